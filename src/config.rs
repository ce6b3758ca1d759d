//! The typed model configuration resolved from a checkpoint's `args` or `cfg`.
//!
//! TEMPORARY (model branch): the minimal forward-relevant subset the model needs, with
//! fairseq's `base_architecture` defaults, until the loader branch's `config.rs` is merged.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransformerConfig {
    pub arch: String,
    pub encoder_embed_dim: i64,
    pub encoder_ffn_embed_dim: i64,
    pub encoder_layers: i64,
    pub encoder_attention_heads: i64,
    pub encoder_normalize_before: bool,
    pub encoder_learned_pos: bool,
    pub decoder_embed_dim: i64,
    pub decoder_ffn_embed_dim: i64,
    pub decoder_layers: i64,
    pub decoder_attention_heads: i64,
    pub decoder_normalize_before: bool,
    pub decoder_learned_pos: bool,
    pub decoder_output_dim: i64,
    pub no_decoder_final_norm: bool,
    pub activation_fn: String,
    pub share_decoder_input_output_embed: bool,
    pub share_all_embeddings: bool,
    pub no_token_positional_embeddings: bool,
    pub no_scale_embedding: bool,
    pub layernorm_embedding: bool,
    pub max_source_positions: i64,
    pub max_target_positions: i64,
}

impl Default for TransformerConfig {
    fn default() -> Self {
        Self {
            arch: "transformer".into(),
            encoder_embed_dim: 512,
            encoder_ffn_embed_dim: 2048,
            encoder_layers: 6,
            encoder_attention_heads: 8,
            encoder_normalize_before: false,
            encoder_learned_pos: false,
            decoder_embed_dim: 512,
            decoder_ffn_embed_dim: 2048,
            decoder_layers: 6,
            decoder_attention_heads: 8,
            decoder_normalize_before: false,
            decoder_learned_pos: false,
            decoder_output_dim: 512,
            no_decoder_final_norm: false,
            activation_fn: "relu".into(),
            share_decoder_input_output_embed: false,
            share_all_embeddings: false,
            no_token_positional_embeddings: false,
            no_scale_embedding: false,
            layernorm_embedding: false,
            max_source_positions: 1024,
            max_target_positions: 1024,
        }
    }
}
