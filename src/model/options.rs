//! The sizes and switches each module is built from, resolved once from the config: fairseq's
//! `EncDecBaseConfig` per side (fairseq/models/transformer/transformer_config.py).

use super::nn::ActivationFn;
use super::ModelError;
use crate::config::TransformerConfig;

/// One side's `EncDecBaseConfig`, plus the top-level switches that side reads.
#[derive(Debug, Clone)]
pub(crate) struct EncDecOptions {
    pub embed_dim: i64,
    pub ffn_embed_dim: i64,
    pub layers: usize,
    pub attention_heads: i64,
    pub normalize_before: bool,
    pub learned_pos: bool,
    pub no_token_positional_embeddings: bool,
    pub no_scale_embedding: bool,
    pub layernorm_embedding: bool,
    /// `max_source_positions` or `max_target_positions`.
    pub max_positions: usize,
    pub activation_fn: ActivationFn,
}

/// The decoder side: its `EncDecBaseConfig` and what only a decoder has.
#[derive(Debug, Clone)]
pub(crate) struct DecoderOptions {
    pub side: EncDecOptions,
    pub encoder_embed_dim: i64,
    pub output_dim: i64,
    pub no_decoder_final_norm: bool,
    /// A language model's decoder: no encoder attention in its layers.
    pub no_encoder_attn: bool,
}

fn dim(value: i64, name: &str) -> Result<i64, ModelError> {
    if value > 0 {
        Ok(value)
    } else {
        Err(ModelError::Setting { name: name.to_string(), value })
    }
}

fn count(value: i64, name: &str) -> Result<usize, ModelError> {
    usize::try_from(value).map_err(|_| ModelError::Setting { name: name.to_string(), value })
}

impl EncDecOptions {
    pub fn encoder(cfg: &TransformerConfig) -> Result<Self, ModelError> {
        let sizes = [cfg.encoder_embed_dim, cfg.encoder_ffn_embed_dim, cfg.encoder_layers, cfg.encoder_attention_heads];
        let switches = [cfg.encoder_normalize_before, cfg.encoder_learned_pos];
        Self::side(cfg, "encoder", sizes, switches, ("max_source_positions", cfg.max_source_positions))
    }

    pub fn decoder(cfg: &TransformerConfig) -> Result<Self, ModelError> {
        let sizes = [cfg.decoder_embed_dim, cfg.decoder_ffn_embed_dim, cfg.decoder_layers, cfg.decoder_attention_heads];
        let switches = [cfg.decoder_normalize_before, cfg.decoder_learned_pos];
        Self::side(cfg, "decoder", sizes, switches, ("max_target_positions", cfg.max_target_positions))
    }

    /// `sizes`: embed_dim, ffn_embed_dim, layers, attention_heads; `switches`:
    /// normalize_before, learned_pos (the config's `{side}_*` fields).
    fn side(
        cfg: &TransformerConfig,
        side: &str,
        [embed_dim, ffn_embed_dim, layers, attention_heads]: [i64; 4],
        [normalize_before, learned_pos]: [bool; 2],
        (max_positions_name, max_positions): (&str, i64),
    ) -> Result<Self, ModelError> {
        Ok(Self {
            embed_dim: dim(embed_dim, &format!("{side}_embed_dim"))?,
            ffn_embed_dim: dim(ffn_embed_dim, &format!("{side}_ffn_embed_dim"))?,
            layers: count(layers, &format!("{side}_layers"))?,
            attention_heads: dim(attention_heads, &format!("{side}_attention_heads"))?,
            normalize_before,
            learned_pos,
            no_token_positional_embeddings: cfg.no_token_positional_embeddings,
            no_scale_embedding: cfg.no_scale_embedding,
            layernorm_embedding: cfg.layernorm_embedding,
            max_positions: count(max_positions, max_positions_name)?,
            activation_fn: ActivationFn::from_name(&cfg.activation_fn)?,
        })
    }
}

impl DecoderOptions {
    pub fn new(cfg: &TransformerConfig) -> Result<Self, ModelError> {
        Ok(Self {
            side: EncDecOptions::decoder(cfg)?,
            encoder_embed_dim: dim(cfg.encoder_embed_dim, "encoder_embed_dim")?,
            output_dim: dim(cfg.decoder_output_dim, "decoder_output_dim")?,
            no_decoder_final_norm: cfg.no_decoder_final_norm,
            no_encoder_attn: cfg.is_language_model(),
        })
    }
}
