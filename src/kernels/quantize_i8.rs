//! Input rows quantized for the int8 kernels (`gemm_i8.rs`): a row's extremes, and each
//! value rounded to nearest (ties to even) into the signed range (`-127..=127`, `+ 128` for VNNI's
//! unsigned bytes) or, for a row with no negative value, the unsigned range (`0..=255`). The
//! vector loops and the one-value [`quantize`] give the same integers.

/// `round(v · inv)` for each `v` of `row` (to nearest, ties to even) within `range`, where the
/// row's largest magnitude lands on its top; `+ 128` in the signed range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn quantize_row_u8(row: &[f32], inv: f32, range: Range, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let scale = _mm512_set1_ps(inv);
    let (lo, hi) = range.bounds();
    let shift = if range == Range::Signed { 128 } else { 0 };
    let (lo, hi, bias) = (_mm512_set1_epi32(lo), _mm512_set1_epi32(hi), _mm512_set1_epi32(shift));
    let chunks = row.len() / 16;
    for c in 0..chunks {
        let v = _mm512_mul_ps(_mm512_loadu_ps(row.as_ptr().add(c * 16)), scale);
        let i = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(v), lo), hi), bias);
        _mm_storeu_si128(out.as_mut_ptr().add(c * 16) as *mut __m128i, _mm512_cvtepi32_epi8(i));
    }
    for (o, &v) in out.iter_mut().zip(row).skip(chunks * 16) {
        *o = (quantize(v, inv, range) + shift) as u8;
    }
}

/// `round(v · inv)` within `range` for each `v` of `row`, as [`quantize_row_u8`] rounds it (for
/// either kernel: a CPU with VNNI has AVX2 too).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_row(row: &[f32], inv: f32, range: Range, out: &mut [i16]) {
    use std::arch::x86_64::*;
    let scale = _mm256_set1_ps(inv);
    let (lo, hi) = range.bounds();
    let (lo, hi) = (_mm256_set1_epi32(lo), _mm256_set1_epi32(hi));
    let chunks = row.len() / 16;
    for c in 0..chunks {
        let q = |at: usize| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(row.as_ptr().add(at)), scale);
            _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi)
        };
        // packs interleaves the 128-bit halves; the permute puts the 16 values back in order
        let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q(c * 16), q(c * 16 + 8)));
        _mm256_storeu_si256(out.as_mut_ptr().add(c * 16) as *mut __m256i, packed);
    }
    for (o, &v) in out.iter_mut().zip(row).skip(chunks * 16) {
        *o = quantize(v, inv, range) as i16;
    }
}

/// One value as the vector loops quantize it (a NaN, which `cvtps2dq` makes -2³¹, to the
/// range's bottom).
fn quantize(v: f32, inv: f32, range: Range) -> i32 {
    let x = (v * inv).round_ties_even();
    let (lo, hi) = range.bounds();
    if x.is_nan() { lo } else { x.clamp(lo as f32, hi as f32) as i32 }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Range {
    Signed,
    Unsigned,
}

impl Range {
    fn bounds(self) -> (i32, i32) {
        match self {
            Self::Signed => (-127, 127),
            Self::Unsigned => (0, 255),
        }
    }

    fn top(self) -> f32 {
        self.bounds().1 as f32
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn quantize_row(_row: &[f32], _inv: f32, _range: Range, _out: &mut [i16]) {
    unreachable!("PackedInt8::available() is false off x86_64")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn quantize_row_u8(_row: &[f32], _inv: f32, _range: Range, _out: &mut [u8]) {
    unreachable!("PackedInt8::available() is false off x86_64")
}

/// An input row's range and scale: the unsigned range for a row with no negative value (as ReLU
/// gives `fc2`), else the signed one, with the row's largest magnitude on the range's top (1 for
/// a row of zeros).
///
/// # Safety
/// The CPU has AVX2 (as every int8 kernel's does).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn input_scale(row: &[f32]) -> (Range, f32) {
    let (min, max) = extremes_avx2(row);
    let range = if min < 0.0 { Range::Signed } else { Range::Unsigned };
    let max = max.max(-min);
    (range, if max > 0.0 { max / range.top() } else { 1.0 })
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn input_scale(_row: &[f32]) -> (Range, f32) {
    unreachable!("PackedInt8::available() is false off x86_64")
}

/// `max |v|`.
///
/// # Safety
/// The CPU has AVX2 (as every int8 kernel's does).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn max_abs(row: &[f32]) -> f32 {
    let (min, max) = extremes_avx2(row);
    max.max(-min)
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn max_abs(_row: &[f32]) -> f32 {
    unreachable!("PackedInt8::available() is false off x86_64")
}

/// The least and the largest value of `row`, and 0 (NaNs are passed over).
fn extremes(row: &[f32]) -> (f32, f32) {
    row.iter().fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// [`extremes`], eight values at a time (a NaN is passed over as `vminps` does: it keeps the
/// extreme so far). Both kernels take it: it is a small part of a product's time.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn extremes_avx2(row: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let chunks = row.len() / 8;
    for c in 0..chunks {
        let v = _mm256_loadu_ps(row.as_ptr().add(c * 8));
        (lo, hi) = (_mm256_min_ps(v, lo), _mm256_max_ps(v, hi));
    }
    let (mut lanes_lo, mut lanes_hi) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(lanes_lo.as_mut_ptr(), lo);
    _mm256_storeu_ps(lanes_hi.as_mut_ptr(), hi);
    let (min, max) = extremes(&row[chunks * 8..]);
    (lanes_lo.iter().fold(min, |a, &v| a.min(v)), lanes_hi.iter().fold(max, |a, &v| a.max(v)))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn extremes_avx2(_row: &[f32]) -> (f32, f32) {
    unreachable!("PackedInt8::available() is false off x86_64")
}
