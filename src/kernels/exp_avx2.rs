//! The fast compute types' exponential in AVX2 vectors, for the softmaxes (`softmax.rs`,
//! `one_query/avx2.rs`), and the reduction across lanes both take their maxima and sums with:
//! `2^(n/8) · e^r` with `n = round(8x / ln 2)`, `2^(n/8)` from an
//! eight-entry table (`vpermps`) and the exponent's bits, `e^r` (`|r| ≤ ln 2 / 16`) from a
//! polynomial of degree 4. Within 2 ulp of libm; 0 below −87.3 (and for −∞), a NaN kept.
//!
//! Against `softmax::exp_with` (Cephes' `2^n · e^r`, `|r| ≤ ln 2 / 2`, degree 7): eight
//! multiply-adds where that takes eleven, and a chain of dependent operations a third shorter.
//! A softmax row is a long run of independent exponentials, each a chain of dependent
//! operations: the CPU keeps only so many operations waiting, so the length of the chain, not
//! the count of multiply-adds, decides how many run at once.

use std::arch::x86_64::*;

/// `2^(k/8)` for `k` in `0..8`, each the float nearest.
const TABLE: [f32; 8] = [1.0, 1.090_507_7, 1.189_207_1, 1.296_839_6, std::f32::consts::SQRT_2, 1.542_210_8, 1.681_792_8, 1.834_008_1];

/// `e^x` on eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub fn exp(x: __m256) -> __m256 {
    let low = _mm256_set1_ps(-87.3);
    let clamped = _mm256_min_ps(_mm256_set1_ps(88.3), x);
    // `n` rounded to the nearest whole number in the low bits of `t`'s mantissa
    let magic = _mm256_set1_ps(12_582_912.0);
    let t = _mm256_fmadd_ps(clamped, _mm256_set1_ps(8.0 * std::f32::consts::LOG2_E), magic);
    let n = _mm256_sub_ps(t, magic);
    // `r = x − n · ln 2 / 8`, the constant in two parts, the first of 14 bits
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-11_357.0 / 131_072.0), clamped);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(3.636_121_4e-6), r);
    let mut p = _mm256_set1_ps(1.0 / 24.0);
    for c in [1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    // `vpermps` reads the low three bits of each lane: `n mod 8`
    let bits = _mm256_castps_si256(t);
    // SAFETY: eight floats.
    let table = unsafe { _mm256_loadu_ps(TABLE.as_ptr()) };
    let s = _mm256_mul_ps(p, _mm256_permutevar8x32_ps(table, bits));
    // `⌊n / 8⌋ · 2²³`: the bits of `n` moved up to the exponent's, `n mod 8`'s dropped
    let exponent = _mm256_and_si256(_mm256_slli_epi32::<20>(bits), _mm256_set1_epi32(0xff80_0000u32 as i32));
    let y = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(s), exponent));
    _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, low), y)
}

/// `op` over the eight lanes: halves, then quarters, then pairs.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub fn reduce(v: __m256, op: impl Fn(__m256, __m256) -> __m256) -> f32 {
    let v = op(v, _mm256_permute2f128_ps::<0x01>(v, v));
    let v = op(v, _mm256_permute_ps::<0b01_00_11_10>(v));
    let v = op(v, _mm256_permute_ps::<0b10_11_00_01>(v));
    _mm256_cvtss_f32(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp8(x: &[f32]) -> [f32; 8] {
        let mut out = [0f32; 8];
        // SAFETY: the callers run only where the CPU has AVX2 and FMA; eight floats each way.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), exp(_mm256_loadu_ps(x.as_ptr()))) };
        out
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn exp_is_within_two_ulp_of_libm() {
        let xs: Vec<f32> = (-87_290..=88_290).step_by(7).map(|i| i as f32 / 1000.0).chain([-87.299_995, 0.0, -0.0, 1e-30, -1e-30]).collect();
        for chunk in xs.chunks(8) {
            let mut lanes = [0f32; 8];
            lanes[..chunk.len()].copy_from_slice(chunk);
            for (&x, &got) in lanes.iter().zip(&exp8(&lanes)) {
                let want = (x as f64).exp();
                let ulp = f64::from(f32::EPSILON) * want;
                assert!((f64::from(got) - want).abs() <= 2.0 * ulp, "exp({x}) = {got}, libm {want}");
            }
        }
        for (k, &t) in TABLE.iter().enumerate() {
            assert_eq!(t, 2f64.powf(k as f64 / 8.0) as f32, "table entry {k}");
        }
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn below_the_range_gives_0_and_a_nan_stays_one() {
        let got = exp8(&[-87.31, -100.0, -1e30, f32::NEG_INFINITY, f32::MIN, f32::NAN, 89.0, f32::INFINITY]);
        assert_eq!(&got[..5], &[0.0; 5]);
        assert!(got[5].is_nan());
        assert!(got[6].is_finite() && got[6] > 1e38 && got[7] == got[6], "clamped at 88.3: {got:?}");
    }
}
