//! The fast compute types' `get_normalized_probs(logits, log_probs=True)` on the host: each
//! row's `x − max − ln Σ exp(x − max)`, written over the logits. The same three passes as
//! libtorch's kernel, with another exponential than Sleef's (`exp_avx2.rs` on x86, the one below
//! elsewhere) and another summation order, like the rest of `float32`; `exact` keeps libtorch's.

use tch::{Device, Kind, Tensor};

#[cfg(target_arch = "x86_64")]
use super::exp_avx2::{exp, reduce};
use super::isa::Isa;
use crate::libtorch::host::f32_view_mut;
use crate::libtorch::parallel::parallel_for;

/// Elements below which a call stays on one thread.
const GRAIN_ELEMENTS: usize = 1 << 15;
const LANES: usize = 16;

/// `log_softmax(logits, -1)` written over `logits`; false (and nothing written) unless it is a
/// contiguous float32 CPU tensor.
pub fn log_softmax_in_place(logits: &mut Tensor) -> bool {
    let Some(&width) = logits.size().last() else { return false };
    if logits.device() != Device::Cpu || logits.kind() != Kind::Float || !logits.is_contiguous() || width <= 0 {
        return false;
    }
    let width = width as usize;
    // SAFETY: the caller hands over the logits, which nothing else reads during the call.
    let Some(data) = (unsafe { f32_view_mut(logits) }) else { return false };
    let rows = data.len() / width;
    let out = SharedRows(data.as_mut_ptr());
    parallel_for(rows, GRAIN_ELEMENTS.div_ceil(width), |start, end| {
        let out = &out;
        // SAFETY: each range holds its own rows.
        let part = unsafe { std::slice::from_raw_parts_mut(out.0.add(start * width), (end - start) * width) };
        for row in part.chunks_exact_mut(width) {
            log_softmax_row(row);
        }
    });
    true
}

struct SharedRows(*mut f32);
// SAFETY: `log_softmax_in_place` hands each thread disjoint rows.
unsafe impl Sync for SharedRows {}

fn log_softmax_row(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if Isa::here().is_some() {
        // SAFETY: the CPU has AVX2 and FMA (an AVX-512 CPU has both).
        return unsafe { row_avx2(row) };
    }
    row_generic(row)
}

/// One row in AVX2's vectors, on every x86 CPU with a host kernel (so all of them compute the
/// same bits): two vectors of partial maxima, then of sums of `exp_avx2::exp`, the last
/// partial vector padded with −∞ (which adds 0); then `x − (max + ln Σ)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn row_avx2(row: &mut [f32]) {
    use std::arch::x86_64::*;
    const STEP: usize = 2 * 8;
    let whole = row.len() / 8 * 8;
    let mut tail = [f32::NEG_INFINITY; 8];
    tail[..row.len() - whole].copy_from_slice(&row[whole..]);
    // SAFETY (every load and store below): whole vectors of 8 floats inside `row` or `tail`.
    let load = |at: usize| unsafe { _mm256_loadu_ps(row.as_ptr().add(at)) };
    let tail_vector = unsafe { _mm256_loadu_ps(tail.as_ptr()) };
    let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); 2];
    let mut at = 0;
    while at + STEP <= whole {
        for (j, acc) in acc.iter_mut().enumerate() {
            // a NaN is passed over here and spoils the sum below
            *acc = _mm256_max_ps(load(at + 8 * j), *acc);
        }
        at += STEP;
    }
    for (j, v) in (at..whole).step_by(8).map(load).chain([tail_vector]).enumerate() {
        acc[j % 2] = _mm256_max_ps(v, acc[j % 2]);
    }
    let max = reduce(_mm256_max_ps(acc[0], acc[1]), |a, b| _mm256_max_ps(a, b));
    let max_v = _mm256_set1_ps(max);
    let mut sums = [_mm256_setzero_ps(); 2];
    let mut at = 0;
    while at + STEP <= whole {
        for (j, sum) in sums.iter_mut().enumerate() {
            *sum = _mm256_add_ps(*sum, exp(_mm256_sub_ps(load(at + 8 * j), max_v)));
        }
        at += STEP;
    }
    for (j, x) in (at..whole).step_by(8).map(load).chain([tail_vector]).enumerate() {
        sums[j % 2] = _mm256_add_ps(sums[j % 2], exp(_mm256_sub_ps(x, max_v)));
    }
    let sum = reduce(_mm256_add_ps(sums[0], sums[1]), |a, b| _mm256_add_ps(a, b));
    let shift = max + sum.ln();
    let shift_v = _mm256_set1_ps(shift);
    let (vectors, rest) = row.split_at_mut(whole);
    for chunk in vectors.chunks_exact_mut(8) {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(chunk.as_mut_ptr(), _mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), shift_v)) };
    }
    rest.iter_mut().for_each(|x| *x -= shift);
}

/// One row, with [`LANES`] partial maxima and sums so that it vectorizes. A NaN makes the whole
/// row NaN, as in libtorch.
#[inline(always)]
fn row_generic(row: &mut [f32]) {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    for chunk in chunks {
        for j in 0..LANES {
            lanes[j] = if chunk[j] > lanes[j] { chunk[j] } else { lanes[j] };
        }
    }
    let max = lanes.iter().fold(tail, |m, &x| if x > m { x } else { m });
    let mut sums = [0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|&x| exp_with::<false>(x - max)).sum();
    for chunk in chunks {
        for j in 0..LANES {
            sums[j] += exp_with::<false>(chunk[j] - max);
        }
    }
    let shift = max + (sums.iter().sum::<f32>() + tail).ln();
    row.iter_mut().for_each(|x| *x -= shift);
}

/// `a · b + c`, fused (one rounding) with `FMA`. Only a caller compiled for FMA may set it:
/// elsewhere `mul_add` is a library call.
#[inline(always)]
pub(super) fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Cephes' `expf`: `2^n · e^r` with `|r| ≤ ln2 / 2`; 0 below −87.3 (and for −∞). With `FMA`
/// its products and sums are fused: fewer instructions, the same accuracy.
#[inline(always)]
pub(super) fn exp_with<const FMA: bool>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    let clamped = x.clamp(-87.3, 88.3);
    let n = madd::<FMA>(clamped, LOG2E, 0.5).floor();
    let r = madd::<FMA>(n, 2.121_944_4e-4, madd::<FMA>(n, -0.693_359_4, clamped));
    let mut p = 1.987_569_1e-4;
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
        p = madd::<FMA>(p, r, c);
    }
    let y = madd::<FMA>(p * r, r, r) + 1.0;
    // 2^n from the low bits of `n + 127 + 2²³` (n is a whole number in −126..=128), which
    // vectorizes where the saturating `n as i32` does not
    let scale = f32::from_bits((n + (127.0 + 8_388_608.0)).to_bits() << 23);
    if x < -87.3 {
        0.0
    } else {
        y * scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn exp_is_within_two_ulp_of_libm() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let (got, want) = (exp_with::<false>(x), x.exp());
            assert!((got - want).abs() <= 2.0 * f32::EPSILON * want, "exp({x}) = {got}, libm {want}");
            // fused: `mul_add` is exact wherever it runs, so this holds on any CPU
            let fused = exp_with::<true>(x);
            assert!((fused - want).abs() <= 2.0 * f32::EPSILON * want, "fused exp({x}) = {fused}, libm {want}");
        }
        assert_eq!(exp_with::<false>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_with::<true>(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn log_softmax_equals_libtorch_within_float_rounding() {
        let opts = (Kind::Float, Device::Cpu);
        let mut rng = TestRng::new(11);
        for shape in [[160i64, 7944], [5, 33], [1, 15], [3, 1], [2, 128_112]] {
            let logits = rng.randn(shape) * 8.0;
            let want = logits.log_softmax(-1, Kind::Float);
            let mut got = logits.copy();
            assert!(log_softmax_in_place(&mut got));
            let diff = (&got - &want).abs().max().double_value(&[]);
            assert!(crate::tolerance::HOST_REDUCTION.holds(diff), "{shape:?}: {diff}");
        }
        // −∞ stays −∞; a NaN spoils its row only, as in libtorch
        let mut t = Tensor::from_slice(&[0.0f32, f32::NEG_INFINITY, 1.0, 2.0, f32::NAN, 0.0]).view([2, 3]);
        assert!(log_softmax_in_place(&mut t));
        let v = Vec::<f32>::try_from(t.view([-1])).unwrap();
        assert_eq!(v[1], f32::NEG_INFINITY);
        assert!((v[0] - (-(1.0f32 + 1f32.exp()).ln())).abs() < 1e-6);
        assert!(v[3..].iter().all(|x| x.is_nan()));
        // not a contiguous float32 tensor: untouched
        let mut half = Tensor::ones([2, 4], (Kind::Half, Device::Cpu));
        assert!(!log_softmax_in_place(&mut half));
        let mut strided = Tensor::ones([4, 4], opts).transpose(0, 1);
        assert!(!log_softmax_in_place(&mut strided));
    }
}
