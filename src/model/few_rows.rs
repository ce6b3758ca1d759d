//! `--compute-type float32`: a linear layer applied to a few rows (the incremental decoder at
//! batch 1: one row per beam) on the host, with the weight packed once into panels of 16 output
//! columns. MKL's sgemm, which `F.linear` calls, copies the weight into its own layout on every
//! call, which at 5 rows costs more than the products; oneDNN's linear pays some 15 µs a call.
//! Needs AVX2 and FMA; without them the layer stays on libtorch.

use tch::{Device, Kind, Tensor};

use super::ModelError;
use crate::libtorch::host::{f32_view, f32_view_mut};

/// Output columns per panel: two AVX registers.
const PANEL: usize = 16;
/// Rows per pass over the weight: 2 × 6 accumulators + 2 weight registers + 1 broadcast fit in
/// the 16 AVX registers.
const ROWS_PER_PASS: usize = 6;
/// The most rows worth computing here (two passes); more go to MKL, which is then efficient.
pub const MAX_ROWS: i64 = 12;

/// A weight `[out, in]` as panels `[out / 16][in][16]` and its bias (zeros without one), both
/// zero-padded to whole panels.
#[derive(Debug)]
pub struct FewRowsWeight {
    panels: Vec<f32>,
    bias: Vec<f32>,
    in_features: usize,
    out_features: usize,
}

impl FewRowsWeight {
    /// `None` when the CPU lacks AVX2/FMA or the weight is not f32 on the CPU.
    pub fn pack(weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Self>, ModelError> {
        if !cpu_supported() || weight.device() != Device::Cpu || weight.kind() != Kind::Float {
            return Ok(None);
        }
        let (out_features, in_features) = weight.size2()?;
        let (out_features, in_features) = (out_features as usize, in_features as usize);
        let w = Vec::<f32>::try_from(weight.f_contiguous()?.f_view([-1])?)?;
        let panel_count = out_features.div_ceil(PANEL);
        let mut panels = vec![0f32; panel_count * in_features * PANEL];
        for o in 0..out_features {
            let (p, c) = (o / PANEL, o % PANEL);
            for i in 0..in_features {
                panels[(p * in_features + i) * PANEL + c] = w[o * in_features + i];
            }
        }
        let mut padded_bias = vec![0f32; panel_count * PANEL];
        if let Some(b) = bias {
            let b = Vec::<f32>::try_from(b.f_contiguous()?.f_view([-1])?)?;
            padded_bias[..b.len().min(out_features)].copy_from_slice(&b[..b.len().min(out_features)]);
        }
        Ok(Some(Self { panels, bias: padded_bias, in_features, out_features }))
    }

    /// `x · Wᵀ + b` (then ReLU with `relu`) when `x` is a contiguous f32 CPU tensor of at most
    /// [`MAX_ROWS`] rows; `None` otherwise.
    pub fn linear(&self, x: &Tensor, relu: bool) -> Result<Option<Tensor>, ModelError> {
        let size = x.size();
        // SAFETY: nothing writes `x` during the call.
        let Some(x) = (unsafe { f32_view(x) }) else {
            return Ok(None);
        };
        if size.last() != Some(&(self.in_features as i64)) {
            return Ok(None);
        }
        let rows = size[..size.len() - 1].iter().product::<i64>();
        if rows > MAX_ROWS {
            return Ok(None);
        }
        let mut out_size = size.clone();
        if let Some(last) = out_size.last_mut() {
            *last = self.out_features as i64;
        }
        let mut y = Tensor::f_empty(out_size.as_slice(), (Kind::Float, Device::Cpu))?;
        let rows = rows as usize;
        // SAFETY: `y` is new and not shared.
        let Some(y_data) = (unsafe { f32_view_mut(&mut y) }) else {
            return Ok(None);
        };
        for start in (0..rows).step_by(ROWS_PER_PASS) {
            let n = ROWS_PER_PASS.min(rows - start);
            let x = &x[start * self.in_features..][..n * self.in_features];
            let y = &mut y_data[start * self.out_features..][..n * self.out_features];
            // SAFETY: `pack` made this weight only where `cpu_supported`.
            unsafe { self.pass(n, x, y, relu) };
        }
        Ok(Some(y))
    }

    /// # Safety
    /// Only after [`cpu_supported`].
    unsafe fn pass(&self, rows: usize, x: &[f32], y: &mut [f32], relu: bool) {
        #[cfg(target_arch = "x86_64")]
        match rows {
            1 => avx2::pass::<1>(self, x, y, relu),
            2 => avx2::pass::<2>(self, x, y, relu),
            3 => avx2::pass::<3>(self, x, y, relu),
            4 => avx2::pass::<4>(self, x, y, relu),
            5 => avx2::pass::<5>(self, x, y, relu),
            _ => avx2::pass::<6>(self, x, y, relu),
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (rows, x, y, relu);
    }
}

fn cpu_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{FewRowsWeight, PANEL};

    /// `R` rows of `x` (`R × in`) through every panel into `y` (`R × out`).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn pass<const R: usize>(w: &FewRowsWeight, x: &[f32], y: &mut [f32], relu: bool) {
        let (k, n) = (w.in_features, w.out_features);
        let zero = _mm256_setzero_ps();
        let mut tail = [0f32; PANEL];
        for p in 0..n.div_ceil(PANEL) {
            let panel = w.panels.as_ptr().add(p * k * PANEL);
            let bias = [_mm256_loadu_ps(w.bias.as_ptr().add(p * PANEL)), _mm256_loadu_ps(w.bias.as_ptr().add(p * PANEL + 8))];
            let mut acc = [bias; R];
            for kk in 0..k {
                let w0 = _mm256_loadu_ps(panel.add(kk * PANEL));
                let w1 = _mm256_loadu_ps(panel.add(kk * PANEL + 8));
                for r in 0..R {
                    let xr = _mm256_set1_ps(*x.get_unchecked(r * k + kk));
                    acc[r][0] = _mm256_fmadd_ps(xr, w0, acc[r][0]);
                    acc[r][1] = _mm256_fmadd_ps(xr, w1, acc[r][1]);
                }
            }
            let cols = PANEL.min(n - p * PANEL);
            for (r, acc) in acc.iter().enumerate() {
                let (a0, a1) = if relu { (_mm256_max_ps(acc[0], zero), _mm256_max_ps(acc[1], zero)) } else { (acc[0], acc[1]) };
                let out = y.as_mut_ptr().add(r * n + p * PANEL);
                if cols == PANEL {
                    _mm256_storeu_ps(out, a0);
                    _mm256_storeu_ps(out.add(8), a1);
                } else {
                    _mm256_storeu_ps(tail.as_mut_ptr(), a0);
                    _mm256_storeu_ps(tail.as_mut_ptr().add(8), a1);
                    std::ptr::copy_nonoverlapping(tail.as_ptr(), out, cols);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// These kernels need AVX2 and FMA (every x86-64 CPU this project runs on has them); on a CPU
    /// without, the tests fail rather than pass on nothing.
    const NO_AVX2: &str = "this CPU lacks AVX2 or FMA, which the host kernels under test need";

    #[test]
    fn equals_f_linear_within_rounding_for_every_row_count() {
        tch::manual_seed(11);
        let opts = (Kind::Float, Device::Cpu);
        for &(out, inp) in &[(384i64, 128i64), (37, 20), (16, 8), (5, 3)] {
            let w = Tensor::randn([out, inp], opts);
            let b = Tensor::randn([out], opts);
            let packed = FewRowsWeight::pack(&w, Some(&b)).unwrap().expect(NO_AVX2);
            for rows in 1..=MAX_ROWS {
                let x = Tensor::randn([1, rows, inp], opts);
                let want = x.linear(&w, Some(&b));
                let got = packed.linear(&x, false).unwrap().expect("few enough rows");
                assert_eq!(got.size(), want.size());
                let diff = (&got - &want).abs().max().double_value(&[]);
                assert!(diff < 1e-4, "{out}x{inp}, {rows} rows: max diff {diff}");
                let relu = packed.linear(&x, true).unwrap().unwrap();
                assert!((&relu - want.relu()).abs().max().double_value(&[]) < 1e-4);
            }
            assert!(packed.linear(&Tensor::randn([MAX_ROWS + 1, inp], opts), false).unwrap().is_none());
        }
    }

    #[test]
    fn a_layer_without_bias_and_a_strided_input() {
        let opts = (Kind::Float, Device::Cpu);
        let w = Tensor::randn([20, 10], opts);
        let packed = FewRowsWeight::pack(&w, None).unwrap().expect(NO_AVX2);
        let x = Tensor::randn([10, 3], opts).transpose(0, 1);
        assert!(packed.linear(&x, false).unwrap().is_none(), "a transposed input is left to libtorch");
        let x = Tensor::randn([3, 10], opts);
        let diff = (packed.linear(&x, false).unwrap().unwrap() - x.linear(&w, None::<&Tensor>)).abs().max().double_value(&[]);
        assert!(diff < 1e-4);
    }
}
