//! The decoder's incremental attention for `--compute-type float32` and `int8`: fewer, larger
//! ops than fairseq's path. A self-attention projects its query, key and value in one matrix
//! product, with the query's scaling folded into the weights; an encoder attention projects its
//! key and value once per sentence in one product; both attend with
//! `scaled_dot_product_attention` (on the host for a few rows, `one_query.rs`; in half precision
//! on a GPU, as fairseq's own path computes: see [`attend`]). The arithmetic differs from
//! fairseq's in the last bits, so `exact` never takes this path.

use tch::{Device, Kind, Tensor};

use super::fixed_cache::FixedKvCache;
use super::incremental::AttentionState;
use crate::kernels::kv_cache::HostKvCache;
use super::nn::Linear;
use crate::kernels::one_query;
use super::ModelError;
use crate::libtorch::host::{f32_view, is_host_f32};

/// The fused projections of one `MultiheadAttention`.
#[derive(Debug)]
pub enum FusedProjections {
    /// `[q·scaling; k; v]` of a self-attention: `[3C, C]`.
    SelfAttention { qkv: Linear },
    /// `q·scaling` `[C, C]` and `[k; v]` `[2C, C_enc]` of an encoder attention.
    EncoderAttention { q: Linear, kv: Linear },
}

/// What a step needs of its attention besides the fused projections.
pub struct Heads<'a> {
    pub num_heads: i64,
    pub head_dim: i64,
    pub embed_dim: i64,
    pub out_proj: &'a Linear,
}

impl FusedProjections {
    /// From an attention's `q_proj`, `k_proj`, `v_proj` and its query `scaling`.
    pub fn new([q_proj, k_proj, v_proj]: [&Linear; 3], scaling: f64, self_attention: bool) -> Result<Self, ModelError> {
        let _guard = tch::no_grad_guard();
        let scaled = |l: &Linear| -> Result<(Tensor, Option<Tensor>), ModelError> {
            let w = l.weight.f_mul_scalar(scaling)?;
            let b = l.bias.as_ref().map(|b| b.f_mul_scalar(scaling)).transpose()?;
            Ok((w, b))
        };
        let (qw, qb) = scaled(q_proj)?;
        let stack = |parts: &[(&Tensor, Option<&Tensor>)]| -> Result<Linear, ModelError> {
            let weight = Tensor::f_cat(&parts.iter().map(|p| p.0).collect::<Vec<_>>(), 0)?;
            let biases: Vec<&Tensor> = parts.iter().filter_map(|p| p.1).collect();
            let bias = if biases.len() == parts.len() { Some(Tensor::f_cat(&biases, 0)?) } else { None };
            Ok(Linear::from_tensors(weight, bias))
        };
        let k = (&k_proj.weight, k_proj.bias.as_ref());
        let v = (&v_proj.weight, v_proj.bias.as_ref());
        Ok(if self_attention {
            Self::SelfAttention { qkv: stack(&[(&qw, qb.as_ref()), k, v])? }
        } else {
            Self::EncoderAttention { q: Linear::from_tensors(qw, qb), kv: stack(&[k, v])? }
        })
    }

    pub fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Self::SelfAttention { qkv } => vec![qkv],
            Self::EncoderAttention { q, kv } => vec![q, kv],
        }
    }
}

/// `[L, B, n·C]` → `[n, B, H, L, D]` (a view); `.select(0, i)` is the i-th projection's heads.
fn split_heads(x: &Tensor, n: i64, h: i64, d: i64) -> Result<Tensor, ModelError> {
    let (len, bsz, _) = x.size3()?;
    Ok(x.f_view([len, bsz, n, h, d])?.f_permute([2, 1, 3, 0, 4])?)
}

/// `[B, H, L, D]` → `[L, B, C]`, through the output projection.
fn merge_heads(a: &Heads, x: &Tensor) -> Result<Tensor, ModelError> {
    let (bsz, _, len, _) = x.size4()?;
    let x = x.f_permute([2, 0, 1, 3])?.f_reshape([len, bsz, a.embed_dim])?;
    a.out_proj.forward(&x)
}

/// One incremental step of a decoder self-attention (no masks: a step sees every earlier
/// position). `state` keeps keys and values `[B, H, len, D]`, as fairseq's path does.
pub fn self_attention_step(a: &Heads, qkv: &Linear, query: &Tensor, state: &mut AttentionState) -> Result<Tensor, ModelError> {
    let projected = qkv.forward(query)?;
    if let Some(out) = host_cache_step(a, &projected, state)? {
        return a.out_proj.forward(&out);
    }
    let heads = split_heads(&projected, 3, a.num_heads, a.head_dim)?;
    if state.fixed_capacity && state.prev_key.is_none() {
        let (k, v) = (heads.f_select(0, 1)?, heads.f_select(0, 2)?);
        let cache = match state.fixed_cache.as_mut() {
            Some(cache) => cache,
            None => state.fixed_cache.insert(FixedKvCache::new(&k)?),
        };
        cache.append(&k, &v)?;
        let (keys, values, bias) = cache.attended()?;
        return merge_heads(a, &attend(&heads.f_select(0, 0)?, &keys, &values, Some(&bias))?);
    }
    state.host_cache_to_tensors()?;
    let grow = |prev: &Option<Tensor>, new: Tensor| match prev {
        Some(p) => Tensor::f_cat(&[p, &new], 2),
        None => new.f_contiguous(),
    };
    let k = grow(&state.prev_key, heads.f_select(0, 1)?)?;
    let v = grow(&state.prev_value, heads.f_select(0, 2)?)?;
    let out = match one_query::attend(&projected, &k, &v, None)? {
        Some(out) => a.out_proj.forward(&out)?,
        None => {
            let q = heads.f_select(0, 0)?;
            merge_heads(a, &attend(&q, &k, &v, None)?)?
        }
    };
    state.prev_key = Some(k);
    state.prev_value = Some(v);
    state.room_for_next_key = false;
    Ok(out)
}

/// [`self_attention_step`] with its keys and values in a host cache (`kv_cache.rs`), for a
/// float32 CPU projection `[1, B, 3C]`; None where it does not apply (then a cache is moved into
/// the tensors the other path reads).
fn host_cache_step(a: &Heads, projected: &Tensor, state: &mut AttentionState) -> Result<Option<Tensor>, ModelError> {
    if !is_host_f32(projected) || state.prev_key.is_some() || state.fixed_capacity {
        return Ok(None);
    }
    let (one, rows, stride) = projected.size3()?;
    let c = (a.num_heads * a.head_dim) as usize;
    if one != 1 || stride as usize != 3 * c || state.host_cache.as_ref().is_some_and(|h| h.rows() != rows as usize) {
        return Ok(None);
    }
    let cache = state.host_cache.get_or_insert_with(|| HostKvCache::new(rows as usize, a.num_heads as usize, a.head_dim as usize));
    // SAFETY: nothing writes `projected` during the call.
    let Some(data) = (unsafe { f32_view(projected) }) else { return Ok(None) };
    cache.append(data, 3 * c, c, 2 * c)?;
    let out = one_query::attend_cache(projected, cache)?;
    out.map(Some).ok_or_else(|| ModelError::Input(format!("no host attention for a step of {:?}", projected.size())))
}

/// An encoder attention in incremental decoding: keys, values and the additive padding mask are
/// computed at the first step and kept in `state`.
pub fn encoder_attention_step(
    a: &Heads,
    [q, kv]: [&Linear; 2],
    query: &Tensor,
    encoder_out: &Tensor,
    encoder_padding_mask: Option<&Tensor>,
    state: &mut AttentionState,
) -> Result<Tensor, ModelError> {
    if state.prev_key.is_none() {
        let heads = split_heads(&kv.forward(encoder_out)?, 2, a.num_heads, a.head_dim)?;
        state.prev_key = Some(heads.f_select(0, 0)?.f_contiguous()?);
        state.prev_value = Some(heads.f_select(0, 1)?.f_contiguous()?);
        state.attn_bias = match encoder_padding_mask {
            Some(m) if m.f_any()?.f_int64_value(&[])? != 0 => {
                let (bsz, src_len) = m.size2()?;
                let bias = Tensor::f_zeros([bsz, src_len], (encoder_out.kind(), m.device()))?.f_masked_fill(m, f64::NEG_INFINITY)?;
                Some(bias.f_view([bsz, 1, 1, src_len])?)
            }
            _ => None,
        };
    }
    let (Some(k), Some(v)) = (&state.prev_key, &state.prev_value) else {
        return Err(ModelError::Input("encoder attention has no cached keys".into()));
    };
    let projected = q.forward(query)?;
    if let Some(out) = one_query::attend(&projected, k, v, state.attn_bias.as_ref())? {
        return a.out_proj.forward(&out);
    }
    let q = split_heads(&projected, 1, a.num_heads, a.head_dim)?.f_select(0, 0)?;
    // keys kept once per sentence (`TransformerModel::beamable_encoder_attention`), repeated
    // for each of its beams here
    let (rows, kv_rows) = (q.size()[0], k.size()[0]);
    if kv_rows != rows && kv_rows > 0 && rows % kv_rows == 0 {
        let per = |t: &Tensor| t.f_repeat_interleave_self_int(rows / kv_rows, 0, None);
        let bias = state.attn_bias.as_ref().map(per).transpose()?;
        return merge_heads(a, &attend(&q, &per(k)?, &per(v)?, bias.as_ref())?);
    }
    merge_heads(a, &attend(&q, k, v, state.attn_bias.as_ref())?)
}

/// `softmax(q·kᵀ + bias)·v` for `[B, H, 1, D]` queries already scaled. In float16 and bfloat16
/// on a GPU, libtorch 2.11's `scaled_dot_product_attention` picks cuDNN's attention, which plans
/// a graph for every new key length: on an H200 that cost 7.7 ms a call (docs/gpu.md). There the
/// step takes fairseq's own path instead: two batched products and a softmax in fp32
/// (`utils.softmax(attn_weights, dim=-1)`, then `type_as`).
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, ModelError> {
    if q.device() == Device::Cpu || q.kind() == Kind::Float {
        return Ok(Tensor::f_scaled_dot_product_attention(q, k, v, bias, 0.0, false, Some(1.0), false)?);
    }
    attend_in_steps(q, k, v, bias)
}

fn attend_in_steps(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, ModelError> {
    let mut weights = q.f_matmul(&k.f_transpose(-2, -1)?)?;
    if let Some(bias) = bias {
        weights = weights.f_add(bias)?;
    }
    let probs = weights.f_softmax(-1, Kind::Float)?.f_to_kind(q.kind())?;
    Ok(probs.f_matmul(v)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn attention_in_steps_is_scaled_dot_product_attention() {
        let mut rng = TestRng::new(234);
        let (b, h, s, d) = (3, 4, 7, 16);
        let q = rng.randn([b, h, 1, d]) * 0.25;
        let k = rng.randn([b, h, s, d]);
        let v = rng.randn([b, h, s, d]);
        let padding = Tensor::from_slice(&[0i64, 0, 2]).view([b, 1, 1, 1]);
        let position = Tensor::arange(s, (Kind::Int64, Device::Cpu)).view([1, 1, 1, s]);
        let mask = position.ge_tensor(&(-padding + s));
        let bias = Tensor::zeros([b, 1, 1, s], (Kind::Float, Device::Cpu)).masked_fill(&mask, f64::NEG_INFINITY);
        for bias in [None, Some(&bias)] {
            let want = Tensor::scaled_dot_product_attention(&q, &k, &v, bias, 0.0, false, Some(1.0), false);
            let got = attend_in_steps(&q, &k, &v, bias).unwrap();
            assert_eq!(got.size(), want.size());
            let diff = (&got - &want).abs().max().double_value(&[]);
            assert!(crate::tolerance::HOST_REDUCTION.holds(diff), "{diff}");
            for kind in [Kind::Half, Kind::BFloat16] {
                let half = |t: &Tensor| t.to_kind(kind);
                let got = attend_in_steps(&half(&q), &half(&k), &half(&v), bias.map(half).as_ref()).unwrap();
                assert_eq!(got.kind(), kind);
                let diff = (got.to_kind(Kind::Float) - &want).abs().max().double_value(&[]);
                assert!(diff < 0.05, "{kind:?}: {diff}");
            }
        }
    }
}
