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
fn feature_hidden(feature: &str) -> bool {
    names(&std::env::var("TCHSEQ_CPU_FEATURES_OFF").unwrap_or_default(), feature)
}

/// Whether this CPU runs `feature` (named as `is_x86_feature_detected!` names it) and
/// `TCHSEQ_CPU_FEATURES_OFF` does not hide it: the one question every kernel, compute type and
/// test asks of the CPU, so that a test can drive it by hiding features.
pub fn cpu_has(feature: &str) -> bool {
    !feature_hidden(feature) && cpu_detected(feature)
}

/// Whether the CPU has `feature`, hidden or not: only for what libtorch's own kernels decide by
/// the real CPU (fbgemm's reduced range without VNNI), which no variable of ours can hide.
pub fn cpu_detected(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "fma" => std::arch::is_x86_feature_detected!("fma"),
            "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
            "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
            "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
            "avx512fp16" => std::arch::is_x86_feature_detected!("avx512fp16"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

fn names(list: &str, feature: &str) -> bool {
    list.split(|c: char| c == ',' || c.is_whitespace()).any(|f| f == feature)
}

impl Isa {
    /// The best this CPU has, unless `TCHSEQ_CPU_FEATURES_OFF` hides it (as in the tests).
    pub fn detect() -> Option<Self> {
        if cpu_has("avx512f") {
            Some(Self::Avx512)
        } else if cpu_has("avx2") && cpu_has("fma") {
            Some(Self::Avx2)
        } else {
            None
        }
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

    /// The kernel tests are compiled as ignored or not by `build.rs` from the CPU it ran on
    /// (`cfg(tchseq_cpu)`): a `target/` built on another CPU, or under another
    /// `TCHSEQ_CPU_FEATURES_OFF`, would skip tests this CPU can run, or run ones it cannot. `make`
    /// rebuilds on a CPU change (`TCHSEQ_BUILD_CPU_FLAGS`); a plain `cargo test` is told here.
    #[test]
    fn the_tests_were_built_for_this_cpu() {
        let built = [
            ("avx2", cfg!(tchseq_cpu = "avx2")),
            ("fma", cfg!(tchseq_cpu = "fma")),
            ("avx512f", cfg!(tchseq_cpu = "avx512f")),
            ("avx512vnni", cfg!(tchseq_cpu = "avx512vnni")),
            ("avx512bf16", cfg!(tchseq_cpu = "avx512bf16")),
        ];
        for (feature, built) in built {
            assert_eq!(cpu_has(feature), built, "{feature}: the tests were built on another CPU or under another TCHSEQ_CPU_FEATURES_OFF: run `touch build.rs` (or `make`) and test again");
        }
    }

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
