//! `--compute-type bfloat16` on the CPU: the panels of `gemm.rs` with bfloat16 weights,
//! multiplied by `vdpbf16ps` (AVX512_BF16), which sums two bfloat16 products into each fp32
//! lane: twice the products of an fp32 FMA a cycle, from half the bytes. A line of a panel holds
//! 16 output columns × 2 inputs (`k`, `k + 1`) in each 32-bit lane, the earlier input in the low
//! half. Each call rounds its input rows to bfloat16 once (round to nearest even, as oneDNN
//! does); the products accumulate in fp32 and the output stays fp32.

use super::panel::{Line, PANEL};
use super::isa::{cpu_has, Isa};
use super::pack::{pack_panels, panel_rows};

/// Whether this CPU runs the kernel: AVX-512 with AVX512_BF16, unless `TCHSEQ_CPU_FEATURES_OFF`
/// hides either.
pub fn available() -> bool {
    Isa::detect() == Some(Isa::Avx512) && cpu_has("avx512bf16")
}

/// `value` rounded to bfloat16, to nearest even (NaN stays a quiet NaN), as libtorch's
/// `to(torch.bfloat16)` rounds.
pub fn round(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
}

/// A weight `w` `[out, in]` (row-major) as `panel_count` panels of `in.div_ceil(2)` pair lines.
pub fn pack(w: &[f32], out_features: usize, in_features: usize, panel_count: usize) -> Vec<Line> {
    pack_panels(panel_count, in_features.div_ceil(2), |p, panel| {
        for (c, row) in panel_rows(w, out_features, in_features, p).enumerate() {
            for (line, pair) in panel.iter_mut().zip(row.chunks(2)) {
                let low = u32::from(round(pair[0]));
                let high = pair.get(1).map_or(0, |&v| u32::from(round(v)));
                line.0[c] = f32::from_bits(low | (high << 16));
            }
        }
    })
}

/// Weight `(o, i)` of panels packed by [`pack`], as f32.
pub fn weight_at(panels: &[Line], in_features: usize, o: usize, i: usize) -> f32 {
    let pairs = in_features.div_ceil(2);
    let lane = panels[(o / PANEL) * pairs + i / 2].0[o % PANEL].to_bits();
    let half = if i.is_multiple_of(2) { lane & 0xffff } else { lane >> 16 };
    f32::from_bits(half << 16)
}

/// `rows` rows of `k` inputs as bfloat16 pairs, `k.div_ceil(2)` lanes a row (an odd `k`'s last
/// pair padded with zero). Only where [`available`] holds (a weight packed in bfloat16).
pub fn input_pairs(x: &[f32], rows: usize, k: usize) -> Vec<u32> {
    let pairs = k.div_ceil(2);
    let mut out = vec![0u32; rows * pairs];
    for (row, lanes) in x.chunks_exact(k).zip(out.chunks_exact_mut(pairs)).take(rows) {
        #[cfg(target_arch = "x86_64")]
        let done = {
            // SAFETY: callers hold `available()`, which checked AVX512_BF16.
            unsafe { avx512bf16::round_row(row, lanes) }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        for (i, lane) in lanes.iter_mut().enumerate().skip(done) {
            let low = u32::from(round(row[2 * i]));
            let high = row.get(2 * i + 1).map_or(0, |&v| u32::from(round(v)));
            *lane = low | (high << 16);
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
pub mod avx512bf16 {
    use std::arch::x86_64::*;

    use crate::kernels::panel::{by_row_count, Job, PANEL};
    use crate::kernels::gemm_f32::avx512;

    /// Rounds the whole 32-input blocks of `row` into `lanes` with `vcvtne2ps2bf16` (the same
    /// rounding as [`super::round`] for every value but subnormals, which it flushes to zero);
    /// returns how many lanes it wrote.
    ///
    /// # Safety
    /// The CPU has AVX512_BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn round_row(row: &[f32], lanes: &mut [u32]) -> usize {
        let blocks = row.len() / 32;
        for b in 0..blocks {
            let lo = _mm512_loadu_ps(row.as_ptr().add(32 * b));
            let hi = _mm512_loadu_ps(row.as_ptr().add(32 * b + 16));
            let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(lanes.as_mut_ptr().add(16 * b) as *mut __m512i, packed);
        }
        16 * blocks
    }

    /// # Safety
    /// `j` describes `m` (1..=12) readable rows of input pairs and a writable unit; the CPU has
    /// AVX512_BF16.
    pub unsafe fn dispatch(m: usize, j: &Job<u32>) {
        by_row_count!(m, rows, j)
    }

    /// `R` rows through two panels: 2R accumulators, two weight registers and a broadcast pair.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn rows<const R: usize>(j: &Job<u32>) {
        let (p0, p1) = (j.panel, j.panel.add(j.lines * PANEL));
        let mut acc = avx512::start::<R, u32>(j);
        for kk in 0..j.k {
            let w0: __m512bh = std::mem::transmute(_mm512_load_ps(p0.add(kk * PANEL)));
            let w1: __m512bh = std::mem::transmute(_mm512_load_ps(p1.add(kk * PANEL)));
            for (r, acc) in acc.iter_mut().enumerate() {
                let xr: __m512bh = std::mem::transmute(_mm512_set1_epi32(*j.x.add(r * j.lines + kk) as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], xr, w0);
                acc[1] = _mm512_dpbf16_ps(acc[1], xr, w1);
            }
        }
        avx512::store(acc, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn rounds_to_nearest_even_as_libtorch_does() {
        // the two halfway cases round to the even neighbour: down from 1 + 2⁻⁸, up from 1 + 3·2⁻⁸
        let values = [0.0f32, -0.0, 1.0, 1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0, 0.1, -2.7, 1e-3, 6.5e4, f32::INFINITY, f32::NEG_INFINITY, 1e-40];
        let t = tch::Tensor::from_slice(&values).to_kind(tch::Kind::BFloat16).to_kind(tch::Kind::Float);
        let want = Vec::<f32>::try_from(t).unwrap();
        for (&v, &w) in values.iter().zip(&want) {
            assert_eq!(f32::from_bits(u32::from(round(v)) << 16).to_bits(), w.to_bits(), "{v}");
        }
        assert!(f32::from_bits(u32::from(round(f32::NAN)) << 16).is_nan());
    }

    /// Without AVX512_BF16 (or with it hidden) nothing is packed for the kernel.
    #[test]
    #[cfg_attr(all(tchseq_cpu = "avx512f", tchseq_cpu = "avx512bf16"), ignore = "this CPU has AVX512_BF16")]
    fn nothing_is_packed_for_bfloat16_without_avx512_bf16() {
        let mut rng = TestRng::new(661);
        use super::super::gemm::{PackedWeight, Precision};
        assert!(!available());
        let w = rng.randn([16, 8]);
        assert!(PackedWeight::pack_with(Precision::Bf16, &w, None).unwrap().is_none());
    }

    /// Products of bfloat16 values are exact in fp32, so the kernel must give what `F.linear`
    /// gives on the rounded input and weight, up to the order of the sums.
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx512f", tchseq_cpu = "avx512bf16")), ignore = "needs AVX512_BF16")]
    fn equals_f_linear_on_rounded_operands_for_every_shape_and_row_count() {
        let mut rng = TestRng::new(689);
        use super::super::gemm::{PackedWeight, Precision};
        use tch::{Kind, Tensor};
        assert!(available(), "built where AVX512_BF16 was found, run where it is not");
        let rounded = |t: &Tensor| t.to_kind(Kind::BFloat16).to_kind(Kind::Float);
        for &(out, inp) in &[(384i64, 128i64), (37, 21), (16, 8), (5, 3), (33, 1), (70, 300), (50, 1001), (35, 2100)] {
            let w = rng.randn([out, inp]);
            let b = rng.randn([out]);
            let packed = PackedWeight::pack_with(Precision::Bf16, &w, Some(&b)).unwrap().expect("packed");
            for rows in [1i64, 2, 5, 11, 12, 13, 25, 160] {
                let x = rng.randn([1, rows, inp]);
                let want = rounded(&x).linear(&rounded(&w), Some(&b));
                let got = packed.linear(&x, false).unwrap().expect("a contiguous input");
                assert_eq!(got.size(), want.size());
                let diff = (&got - &want).abs().max().double_value(&[]);
                assert!(crate::tolerance::HOST_BF16_LINEAR.holds(diff), "{out}x{inp}, {rows} rows: max diff {diff}");
                let relu = packed.linear(&x, true).unwrap().unwrap();
                assert!(crate::tolerance::HOST_BF16_LINEAR.holds((&relu - want.relu()).abs().max().double_value(&[])));
            }
            let mut row = vec![0f32; inp as usize];
            packed.row_into(out as usize - 1, &mut row);
            assert_eq!(row, Vec::<f32>::try_from(rounded(&w).get(out - 1)).unwrap(), "{out}x{inp}");
            let part = packed.columns(32..out as usize);
            if let Some(part) = part {
                let x = rng.randn([3, inp]);
                let want = rounded(&x).linear(&rounded(&w).narrow(0, 32, out - 32), Some(&b.narrow(0, 32, out - 32)));
                assert!(crate::tolerance::HOST_BF16_LINEAR.holds((part.linear(&x, false).unwrap().unwrap() - want).abs().max().double_value(&[])));
            }
        }
    }

    /// Large enough that the panels are shared out among the intra-op threads; the layout is
    /// plain Rust, so it is checked on every CPU.
    #[test]
    fn packs_every_weight_of_a_weight_shared_out_among_threads() {
        let (out, inp) = (1040usize, 1001usize);
        let w: Vec<f32> = (0..out * inp).map(|i| ((i as f32) * 0.013).sin() * 2.0).collect();
        let pairs = inp.div_ceil(2);
        let panel_count = out.div_ceil(PANEL) + 1;
        let panels = pack(&w, out, inp, panel_count);
        assert_eq!(panels.len(), panel_count * pairs);
        for o in 0..panel_count * PANEL {
            for i in 0..inp {
                let want = if o < out { u32::from(round(w[o * inp + i])) << 16 } else { 0 };
                assert_eq!(weight_at(&panels, inp, o, i).to_bits(), want, "({o}, {i})");
            }
            // the odd input count's last pair has zero in its high half
            assert_eq!(panels[(o / PANEL) * pairs + pairs - 1].0[o % PANEL].to_bits() >> 16, 0, "{o}");
        }
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx512f", tchseq_cpu = "avx512bf16")), ignore = "needs AVX512_BF16")]
    fn the_vector_rounding_of_inputs_equals_the_scalar_one() {
        assert!(available(), "built where AVX512_BF16 was found, run where it is not");
        let k = 70;
        let x: Vec<f32> = (0..2 * k).map(|i| ((i as f32) * 0.37).sin() * 3.0 + 0.001 * i as f32).collect();
        let pairs = input_pairs(&x, 2, k);
        for (r, row) in x.chunks(k).enumerate() {
            for (i, &v) in row.iter().enumerate() {
                let lane = pairs[r * k.div_ceil(2) + i / 2];
                let half = if i.is_multiple_of(2) { lane & 0xffff } else { lane >> 16 };
                assert_eq!(half as u16, round(v), "row {r}, input {i}");
            }
        }
    }
}
