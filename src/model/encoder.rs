//! `TransformerEncoderBase` (fairseq/models/transformer/transformer_encoder.py).

use tch::{Kind, Tensor};

use super::embedding::EmbeddingFrontEnd;
use super::layer::TransformerEncoderLayer;
use super::nn::LayerNorm;
use super::options::EncDecOptions;
use super::weights::Weights;
use super::{ModelError, PADDING_IDX};

/// What `TransformerEncoderBase.forward` returns.
#[derive(Debug)]
pub struct EncoderOut {
    /// `[S, B, C]`, after the final layer norm if any.
    pub encoder_out: Tensor,
    /// `[B, S]` bool, true at padding.
    pub encoder_padding_mask: Tensor,
    /// The scaled token embeddings before positions `[B, S, C]`.
    pub encoder_embedding: Tensor,
    /// With `return_all_hiddens`: the input of the first layer and every layer's output,
    /// `[S, B, C]` each (fast-path states are transposed back and padded with zeros).
    pub encoder_states: Vec<Tensor>,
}

impl EncoderOut {
    /// `reorder_encoder_out`: `index_select` along the batch axis of every tensor.
    /// `new_order` must be an int64 tensor of valid row indices on the model device.
    pub fn reorder(&self, new_order: &Tensor) -> EncoderOut {
        EncoderOut {
            encoder_out: self.encoder_out.index_select(1, new_order),
            encoder_padding_mask: self.encoder_padding_mask.index_select(0, new_order),
            encoder_embedding: self.encoder_embedding.index_select(0, new_order),
            encoder_states: self.encoder_states.iter().map(|s| s.index_select(1, new_order)).collect(),
        }
    }
}

/// Which implementation ran the encoder layers (fairseq 0.12.2 on torch >= 1.13 picks one per
/// batch; see [`TransformerEncoder::path_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EncoderPath {
    /// `TransformerEncoderLayerBase.forward`'s regular branch (`F.multi_head_attention_forward`).
    Regular,
    /// `torch._transformer_encoder_layer_fwd` on a padded batch-first tensor plus a mask
    /// (the padding is not at the end of every row: left-padded batches).
    FastPathMasked,
    /// `torch._transformer_encoder_layer_fwd` on a nested tensor (every row's tokens come
    /// first: right-padded batches and batches without padding).
    FastPathNested,
}

#[derive(Debug)]
pub struct TransformerEncoder {
    pub embedding: EmbeddingFrontEnd,
    pub layers: Vec<TransformerEncoderLayer>,
    pub layer_norm: Option<LayerNorm>,
    pub padding_idx: i64,
    pub max_source_positions: usize,
    /// When false, never take the fast path (to measure what it changes).
    pub allow_fastpath: bool,
}

impl TransformerEncoder {
    pub(crate) fn load(w: &Weights, o: &EncDecOptions) -> Result<(Self, Vec<String>), ModelError> {
        let mut warnings = Vec::new();
        let embedding = EmbeddingFrontEnd::load(w, o, false)?;
        let layers = (0..o.layers)
            .map(|i| TransformerEncoderLayer::load(&w.sub(&format!("layers.{i}")), o))
            .collect::<Result<Vec<_>, _>>()?;
        // upgrade_state_dict_named: checkpoints before version 2 had no final layer norm
        let layer_norm =
            LayerNorm::load_final(w, o.embed_dim, "encoder", o.normalize_before, |v| v >= 2.0, &mut warnings)?;
        let encoder = Self {
            embedding,
            layers,
            layer_norm,
            padding_idx: PADDING_IDX,
            max_source_positions: o.max_positions,
            allow_fastpath: true,
        };
        Ok((encoder, warnings))
    }

    /// fairseq's `encoder.max_positions()`.
    pub fn max_positions(&self) -> usize {
        self.embedding.max_positions(self.max_source_positions)
    }

    /// The path fairseq 0.12.2 takes for this padding mask.
    pub fn path_for(&self, encoder_padding_mask: &Tensor) -> Result<EncoderPath, ModelError> {
        let fast = self.allow_fastpath && self.layers.first().is_some_and(|l| l.can_use_fastpath());
        if !fast {
            return Ok(EncoderPath::Regular);
        }
        // torch._nested_tensor_from_mask_left_aligned: every row's tokens precede its padding
        let (_, s) = encoder_padding_mask.size2()?;
        let tokens = encoder_padding_mask.f_logical_not()?;
        let lengths = tokens.f_sum_dim_intlist(1, true, Kind::Int64)?;
        let left_aligned = Tensor::f_arange(s, (Kind::Int64, tokens.device()))?.f_unsqueeze(0)?.f_lt_tensor(&lengths)?;
        Ok(if left_aligned.f_equal(&tokens)? { EncoderPath::FastPathNested } else { EncoderPath::FastPathMasked })
    }

    /// `src_tokens` `[B, S]` int64, left- or right-padded with pad = 1.
    pub fn forward(&self, src_tokens: &Tensor, return_all_hiddens: bool) -> Result<EncoderOut, ModelError> {
        self.forward_with_path(src_tokens, return_all_hiddens).map(|(out, _)| out)
    }

    /// [`Self::forward`], also saying which layer implementation ran.
    pub fn forward_with_path(
        &self,
        src_tokens: &Tensor,
        return_all_hiddens: bool,
    ) -> Result<(EncoderOut, EncoderPath), ModelError> {
        let _guard = tch::no_grad_guard();
        if src_tokens.dim() != 2 || src_tokens.kind() != Kind::Int64 {
            return Err(ModelError::Input(format!(
                "src_tokens must be a [batch, len] int64 tensor, got {:?} {:?}",
                src_tokens.kind(),
                src_tokens.size()
            )));
        }
        let (bsz, src_len) = src_tokens.size2()?;
        let encoder_padding_mask = src_tokens.f_eq(self.padding_idx)?;
        let has_pads = encoder_padding_mask.f_any()?.f_int64_value(&[])? != 0;
        let positions = self.embedding.positions(src_tokens, false)?;
        let (mut x, encoder_embedding) = self.embedding.forward(src_tokens, positions.as_ref())?;
        if has_pads {
            let keep = encoder_padding_mask.f_unsqueeze(-1)?.f_to_kind(x.kind())?.f_rsub_scalar(1)?;
            x = x.f_mul(&keep)?;
        }
        x = x.f_transpose(0, 1)?;
        let mut encoder_states = Vec::new();
        if return_all_hiddens {
            encoder_states.push(x.shallow_clone());
        }
        let path = self.path_for(&encoder_padding_mask)?;
        match path {
            EncoderPath::Regular => {
                let mask = has_pads.then_some(&encoder_padding_mask);
                for layer in &self.layers {
                    x = layer.forward(&x, mask)?;
                    if return_all_hiddens {
                        encoder_states.push(x.shallow_clone());
                    }
                }
            }
            EncoderPath::FastPathMasked | EncoderPath::FastPathNested => {
                let c = x.size()[2];
                let padded_size = [bsz, src_len, c];
                // batch first again (a view, as in fairseq)
                x = x.f_transpose(0, 1)?;
                let nested = path == EncoderPath::FastPathNested;
                if nested {
                    x = nested_tensor_from_mask(&x, &encoder_padding_mask)?;
                }
                let mask = (!nested && has_pads).then_some(&encoder_padding_mask);
                for layer in &self.layers {
                    x = layer.forward_fastpath(&x, mask)?;
                    if return_all_hiddens {
                        let state = if nested { x.f_to_padded_tensor(0.0, Some(padded_size.as_slice()))? } else { x.shallow_clone() };
                        encoder_states.push(state.f_transpose(0, 1)?);
                    }
                }
                if nested {
                    // fairseq pads to the longest row; a batch whose last column is all padding
                    // would then disagree with its mask, so pad to the input length
                    x = x.f_to_padded_tensor(0.0, Some(padded_size.as_slice()))?;
                }
                x = x.f_transpose(0, 1)?;
            }
        }
        if let Some(ln) = &self.layer_norm {
            x = ln.forward(&x)?;
        }
        let out = EncoderOut { encoder_out: x, encoder_padding_mask, encoder_embedding, encoder_states };
        Ok((out, path))
    }
}

/// `torch._nested_tensor_from_mask(x, mask.logical_not())`, which is
/// `_nested_from_padded(x, [[len_i, C] for each row])`; tch does not bind the former.
fn nested_tensor_from_mask(x: &Tensor, encoder_padding_mask: &Tensor) -> Result<Tensor, ModelError> {
    let (bsz, _, c) = x.size3()?;
    let lengths = encoder_padding_mask.f_logical_not()?.f_sum_dim_intlist(1, false, Kind::Int64)?;
    let dims = Tensor::f_full([bsz], c, (Kind::Int64, lengths.device()))?;
    let sizes = Tensor::f_stack(&[lengths, dims], 1)?.f_to_device(tch::Device::Cpu)?;
    Ok(Tensor::f_internal_nested_from_padded(x, &sizes, false)?)
}
