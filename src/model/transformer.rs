//! `TransformerModel`: the encoder and decoder built from one state dict.

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};

use super::decoder::{DecoderOptions, TransformerDecoder};
use super::encoder::{EncoderOptions, TransformerEncoder};
use super::nn::ActivationFn;
use super::weights::{LoadReport, StateDict};
use super::ModelError;
use crate::config::TransformerConfig;

#[derive(Debug)]
pub struct TransformerModel {
    pub cfg: TransformerConfig,
    pub encoder: TransformerEncoder,
    pub decoder: TransformerDecoder,
    /// Every tensor under its fairseq `state_dict()` name, as the model uses it (for `verify`).
    pub named_tensors: IndexMap<String, Tensor>,
    pub device: Device,
    pub kind: Kind,
}

fn dim(value: i64, name: &str) -> Result<i64, ModelError> {
    if value > 0 {
        Ok(value)
    } else {
        Err(ModelError::Unsupported(format!("{name} = {value}")))
    }
}

fn count(value: i64, name: &str) -> Result<usize, ModelError> {
    usize::try_from(value).map_err(|_| ModelError::Unsupported(format!("{name} = {value}")))
}

impl TransformerModel {
    /// Builds every module from the state dict (constructor tree = key tree); a missing key is
    /// an error, unused keys are reported. Weights are cast to `kind` on `device`.
    pub fn from_state_dict(
        cfg: &TransformerConfig,
        sd: &IndexMap<String, Tensor>,
        device: Device,
        kind: Kind,
    ) -> Result<(Self, LoadReport), ModelError> {
        let _guard = tch::no_grad_guard();
        if !matches!(kind, Kind::Float | Kind::Half | Kind::BFloat16 | Kind::Double) {
            return Err(ModelError::Unsupported(format!("model dtype {kind:?}")));
        }
        let activation_fn = ActivationFn::from_name(&cfg.activation_fn)?;
        let encoder_options = EncoderOptions {
            embed_dim: dim(cfg.encoder_embed_dim, "encoder_embed_dim")?,
            ffn_embed_dim: dim(cfg.encoder_ffn_embed_dim, "encoder_ffn_embed_dim")?,
            layers: count(cfg.encoder_layers, "encoder_layers")?,
            attention_heads: dim(cfg.encoder_attention_heads, "encoder_attention_heads")?,
            normalize_before: cfg.encoder_normalize_before,
            learned_pos: cfg.encoder_learned_pos,
            no_token_positional_embeddings: cfg.no_token_positional_embeddings,
            no_scale_embedding: cfg.no_scale_embedding,
            layernorm_embedding: cfg.layernorm_embedding,
            max_source_positions: count(cfg.max_source_positions, "max_source_positions")?,
            activation_fn,
        };
        let decoder_options = DecoderOptions {
            embed_dim: dim(cfg.decoder_embed_dim, "decoder_embed_dim")?,
            encoder_embed_dim: encoder_options.embed_dim,
            ffn_embed_dim: dim(cfg.decoder_ffn_embed_dim, "decoder_ffn_embed_dim")?,
            layers: count(cfg.decoder_layers, "decoder_layers")?,
            attention_heads: dim(cfg.decoder_attention_heads, "decoder_attention_heads")?,
            normalize_before: cfg.decoder_normalize_before,
            learned_pos: cfg.decoder_learned_pos,
            output_dim: dim(cfg.decoder_output_dim, "decoder_output_dim")?,
            no_decoder_final_norm: cfg.no_decoder_final_norm,
            no_token_positional_embeddings: cfg.no_token_positional_embeddings,
            no_scale_embedding: cfg.no_scale_embedding,
            layernorm_embedding: cfg.layernorm_embedding,
            max_target_positions: count(cfg.max_target_positions, "max_target_positions")?,
            activation_fn,
        };

        let state = StateDict::new(sd, device, kind);
        // One nn.Parameter under several names: load_state_dict copies each name into it in
        // order, so the last one present is what fairseq computes with.
        if cfg.share_all_embeddings {
            state.tie(&["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"])?;
        } else if cfg.share_decoder_input_output_embed {
            state.tie(&["decoder.embed_tokens.weight", "decoder.output_projection.weight"])?;
        }
        let root = state.root();
        let (encoder, enc_warnings) = TransformerEncoder::load(&root.sub("encoder"), &encoder_options)?;
        let (decoder, dec_warnings) = TransformerDecoder::load(&root.sub("decoder"), &decoder_options)?;
        for w in enc_warnings.into_iter().chain(dec_warnings) {
            state.warn(w);
        }
        drop(root);
        let (report, named_tensors) = state.finish();
        let model = Self { cfg: cfg.clone(), encoder, decoder, named_tensors, device, kind };
        Ok((model, report))
    }

    /// fairseq's `model.max_decoder_positions()`.
    pub fn max_decoder_positions(&self) -> usize {
        self.decoder.max_positions()
    }

    /// fairseq's `model.max_positions()[0]`.
    pub fn max_source_positions(&self) -> usize {
        self.encoder.max_positions()
    }
}
