//! `--compute-type float32`/`int8`: attention for one query position per row, the incremental
//! decoder's step, computed on the host. libtorch's `scaled_dot_product_attention` blocks for
//! long queries and costs some 180 µs a call at 1,280 heads of one query (the bundled model at
//! batch 32, beam 5), where the arithmetic is a few dozen products per head.
//!
//! Another summation order than libtorch's, like the rest of `float32`. On x86 with a head size
//! of 8 to 64 in whole vectors, `avx2.rs` computes it in vectors written out, with
//! `exp_avx2::exp`; the plain loops below take the other sizes and CPUs, with
//! `softmax::exp_with` (its multiply-adds fused where the CPU has FMA).

use tch::{Device, Kind, Tensor};

use super::kv_cache::HostKvCache;
use super::isa::Isa;
use super::softmax::{exp_with, madd};
use super::KernelError;
use crate::libtorch::host::{f32_view, f32_view_mut};

#[cfg(target_arch = "x86_64")]
mod avx2;

/// The shapes of one call: `rows` queries (`heads × head_dim` each, `q_stride` floats apart)
/// over `len` positions of keys and values (see [`Keys`]), query row `b` reading key row
/// `b / (rows / kv_rows)` (BART's beamable attention keeps one key row per sentence).
struct Shape {
    rows: usize,
    kv_rows: usize,
    heads: usize,
    len: usize,
    head_dim: usize,
    q_stride: usize,
}

/// `softmax(q·kᵀ + bias)·v` for every row and head; `q` is `[1, rows, q_stride]` (the first
/// `heads × head_dim` columns are the query; scaling already applied), `bias` `[kv_rows, len]`
/// additive (−∞ for padding). Returns `[1, rows, heads × head_dim]`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>) -> Result<Option<Tensor>, KernelError> {
    // SAFETY: nothing writes these tensors during the call.
    let (Some(q_data), Some(k_data), Some(v_data)) = (unsafe { (f32_view(q), f32_view(k), f32_view(v)) }) else {
        return Ok(None);
    };
    let bias_data = match bias.map(|b| unsafe { f32_view(b) }) {
        Some(None) => return Ok(None),
        viewed => viewed.flatten(),
    };
    let (one, rows, q_stride) = q.size3()?;
    let (kv_rows, heads, len, head_dim) = k.size4()?;
    if one != 1 || v.size() != k.size() || kv_rows == 0 || rows % kv_rows != 0 || heads * head_dim > q_stride || len == 0 {
        return Ok(None);
    }
    if bias.is_some_and(|b| b.numel() as i64 != kv_rows * len) {
        return Ok(None);
    }
    let shape = Shape {
        rows: rows as usize,
        kv_rows: kv_rows as usize,
        heads: heads as usize,
        len: len as usize,
        head_dim: head_dim as usize,
        q_stride: q_stride as usize,
    };
    let mut out = Tensor::f_empty([1, rows, heads * head_dim], (Kind::Float, Device::Cpu))?;
    // SAFETY: `out` is new and not shared.
    let Some(out_data) = (unsafe { f32_view_mut(&mut out) }) else {
        return Ok(None);
    };
    run(&shape, q_data, Keys::Dense { k: k_data, v: v_data }, bias_data, out_data);
    Ok(Some(out))
}

/// [`attend`] over a host key/value cache (`kv_cache.rs`), each query row reading its own
/// positions' slots; `q` as there, `[1, rows, q_stride]` with the query in its first `heads × head_dim` columns.
pub fn attend_cache(q: &Tensor, cache: &HostKvCache) -> Result<Option<Tensor>, KernelError> {
    // SAFETY: nothing writes `q` during the call.
    let Some(q_data) = (unsafe { f32_view(q) }) else { return Ok(None) };
    let (one, rows, q_stride) = q.size3()?;
    let (heads, head_dim) = (cache.heads(), cache.head_dim());
    if one != 1 || rows as usize != cache.rows() || heads * head_dim > q_stride as usize || cache.is_empty() {
        return Ok(None);
    }
    let shape = Shape {
        rows: rows as usize,
        kv_rows: rows as usize,
        heads,
        len: cache.len(),
        head_dim,
        q_stride: q_stride as usize,
    };
    let mut out = Tensor::f_empty([1, rows, (heads * head_dim) as i64], (Kind::Float, Device::Cpu))?;
    // SAFETY: `out` is new and not shared.
    let Some(out_data) = (unsafe { f32_view_mut(&mut out) }) else { return Ok(None) };
    run(&shape, q_data, Keys::Cache(cache), None, out_data);
    Ok(Some(out))
}

/// [`attend`] on slices: `rows` queries `q_stride` floats apart (the query in the first `heads ×
/// head_dim` of each) over dense keys and values `[kv_rows, heads, len, head_dim]` and an
/// additive `bias` `[kv_rows, len]`, into `out` `[rows, heads × head_dim]`; false (nothing
/// written) where the operands do not fit those shapes.
#[allow(clippy::too_many_arguments)]
pub fn attend_into(q: &[f32], q_stride: usize, k: &[f32], v: &[f32], [kv_rows, heads, len, head_dim]: [usize; 4], bias: Option<&[f32]>, out: &mut [f32]) -> bool {
    let width = heads * head_dim;
    let rows = out.len() / width.max(1);
    let fits = kv_rows > 0
        && len > 0
        && width > 0
        && width <= q_stride
        && rows.is_multiple_of(kv_rows)
        && out.len() == rows * width
        && q.len() == rows * q_stride
        && k.len() == kv_rows * width * len
        && v.len() == k.len()
        && bias.is_none_or(|b| b.len() == kv_rows * len);
    if fits {
        let shape = Shape { rows, kv_rows, heads, len, head_dim, q_stride };
        run(&shape, q, Keys::Dense { k, v }, bias, out);
    }
    fits
}

/// [`attend_cache`] on slices: `q` as in [`attend_into`], one row per cached row; false
/// (nothing written) where the operands do not fit.
pub fn attend_cache_into(q: &[f32], q_stride: usize, cache: &HostKvCache, out: &mut [f32]) -> bool {
    let (rows, heads, head_dim) = (cache.rows(), cache.heads(), cache.head_dim());
    let fits = !cache.is_empty() && heads * head_dim <= q_stride && q.len() == rows * q_stride && out.len() == rows * heads * head_dim;
    if fits {
        let shape = Shape { rows, kv_rows: rows, heads, len: cache.len(), head_dim, q_stride };
        run(&shape, q, Keys::Cache(cache), None, out);
    }
    fits
}

/// Work below this many flops is not worth waking another thread for.
const GRAIN_FLOPS: usize = 1 << 17;

fn run(s: &Shape, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    let row_flops = (s.heads * s.len * s.head_dim * 4).max(1);
    let width = s.heads * s.head_dim;
    let out = SharedOut(out.as_mut_ptr());
    crate::libtorch::parallel::parallel_for(s.rows, GRAIN_FLOPS.div_ceil(row_flops), |start, end| {
        let out = &out;
        // SAFETY: each range writes only its own rows of `out`.
        let out = unsafe { std::slice::from_raw_parts_mut(out.0.add(start * width), (end - start) * width) };
        rows(s, start..end, q, kv, bias, out)
    });
}

struct SharedOut(*mut f32);
// SAFETY: `run` hands each thread disjoint rows.
unsafe impl Sync for SharedOut {}

#[derive(Clone, Copy)]
enum Keys<'a> {
    /// `[kv_rows, heads, len, head_dim]` each.
    Dense { k: &'a [f32], v: &'a [f32] },
    /// Each row's own positions.
    Cache(&'a HostKvCache),
}

impl<'a> Keys<'a> {
    /// Query row `row`'s key and value at position `l`, from head 0 on.
    #[inline(always)]
    fn position(self, s: &Shape, row: usize, l: usize) -> (&'a [f32], &'a [f32]) {
        match self {
            Keys::Dense { k, v } => {
                let at = ((row / (s.rows / s.kv_rows) * s.heads) * s.len + l) * s.head_dim;
                (&k[at..], &v[at..])
            }
            Keys::Cache(cache) => cache.position(row, l),
        }
    }

    /// Floats from one head's key (or value) to the next head's at the same position.
    fn head_stride(self, s: &Shape) -> usize {
        match self {
            Keys::Dense { .. } => s.len * s.head_dim,
            Keys::Cache(cache) => cache.head_stride(),
        }
    }
}

fn rows(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2::rows(s, range.clone(), q, kv, bias, out) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match Isa::here() {
        // SAFETY: the CPU has the features the function is compiled for.
        Some(Isa::Avx512) => return unsafe { rows_avx512(s, range, q, kv, bias, out) },
        // SAFETY: as above.
        Some(Isa::Avx2) => return unsafe { rows_avx2(s, range, q, kv, bias, out) },
        None => {}
    }
    rows_generic::<false>(s, range, q, kv, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_avx512(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    rows_generic::<true>(s, range, q, kv, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    rows_generic::<true>(s, range, q, kv, bias, out)
}

/// Rows `range` of the output, into `out` (those rows only); `FMA` as in [`madd`].
#[inline(always)]
fn rows_generic<const FMA: bool>(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    let (d, len) = (s.head_dim, s.len);
    let per_kv = s.rows / s.kv_rows;
    let head_stride = kv.head_stride(s);
    // each head's attention probabilities over the positions, `[heads, len]`
    let mut probs = vec![0f32; s.heads * len];
    // each position's key and value from head 0 on
    let (mut keys, mut values): (Vec<&[f32]>, Vec<&[f32]>) = (Vec::with_capacity(len), Vec::with_capacity(len));
    let first = range.start;
    let width = s.heads * d;
    for row in range {
        let kv_row = row / per_kv;
        let bias = bias.map(|b| &b[kv_row * len..][..len]);
        keys.clear();
        values.clear();
        for l in 0..len {
            let (k, v) = kv.position(s, row, l);
            keys.push(k);
            values.push(v);
        }
        for (h, scores) in probs.chunks_exact_mut(len).enumerate() {
            let query = &q[row * s.q_stride + h * d..][..d];
            let head = h * head_stride;
            for (score, k) in scores.iter_mut().zip(&keys) {
                *score = dot::<FMA>(query, &k[head..][..d]);
            }
            if let Some(b) = bias {
                scores.iter_mut().zip(b).for_each(|(s, b)| *s += b);
            }
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
            for score in scores.iter_mut() {
                *score = exp_with::<FMA>(*score - max);
            }
            let sum: f32 = sum8(scores);
            scores.iter_mut().for_each(|p| *p /= sum);
        }
        let o = &mut out[(row - first) * width..][..width];
        if d % LANES == 0 {
            let heads = Heads { probs: &probs, len, chunks_per_head: d / LANES, head_stride };
            let mut c = 0;
            while c < width / LANES {
                let n = (width / LANES - c).min(GROUP);
                let o = &mut o[c * LANES..][..n * LANES];
                match n {
                    1 => weighted_sums::<1, FMA>(o, &heads, &values, c),
                    2 => weighted_sums::<2, FMA>(o, &heads, &values, c),
                    3 => weighted_sums::<3, FMA>(o, &heads, &values, c),
                    4 => weighted_sums::<4, FMA>(o, &heads, &values, c),
                    5 => weighted_sums::<5, FMA>(o, &heads, &values, c),
                    6 => weighted_sums::<6, FMA>(o, &heads, &values, c),
                    7 => weighted_sums::<7, FMA>(o, &heads, &values, c),
                    _ => weighted_sums::<GROUP, FMA>(o, &heads, &values, c),
                }
                c += n;
            }
        } else {
            for (h, o) in o.chunks_exact_mut(d).enumerate() {
                for (c, o) in o.chunks_mut(LANES).enumerate() {
                    weighted_sum::<FMA>(o, &probs[h * len..][..len], &values, h * head_stride + c * LANES);
                }
            }
        }
    }
}

/// Chunks of [`LANES`] output columns summed over the positions together, each in its own
/// registers: one chunk alone waits on its own additions, position after position.
const GROUP: usize = 8;

/// Where [`weighted_sums`] reads each head's probabilities and values.
struct Heads<'a> {
    probs: &'a [f32],
    len: usize,
    chunks_per_head: usize,
    head_stride: usize,
}

/// Output chunks `first..first + N` (`o`, `N × LANES` columns): each column the sum over the
/// positions, in position order, of its head's probability times its value.
#[inline(always)]
fn weighted_sums<const N: usize, const FMA: bool>(o: &mut [f32], heads: &Heads, values: &[&[f32]], first: usize) {
    let mut acc = [[0f32; LANES]; N];
    let mut at = [0usize; N];
    let mut head = [0usize; N];
    for g in 0..N {
        let c = first + g;
        head[g] = c / heads.chunks_per_head;
        at[g] = head[g] * heads.head_stride + (c % heads.chunks_per_head) * LANES;
    }
    for (l, v) in values.iter().enumerate() {
        for g in 0..N {
            let w = heads.probs[head[g] * heads.len + l];
            let x: &[f32; LANES] = v[at[g]..][..LANES].try_into().expect("a whole chunk");
            for j in 0..LANES {
                acc[g][j] = madd::<FMA>(w, x[j], acc[g][j]);
            }
        }
    }
    for (o, acc) in o.chunks_exact_mut(LANES).zip(&acc) {
        o.copy_from_slice(acc);
    }
}

const LANES: usize = 16;

/// `o[j] = Σ_l w[l] · values[l][at + j]`, summed in position order; a whole chunk of
/// [`LANES`] columns stays in registers across the positions.
#[inline(always)]
fn weighted_sum<const FMA: bool>(o: &mut [f32], w: &[f32], values: &[&[f32]], at: usize) {
    if let Ok(o) = <&mut [f32; LANES]>::try_from(&mut *o) {
        let mut acc = [0f32; LANES];
        for (&w, v) in w.iter().zip(values) {
            let x: &[f32; LANES] = v[at..][..LANES].try_into().expect("a whole chunk");
            for j in 0..LANES {
                acc[j] = madd::<FMA>(w, x[j], acc[j]);
            }
        }
        *o = acc;
        return;
    }
    o.fill(0.0);
    let n = o.len();
    for (&w, v) in w.iter().zip(values) {
        for (o, &x) in o.iter_mut().zip(&v[at..][..n]) {
            *o = madd::<FMA>(w, x, *o);
        }
    }
}

/// A dot product with eight partial sums, so that it vectorizes.
#[inline(always)]
fn dot<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for j in 0..8 {
            acc[j] = madd::<FMA>(x[j], y[j], acc[j]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn sum8(a: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for x in chunks {
        for j in 0..8 {
            acc[j] += x[j];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn attention_equals_libtorch_within_float_rounding() {
        let mut rng = TestRng::new(5);
        let opts = (Kind::Float, Device::Cpu);
        for &(rows, kv_rows, heads, len, d, stride) in &[(6i64, 6i64, 4i64, 7i64, 16i64, 64i64), (10, 2, 2, 5, 12, 40), (1, 1, 8, 1, 64, 512), (4, 2, 5, 9, 48, 256)] {
            let q = rng.randn([1, rows, stride]);
            let k = rng.randn([kv_rows, heads, len, d]);
            let v = rng.randn([kv_rows, heads, len, d]);
            let bias = Tensor::zeros([kv_rows, len], opts);
            if len > 1 {
                let _ = bias.select(1, 0).fill_(f64::NEG_INFINITY);
            }
            let got = attend(&q, &k, &v, Some(&bias)).unwrap().expect("a supported shape");
            let per = rows / kv_rows;
            let expand = |t: &Tensor| t.repeat_interleave_self_int(per, 0, None);
            let query = q.narrow(2, 0, heads * d).view([rows, heads, 1, d]);
            let mask = expand(&bias).view([rows, 1, 1, len]);
            let want = Tensor::scaled_dot_product_attention(&query, &expand(&k), &expand(&v), Some(&mask), 0.0, false, Some(1.0), false);
            let want = want.view([1, rows, heads * d]);
            let diff = (&got - &want).abs().max().double_value(&[]);
            assert!(crate::tolerance::HOST_REDUCTION.holds(diff), "rows {rows} heads {heads} len {len}: max diff {diff}");
        }
    }

    /// Over a reordered cache, each row attends to the positions its slots hold, as over the
    /// cache's gathered keys and values.
    #[test]
    fn attention_over_a_host_cache_equals_attention_over_its_tensors() {
        let mut rng = TestRng::new(7);
        let (rows, heads, d) = (6usize, 4usize, 8usize);
        let width = heads * d;
        let mut cache = HostKvCache::new(rows, heads, d);
        for step in 0..20 {
            let current = cache.rows();
            let projected = rng.randn([1, current as i64, 3 * width as i64]);
            cache.append(&Vec::<f32>::try_from(projected.flatten(0, -1)).unwrap(), 3 * width, width, 2 * width).unwrap();
            let got = attend_cache(&projected, &cache).unwrap().expect("a supported shape");
            let (k, v) = cache.to_tensors().unwrap();
            let want = attend(&projected, &k, &v, None).unwrap().expect("a supported shape");
            let diff = (&got - &want).abs().max().double_value(&[]);
            assert!(diff == 0.0, "step {step}: {diff}");
            if step % 3 == 2 {
                let order: Vec<i64> = (0..current as i64).rev().map(|r| r / 2 * 2).skip(usize::from(step > 10)).collect();
                cache.reorder(&order).unwrap();
            }
        }
    }

    #[test]
    fn unsupported_layouts_are_left_to_libtorch() {
        let mut rng = TestRng::new(682);
        let k = rng.randn([2, 2, 3, 4]);
        let q = rng.randn([1, 3, 8]);
        assert!(attend(&q, &k, &k, None).unwrap().is_none(), "3 rows over 2 key rows");
        let q = rng.randn([1, 2, 16]).transpose(1, 2);
        assert!(attend(&q.contiguous().transpose(1, 2), &k, &k, None).unwrap().is_none(), "strided query");
    }
}
