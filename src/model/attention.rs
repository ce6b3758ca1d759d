//! `MultiheadAttention` (fairseq/modules/multihead_attention.py) with both of the paths fairseq
//! 0.12.2 takes on torch 2.x: `F.multi_head_attention_forward` (which ends in
//! `scaled_dot_product_attention` when no weights are requested) and fairseq's own
//! `q * scaling` / `bmm` / f32-softmax path.

use tch::{Kind, Tensor};

use super::fused::{self, FusedProjections, Heads};
use super::incremental::AttentionState;
use crate::kernels::gemm::Precision;
use super::nn::Linear;
use super::weights::Weights;
use super::ModelError;

#[derive(Debug)]
pub struct MultiheadAttention {
    pub q_proj: Linear,
    pub k_proj: Linear,
    pub v_proj: Linear,
    pub out_proj: Linear,
    pub embed_dim: i64,
    pub num_heads: i64,
    pub head_dim: i64,
    pub scaling: f64,
    /// `self.scaling` as the Python float of `q *= self.scaling`, made once.
    scaling_operand: Tensor,
    /// `torch.cat((q_proj.bias, k_proj.bias, v_proj.bias))`, as handed to
    /// `F.multi_head_attention_forward`.
    in_proj_bias: Tensor,
    /// The projections of the incremental decoder under `--compute-type float32`/`int8`.
    pub fused: Option<FusedProjections>,
    /// `q_proj` computes `q · scaling` (it shares the fused projection's packed weight).
    q_prescaled: bool,
}

impl MultiheadAttention {
    /// `kdim` is the key/value input width (the encoder's for `encoder_attn`).
    pub fn load(w: &Weights, embed_dim: i64, kdim: i64, num_heads: i64) -> Result<Self, ModelError> {
        if num_heads <= 0 || embed_dim % num_heads != 0 {
            return Err(ModelError::Heads { module: w.prefix().to_string(), embed_dim, heads: num_heads });
        }
        let q_proj = Linear::load(&w.sub("q_proj"), embed_dim, embed_dim, true)?;
        let k_proj = Linear::load(&w.sub("k_proj"), kdim, embed_dim, true)?;
        let v_proj = Linear::load(&w.sub("v_proj"), kdim, embed_dim, true)?;
        let out_proj = Linear::load(&w.sub("out_proj"), embed_dim, embed_dim, true)?;
        let biases: Vec<&Tensor> = [&q_proj, &k_proj, &v_proj].iter().filter_map(|l| l.bias.as_ref()).collect();
        let in_proj_bias = Tensor::f_cat(&biases, 0)?;
        let head_dim = embed_dim / num_heads;
        let scaling = (head_dim as f64).powf(-0.5);
        Ok(Self {
            q_proj,
            k_proj,
            v_proj,
            out_proj,
            embed_dim,
            num_heads,
            head_dim,
            scaling,
            scaling_operand: super::nn::python_float(scaling)?,
            in_proj_bias,
            fused: None,
            q_prescaled: false,
        })
    }

    /// Fuses the projections for the incremental decoder's fewer, larger ops (`fused.rs`).
    pub fn fuse_projections(&mut self, self_attention: bool) -> Result<(), ModelError> {
        let projections = [&self.q_proj, &self.k_proj, &self.v_proj];
        self.fused = Some(FusedProjections::new(projections, self.scaling, self_attention)?);
        Ok(())
    }

    /// Packs the fused projections for the host and makes `q_proj`, `k_proj` and `v_proj`
    /// ranges of their columns, so that one copy of the weights serves the incremental step and
    /// whole sequences; `q_proj` then gives `q · scaling`. Returns whether it could.
    pub fn pack_fused_for_host(&mut self, precision: Precision) -> Result<bool, ModelError> {
        let c = self.embed_dim as usize;
        let Some(fused) = self.fused.as_mut() else {
            return Ok(false);
        };
        for linear in fused.linears_mut() {
            if !linear.pack_for_host(precision)? {
                return Ok(false);
            }
        }
        let parts = match &*fused {
            FusedProjections::SelfAttention { qkv } => {
                let p = qkv.packed().ok_or_else(|| ModelError::Input("unpacked projection".into()))?;
                [p.columns(0..c), p.columns(c..2 * c), p.columns(2 * c..3 * c)]
            }
            FusedProjections::EncoderAttention { q, kv } => {
                let (q, kv) = (q.packed(), kv.packed());
                let (Some(q), Some(kv)) = (q, kv) else {
                    return Ok(false);
                };
                [q.columns(0..c), kv.columns(0..c), kv.columns(c..2 * c)]
            }
        };
        let [Some(q), Some(k), Some(v)] = parts else {
            return Ok(false);
        };
        self.q_proj.set_packed(q);
        self.k_proj.set_packed(k);
        self.v_proj.set_packed(v);
        self.q_prescaled = true;
        Ok(true)
    }

    fn heads(&self) -> Heads<'_> {
        Heads { num_heads: self.num_heads, head_dim: self.head_dim, embed_dim: self.embed_dim, out_proj: &self.out_proj }
    }

    /// One incremental self-attention step through the fused projections.
    pub fn fused_self_attention_step(&self, query: &Tensor, state: &mut AttentionState) -> Result<Tensor, ModelError> {
        let Some(FusedProjections::SelfAttention { qkv }) = &self.fused else {
            return Err(ModelError::Input("self-attention without fused projections".into()));
        };
        fused::self_attention_step(&self.heads(), qkv, query, state)
    }

    /// One incremental encoder-attention step through the fused projections.
    pub fn fused_encoder_attention_step(
        &self,
        query: &Tensor,
        encoder_out: &Tensor,
        encoder_padding_mask: Option<&Tensor>,
        state: &mut AttentionState,
    ) -> Result<Tensor, ModelError> {
        let Some(FusedProjections::EncoderAttention { q, kv }) = &self.fused else {
            return Err(ModelError::Input("encoder attention without fused projections".into()));
        };
        fused::encoder_attention_step(&self.heads(), [q, kv], query, encoder_out, encoder_padding_mask, state)
    }

    /// `F.multi_head_attention_forward(..., need_weights=False, use_separate_proj_weight=True)`
    /// as fairseq calls it when there is no incremental state and no static kv (encoder
    /// self-attention off the fast path, decoder self-attention over a whole sequence).
    ///
    /// `query` `[L, B, C]`, `key` `[S, B, C]` (value = key), `key_padding_mask` `[B, S]` bool
    /// (true = pad), `attn_mask` `[L, S]` float (added).
    pub fn forward_torch(
        &self,
        query: &Tensor,
        key: &Tensor,
        key_padding_mask: Option<&Tensor>,
        attn_mask: Option<&Tensor>,
    ) -> Result<Tensor, ModelError> {
        let (tgt_len, bsz, embed_dim) = query.size3()?;
        let src_len = key.size3()?.0;
        let (h, d) = (self.num_heads, self.head_dim);
        // _canonical_mask: a bool padding mask becomes -inf where true, in the query dtype
        let key_padding_mask = match key_padding_mask {
            Some(m) => Some(
                m.f_zeros_like()?
                    .f_to_kind(query.kind())?
                    .f_masked_fill_(m, f64::NEG_INFINITY)?,
            ),
            None => None,
        };
        let b = self.in_proj_bias.f_chunk(3, 0)?;
        let q = self.q_proj.forward_with_bias(query, Some(&b[0]))?;
        let k = self.k_proj.forward_with_bias(key, Some(&b[1]))?;
        let v = self.v_proj.forward_with_bias(key, Some(&b[2]))?;
        let mut attn_mask = match attn_mask {
            Some(m) if m.dim() == 2 => Some(m.f_unsqueeze(0)?),
            Some(m) => Some(m.shallow_clone()),
            None => None,
        };
        let q = q.f_view([tgt_len, bsz * h, d])?.f_transpose(0, 1)?;
        let k = k.f_view([k.size()[0], bsz * h, d])?.f_transpose(0, 1)?;
        let v = v.f_view([v.size()[0], bsz * h, d])?.f_transpose(0, 1)?;
        if let Some(kpm) = key_padding_mask {
            let kpm = kpm
                .f_view([bsz, 1, 1, src_len])?
                .f_expand([-1, h, -1, -1], false)?
                .f_reshape([bsz * h, 1, src_len])?;
            attn_mask = Some(match attn_mask {
                None => kpm,
                Some(m) => m.f_add(&kpm)?,
            });
        }
        let attn_mask = match attn_mask {
            Some(m) if m.size()[0] == 1 && m.dim() == 3 => Some(m.f_unsqueeze(0)?),
            Some(m) => Some(m.f_view([bsz, h, -1, src_len])?),
            None => None,
        };
        let q = q.f_view([bsz, h, tgt_len, d])?;
        let k = k.f_view([bsz, h, src_len, d])?;
        let v = v.f_view([bsz, h, src_len, d])?;
        let scale = self.q_prescaled.then_some(1.0);
        let out = Tensor::f_scaled_dot_product_attention(&q, &k, &v, attn_mask.as_ref(), 0.0, false, scale, false)?;
        let out = out.f_permute([2, 0, 1, 3])?.f_reshape([bsz * tgt_len, embed_dim])?;
        let out = self.out_proj.forward(&out)?;
        Ok(out.f_view([tgt_len, bsz, -1])?)
    }

    /// fairseq's own attention path (`MultiheadAttention.forward` past the
    /// `F.multi_head_attention_forward` branch): incremental self-attention and every
    /// encoder-decoder attention.
    ///
    /// `key` is None for self-attention (keys come from `query`) and for encoder attention
    /// once `state` holds the static keys. Returns the output `[L, B, C]` and, with
    /// `need_weights`, the f32 attention probabilities: `[H, B, L, S]` with
    /// `need_head_weights`, else averaged over heads `[B, L, S]`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_fairseq(
        &self,
        query: &Tensor,
        key: Option<&Tensor>,
        key_padding_mask: Option<&Tensor>,
        attn_mask: Option<&Tensor>,
        state: Option<&mut AttentionState>,
        static_kv: bool,
        need_weights: bool,
        need_head_weights: bool,
    ) -> Result<(Tensor, Option<Tensor>), ModelError> {
        let (tgt_len, bsz, embed_dim) = query.size3()?;
        let (h, d) = (self.num_heads, self.head_dim);
        let self_attention = !static_kv;
        // previous steps cached the static keys: do not recompute them
        let key = if static_kv && state.as_ref().is_some_and(|s| s.prev_key.is_some()) { None } else { key };
        let beam_size = state.as_ref().map_or(1, |s| s.beam_size.max(1));
        // BART's beamable attention reduces per-beam keys [T, B*beam, C] to [T, B, C]
        let mut key_padding_mask = key_padding_mask.map(Tensor::shallow_clone);
        let reduced;
        let key = match key {
            Some(k) if static_kv && beam_size > 1 && k.size()[1] == bsz => {
                let s = k.size();
                reduced = k.f_view([s[0], -1, beam_size, s[2]])?.f_select(2, 0)?;
                if let Some(m) = &key_padding_mask {
                    let src = m.size()[1];
                    key_padding_mask = Some(m.f_view([-1, beam_size, src])?.f_select(1, 0)?);
                }
                Some(&reduced)
            }
            k => k,
        };
        let mut q = self.q_proj.forward(query)?;
        let (k, v) = if self_attention {
            (Some(self.k_proj.forward(query)?), Some(self.v_proj.forward(query)?))
        } else if let Some(key) = key {
            (Some(self.k_proj.forward(key)?), Some(self.v_proj.forward(key)?))
        } else {
            (None, None)
        };
        // fairseq scales q after the bias add
        if !self.q_prescaled {
            let _ = q.f_mul_(&self.scaling_operand)?;
        }
        let q = q.f_contiguous()?.f_view([tgt_len, bsz * h, d])?.f_transpose(0, 1)?;
        let mut kv_bsz = bsz;
        let mut k = match k {
            Some(k) => {
                kv_bsz = k.size()[1];
                Some(k.f_contiguous()?.f_view([-1, kv_bsz * h, d])?.f_transpose(0, 1)?)
            }
            None => None,
        };
        let mut v = match v {
            Some(v) => Some(v.f_contiguous()?.f_view([-1, kv_bsz * h, d])?.f_transpose(0, 1)?),
            None => None,
        };
        // an encoder attention whose cached padding mask holds no padding: its fill is skipped
        let mut padding_free = false;
        if let Some(state) = state {
            let appended = match (&k, &v) {
                (Some(k), Some(v)) if self_attention => state.append_in_place(k, v)?,
                _ => None,
            };
            if let Some((all_k, all_v)) = appended {
                kv_bsz = all_k.size()[0] / h;
                (k, v) = (Some(all_k), Some(all_v));
            } else {
                if let Some(prev_key) = &state.prev_key {
                    kv_bsz = prev_key.size()[0];
                    let prev_key = prev_key.f_view([kv_bsz * h, -1, d])?;
                    k = Some(match (static_kv, k) {
                        (false, Some(k)) => Tensor::f_cat(&[prev_key, k], 1)?,
                        _ => prev_key,
                    });
                }
                if let Some(prev_value) = &state.prev_value {
                    let prev_value = prev_value.f_view([kv_bsz * h, -1, d])?;
                    v = Some(match (static_kv, v) {
                        (false, Some(v)) => Tensor::f_cat(&[prev_value, v], 1)?,
                        _ => prev_value,
                    });
                }
            }
            let (Some(k), Some(v)) = (&k, &v) else {
                return Err(ModelError::Input("encoder attention has neither keys nor a cache".into()));
            };
            key_padding_mask = append_prev_key_padding_mask(
                key_padding_mask.as_ref(),
                state.prev_key_padding_mask.as_ref(),
                kv_bsz,
                k.size()[1],
                static_kv,
            )?;
            state.prev_key = Some(k.f_view([kv_bsz, h, -1, d])?);
            state.prev_value = Some(v.f_view([kv_bsz, h, -1, d])?);
            state.prev_key_padding_mask = key_padding_mask.as_ref().map(Tensor::shallow_clone);
            state.room_for_next_key = self_attention;
            if static_kv {
                // known from the step that computed the keys on; the reorders only select rows
                if key.is_some() || state.static_padding_free.is_none() {
                    state.static_padding_free = Some(match &key_padding_mask {
                        Some(m) => m.f_any()?.f_int64_value(&[])? == 0,
                        None => true,
                    });
                }
                padding_free = state.static_padding_free == Some(true);
            }
        }
        let (Some(k), Some(v)) = (k, v) else {
            return Err(ModelError::Input("encoder attention called without keys".into()));
        };
        let src_len = k.size()[1];
        let beamable = kv_bsz != bsz;
        if beamable && (kv_bsz == 0 || bsz % kv_bsz != 0) {
            return Err(ModelError::Input(format!("attention over {kv_bsz} key rows for {bsz} query rows")));
        }
        let mut attn_weights = if beamable {
            let q5 = q.f_view([kv_bsz, -1, h, tgt_len, d])?;
            let k4 = k.f_view([kv_bsz, h, -1, d])?;
            Tensor::f_einsum("bxhtd,bhsd->bxhts", &[q5, k4], None::<&[i64]>)?.f_reshape([-1, tgt_len, src_len])?
        } else {
            q.f_bmm(&k.f_transpose(1, 2)?)?
        };
        if let Some(m) = attn_mask {
            let _ = attn_weights.f_add_(&m.f_unsqueeze(0)?)?;
        }
        if let Some(kpm) = key_padding_mask.as_ref().filter(|_| !padding_free) {
            let fill = kpm.f_unsqueeze(1)?.f_unsqueeze(2)?.f_unsqueeze(3)?.f_to_kind(Kind::Bool)?;
            // fairseq's masked_fill makes a copy; this one writes over the product's fresh output
            let mut grouped = attn_weights.f_view([bsz, h, tgt_len, src_len])?.f_view([kv_bsz, -1, h, tgt_len, src_len])?;
            let _ = grouped.f_masked_fill_(&fill, f64::NEG_INFINITY)?;
            attn_weights = grouped.f_view([bsz * h, tgt_len, src_len])?;
        }
        let attn_weights_float = attn_weights.f_softmax(-1, Kind::Float)?;
        // `type_as`, which returns the tensor itself when the kinds agree
        let attn_probs = match attn_weights.kind() {
            Kind::Float => attn_weights_float.shallow_clone(),
            kind => attn_weights_float.f_to_kind(kind)?,
        };
        let attn = if beamable {
            let p5 = attn_probs.f_view([kv_bsz, -1, h, tgt_len, src_len])?;
            let v4 = v.f_view([kv_bsz, h, -1, d])?;
            Tensor::f_einsum("bxhts,bhsd->bxhtd", &[p5, v4], None::<&[i64]>)?.f_reshape([-1, tgt_len, d])?
        } else {
            attn_probs.f_bmm(&v)?
        };
        let attn = attn.f_transpose(0, 1)?.f_contiguous()?.f_view([tgt_len, bsz, embed_dim])?;
        let attn = self.out_proj.forward(&attn)?;
        let weights = if need_weights || need_head_weights {
            let w = attn_weights_float.f_view([bsz, h, tgt_len, src_len])?.f_transpose(1, 0)?;
            Some(if need_head_weights { w } else { w.f_mean_dim(0, false, None::<Kind>)? })
        } else {
            None
        };
        Ok((attn, weights))
    }
}

/// `MultiheadAttention._append_prev_key_padding_mask`: cached masks are kept as float.
fn append_prev_key_padding_mask(
    key_padding_mask: Option<&Tensor>,
    prev_key_padding_mask: Option<&Tensor>,
    batch_size: i64,
    src_len: i64,
    static_kv: bool,
) -> Result<Option<Tensor>, ModelError> {
    let float = |t: &Tensor| t.f_to_kind(Kind::Float);
    Ok(match (prev_key_padding_mask, key_padding_mask) {
        (Some(prev), _) if static_kv => Some(prev.shallow_clone()),
        (Some(prev), Some(cur)) => Some(Tensor::f_cat(&[float(prev)?, float(cur)?], 1)?),
        (Some(prev), None) => {
            let have = prev.size()[1];
            if src_len > have {
                let filler = Tensor::f_zeros([batch_size, src_len - have], (Kind::Float, prev.device()))?;
                Some(Tensor::f_cat(&[float(prev)?, filler], 1)?)
            } else {
                Some(float(prev)?)
            }
        }
        (None, Some(cur)) => {
            let have = cur.size()[1];
            if src_len > have {
                let filler = Tensor::f_zeros([batch_size, src_len - have], (Kind::Float, cur.device()))?;
                Some(Tensor::f_cat(&[filler, float(cur)?], 1)?)
            } else {
                Some(float(cur)?)
            }
        }
        (None, None) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_padding_masks_are_float_and_static_ones_are_reused() {
        let cur = Tensor::from_slice(&[false, true]).view([2, 1]);
        let first = append_prev_key_padding_mask(Some(&cur), None, 2, 3, false).unwrap().unwrap();
        assert_eq!(first.kind(), Kind::Float);
        assert_eq!(Vec::<f32>::try_from(first.flatten(0, -1)).unwrap(), [0., 0., 0., 0., 0., 1.]);
        let prev = Tensor::from_slice(&[1.0f32, 0.0]).view([2, 1]);
        let kept = append_prev_key_padding_mask(Some(&cur), Some(&prev), 2, 1, true).unwrap().unwrap();
        assert!(kept.equal(&prev));
        assert!(append_prev_key_padding_mask(None, None, 2, 1, false).unwrap().is_none());
    }
}
