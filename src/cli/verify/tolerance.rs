//! How close ours must be to a reference value.
//!
//! Derived (the default): an activation passes when every compared element is within
//! `C * eps * scale * depth` of the reference, `eps` the machine epsilon of the model's dtype,
//! `scale` the largest finite |reference| over the compared elements and `depth` the number of
//! layers the tensor comes after, plus one; and when the tensor as a whole is not rescaled: the
//! least-squares `s` in ours ≈ (1 + s) · reference is within `RESCALE_EPS * eps`, or within
//! `RESCALE_SE` of its standard errors of 0. A weight (and the padding mask, depth 0) must be the
//! reference rounded once to the model's dtype: within `u * |reference|` (u = eps / 2), plus half
//! the dtype's smallest subnormal spacing.
//! Explicit (`--atol`/`--rtol`): `atol + rtol * |reference|` for everything.

use serde::Serialize;
use tch::Kind;

/// Multiples of `eps * scale * depth` an activation may drift: the largest drift measured
/// across CPU kinds and kernel settings was 6.5 of them, a LayerNorm eps of 2e-5 for 1e-5
/// moves the first layer's output by 20 (docs/commands.md, "Tolerances").
pub const C: f64 = 12.0;

/// A rescale fails beyond this many `eps`… Kernel drift measured across CPU kinds and kernel
/// settings rescaled a tensor by at most 1.1 eps, and by 0.72 eps where it was significant
/// (7.6 standard errors); a LayerNorm eps of 1.1e-5 for 1e-5 rescales the first layer norm's
/// output by 3.1 to 4 eps at 48 and more standard errors, 70 eps on pre-norm models
/// (docs/commands.md, "Tolerances").
pub const RESCALE_EPS: f64 = 1.5;
/// …when it is also this many standard errors from 0.
pub const RESCALE_SE: f64 = 20.0;

/// The limit on a tensor's systematic rescale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Systematic {
    pub eps: f64,
    /// Of `eps`.
    pub multiple: f64,
    pub standard_errors: f64,
}

impl Systematic {
    /// `s` beyond the limit in both senses: larger than the rounding can explain, and not chance.
    pub fn exceeded(&self, s: f64, standard_errors: f64) -> bool {
        s.abs() > self.multiple * self.eps && standard_errors > self.standard_errors
    }
}

/// What bounds |ours - reference| element-wise: `atol + rtol * |reference|`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bound {
    pub atol: f64,
    pub rtol: f64,
}

impl Bound {
    pub fn text(&self) -> String {
        match (self.atol, self.rtol) {
            (a, r) if r == 0.0 => format!("{a:.2e}"),
            (a, r) if a < 1e-30 => format!("{r:.2e}|r|"),
            (a, r) => format!("{a:.1e}+{r:.1e}|r|"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "lowercase")]
pub enum Tolerance {
    /// Derived per tensor from the rounding of `kind` (the model's dtype).
    Derived {
        c: f64,
        eps: f64,
        rescale_eps: f64,
        rescale_se: f64,
        #[serde(skip)]
        kind: Kind,
    },
    Explicit {
        atol: f64,
        rtol: f64,
    },
}

impl Tolerance {
    /// Explicit when either of `--atol`/`--rtol` is given (the other then defaults to 0).
    pub fn new(atol: Option<f64>, rtol: Option<f64>, kind: Kind) -> Self {
        if atol.is_none() && rtol.is_none() {
            Tolerance::Derived { c: C, eps: epsilon(kind), rescale_eps: RESCALE_EPS, rescale_se: RESCALE_SE, kind }
        } else {
            Tolerance::Explicit { atol: atol.unwrap_or(0.0), rtol: rtol.unwrap_or(0.0) }
        }
    }

    /// The limit on an activation's rescale: none for the explicit rule or at depth 0.
    pub fn systematic(&self, depth: usize) -> Option<Systematic> {
        match *self {
            Tolerance::Derived { eps, rescale_eps, rescale_se, .. } if depth > 0 => {
                Some(Systematic { eps, multiple: rescale_eps, standard_errors: rescale_se })
            }
            _ => None,
        }
    }

    /// The bound of an activation `depth` layers deep whose compared reference values reach
    /// `scale`; depth 0 means exact up to one rounding, as for a weight.
    pub fn activation(&self, scale: f64, depth: usize) -> Bound {
        match *self {
            Tolerance::Derived { .. } if depth == 0 => self.weight(),
            Tolerance::Derived { c, eps, .. } => Bound { atol: c * eps * scale * depth as f64, rtol: 0.0 },
            Tolerance::Explicit { atol, rtol } => Bound { atol, rtol },
        }
    }

    pub fn weight(&self) -> Bound {
        match *self {
            Tolerance::Derived { eps, kind, .. } => Bound { atol: eps / 2.0 * smallest_normal(kind), rtol: eps / 2.0 },
            Tolerance::Explicit { atol, rtol } => Bound { atol, rtol },
        }
    }

    pub fn text(&self) -> String {
        match self {
            Tolerance::Derived { c, eps, rescale_eps, rescale_se, .. } => format!(
                "derived: activations {c} * eps * max|ref| * depth and rescaled by at most {rescale_eps} eps \
                 or within {rescale_se} standard errors of none, weights one rounding (eps = {eps:.3e})"
            ),
            Tolerance::Explicit { atol, rtol } => format!("--atol {atol:e} --rtol {rtol:e}"),
        }
    }
}

fn epsilon(kind: Kind) -> f64 {
    match kind {
        Kind::Half => 2f64.powi(-10),
        Kind::BFloat16 => 2f64.powi(-7),
        Kind::Double => f64::EPSILON,
        _ => f64::from(f32::EPSILON),
    }
}

fn smallest_normal(kind: Kind) -> f64 {
    match kind {
        Kind::Half => 2f64.powi(-14),
        Kind::Double => f64::MIN_POSITIVE,
        _ => f64::from(f32::MIN_POSITIVE),
    }
}

/// Layers a reference activation comes after, plus one (0: exact); `None` for a weight.
/// Everything in the decoder counts the encoder's layers too: it reads `encoder_out`.
pub fn depth(name: &str, encoder_layers: usize, decoder_layers: usize) -> Option<usize> {
    let index = |prefix: &str| name.strip_prefix(prefix).and_then(|i| i.parse::<usize>().ok());
    let encoder = encoder_layers + 1;
    Some(match name {
        "encoder_padding_mask" => 0,
        "encoder_embedding" => 1,
        "encoder_out" => encoder,
        "attn" => encoder + decoder_layers,
        "logits" | "lprobs" | "incremental_logits" => encoder + decoder_layers + 1,
        _ => {
            if let Some(i) = index("encoder_states.") {
                i + 1
            } else {
                encoder + index("decoder_inner_states.")?
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_grows_through_the_encoder_then_the_decoder() {
        let d = |n| depth(n, 2, 3);
        assert_eq!(d("encoder_padding_mask"), Some(0));
        assert_eq!(d("encoder_embedding"), Some(1));
        assert_eq!(d("encoder_states.0"), Some(1));
        assert_eq!(d("encoder_states.2"), Some(3));
        assert_eq!(d("encoder_out"), Some(3));
        assert_eq!(d("decoder_inner_states.0"), Some(3));
        assert_eq!(d("decoder_inner_states.3"), Some(6));
        assert_eq!(d("attn"), Some(6));
        assert_eq!(d("logits"), Some(7));
        assert_eq!(d("decoder.layers.0.fc1.weight"), None);
        assert_eq!(d("decoder_inner_states.x"), None);
    }

    #[test]
    fn explicit_tolerances_override_the_derived_bound() {
        let t = Tolerance::new(Some(1e-3), None, Kind::Float);
        assert_eq!(t.activation(10.0, 5), Bound { atol: 1e-3, rtol: 0.0 });
        assert_eq!(t.weight(), Bound { atol: 1e-3, rtol: 0.0 });
        let t = Tolerance::new(None, None, Kind::Float);
        let b = t.activation(2.0, 3);
        assert!((b.atol - C * f64::from(f32::EPSILON) * 6.0).abs() < 1e-20, "{b:?}");
        assert_eq!(t.weight().rtol, 2f64.powi(-24));
        assert_eq!(t.activation(2.0, 0), t.weight());
        assert_eq!(t.systematic(0), None);
        let limit = t.systematic(3).unwrap();
        assert_eq!((limit.multiple, limit.standard_errors), (RESCALE_EPS, RESCALE_SE));
        assert_eq!(Tolerance::new(None, Some(1e-3), Kind::Float).systematic(3), None);
    }
}
