//! `TransformerDecoderBase` (fairseq/models/transformer/transformer_decoder.py).

use std::sync::atomic::{AtomicUsize, Ordering};

use tch::{Kind, Tensor};

use super::embedding::EmbeddingFrontEnd;
use super::encoder::EncoderOut;
use super::fixed_cache::{row_bucket, source_bucket};
use super::incremental::IncrementalState;
use super::layer::TransformerDecoderLayer;
use super::nn::{LayerNorm, Linear};
use super::options::DecoderOptions;
use super::step_graphs::StepGraphs;
use super::weights::Weights;
use super::{ModelError, PADDING_IDX};
use crate::libtorch::reuse::BufferPool;

/// What `TransformerDecoderBase.forward` returns.
#[derive(Debug)]
pub struct DecoderOut {
    /// `[B, T, V]` (`T` = 1 in incremental mode).
    pub logits: Tensor,
    /// Encoder attention of the last layer averaged over heads `[B, T, S]`, with `need_attn`.
    pub attn: Option<Tensor>,
    /// With `return_all_hiddens`: the input of the first layer and every layer's output,
    /// `[T, B, C]` each.
    pub inner_states: Vec<Tensor>,
}

#[derive(Debug)]
pub struct TransformerDecoder {
    pub embedding: EmbeddingFrontEnd,
    pub layers: Vec<TransformerDecoderLayer>,
    pub layer_norm: Option<LayerNorm>,
    pub project_out_dim: Option<Linear>,
    pub output_projection: Linear,
    pub padding_idx: i64,
    pub max_target_positions: usize,
    /// Full-sequence self-attention through `F.multi_head_attention_forward` (SDPA), as
    /// fairseq does; false runs fairseq's own bmm path, the one incremental decoding takes
    /// (for checking the cache against a full pass with the same kernels).
    pub torch_self_attention: bool,
    /// Incremental steps of the fast compute types on host buffers where they can, and a beam
    /// search's first step once per sentence (`host_step.rs`); false keeps every step on the
    /// tensor path, on every row (for checking one against the other).
    pub host_step: bool,
    /// Steps taken on the host so far.
    host_steps: AtomicUsize,
    /// Incremental steps on the fused libtorch path keep their self-attention keys and values
    /// at a fixed capacity (`fixed_cache.rs`) instead of growing them each step.
    pub fixed_kv_cache: bool,
    /// Steps taken with a fixed-capacity cache so far.
    fixed_steps: AtomicUsize,
    /// Of those, steps at their row bucket's shape (padded where the batch does not fill it).
    fixed_shape_steps: AtomicUsize,
    /// The logits' buffers, reused from step to step where the output projection is packed.
    pub(super) logits: BufferPool,
    /// Fixed-shape steps replayed as CUDA graphs (`step_graphs.rs`); None runs them eagerly.
    pub cuda_graphs: Option<StepGraphs>,
}

impl TransformerDecoder {
    pub(crate) fn load(w: &Weights, o: &DecoderOptions) -> Result<(Self, Vec<String>), ModelError> {
        let mut warnings = Vec::new();
        let c = o.side.embed_dim;
        // the embedding width is the table's own (it differs from the decoder width only
        // when fairseq adds project_in_dim)
        let embedding = EmbeddingFrontEnd::load(w, &o.side, true)?;
        let layers = (0..o.side.layers)
            .map(|i| TransformerDecoderLayer::load(&w.sub(&format!("layers.{i}")), o))
            .collect::<Result<Vec<_>, _>>()?;
        // upgrade_state_dict_named: decoders up to version 2 had no final layer norm (but
        // 2018-19 pre-norm checkpoints carry version 2 and its weights; use them then)
        let wanted = o.side.normalize_before && !o.no_decoder_final_norm;
        let layer_norm = LayerNorm::load_final(w, c, "decoder", wanted, |v| v > 2.0, &mut warnings)?;
        let project_out_dim =
            if c != o.output_dim { Some(Linear::load(&w.sub("project_out_dim"), c, o.output_dim, false)?) } else { None };
        let vocab = embedding.embed_tokens.num_embeddings();
        let output_projection = Linear::load(&w.sub("output_projection"), o.output_dim, vocab, false)?;
        let decoder = Self {
            embedding,
            layers,
            layer_norm,
            project_out_dim,
            output_projection,
            padding_idx: PADDING_IDX,
            max_target_positions: o.side.max_positions,
            torch_self_attention: true,
            host_step: true,
            host_steps: AtomicUsize::new(0),
            fixed_kv_cache: false,
            fixed_steps: AtomicUsize::new(0),
            fixed_shape_steps: AtomicUsize::new(0),
            logits: BufferPool::default(),
            cuda_graphs: None,
        };
        Ok((decoder, warnings))
    }

    /// How many incremental steps kept their keys and values at a fixed capacity.
    pub fn fixed_steps(&self) -> usize {
        self.fixed_steps.load(Ordering::Relaxed)
    }

    /// How many incremental steps ran at their row bucket's shape.
    pub fn fixed_shape_steps(&self) -> usize {
        self.fixed_shape_steps.load(Ordering::Relaxed)
    }

    /// How many incremental steps ran on host buffers (`host_step.rs`).
    pub fn host_steps(&self) -> usize {
        self.host_steps.load(Ordering::Relaxed)
    }

    /// fairseq's `decoder.max_positions()`.
    pub fn max_positions(&self) -> usize {
        self.embedding.max_positions(self.max_target_positions)
    }

    /// `buffered_future_mask`: `triu(fill_with_neg_inf(zeros(T, T)), 1)` cast to `x`.
    fn future_mask(x: &Tensor) -> Result<Tensor, ModelError> {
        let dim = x.size()[0];
        let mask = Tensor::f_zeros([dim, dim], (Kind::Float, tch::Device::Cpu))?
            .f_fill_(f64::NEG_INFINITY)?
            .f_triu(1)?;
        Ok(mask.f_to_device(x.device())?.f_to_kind(x.kind())?)
    }

    /// Full-sequence mode when `incremental_state` is None. In incremental mode
    /// `prev_output_tokens` is the whole prefix `[B, step+1]` and only the last position is
    /// computed (fairseq semantics); logits are then `[B, 1, V]`. `encoder_out` is None for a
    /// language model's decoder.
    pub fn forward(
        &self,
        prev_output_tokens: &Tensor,
        encoder_out: Option<&EncoderOut>,
        incremental_state: Option<&mut IncrementalState>,
        need_attn: bool,
        return_all_hiddens: bool,
    ) -> Result<DecoderOut, ModelError> {
        let _guard = tch::no_grad_guard();
        if prev_output_tokens.dim() != 2 || prev_output_tokens.kind() != Kind::Int64 {
            return Err(ModelError::Input(format!(
                "prev_output_tokens must be a [batch, len] int64 tensor, got {:?} {:?}",
                prev_output_tokens.kind(),
                prev_output_tokens.size()
            )));
        }
        let bsz = prev_output_tokens.size()[0];
        if let Some(encoder_out) = encoder_out {
            let (src_len, enc_bsz, _) = encoder_out.encoder_out.size3()?;
            // BART's beamable attention keeps one encoder row per sentence for all its beams
            // (and does not shrink with the batch: only the cached keys do)
            let beamable = incremental_state.as_ref().is_some_and(|s| s.beamable > 1);
            if (enc_bsz != bsz && !beamable) || encoder_out.encoder_padding_mask.size() != [enc_bsz, src_len] {
                return Err(ModelError::Input(format!(
                    "{bsz} target rows for an encoder output of {enc_bsz} rows (mask {:?})",
                    encoder_out.encoder_padding_mask.size()
                )));
            }
        }
        let mut incremental_state = incremental_state;
        if let Some(state) = incremental_state.as_deref_mut().filter(|_| self.host_step && !need_attn && !return_all_hiddens) {
            if let Some(out) = self.first_step_once_per_sentence(prev_output_tokens, encoder_out, state)? {
                return Ok(out);
            }
            if let Some(logits) = self.host_step(prev_output_tokens, state)? {
                self.host_steps.fetch_add(1, Ordering::Relaxed);
                return Ok(DecoderOut { logits, attn: None, inner_states: Vec::new() });
            }
        }
        // a fixed-shape step runs on its rows padded to the row bucket, and returns the real ones
        let fixed_shape = incremental_state.as_deref().is_some_and(|s| self.fixed_shape_step(s, need_attn, return_all_hiddens));
        let padded = match incremental_state.as_deref_mut().filter(|_| fixed_shape) {
            Some(state) => self.pad_to_bucket(prev_output_tokens, encoder_out, state)?,
            None => None,
        };
        let (prev_output_tokens, encoder_out) = match &padded {
            Some((tokens, padded_encoder_out, _)) => (tokens, padded_encoder_out.as_ref().or(encoder_out)),
            None => (prev_output_tokens, encoder_out),
        };
        let enc = encoder_out.map(|e| &e.encoder_out);
        let incremental = incremental_state.is_some();
        let mut positions = self.embedding.positions(prev_output_tokens, incremental)?;
        let mut tokens = prev_output_tokens.shallow_clone();
        if incremental {
            tokens = tokens.f_narrow(1, tokens.size()[1] - 1, 1)?;
            if let Some(p) = positions.as_mut() {
                *p = p.f_narrow(1, p.size()[1] - 1, 1)?;
            }
        }
        let tokens = tokens.f_contiguous()?;
        let (mut x, _) = self.embedding.forward(&tokens, positions.as_ref())?;
        x = x.f_transpose(0, 1)?;
        let pad_mask = tokens.f_eq(self.padding_idx)?;
        let self_attn_padding_mask = (pad_mask.f_any()?.f_int64_value(&[])? != 0).then_some(pad_mask);
        let encoder_padding_mask = encoder_out.map(|e| &e.encoder_padding_mask);
        if let (Some(graphs), Some(s), true) = (&self.cuda_graphs, incremental_state.as_deref_mut(), fixed_shape && self_attn_padding_mask.is_none()) {
            let mut body = |x: &Tensor, s: &mut IncrementalState| self.step_layers(x, enc, encoder_padding_mask, s);
            if let Some(mut logits) = graphs.step(&x, s, enc.is_some(), &mut body)? {
                self.fixed_steps.fetch_add(1, Ordering::Relaxed);
                if let Some((_, _, rows)) = padded {
                    logits = logits.f_narrow(0, 0, rows)?;
                }
                return Ok(DecoderOut { logits, attn: None, inner_states: Vec::new() });
            }
        }
        let mut inner_states = Vec::new();
        if return_all_hiddens {
            inner_states.push(x.shallow_clone());
        }
        let mut attn = None;
        let last = self.layers.len().saturating_sub(1);
        let self_attn_mask = if incremental { None } else { Some(Self::future_mask(&x)?) };
        let mut state = incremental_state;
        if let Some(s) = state.as_deref_mut() {
            s.fixed_capacity = self.fixed_kv_cache;
        }
        for (idx, layer) in self.layers.iter().enumerate() {
            let need_head_weights = need_attn && idx == last;
            let layer_state = state.as_deref_mut().map(|s| s.layer_mut(idx));
            let (out, layer_attn) = layer.forward(
                &x,
                enc,
                encoder_padding_mask,
                layer_state,
                self_attn_mask.as_ref(),
                self_attn_padding_mask.as_ref(),
                need_head_weights,
                self.torch_self_attention,
            )?;
            x = out;
            if return_all_hiddens {
                inner_states.push(x.shallow_clone());
            }
            if let Some(a) = layer_attn.filter(|_| need_head_weights) {
                attn = Some(a.f_to_kind(Kind::Float)?.f_to_kind(x.kind())?);
            }
        }
        if state.is_some_and(|s| s.layers.first().is_some_and(|l| l.self_attn.fixed_cache.is_some())) {
            self.fixed_steps.fetch_add(1, Ordering::Relaxed);
        }
        let attn = match attn {
            Some(a) => Some(a.f_mean_dim(0, false, None::<Kind>)?),
            None => None,
        };
        let mut logits = self.output_layer(&x)?;
        if let Some((_, _, rows)) = padded {
            logits = logits.f_narrow(0, 0, rows)?;
        }
        Ok(DecoderOut { logits, attn, inner_states })
    }

    /// A fixed-shape step's layers and output layer on `x` `[1, rows, C]`, without masks or the
    /// attention weights: what a CUDA graph captures (`step_graphs.rs`).
    fn step_layers(
        &self,
        x: &Tensor,
        enc: Option<&Tensor>,
        encoder_padding_mask: Option<&Tensor>,
        state: &mut IncrementalState,
    ) -> Result<Tensor, ModelError> {
        state.fixed_capacity = self.fixed_kv_cache;
        let mut x = x.shallow_clone();
        for (idx, layer) in self.layers.iter().enumerate() {
            let layer_state = Some(state.layer_mut(idx));
            (x, _) = layer.forward(&x, enc, encoder_padding_mask, layer_state, None, None, false, self.torch_self_attention)?;
        }
        self.output_layer(&x)
    }

    /// Whether an incremental step runs at a fixed shape: the fixed-capacity cache on every
    /// layer's fused path, without the attention weights or the states a caller may ask for, and
    /// not BART's beamable encoder attention (one encoder row per sentence).
    fn fixed_shape_step(&self, state: &IncrementalState, need_attn: bool, return_all_hiddens: bool) -> bool {
        self.fixed_kv_cache
            && state.beamable <= 1
            && !need_attn
            && !return_all_hiddens
            && self.layers.iter().all(|l| l.self_attn.fused.is_some())
    }

    /// A fixed-shape step's input: its rows padded to the row bucket (`fixed_cache::row_bucket`)
    /// with copies of the first row, and the rows the logits keep. On the step that computes the
    /// encoder attentions' keys, the encoder output and its mask are padded too: their rows as
    /// the tokens', their positions to the source bucket (`fixed_cache::source_bucket`) with
    /// masked zeros, so that batches of nearby source lengths share one shape. None when there
    /// is nothing to pad.
    fn pad_to_bucket(
        &self,
        prev_output_tokens: &Tensor,
        encoder_out: Option<&EncoderOut>,
        state: &mut IncrementalState,
    ) -> Result<Option<(Tensor, Option<EncoderOut>, i64)>, ModelError> {
        let rows = prev_output_tokens.size()[0];
        let bucket = row_bucket(rows);
        state.padded_rows = Some(rows);
        self.fixed_shape_steps.fetch_add(1, Ordering::Relaxed);
        let keys_cached = state.layers.first().is_some_and(|l| l.encoder_attn.prev_key.is_some());
        let pad_source = encoder_out.filter(|_| !keys_cached).and_then(|e| {
            let src_len = e.encoder_padding_mask.size().get(1).copied().unwrap_or(0);
            (source_bucket(src_len) != src_len).then_some(source_bucket(src_len) - src_len)
        });
        if bucket == rows && pad_source.is_none() {
            return Ok(None);
        }
        let pad = |t: &Tensor, dim: i64| -> Result<Tensor, ModelError> {
            if bucket == rows {
                return Ok(t.shallow_clone());
            }
            let mut size = t.size();
            size[dim as usize] = bucket - rows;
            let copies = t.f_narrow(dim, 0, 1)?.f_expand(&size, false)?;
            Ok(Tensor::f_cat(&[t, &copies], dim)?)
        };
        let encoder_out = match encoder_out {
            // the keys are cached: the layers do not read the encoder output again, and the
            // step takes the caller's as it is
            Some(_) if keys_cached => None,
            Some(e) => {
                let (mut out, mut mask) = (pad(&e.encoder_out, 1)?, pad(&e.encoder_padding_mask, 0)?);
                if let Some(extra) = pad_source {
                    let (_, b, c) = out.size3()?;
                    let zeros = Tensor::f_zeros([extra, b, c], (out.kind(), out.device()))?;
                    out = Tensor::f_cat(&[&out, &zeros], 0)?;
                    let masked = Tensor::f_ones([b, extra], (mask.kind(), mask.device()))?;
                    mask = Tensor::f_cat(&[&mask, &masked], 1)?;
                }
                Some(EncoderOut {
                    encoder_out: out,
                    encoder_padding_mask: mask,
                    encoder_embedding: e.encoder_embedding.shallow_clone(),
                    encoder_states: Vec::new(),
                })
            }
            None => None,
        };
        Ok(Some((pad(prev_output_tokens, 0)?, encoder_out, rows)))
    }

    /// The last layer's output `[T, B, C]` to logits `[B, T, V]`: the final layer norm, then
    /// `project_out_dim` and `output_layer` (the output projection).
    pub fn output_layer(&self, features: &Tensor) -> Result<Tensor, ModelError> {
        let _guard = tch::no_grad_guard();
        let mut x = match &self.layer_norm {
            Some(ln) => ln.forward(features)?,
            None => features.shallow_clone(),
        };
        x = x.f_transpose(0, 1)?;
        if let Some(proj) = &self.project_out_dim {
            x = proj.forward(&x)?;
        }
        self.output_projection.forward_pooled(&x, &self.logits)
    }
}
