//! Input rows quantized for the int8 kernels (`gemm_i8.rs`): a row's extremes, and each
//! value rounded to nearest (ties to even) into the kernel's signed range or, for a row with no
//! negative value, its unsigned range ([`Levels`]). Signed rows are stored shifted into unsigned
//! bytes. The vector loops and the one-value [`quantize`] give the same integers.

/// How many levels a kernel's input rows take: a byte's (VNNI's `vpdpbusd` sums in 32 bits), or
/// one bit less (AVX2's `vpmaddubsw` sums two byte products in 16 bits, where `2 · 127 · 127`
/// fits and `2 · 255 · 127` saturates; fbgemm's AVX2 path gives up the same bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Levels {
    Byte,
    Seven,
}

/// `round(v · inv)` for each `v` of `row` (to nearest, ties to even) within `range` at `levels`,
/// where the row's largest magnitude lands on the range's top; a signed row shifted into unsigned
/// bytes ([`Range::shift`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_row_u8(row: &[f32], inv: f32, range: Range, levels: Levels, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let scale = _mm256_set1_ps(inv);
    let (lo, hi) = range.bounds(levels);
    let shift = range.shift(levels);
    let (lo, hi, bias) = (_mm256_set1_epi32(lo), _mm256_set1_epi32(hi), _mm256_set1_epi32(shift));
    // the packs interleave 128-bit halves and 32-bit words; the permute puts the words in order
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let chunks = row.len() / 32;
    for c in 0..chunks {
        let q = |at: usize| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(row.as_ptr().add(c * 32 + at)), scale);
            _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi), bias)
        };
        let bytes = _mm256_packus_epi16(_mm256_packs_epi32(q(0), q(8)), _mm256_packs_epi32(q(16), q(24)));
        _mm256_storeu_si256(out.as_mut_ptr().add(c * 32) as *mut __m256i, _mm256_permutevar8x32_epi32(bytes, order));
    }
    for (o, &v) in out.iter_mut().zip(row).skip(chunks * 32) {
        *o = (quantize(v, inv, range.bounds(levels)) + shift) as u8;
    }
}

/// A weight's column: `round(v · inv)` within `-127..=127` for each `v` of `row`, as
/// [`quantize_row_u8`] rounds (for either kernel: a CPU with VNNI has AVX2 too).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_weights(row: &[f32], inv: f32, out: &mut [i16]) {
    use std::arch::x86_64::*;
    let scale = _mm256_set1_ps(inv);
    let (lo, hi) = WEIGHT_BOUNDS;
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
        *o = quantize(v, inv, WEIGHT_BOUNDS) as i16;
    }
}

/// A weight's symmetric range: every kernel's weights take a byte's levels.
const WEIGHT_BOUNDS: (i32, i32) = (-127, 127);

/// One value as the vector loops quantize it (a NaN, which `cvtps2dq` makes -2³¹, to the
/// range's bottom).
fn quantize(v: f32, inv: f32, (lo, hi): (i32, i32)) -> i32 {
    let x = (v * inv).round_ties_even();
    if x.is_nan() { lo } else { x.clamp(lo as f32, hi as f32) as i32 }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Range {
    Signed,
    Unsigned,
}

impl Range {
    fn bounds(self, levels: Levels) -> (i32, i32) {
        match (self, levels) {
            (Self::Signed, Levels::Byte) => (-127, 127),
            (Self::Unsigned, Levels::Byte) => (0, 255),
            (Self::Signed, Levels::Seven) => (-63, 63),
            (Self::Unsigned, Levels::Seven) => (0, 127),
        }
    }

    fn top(self, levels: Levels) -> f32 {
        self.bounds(levels).1 as f32
    }

    /// What a signed row's values carry into unsigned bytes, taken back with each column's
    /// weight sum: `+ 128` at a byte's levels (`1..=255`), `+ 64` at seven (`1..=127`).
    pub(super) fn shift(self, levels: Levels) -> i32 {
        match (self, levels) {
            (Self::Unsigned, _) => 0,
            (Self::Signed, Levels::Byte) => 128,
            (Self::Signed, Levels::Seven) => 64,
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn quantize_weights(_row: &[f32], _inv: f32, _out: &mut [i16]) {
    unreachable!("PackedInt8::available() is false off x86_64")
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn quantize_row_u8(_row: &[f32], _inv: f32, _range: Range, _levels: Levels, _out: &mut [u8]) {
    unreachable!("PackedInt8::available() is false off x86_64")
}

/// An input row's range and scale: the unsigned range for a row with no negative value (as ReLU
/// gives `fc2`), else the signed one, with the row's largest magnitude on the range's top at
/// `levels` (1 for a row of zeros).
///
/// # Safety
/// The CPU has AVX2 (as every int8 kernel's does).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn input_scale(row: &[f32], levels: Levels) -> (Range, f32) {
    let (min, max) = extremes_avx2(row);
    let range = if min < 0.0 { Range::Signed } else { Range::Unsigned };
    let max = max.max(-min);
    (range, if max > 0.0 { max / range.top(levels) } else { 1.0 })
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn input_scale(_row: &[f32], _levels: Levels) -> (Range, f32) {
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
