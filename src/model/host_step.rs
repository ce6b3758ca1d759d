//! One incremental decoder step of the fast compute types on the CPU (`float32`, `bfloat16`,
//! `int8`) on host buffers, as CTranslate2's decoder steps: the embedding, every layer's
//! products, attentions and norms, and the output projection run through the host kernels on
//! slices the incremental state keeps from step to step, with no libtorch op between them. The
//! kernels and their order are the tensor path's (`layer.rs`, `fused.rs`), so the bits are too.
//!
//! An activation other than ReLU runs libtorch's kernel over the host buffer, as the tensor path
//! does. The first step of a batch takes the tensor path: it projects the encoder attention's
//! keys and values and starts the self-attention's host cache, in a beam search on each
//! sentence's first beam only (its other beams are copies). So do a step with padding or
//! attention weights asked for, and a model with a layer the host kernels do not cover (fbgemm's
//! int8, a CPU without AVX2).

use tch::{Device, Kind, Tensor};

use super::decoder::{DecoderOut, TransformerDecoder};
use super::encoder::EncoderOut;
use super::fused::FusedProjections;
use crate::kernels::norm::HostLayerNorm;
use super::incremental::{AttentionState, IncrementalState, LayerState};
use crate::kernels::step_buffers::HostStepBuffers;
use super::layer::TransformerDecoderLayer;
use super::nn::{ActivationFn, HostKernel, LayerNorm, Linear};
use crate::kernels::one_query;
use super::ModelError;
use crate::libtorch::host::{f32_view, f32_view_mut, i64_column_into};

/// What one decoder layer computes with, every part on the host.
struct HostLayer<'a> {
    self_attn_qkv: HostKernel<'a>,
    self_attn_out: HostKernel<'a>,
    self_attn_layer_norm: &'a HostLayerNorm,
    encoder_attn: Option<HostEncoderAttention<'a>>,
    fc1: HostKernel<'a>,
    fc2: HostKernel<'a>,
    activation_fn: ActivationFn,
    final_layer_norm: &'a HostLayerNorm,
    normalize_before: bool,
    heads: usize,
    head_dim: usize,
}

struct HostEncoderAttention<'a> {
    q: HostKernel<'a>,
    out: HostKernel<'a>,
    layer_norm: &'a HostLayerNorm,
}

/// The keys, values and padding bias an encoder attention cached at the first step, as slices.
struct EncoderKeys<'s> {
    k: &'s [f32],
    v: &'s [f32],
    bias: Option<&'s [f32]>,
    /// `[kv_rows, heads, len, head_dim]`.
    shape: [usize; 4],
}

fn kernel(linear: &Linear, relu: bool) -> Option<HostKernel<'_>> {
    linear.host_kernel(relu)
}

fn norm(layer_norm: &LayerNorm) -> Option<&HostLayerNorm> {
    layer_norm.host()
}

impl<'a> HostLayer<'a> {
    fn new(layer: &'a TransformerDecoderLayer) -> Option<Self> {
        let Some(FusedProjections::SelfAttention { qkv }) = &layer.self_attn.fused else { return None };
        let encoder_attn = match (&layer.encoder_attn, &layer.encoder_attn_layer_norm) {
            (None, _) => None,
            (Some(a), Some(ln)) => {
                let Some(FusedProjections::EncoderAttention { q, .. }) = &a.fused else { return None };
                Some(HostEncoderAttention { q: kernel(q, false)?, out: kernel(&a.out_proj, false)?, layer_norm: norm(ln)? })
            }
            (Some(_), None) => return None,
        };
        Some(Self {
            self_attn_qkv: kernel(qkv, false)?,
            self_attn_out: kernel(&layer.self_attn.out_proj, false)?,
            self_attn_layer_norm: norm(&layer.self_attn_layer_norm)?,
            encoder_attn,
            fc1: kernel(&layer.fc1, layer.activation_fn == ActivationFn::Relu)?,
            fc2: kernel(&layer.fc2, false)?,
            activation_fn: layer.activation_fn,
            final_layer_norm: norm(&layer.final_layer_norm)?,
            normalize_before: layer.normalize_before,
            heads: layer.self_attn.num_heads as usize,
            head_dim: layer.self_attn.head_dim as usize,
        })
    }

    /// Whether the state this layer's last step left fits a host step of `rows` rows.
    fn fits(&self, rows: usize, self_attn: &AttentionState, encoder_attn: &AttentionState) -> bool {
        let cache_fits = self_attn.prev_key.is_none()
            && self_attn.host_cache.as_ref().is_some_and(|c| c.rows() == rows && c.heads() == self.heads && c.head_dim() == self.head_dim);
        cache_fits && (self.encoder_attn.is_none() || encoder_keys(encoder_attn).is_some_and(|e| rows.is_multiple_of(e.shape[0]) && e.shape[1] == self.heads && e.shape[3] == self.head_dim))
    }
}

impl HostLayer<'_> {
    /// `TransformerDecoderLayerBase.forward` for one position of every row: `buffers.x` in and
    /// out, the self-attention's position appended to its host cache.
    fn step(&self, state: &mut LayerState, buffers: &mut HostStepBuffers) -> Result<(), ModelError> {
        let HostStepBuffers { x, h, out, projected, query, attn, ffn, .. } = buffers;
        let (pre, width) = (self.normalize_before, self.heads * self.head_dim);
        let rows = x.len() / width.max(1);

        let input = sublayer_input(x, h, self.self_attn_layer_norm, pre);
        product(&self.self_attn_qkv, input, projected, false)?;
        let cache = state.self_attn.host_cache.as_mut().ok_or_else(|| ModelError::Input("a host step without a host cache".into()))?;
        cache.append(projected, 3 * width, width, 2 * width)?;
        attn.resize(rows * width, 0.0);
        if !one_query::attend_cache_into(projected, 3 * width, cache, attn) {
            return Err(ModelError::Input(format!("no host attention for {rows} rows of {width}")));
        }
        product(&self.self_attn_out, attn, out, false)?;
        residual(x, out, h, self.self_attn_layer_norm, pre);

        if let Some(e) = &self.encoder_attn {
            let keys = encoder_keys(&state.encoder_attn).ok_or_else(|| ModelError::Input("encoder attention has no cached keys".into()))?;
            let input = sublayer_input(x, h, e.layer_norm, pre);
            product(&e.q, input, query, false)?;
            attn.resize(rows * width, 0.0);
            if !one_query::attend_into(query, width, keys.k, keys.v, keys.shape, keys.bias, attn) {
                return Err(ModelError::Input(format!("no host attention for {rows} rows over {:?}", keys.shape)));
            }
            product(&e.out, attn, out, false)?;
            residual(x, out, h, e.layer_norm, pre);
        }

        let input = sublayer_input(x, h, self.final_layer_norm, pre);
        let relu = self.activation_fn == ActivationFn::Relu;
        product(&self.fc1, input, ffn, relu)?;
        if !relu {
            activation(self.activation_fn, ffn, self.fc1.out_features())?;
        }
        product(&self.fc2, ffn, out, false)?;
        residual(x, out, h, self.final_layer_norm, pre);
        Ok(())
    }
}

fn encoder_keys(state: &AttentionState) -> Option<EncoderKeys<'_>> {
    let (Some(k), Some(v)) = (&state.prev_key, &state.prev_value) else { return None };
    let (kv_rows, heads, len, head_dim) = k.size4().ok()?;
    if v.size() != k.size() {
        return None;
    }
    // SAFETY: nothing writes the cached tensors during a step.
    let (k, v) = unsafe { (f32_view(k)?, f32_view(v)?) };
    let bias = match &state.attn_bias {
        // SAFETY: as above.
        Some(b) => Some(unsafe { f32_view(b) }?),
        None => None,
    };
    let shape = [kv_rows, heads, len, head_dim].map(|d| d as usize);
    Some(EncoderKeys { k, v, bias, shape })
}

/// `x = residual + out` (pre-norm), or `x = layer_norm(x + out)` (post-norm), `h` as scratch.
fn residual(x: &mut Vec<f32>, out: &[f32], h: &mut Vec<f32>, layer_norm: &HostLayerNorm, normalize_before: bool) {
    if normalize_before {
        x.iter_mut().zip(out).for_each(|(x, o)| *x += o);
    } else {
        h.resize(x.len(), 0.0);
        layer_norm.forward_into(out, Some(x), h);
        std::mem::swap(x, h);
    }
}

/// The input of a sublayer: `layer_norm(x)` into `h` (pre-norm), or `x` itself (post-norm).
fn sublayer_input<'b>(x: &'b [f32], h: &'b mut Vec<f32>, layer_norm: &HostLayerNorm, normalize_before: bool) -> &'b [f32] {
    if !normalize_before {
        return x;
    }
    h.resize(x.len(), 0.0);
    layer_norm.forward_into(x, None, h);
    h
}

fn product(kernel: &HostKernel, x: &[f32], y: &mut Vec<f32>, relu: bool) -> Result<(), ModelError> {
    let rows = x.len() / kernel.in_features().max(1);
    y.resize(rows * kernel.out_features(), 0.0);
    match kernel.gemm(x, y, relu) {
        true => Ok(()),
        false => Err(ModelError::Input(format!("a host step of {} floats for a product of {} inputs", x.len(), kernel.in_features()))),
    }
}

/// `activation_fn(y)` in place for `y` `[rows, cols]`, through libtorch's kernel as the tensor
/// path computes it (ReLU is fused into the product instead).
fn activation(activation_fn: ActivationFn, y: &mut [f32], cols: usize) -> Result<(), ModelError> {
    let rows = y.len() / cols.max(1);
    // SAFETY: `y` outlives the tensor, which only this function reads.
    let input = unsafe { Tensor::f_from_blob(y.as_ptr().cast(), &[rows as i64, cols as i64], &[cols as i64, 1], Kind::Float, Device::Cpu)? };
    let output = activation_fn.forward(&input)?;
    drop(input);
    if output.data_ptr() == y.as_mut_ptr().cast() {
        return Ok(());
    }
    // SAFETY: a tensor of its own, which nothing else writes.
    match unsafe { f32_view(&output) } {
        Some(values) if values.len() == y.len() => {
            y.copy_from_slice(values);
            Ok(())
        }
        _ => Err(ModelError::Input(format!("{activation_fn:?} of a host buffer gave {:?}", output.size()))),
    }
}

/// The decoder's parts outside its layers, every one on the host.
struct HostEnds<'a> {
    project_in_dim: Option<HostKernel<'a>>,
    layernorm_embedding: Option<&'a HostLayerNorm>,
    final_layer_norm: Option<&'a HostLayerNorm>,
    project_out_dim: Option<HostKernel<'a>>,
    output_projection: HostKernel<'a>,
}

/// `Some(None)` for an absent part, `Some(Some(host))` for a part on the host, None for a part
/// that is not.
fn optional<'a, T: 'a, H>(part: &'a Option<T>, host: impl Fn(&'a T) -> Option<H>) -> Option<Option<H>> {
    match part {
        None => Some(None),
        Some(p) => host(p).map(Some),
    }
}

impl<'a> HostEnds<'a> {
    fn new(decoder: &'a TransformerDecoder) -> Option<Self> {
        let embedding = &decoder.embedding;
        Some(Self {
            project_in_dim: optional(&embedding.project_in_dim, |l| kernel(l, false))?,
            layernorm_embedding: optional(&embedding.layernorm_embedding, norm)?,
            final_layer_norm: optional(&decoder.layer_norm, norm)?,
            project_out_dim: optional(&decoder.project_out_dim, |l| kernel(l, false))?,
            output_projection: kernel(&decoder.output_projection, false)?,
        })
    }
}

impl TransformerDecoder {
    /// The first step of a beam search on the host kernels, once per sentence. Its beams start
    /// from the same token over the same encoder row (kept once per sentence: `beamable`), and
    /// every host kernel computes each row alone, so their logits and cached keys are copies of
    /// the first beam's: the step runs on each sentence's first row and repeats its logits and
    /// cache rows for the other beams. None, with nothing computed, where that does not hold.
    pub(super) fn first_step_once_per_sentence(&self, prev_output_tokens: &Tensor, encoder_out: Option<&EncoderOut>, state: &mut IncrementalState) -> Result<Option<DecoderOut>, ModelError> {
        let beam = state.beamable;
        let (Some(encoder_out), Ok((rows, 1))) = (encoder_out, prev_output_tokens.size2()) else { return Ok(None) };
        let sentences = encoder_out.encoder_out.size().get(1).copied().unwrap_or(0);
        if beam <= 1 || !state.layers.is_empty() || sentences == 0 || sentences * beam != rows || self.fixed_kv_cache {
            return Ok(None);
        }
        if !self.layers.iter().all(|l| HostLayer::new(l).is_some()) || HostEnds::new(self).is_none() {
            return Ok(None);
        }
        let beams = prev_output_tokens.f_view([sentences, beam])?;
        if beams.f_eq_tensor(&beams.f_narrow(1, 0, 1)?)?.f_all()?.f_int64_value(&[])? == 0 {
            return Ok(None);
        }
        let device = prev_output_tokens.device();
        let firsts = Tensor::f_arange_start_step(0, rows, beam, (Kind::Int64, device))?;
        let out = self.forward(&prev_output_tokens.f_index_select(0, &firsts)?, Some(encoder_out), Some(&mut *state), false, false)?;
        let repeat = Tensor::f_arange(sentences, (Kind::Int64, device))?.f_repeat_interleave_self_int(beam, 0, None)?;
        state.reorder(&repeat)?;
        Ok(Some(DecoderOut { logits: out.logits.f_index_select(0, &repeat)?, attn: None, inner_states: Vec::new() }))
    }

    /// The logits `[B, 1, V]` of the step after `prev_output_tokens` `[B, step + 1]`, computed
    /// on the host; None, with nothing computed or changed, where the step is not for the host
    /// (see the module docs).
    pub(super) fn host_step(&self, prev_output_tokens: &Tensor, state: &mut IncrementalState) -> Result<Option<Tensor>, ModelError> {
        let Some(layers) = self.layers.iter().map(HostLayer::new).collect::<Option<Vec<_>>>() else { return Ok(None) };
        let Some(ends) = HostEnds::new(self) else { return Ok(None) };
        let prefix_len = prev_output_tokens.size().get(1).copied().unwrap_or(0);
        let buffers = &mut state.host_buffers;
        // SAFETY: the generator does not write its tokens during a step.
        if !unsafe { i64_column_into(prev_output_tokens, prefix_len - 1, &mut buffers.tokens) } {
            return Ok(None);
        }
        let rows = buffers.tokens.len();
        if layers.is_empty() || rows == 0 || buffers.tokens.contains(&self.padding_idx) || state.layers.len() != layers.len() {
            return Ok(None);
        }
        if !layers.iter().zip(&state.layers).all(|(l, s)| l.fits(rows, &s.self_attn, &s.encoder_attn)) {
            return Ok(None);
        }
        if !self.host_embed(&ends, prefix_len as usize, &mut state.host_buffers)? {
            return Ok(None);
        }
        for (layer, layer_state) in layers.iter().zip(state.layers.iter_mut()) {
            layer.step(layer_state, &mut state.host_buffers)?;
        }
        self.host_output(&ends, &mut state.host_buffers).map(Some)
    }

    /// The layers' input into `buffers.x`: `embed_scale * embed_tokens(tokens)`, then
    /// `project_in_dim`, `+ embed_positions` and `layernorm_embedding`, each rounded as libtorch
    /// does. False (nothing else computed) where a row or position is not on the host: a token
    /// outside the table then gets the tensor path's error.
    fn host_embed(&self, ends: &HostEnds, prefix_len: usize, buffers: &mut HostStepBuffers) -> Result<bool, ModelError> {
        let embedding = &self.embedding;
        let HostStepBuffers { tokens, x, h, .. } = buffers;
        let dim = embedding.embed_tokens.embedding_dim() as usize;
        let c = ends.project_in_dim.map_or(dim, |p| p.out_features());
        let position = match &embedding.embed_positions {
            Some(p) => match p.incremental_row(prefix_len) {
                Some(row) if row.len() == c => Some(row),
                _ => return Ok(false),
            },
            None => None,
        };
        let scale = embedding.embed_scale as f32;
        let embed = if ends.project_in_dim.is_some() { &mut *h } else { &mut *x };
        embed.resize(tokens.len() * dim, 0.0);
        for (row, &token) in embed.chunks_exact_mut(dim).zip(tokens.iter()) {
            if !embedding.embed_tokens.row_into(token, row) {
                return Ok(false);
            }
            row.iter_mut().for_each(|v| *v *= scale);
        }
        if let Some(project_in_dim) = &ends.project_in_dim {
            product(project_in_dim, h, x, false)?;
        }
        if let Some(p) = position {
            x.chunks_exact_mut(c).for_each(|row| row.iter_mut().zip(p).for_each(|(v, p)| *v += p));
        }
        if let Some(ln) = ends.layernorm_embedding {
            h.resize(x.len(), 0.0);
            ln.forward_into(x, None, h);
            std::mem::swap(x, h);
        }
        Ok(true)
    }

    /// `output_layer`: the final layer norm, `project_out_dim` and the output projection, into
    /// a logits buffer of the pool.
    fn host_output(&self, ends: &HostEnds, buffers: &mut HostStepBuffers) -> Result<Tensor, ModelError> {
        let HostStepBuffers { x, h, out, .. } = buffers;
        let mut features: &[f32] = x;
        if let Some(ln) = ends.final_layer_norm {
            h.resize(x.len(), 0.0);
            ln.forward_into(x, None, h);
            features = h;
        }
        if let Some(project_out_dim) = &ends.project_out_dim {
            product(project_out_dim, features, out, false)?;
            features = out;
        }
        let output = &ends.output_projection;
        let rows = features.len() / output.in_features().max(1);
        let mut logits = self.logits.take(&[rows as i64, 1, output.out_features() as i64])?;
        // SAFETY: the pool hands out a buffer nothing else holds.
        let Some(data) = (unsafe { f32_view_mut(&mut logits) }) else {
            return Err(ModelError::Input("the logits buffer is not a float32 CPU tensor".into()));
        };
        if !output.gemm(features, data, false) {
            return Err(ModelError::Input(format!("a host step of {} floats for an output projection of {} inputs", features.len(), output.in_features())));
        }
        Ok(logits)
    }
}
