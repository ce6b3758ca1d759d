//! The attention probabilities of every layer and head, for a teacher-forced pass.
//!
//! The model's forward returns only the head-averaged encoder attention of the last decoder
//! layer (fairseq's `attn`). Here each layer's attention modules are re-run on the layer's
//! input (the model's own `encoder_states` / `inner_states`) through fairseq's own attention
//! path, which returns per-head probabilities: `softmax((q * scaling) k^T + mask)` in f32.
//! The last layer's head mean is fairseq's `attn` (tested against the fixtures' goldens).

use tch::{Kind, Tensor};

use super::PlotError;
use crate::model::{EncoderOut, TransformerModel};

/// Which attention modules to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKind {
    /// Decoder `encoder_attn`: queries are target positions, keys source positions.
    Cross,
    /// Encoder `self_attn`.
    EncoderSelf,
    /// Decoder `self_attn` (future-masked).
    DecoderSelf,
}

impl AttentionKind {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Cross => "cross-attention (decoder encoder_attn)",
            Self::EncoderSelf => "encoder self-attention",
            Self::DecoderSelf => "decoder self-attention",
        }
    }
}

/// Per-layer attention probabilities, each `[H, B, queries, keys]` f32 on CPU.
#[derive(Debug)]
pub struct AttentionMaps {
    pub encoder_self: Vec<Tensor>,
    pub decoder_self: Vec<Tensor>,
    pub cross: Vec<Tensor>,
}

impl AttentionMaps {
    pub fn layers(&self, kind: AttentionKind) -> &[Tensor] {
        match kind {
            AttentionKind::Cross => &self.cross,
            AttentionKind::EncoderSelf => &self.encoder_self,
            AttentionKind::DecoderSelf => &self.decoder_self,
        }
    }
}

/// Runs `model` on `src_tokens` `[B, S]` and `prev_output_tokens` `[B, T]` (EOS first, as
/// fairseq feeds the decoder) and returns every attention map.
pub fn capture_attention(
    model: &TransformerModel,
    src_tokens: &Tensor,
    prev_output_tokens: &Tensor,
) -> Result<AttentionMaps, PlotError> {
    let _guard = tch::no_grad_guard();
    let enc = model.encoder.forward(src_tokens, true)?;
    let dec = model.decoder.forward(prev_output_tokens, Some(&enc), None, false, true)?;
    let encoder_self = encoder_self_attention(model, &enc)?;
    let (decoder_self, cross) = decoder_attention(model, prev_output_tokens, &enc, &dec.inner_states)?;
    Ok(AttentionMaps { encoder_self, decoder_self, cross })
}

fn to_cpu_f32(t: Tensor) -> Result<Tensor, PlotError> {
    Ok(t.f_to_kind(Kind::Float)?.f_to_device(tch::Device::Cpu)?)
}

fn encoder_self_attention(model: &TransformerModel, enc: &EncoderOut) -> Result<Vec<Tensor>, PlotError> {
    let mask = &enc.encoder_padding_mask;
    let has_pads = mask.f_any()?.f_int64_value(&[])? != 0;
    let mask = has_pads.then_some(mask);
    let mut out = Vec::with_capacity(model.encoder.layers.len());
    for (i, layer) in model.encoder.layers.iter().enumerate() {
        let x = enc
            .encoder_states
            .get(i)
            .ok_or_else(|| PlotError::Internal(format!("the encoder returned no input for layer {i}")))?;
        let q = if layer.normalize_before { layer.self_attn_layer_norm.forward(x)? } else { x.shallow_clone() };
        let (_, w) = layer.self_attn.forward_fairseq(&q, None, mask, None, None, false, true, true)?;
        let w = w.ok_or_else(|| PlotError::Internal("self-attention returned no weights".into()))?;
        out.push(to_cpu_f32(w)?);
    }
    Ok(out)
}

fn decoder_attention(
    model: &TransformerModel,
    prev_output_tokens: &Tensor,
    enc: &EncoderOut,
    inner_states: &[Tensor],
) -> Result<(Vec<Tensor>, Vec<Tensor>), PlotError> {
    let decoder = &model.decoder;
    let pad_mask = prev_output_tokens.f_eq(decoder.padding_idx)?;
    let self_pad_mask = (pad_mask.f_any()?.f_int64_value(&[])? != 0).then_some(pad_mask);
    let t = prev_output_tokens.size()[1];
    let kind = inner_states.first().map_or(Kind::Float, Tensor::kind);
    let device = inner_states.first().map_or(tch::Device::Cpu, Tensor::device);
    // buffered_future_mask
    let future_mask = Tensor::f_zeros([t, t], (Kind::Float, tch::Device::Cpu))?
        .f_fill_(f64::NEG_INFINITY)?
        .f_triu(1)?
        .f_to_device(device)?
        .f_to_kind(kind)?;
    let mut self_maps = Vec::with_capacity(decoder.layers.len());
    let mut cross_maps = Vec::with_capacity(decoder.layers.len());
    for (i, layer) in decoder.layers.iter().enumerate() {
        let x = inner_states
            .get(i)
            .ok_or_else(|| PlotError::Internal(format!("the decoder returned no input for layer {i}")))?;
        let q = if layer.normalize_before { layer.self_attn_layer_norm.forward(x)? } else { x.shallow_clone() };
        let (_, w) = layer.self_attn.forward_fairseq(
            &q,
            None,
            self_pad_mask.as_ref(),
            Some(&future_mask),
            None,
            false,
            true,
            true,
        )?;
        let w = w.ok_or_else(|| PlotError::Internal("self-attention returned no weights".into()))?;
        self_maps.push(to_cpu_f32(w)?);
        // the self-attention block as TransformerDecoderLayer runs it over a whole sequence
        let sa = layer.self_attn.forward_torch(&q, &q, self_pad_mask.as_ref(), Some(&future_mask))?;
        let mut x = x.f_add(&sa)?;
        if !layer.normalize_before {
            x = layer.self_attn_layer_norm.forward(&x)?;
        }
        let (Some(encoder_attn), Some(encoder_attn_layer_norm)) = (&layer.encoder_attn, &layer.encoder_attn_layer_norm) else {
            return Err(PlotError::Internal("a decoder layer without encoder attention".into()));
        };
        let q = if layer.normalize_before { encoder_attn_layer_norm.forward(&x)? } else { x };
        let (_, w) = encoder_attn.forward_fairseq(
            &q,
            Some(&enc.encoder_out),
            Some(&enc.encoder_padding_mask),
            None,
            None,
            true,
            true,
            true,
        )?;
        let w = w.ok_or_else(|| PlotError::Internal("encoder attention returned no weights".into()))?;
        cross_maps.push(to_cpu_f32(w)?);
    }
    Ok((self_maps, cross_maps))
}

/// One `[queries, keys]` matrix of batch row `row`: head `head`, or the mean over heads
/// (`None`, fairseq's `attn.mean(dim=0)`).
pub fn select(maps: &Tensor, row: i64, head: Option<i64>) -> Result<Vec<Vec<f32>>, PlotError> {
    let per_row = maps.f_select(1, row)?;
    let m = match head {
        Some(h) => per_row.f_select(0, h)?,
        None => per_row.f_mean_dim(0, false, None::<Kind>)?,
    };
    Ok(Vec::<Vec<f32>>::try_from(m.f_contiguous()?)?)
}

/// The mean over heads of the last decoder layer's cross-attention, `[B, T, S]`.
pub fn alignment_attention(maps: &AttentionMaps) -> Result<Tensor, PlotError> {
    let last = maps.cross.last().ok_or_else(|| PlotError::Input("the model has no decoder layers".into()))?;
    Ok(last.f_mean_dim(0, false, None::<Kind>)?)
}
