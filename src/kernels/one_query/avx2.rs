//! The host attention's body with AVX2 and FMA, for a head size of 8 to 64 in whole vectors of
//! 8: every x86 CPU with a host kernel runs it, AVX-512 ones too, so all of them compute the same
//! bits. A row's heads are scored [`GROUP`] positions at a time (a dot product each, summed
//! across lanes by one `vhaddps` tree), their softmax taken over vectors, and their values
//! summed as many heads together as eight vectors of sums hold. Each step goes over every head
//! of the row before the next: one head's chain of dependent steps is too short to keep the
//! CPU busy.

use std::arch::x86_64::*;

use super::{Keys, Shape};
use crate::kernels::exp_avx2::{exp, reduce};
use crate::kernels::isa::Isa;

/// Positions scored together, each with its own accumulator.
const GROUP: usize = 8;

/// [`super::rows`] on this body; false (nothing written) where the head size is not 8 to 64 in
/// whole vectors or the CPU has no host kernel.
pub(super) fn rows(s: &Shape, range: std::ops::Range<usize>, q: &[f32], kv: Keys, bias: Option<&[f32]>, out: &mut [f32]) -> bool {
    if Isa::here().is_none() || s.heads == 0 || !s.head_dim.is_multiple_of(8) {
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
    let head_stride = kv.head_stride(s);
    // what each position's key and value span, from head 0 to the end of the last head
    let span = (s.heads - 1) * head_stride + d;
    // the positions that pad the last group score a zero key, which their −∞ bias drops
    let zero = vec![0f32; span];
    let mut keys = vec![zero.as_ptr(); padded];
    let mut values = vec![zero.as_ptr(); len];
    let mut row_bias = vec![f32::NEG_INFINITY; padded];
    row_bias[..len].fill(0.0);
    // each head's scores, then probabilities, `padded` apart
    let mut probs = vec![0f32; s.heads * padded];
    let (first, width) = (range.start, s.heads * d);
    // heads summed together: as many as keep eight vectors of sums in registers
    let together = (8 / ND).max(1);
    for row in range {
        let kv_row = row / per_kv;
        for l in 0..len {
            let (k, v) = kv.position(s, row, l);
            keys[l] = k[..span].as_ptr();
            values[l] = v[..span].as_ptr();
        }
        if let Some(b) = bias {
            row_bias[..len].copy_from_slice(&b[kv_row * len..][..len]);
        }
        let query = &q[row * s.q_stride..][..width];
        let o = &mut out[(row - first) * width..][..width];
        // each step over every head before the next, so that the heads' chains overlap
        for (h, probs) in probs.chunks_exact_mut(padded).enumerate() {
            // SAFETY: every pointer in `keys` starts `span` readable floats, of which head `h`
            // reads `h · head_stride ..` `d` of them; `query` holds every head.
            unsafe { scores::<ND>(query.as_ptr().add(h * d), &keys, h * head_stride, &row_bias, probs) };
        }
        softmax(&mut probs, padded);
        let mut h = 0;
        while h < s.heads {
            let n = together.min(s.heads - h);
            // SAFETY: as above for `values`; `o` holds every head.
            unsafe {
                let o = o.as_mut_ptr().add(h * d);
                match n {
                    8 => weighted_sums::<ND, 8>(&probs[h * padded..], padded, len, &values, h * head_stride, head_stride, o),
                    4..=7 => weighted_sums::<ND, 4>(&probs[h * padded..], padded, len, &values, h * head_stride, head_stride, o),
                    2 | 3 => weighted_sums::<ND, 2>(&probs[h * padded..], padded, len, &values, h * head_stride, head_stride, o),
                    _ => weighted_sums::<ND, 1>(&probs[h * padded..], padded, len, &values, h * head_stride, head_stride, o),
                }
                h += match n {
                    8 => 8,
                    4..=7 => 4,
                    2 | 3 => 2,
                    _ => 1,
                };
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

/// Each head's scores (`padded` apart) made probabilities in place: `exp(x − max) / Σ exp(x −
/// max)` (the −∞ of a padded position gives 0). Each pass goes over every head.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn softmax(probs: &mut [f32], padded: usize) {
    let mut maxima = [0f32; MAX_HEADS];
    let mut sums = [0f32; MAX_HEADS];
    for heads in probs.chunks_mut(MAX_HEADS * padded) {
        for (head, max) in heads.chunks_exact(padded).zip(&mut maxima) {
            let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
            for chunk in head.chunks_exact(GROUP) {
                // SAFETY: a whole vector of floats.
                m = _mm256_max_ps(m, unsafe { _mm256_loadu_ps(chunk.as_ptr()) });
            }
            *max = reduce(m, |a, b| _mm256_max_ps(a, b));
        }
        for ((head, &max), sum) in heads.chunks_exact_mut(padded).zip(&maxima).zip(&mut sums) {
            let (max, mut s) = (_mm256_set1_ps(max), _mm256_setzero_ps());
            for chunk in head.chunks_exact_mut(GROUP) {
                // SAFETY: as above.
                unsafe {
                    let e = exp(_mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), max));
                    s = _mm256_add_ps(s, e);
                    _mm256_storeu_ps(chunk.as_mut_ptr(), e);
                }
            }
            *sum = reduce(s, |a, b| _mm256_add_ps(a, b));
        }
        for (head, &sum) in heads.chunks_exact_mut(padded).zip(&sums) {
            let sum = _mm256_set1_ps(sum);
            for chunk in head.chunks_exact_mut(GROUP) {
                // SAFETY: as above.
                unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_div_ps(_mm256_loadu_ps(chunk.as_ptr()), sum)) };
            }
        }
    }
}

/// Heads whose maxima and sums [`softmax`] keeps at once.
const MAX_HEADS: usize = 16;

/// Heads `0..H` from the one at `at` (`head_stride` floats apart in each value, `8·ND` columns
/// each, their probabilities `padded` apart): `o[j] = Σ_l probs[l] · values[l][at + j]` for
/// their every column, in position order.
///
/// # Safety
/// Each `values[l].add(at + h · head_stride)` starts `8·ND` readable floats for every `h < H`,
/// and `o` `8·ND·H` writable ones; the CPU has AVX2 and FMA.
#[inline]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted_sums<const ND: usize, const H: usize>(probs: &[f32], padded: usize, len: usize, values: &[*const f32], at: usize, head_stride: usize, o: *mut f32) {
    let mut acc = [[_mm256_setzero_ps(); ND]; H];
    for (l, v) in values.iter().enumerate().take(len) {
        for (h, acc) in acc.iter_mut().enumerate() {
            let w = _mm256_set1_ps(probs[h * padded + l]);
            let v = v.add(at + h * head_stride);
            for (c, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(v.add(8 * c)), *acc);
            }
        }
    }
    for (h, acc) in acc.iter().enumerate() {
        for (c, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * (h * ND + c)), *acc);
        }
    }
}
