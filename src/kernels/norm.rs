//! `--compute-type float32` and `int8`: `LayerNorm`, and the residual add before a post-norm
//! one, on the host. libtorch's kernel shares every call out among its threads: about 7 µs a
//! call at one step of the bundled model (five rows of 128), a fifth of a batch-1 step. Another
//! summation order than libtorch's, like the rest of `float32`; `exact` never takes this path.

use tch::{Device, Kind, Tensor};

use super::isa::Isa;
use super::KernelError;
use crate::libtorch::host::{f32_view, f32_view_mut};
use crate::libtorch::parallel::parallel_for;

/// Elements below which a call stays on one thread.
const GRAIN_ELEMENTS: usize = 1 << 15;

#[derive(Debug)]
pub struct HostLayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl HostLayerNorm {
    /// From a layer norm's weight and bias `[C]`; None unless they are float32 on the CPU.
    pub fn new(weight: &Tensor, bias: &Tensor, eps: f64) -> Result<Option<Self>, KernelError> {
        let copy = |t: &Tensor| -> Result<Option<Vec<f32>>, KernelError> {
            if t.device() != Device::Cpu || t.kind() != Kind::Float || t.dim() != 1 {
                return Ok(None);
            }
            Ok(Some(Vec::<f32>::try_from(&t.f_contiguous()?)?))
        };
        let (Some(weight), Some(bias)) = (copy(weight)?, copy(bias)?) else { return Ok(None) };
        if weight.len() != bias.len() || weight.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self { weight, bias, eps: eps as f32 }))
    }

    /// `layer_norm(residual + x)` over the last dimension (`layer_norm(x)` without a residual);
    /// None when an input is not a contiguous float32 CPU tensor of this width.
    pub fn forward(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Option<Tensor>, KernelError> {
        let dim = self.weight.len();
        if residual.is_some_and(|r| r.size() != x.size()) || x.size().last() != Some(&(dim as i64)) {
            return Ok(None);
        }
        // SAFETY: nothing writes the inputs during the call.
        let Some(x_data) = (unsafe { f32_view(x) }) else { return Ok(None) };
        let residual_data = match residual.map(|r| unsafe { f32_view(r) }) {
            Some(None) => return Ok(None),
            viewed => viewed.flatten(),
        };
        let mut out = Tensor::f_empty(x.size(), (Kind::Float, Device::Cpu))?;
        // SAFETY: `out` is new and not shared.
        let Some(out_data) = (unsafe { f32_view_mut(&mut out) }) else { return Ok(None) };
        self.forward_into(x_data, residual_data, out_data);
        Ok(Some(out))
    }

    /// [`HostLayerNorm::forward`] on slices: `out = layer_norm(residual + x)`, rows of the
    /// norm's width; `x`, `residual` and `out` are as long as each other.
    pub fn forward_into(&self, x: &[f32], residual: Option<&[f32]>, out: &mut [f32]) {
        let dim = self.weight.len();
        assert!(out.len() == x.len() && residual.is_none_or(|r| r.len() == x.len()), "host layer norm: mismatched operands");
        let out_ptr = SharedOut(out.as_mut_ptr());
        let count = x.len() / dim;
        parallel_for(count, GRAIN_ELEMENTS.div_ceil(dim), |start, end| {
            let out_ptr = &out_ptr;
            // SAFETY: each range writes only its own rows.
            let out = unsafe { std::slice::from_raw_parts_mut(out_ptr.0.add(start * dim), (end - start) * dim) };
            rows(self, x, residual, start..end, out);
        });
    }
}

fn rows(norm: &HostLayerNorm, x: &[f32], residual: Option<&[f32]>, range: std::ops::Range<usize>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match Isa::here() {
        // SAFETY: the CPU has the features the function is compiled for.
        Some(Isa::Avx512) => return unsafe { rows_avx512(norm, x, residual, range, out) },
        // SAFETY: as above.
        Some(Isa::Avx2) => return unsafe { rows_avx2(norm, x, residual, range, out) },
        None => {}
    }
    rows_generic(norm, x, residual, range, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn rows_avx512(norm: &HostLayerNorm, x: &[f32], residual: Option<&[f32]>, range: std::ops::Range<usize>, out: &mut [f32]) {
    rows_generic(norm, x, residual, range, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(norm: &HostLayerNorm, x: &[f32], residual: Option<&[f32]>, range: std::ops::Range<usize>, out: &mut [f32]) {
    rows_generic(norm, x, residual, range, out)
}

/// Rows `range` of `layer_norm(residual + x)` into `out` (those rows only): `(v − mean) /
/// sqrt(var + eps) · weight + bias`, the biased variance.
#[inline(always)]
fn rows_generic(norm: &HostLayerNorm, x: &[f32], residual: Option<&[f32]>, range: std::ops::Range<usize>, out: &mut [f32]) {
    let dim = norm.weight.len();
    let first = range.start;
    for row in range {
        let o = &mut out[(row - first) * dim..][..dim];
        let x = &x[row * dim..][..dim];
        match residual {
            Some(r) => o.iter_mut().zip(x).zip(&r[row * dim..][..dim]).for_each(|((o, x), r)| *o = r + x),
            None => o.copy_from_slice(x),
        }
        let n = dim as f32;
        let mean = sum16(o, |v| v) / n;
        let var = sum16(o, |v| (v - mean) * (v - mean)) / n;
        let rstd = 1.0 / (var + norm.eps).sqrt();
        for ((v, w), b) in o.iter_mut().zip(&norm.weight).zip(&norm.bias) {
            *v = (*v - mean) * rstd * w + b;
        }
    }
}

/// `Σ f(v)` with sixteen partial sums, so that it vectorizes.
#[inline(always)]
fn sum16(values: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = values.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|&v| f(v)).sum();
    for chunk in chunks {
        for j in 0..16 {
            acc[j] += f(chunk[j]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

struct SharedOut(*mut f32);
// SAFETY: `forward` hands each thread disjoint rows.
unsafe impl Sync for SharedOut {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn equals_libtorch_layer_norm_within_float_rounding() {
        let mut rng = TestRng::new(3);
        for &(rows, dim) in &[(1i64, 8i64), (5, 128), (160, 512), (300, 1024), (3, 100)] {
            let x = rng.randn([rows, 1, dim]) * 3.0 + 1.5;
            let residual = rng.randn([rows, 1, dim]);
            let weight = rng.randn([dim]);
            let bias = rng.randn([dim]);
            let norm = HostLayerNorm::new(&weight, &bias, 1e-5).unwrap().expect("f32 weights");
            for residual in [None, Some(&residual)] {
                let sum = residual.map_or_else(|| x.shallow_clone(), |r| r + &x);
                let want = sum.layer_norm([dim].as_slice(), Some(&weight), Some(&bias), 1e-5, true);
                let got = norm.forward(&x, residual).unwrap().expect("a supported layout");
                let diff = (&got - &want).abs().max().double_value(&[]);
                assert!(crate::tolerance::HOST_REDUCTION.holds(diff), "rows {rows} dim {dim}: max diff {diff}");
            }
        }
    }

    #[test]
    fn other_layouts_are_left_to_libtorch() {
        let opts = (Kind::Float, Device::Cpu);
        let norm = HostLayerNorm::new(&Tensor::ones([4], opts), &Tensor::zeros([4], opts), 1e-5).unwrap().unwrap();
        assert!(norm.forward(&Tensor::ones([2, 4], opts).tr().contiguous().tr(), None).unwrap().is_none(), "strided");
        assert!(norm.forward(&Tensor::ones([2, 5], opts), None).unwrap().is_none(), "width");
        assert!(norm.forward(&Tensor::ones([2, 4], opts), Some(&Tensor::ones([4, 2], opts))).unwrap().is_none());
        let double = Tensor::ones([4], (Kind::Double, Device::Cpu));
        assert!(HostLayerNorm::new(&double, &double, 1e-5).unwrap().is_none());
    }
}
