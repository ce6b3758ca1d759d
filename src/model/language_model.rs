//! `TransformerLanguageModel` (fairseq/models/transformer_lm.py): one `TransformerDecoder`
//! built with `no_encoder_attn=True`, over the task's one dictionary.

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};

use super::decoder::{DecoderOut, TransformerDecoder};
use super::incremental::IncrementalState;
use super::options::DecoderOptions;
use super::weights::{LoadReport, StateDict};
use super::ModelError;
use crate::checkpoint::Checkpoint;
use crate::config::TransformerConfig;

#[derive(Debug)]
pub struct TransformerLanguageModel {
    pub cfg: TransformerConfig,
    pub decoder: TransformerDecoder,
    /// Every tensor under its fairseq `state_dict()` name, as the model uses it.
    pub named_tensors: IndexMap<String, Tensor>,
    pub device: Device,
    pub kind: Kind,
}

impl TransformerLanguageModel {
    /// Builds the decoder from a checkpoint's state dict (a missing key is an error, unused keys
    /// are reported); weights are cast to `kind` on `device`.
    pub fn from_checkpoint(checkpoint: &Checkpoint, device: Device, kind: Kind) -> Result<(Self, LoadReport), ModelError> {
        let (cfg, sd) = (&checkpoint.config, &checkpoint.state_dict);
        let _guard = tch::no_grad_guard();
        if !cfg.is_language_model() {
            return Err(ModelError::NotALanguageModel(cfg.arch.clone()));
        }
        super::check_model_kind(kind)?;
        let options = DecoderOptions::new(cfg)?;
        let state = StateDict::new(sd, device, kind);
        if cfg.share_decoder_input_output_embed {
            state.tie(&["decoder.embed_tokens.weight", "decoder.output_projection.weight"])?;
        }
        let root = state.root();
        let (decoder, warnings) = TransformerDecoder::load(&root.sub("decoder"), &options)?;
        for w in warnings {
            state.warn(w);
        }
        drop(root);
        let (report, named_tensors) = state.finish();
        Ok((Self { cfg: cfg.clone(), decoder, named_tensors, device, kind }, report))
    }

    /// `model(src_tokens)`: logits `[B, T, V]` of every position (right-padded `[B, T]` input);
    /// with `state`, only the last position's (incremental decoding).
    pub fn forward(&self, src_tokens: &Tensor, state: Option<&mut IncrementalState>) -> Result<DecoderOut, ModelError> {
        self.decoder.forward(src_tokens, None, state, false, false)
    }

    /// fairseq's `model.max_positions()` (= `max_decoder_positions()`).
    pub fn max_positions(&self) -> usize {
        self.decoder.max_positions()
    }
}
