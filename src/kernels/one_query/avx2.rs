//! The host attention's body with AVX2 and FMA, for a head size of 8 to 64 in whole vectors of
//! 8: every x86 CPU with a host kernel runs it, AVX-512 ones too, so all of them compute the same
//! bits. One row's heads a call, each scored [`GROUP`] positions at a time (a dot product each,
//! summed across lanes by one `vhaddps` tree), its softmax over vectors, and its weighted sum
//! of values over two positions at a time where the head is narrow enough to keep two sums.

use std::arch::x86_64::*;

use super::{Keys, Shape};
use crate::kernels::isa::Isa;

/// Positions scored together, each with its own accumulator.
const GROUP: usize = 8;

/// [`super::rows`] on this body; false (nothing written) where the head size is not 8 to 64 in
/// whole vectors or the CPU has no host kernel.
pub(super) fn rows(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) -> bool {
    if Isa::here().is_none() || !s.head_dim.is_multiple_of(8) {
        return false;
    }
    // SAFETY (each arm): `Isa::here()` found AVX2 and FMA, or AVX-512, which has both.
    unsafe {
        match s.head_dim / 8 {
            1 => rows_nd::<1>(s, range, q, kv, bias, out),
            2 => rows_nd::<2>(s, range, q, kv, bias, out),
            3 => rows_nd::<3>(s, range, q, kv, bias, out),
            4 => rows_nd::<4>(s, range, q, kv, bias, out),
            5 => rows_nd::<5>(s, range, q, kv, bias, out),
            6 => rows_nd::<6>(s, range, q, kv, bias, out),
            7 => rows_nd::<7>(s, range, q, kv, bias, out),
            8 => rows_nd::<8>(s, range, q, kv, bias, out),
            _ => return false,
        }
    }
    true
}

/// Rows `range` of the output (into `out`, those rows only), heads of `ND` vectors.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_nd<const ND: usize>(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) {
    let (d, len) = (ND * 8, s.len);
    let padded = len.next_multiple_of(GROUP);
    let per_kv = s.rows / s.kv_rows;
    let head_stride = match kv {
        Keys::Dense { .. } => len * d,
        Keys::Cache(cache) => cache.head_stride(),
    };
    // what each position's key and value span, from head 0 to the end of the last head
    let span = (s.heads - 1) * head_stride + d;
    // the positions that pad the last group score a zero key, which their −∞ bias drops
    let zero = vec![0f32; span];
    let mut keys = vec![zero.as_ptr(); padded];
    let mut values = vec![zero.as_ptr(); len];
    let mut row_bias = vec![f32::NEG_INFINITY; padded];
    row_bias[..len].fill(0.0);
    let mut probs = vec![0f32; padded];
    let (first, width) = (range.start, s.heads * d);
    for row in range {
        let kv_row = row / per_kv;
        for l in 0..len {
            let (k, v) = match kv {
                Keys::Dense { k, v } => {
                    let at = (kv_row * s.heads * len + l) * d;
                    (&k[at..], &v[at..])
                }
                Keys::Cache(cache) => cache.position(row, l),
            };
            keys[l] = k[..span].as_ptr();
            values[l] = v[..span].as_ptr();
        }
        if let Some(b) = bias {
            row_bias[..len].copy_from_slice(&b[kv_row * len..][..len]);
        }
        let query = &q[row * s.q_stride..][..width];
        let o = &mut out[(row - first) * width..][..width];
        for h in 0..s.heads {
            let at = h * head_stride;
            // SAFETY: every pointer in `keys` and `values` starts `span` readable floats, of
            // which head `h` reads `at .. at + d`; `query` and `o` hold every head.
            unsafe {
                scores::<ND>(query.as_ptr().add(h * d), &keys, at, &row_bias, &mut probs);
                softmax(&mut probs);
                weighted_sum::<ND>(&probs[..len], &values, at, o.as_mut_ptr().add(h * d));
            }
        }
    }
}

/// `probs[l] = q · keys[l][at..] + bias[l]` for every position (a whole number of [`GROUP`]s).
///
/// # Safety
/// `q` and each `keys[l].add(at)` start `8·ND` readable floats; the CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scores<const ND: usize>(q: *const f32, keys: &[*const f32], at: usize, bias: &[f32], probs: &mut [f32]) {
    for ((keys, bias), probs) in keys.chunks_exact(GROUP).zip(bias.chunks_exact(GROUP)).zip(probs.chunks_exact_mut(GROUP)) {
        let mut acc = [_mm256_setzero_ps(); GROUP];
        for c in 0..ND {
            let qc = _mm256_loadu_ps(q.add(8 * c));
            for (acc, k) in acc.iter_mut().zip(keys) {
                *acc = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k.add(at + 8 * c)), *acc);
            }
        }
        let s = _mm256_add_ps(across_lanes(&acc), _mm256_loadu_ps(bias.as_ptr()));
        _mm256_storeu_ps(probs.as_mut_ptr(), s);
    }
}

/// Each of eight vectors summed across its lanes, in lane order: `[Σ a[0], …, Σ a[7]]`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn across_lanes(a: &[__m256; GROUP]) -> __m256 {
    let h01 = _mm256_hadd_ps(a[0], a[1]);
    let h23 = _mm256_hadd_ps(a[2], a[3]);
    let h45 = _mm256_hadd_ps(a[4], a[5]);
    let h67 = _mm256_hadd_ps(a[6], a[7]);
    // [a0 a1 a2 a3 of lanes 0-3 | the same of lanes 4-7], and of a4..a7
    let low = _mm256_hadd_ps(h01, h23);
    let high = _mm256_hadd_ps(h45, h67);
    _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(low, high), _mm256_permute2f128_ps::<0x31>(low, high))
}

/// The scores made probabilities in place: `exp(x − max) / Σ exp(x − max)` (the −∞ of a padded
/// position gives 0).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn softmax(probs: &mut [f32]) {
    let mut max = _mm256_set1_ps(f32::NEG_INFINITY);
    for chunk in probs.chunks_exact(GROUP) {
        // SAFETY: a whole vector of floats.
        max = _mm256_max_ps(max, unsafe { _mm256_loadu_ps(chunk.as_ptr()) });
    }
    let max = _mm256_set1_ps(reduce(max, |a, b| _mm256_max_ps(a, b)));
    let mut sum = _mm256_setzero_ps();
    for chunk in probs.chunks_exact_mut(GROUP) {
        // SAFETY: as above.
        unsafe {
            let e = exp(_mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), max));
            sum = _mm256_add_ps(sum, e);
            _mm256_storeu_ps(chunk.as_mut_ptr(), e);
        }
    }
    let sum = _mm256_set1_ps(reduce(sum, |a, b| _mm256_add_ps(a, b)));
    for chunk in probs.chunks_exact_mut(GROUP) {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_div_ps(_mm256_loadu_ps(chunk.as_ptr()), sum)) };
    }
}

/// `op` over the eight lanes: halves, then quarters, then pairs.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn reduce(v: __m256, op: impl Fn(__m256, __m256) -> __m256) -> f32 {
    let v = op(v, _mm256_permute2f128_ps::<0x01>(v, v));
    let v = op(v, _mm256_permute_ps::<0b01_00_11_10>(v));
    let v = op(v, _mm256_permute_ps::<0b10_11_00_01>(v));
    _mm256_cvtss_f32(v)
}

/// `softmax::exp_with::<true>` on eight lanes, operation for operation: the same bits.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp(x: __m256) -> __m256 {
    let low = _mm256_set1_ps(-87.3);
    // `max(low, x)` and `min(high, ·)` keep a NaN, as `clamp` does
    let clamped = _mm256_min_ps(_mm256_set1_ps(88.3), _mm256_max_ps(low, x));
    let n = _mm256_floor_ps(_mm256_fmadd_ps(clamped, _mm256_set1_ps(std::f32::consts::LOG2_E), _mm256_set1_ps(0.5)));
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.121_944_4e-4), _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693_359_4), clamped));
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0));
    let biased = _mm256_add_ps(n, _mm256_set1_ps(127.0 + 8_388_608.0));
    let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(biased)));
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, low), _mm256_mul_ps(y, scale))
}

/// `o[j] = Σ_l probs[l] · values[l][at + j]` for `j < 8·ND`, in position order; narrow heads
/// sum the even and the odd positions apart and then add the two, for twice the multiply-adds
/// in flight.
///
/// # Safety
/// Each `values[l].add(at)` starts `8·ND` readable floats and `o` as many writable ones; the CPU
/// has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn weighted_sum<const ND: usize>(probs: &[f32], values: &[*const f32], at: usize, o: *mut f32) {
    let mut even = [_mm256_setzero_ps(); ND];
    let mut odd = [_mm256_setzero_ps(); ND];
    let mut l = 0;
    if ND <= 4 {
        while l + 1 < probs.len() {
            let (w0, w1) = (_mm256_set1_ps(probs[l]), _mm256_set1_ps(probs[l + 1]));
            let (v0, v1) = (values[l].add(at), values[l + 1].add(at));
            for c in 0..ND {
                even[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(v0.add(8 * c)), even[c]);
                odd[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(v1.add(8 * c)), odd[c]);
            }
            l += 2;
        }
    }
    for (&w, v) in probs[l..].iter().zip(&values[l..]) {
        let (w, v) = (_mm256_set1_ps(w), v.add(at));
        for (c, even) in even.iter_mut().enumerate() {
            *even = _mm256_fmadd_ps(w, _mm256_loadu_ps(v.add(8 * c)), *even);
        }
    }
    for c in 0..ND {
        _mm256_storeu_ps(o.add(8 * c), if ND <= 4 { _mm256_add_ps(even[c], odd[c]) } else { even[c] });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::softmax::exp_with;

    /// The vector exponential gives `exp_with::<true>`'s bits on every lane, across its clamps,
    /// its cut to 0 and the non-finite values.
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn the_vector_exponential_is_the_scalar_one_bit_for_bit() {
        let mut xs: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
        xs.extend([-87.3, -87.299_995, -87.300_01, 88.3, 88.4, -0.0, 1e-30, f32::NEG_INFINITY, f32::INFINITY, f32::NAN, f32::MIN, f32::MAX]);
        xs.resize(xs.len().next_multiple_of(8), 0.0);
        for chunk in xs.chunks_exact(8) {
            let mut got = [0f32; 8];
            // SAFETY: the test runs only where the CPU has AVX2 and FMA; eight floats each way.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), exp(_mm256_loadu_ps(chunk.as_ptr()))) };
            for (&x, &g) in chunk.iter().zip(&got) {
                let want = exp_with::<true>(x);
                assert!(g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()), "exp({x}): {g} against {want}");
            }
        }
    }
}
