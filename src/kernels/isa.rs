//! Which instructions the host kernels use on this CPU, and the features a test can hide from them
//! (`TCHSEQ_CPU_FEATURES_OFF`) to run a smaller CPU's path.

/// The instructions the kernels use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Two panels a unit, 12 rows a pass.
    Avx512,
    /// One panel a unit, 6 rows a pass.
    Avx2,
}

/// Whether `TCHSEQ_CPU_FEATURES_OFF` (feature names apart by spaces or commas) hides `feature`
/// from the host kernels, as the tests do to run a smaller CPU's path.
pub fn feature_hidden(feature: &str) -> bool {
    names(&std::env::var("TCHSEQ_CPU_FEATURES_OFF").unwrap_or_default(), feature)
}

fn names(list: &str, feature: &str) -> bool {
    list.split(|c: char| c == ',' || c.is_whitespace()).any(|f| f == feature)
}

impl Isa {
    /// The best this CPU has, unless `TCHSEQ_CPU_FEATURES_OFF` hides it (as in the tests).
    pub fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") && !feature_hidden("avx512f") {
                return Some(Self::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") && !feature_hidden("avx2") {
                return Some(Self::Avx2);
            }
        }
        None
    }

    /// [`Isa::detect`], once a process: for the kernels that choose at every call
    /// (`one_query.rs`, `norm.rs`).
    pub fn here() -> Option<Self> {
        static HERE: std::sync::OnceLock<Option<Isa>> = std::sync::OnceLock::new();
        *HERE.get_or_init(Self::detect)
    }

    /// Every ISA this CPU runs, best first (the tests run the kernels of each).
    #[cfg(test)]
    pub fn all_here() -> Vec<Self> {
        let best = Self::detect().expect("this CPU lacks AVX2 or FMA, which the host kernels under test need");
        if best == Self::Avx512 { vec![Self::Avx512, Self::Avx2] } else { vec![Self::Avx2] }
    }

    pub(super) fn panels_per_unit(self) -> usize {
        match self {
            Self::Avx512 => 2,
            Self::Avx2 => 1,
        }
    }

    pub(super) fn rows_per_pass(self) -> usize {
        match self {
            Self::Avx512 => 12,
            Self::Avx2 => 6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_feature_is_named_whole_among_spaces_or_commas() {
        for list in ["avx512f", "avx512bf16 avx512f", "avx512bf16,avx512f", " avx512vnni, avx512f ,"] {
            assert!(names(list, "avx512f"), "{list:?}");
        }
        for list in ["", "avx512", "avx512fx", "avx512bf16;avx512f"] {
            assert!(!names(list, "avx512f"), "{list:?}");
        }
    }
}
