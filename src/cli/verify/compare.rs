//! One reference tensor against ours, over the compared elements: the largest differences, and
//! the systematic part of the difference, `s` in ours ≈ (1 + s) · reference.

use anyhow::Result;
use tch::{Device, Kind, Tensor};

use super::tolerance::{Bound, Systematic};

/// The least-squares `s` in ours ≈ (1 + s) · reference, and its standard error (robust to an
/// uneven spread of the differences: sqrt(Σ e²r²) / Σ r², `e` the residuals).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rescale {
    pub s: f64,
    pub se: f64,
}

impl Rescale {
    /// How many standard errors `s` is from 0 (0 for an exact match).
    pub fn standard_errors(&self) -> f64 {
        if self.s == 0.0 {
            0.0
        } else {
            self.s.abs() / self.se
        }
    }
}

/// One comparison over the kept elements.
pub struct Diff {
    pub max_abs: f64,
    pub max_rel: f64,
    /// The largest finite |reference|.
    pub scale: f64,
    pub bound: Bound,
    /// Measured when a systematic limit applies.
    pub rescale: Option<Rescale>,
    /// Every element within `bound`.
    pub within: bool,
    /// `rescale` beyond the systematic limit.
    pub systematic: bool,
}

impl Diff {
    pub fn ok(&self) -> bool {
        self.within && !self.systematic
    }
}

/// Compares the kept elements, bounded element-wise by `bound(scale)` and, with `systematic`, as
/// a whole.
pub fn compare(
    ours: &Tensor,
    reference: &Tensor,
    keep: Option<&Tensor>,
    bound: impl Fn(f64) -> Bound,
    systematic: Option<Systematic>,
) -> Result<Diff> {
    let a = ours.f_to_device(Device::Cpu)?.f_to_kind(Kind::Double)?;
    let b = reference.f_to_kind(Kind::Double)?;
    let (a, b) = match keep {
        Some(k) => {
            let k = k.f_to_device(Device::Cpu)?.f_expand_as(&b)?;
            (a.f_masked_select(&k)?, b.f_masked_select(&k)?)
        }
        None => (a.f_flatten(0, -1)?, b.f_flatten(0, -1)?),
    };
    if a.numel() == 0 {
        let rescale = systematic.map(|_| Rescale { s: 0.0, se: 0.0 });
        return Ok(Diff { max_abs: 0.0, max_rel: 0.0, scale: 0.0, bound: bound(0.0), rescale, within: true, systematic: false });
    }
    // equal values (including matching infinities) differ by exactly 0
    let same = a.f_eq_tensor(&b)?;
    let diff = a.f_sub(&b)?.f_abs()?.f_masked_fill(&same, 0.0)?;
    let nan = diff.f_isnan()?.f_any()?.f_int64_value(&[])? != 0;
    let max_abs = if nan { f64::NAN } else { diff.f_max()?.f_double_value(&[])? };
    let denom = b.f_abs()?;
    let rel = diff.f_div(&denom)?.f_masked_fill(&diff.f_eq(0.0)?, 0.0)?;
    let max_rel = if nan { f64::NAN } else { rel.f_max()?.f_double_value(&[])? };
    let scale = denom.f_masked_fill(&denom.f_isfinite()?.f_logical_not()?, 0.0)?.f_max()?.f_double_value(&[])?;
    let bound = bound(scale);
    let limit = denom.f_mul_scalar(bound.rtol)?.f_add_scalar(bound.atol)?;
    let within = !nan && diff.f_gt_tensor(&limit)?.f_any()?.f_int64_value(&[])? == 0;
    let rescale = match systematic {
        Some(_) => Some(fit_rescale(&a, &b)?),
        None => None,
    };
    let systematic = match (systematic, rescale) {
        (Some(limit), Some(r)) => limit.exceeded(r.s, r.standard_errors()),
        _ => false,
    };
    Ok(Diff { max_abs, max_rel, scale, bound, rescale, within, systematic })
}

/// `s` and its standard error over the elements finite on both sides.
fn fit_rescale(ours: &Tensor, reference: &Tensor) -> Result<Rescale> {
    let finite = ours.f_isfinite()?.f_logical_and(&reference.f_isfinite()?)?;
    let (a, r) = (ours.f_masked_select(&finite)?, reference.f_masked_select(&finite)?);
    let sum = |t: Tensor| -> Result<f64> { Ok(t.f_sum(Kind::Double)?.f_double_value(&[])?) };
    let energy = sum(r.f_square()?)?;
    if energy == 0.0 {
        return Ok(Rescale { s: 0.0, se: 0.0 });
    }
    let d = a.f_sub(&r)?;
    let s = sum(d.f_mul(&r)?)? / energy;
    let residual = d.f_sub(&r.f_mul_scalar(s)?)?;
    let se = sum(residual.f_mul(&r)?.f_square()?)?.sqrt() / energy;
    Ok(Rescale { s, se })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard normal values from a fixed seed (xorshift64*, Box-Muller), apart from
    /// libtorch's global generator, which tests running in parallel share.
    fn normal(rows: i64, cols: i64, seed: u64) -> Tensor {
        let mut state = seed.max(1);
        let mut uniform = || {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        let values: Vec<f64> = (0..rows * cols)
            .map(|_| (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos())
            .collect();
        Tensor::from_slice(&values).view([rows, cols])
    }

    fn limit() -> Systematic {
        Systematic { eps: f64::from(f32::EPSILON), multiple: 1.5, standard_errors: 20.0 }
    }

    #[test]
    fn a_uniform_rescale_is_measured_and_fails_where_rounding_noise_does_not() {
        let reference = normal(64, 32, 1);
        let eps = f64::from(f32::EPSILON);
        let wide = |_| Bound { atol: 1.0, rtol: 0.0 };
        // every element 3 eps larger: far beyond the limit, and within any element-wise bound
        let scaled = &reference * (1.0 + 3.0 * eps);
        let d = compare(&scaled, &reference, None, wide, Some(limit())).unwrap();
        let r = d.rescale.unwrap();
        assert!((r.s / eps - 3.0).abs() < 1e-6, "{r:?}");
        assert!(d.within && d.systematic && !d.ok());
        // noise of 3 eps of the scale, with no systematic part: passes
        let noise = normal(64, 32, 2) * (3.0 * eps);
        let d = compare(&(&reference + noise), &reference, None, wide, Some(limit())).unwrap();
        assert!(d.rescale.unwrap().standard_errors() < 6.0, "{:?}", d.rescale);
        assert!(d.ok());
        // without a systematic limit nothing is fitted
        let d = compare(&scaled, &reference, None, wide, None).unwrap();
        assert!(d.rescale.is_none() && d.ok());
    }

    #[test]
    fn a_large_but_noisy_rescale_and_a_significant_but_tiny_one_both_pass() {
        let eps = f64::from(f32::EPSILON);
        // 2 eps, 1 standard error
        let exceeded = |s: f64, se: f64| limit().exceeded(s, Rescale { s, se }.standard_errors());
        assert!(!exceeded(2.0 * eps, 2.0 * eps));
        // 0.5 eps, 100 standard errors
        assert!(!exceeded(-0.5 * eps, 0.005 * eps));
        // 2 eps, 40 standard errors, either sign
        assert!(exceeded(-2.0 * eps, 0.05 * eps));
        assert!(exceeded(2.0 * eps, 0.05 * eps));
        assert!(!exceeded(0.0, 0.0));
    }
}
