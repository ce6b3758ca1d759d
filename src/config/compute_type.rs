//! `--compute-type`, in CTranslate2's terms: how the model computes. The names live here, on the
//! ground floor, for every door to parse; what a compute type needs of this CPU is
//! `kernels::compute_type`'s, and the CLI's help for each is `cli/args/compute_type.rs`'s.

use tch::Kind;

/// How the model computes, named as CTranslate2 names its compute types. The CLI, the server
/// and Python parse their strings with [`str::parse`], and `hub` resolves it once against the
/// device and this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ComputeType {
    /// fairseq's arithmetic, bit for bit.
    #[default]
    Exact,
    /// The decoder's attention fused (`model/fused.rs`) and, on the CPU, every linear layer on
    /// weights packed once (`kernels/gemm.rs`): the same weights, another summation order.
    Float32,
    /// int8 linear layers: `kernels/gemm_i8.rs` (AVX2 or VNNI) or libtorch's fbgemm
    /// (`kernels/int8.rs`), with float32's fused decoder attention.
    Int8,
    /// The model halved as fairseq's `--fp16` halves it; softmax and log-softmax in fp32 where
    /// fairseq computes them so, with float32's fused decoder attention.
    Float16,
    /// The model in bfloat16: on a GPU as float16; on a CPU as float32, with the products in
    /// bfloat16 (`kernels/gemm_bf16.rs`), accumulated in fp32.
    BFloat16,
}

/// A compute type's name that is none of [`ComputeType::NAMES`] (nor an alias of one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compute type {0:?} (available: \"exact\", \"float32\", \"int8\", \"float16\", \"bfloat16\")")]
pub struct UnknownComputeType(pub String);

impl std::str::FromStr for ComputeType {
    type Err = UnknownComputeType;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == name || c.alias() == Some(name))
            .ok_or_else(|| UnknownComputeType(name.to_string()))
    }
}

impl std::fmt::Display for ComputeType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for ComputeType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for ComputeType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl ComputeType {
    pub const ALL: [Self; 5] = [Self::Exact, Self::Float32, Self::Int8, Self::Float16, Self::BFloat16];
    pub const NAMES: [&'static str; 5] = ["exact", "float32", "int8", "float16", "bfloat16"];

    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Float32 => "float32",
            Self::Int8 => "int8",
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
        }
    }

    /// The other name it answers to (CTranslate2's, or fairseq's word for it).
    pub fn alias(self) -> Option<&'static str> {
        match self {
            Self::Exact => Some("default"),
            Self::Float32 => Some("float"),
            Self::Int8 => Some("int8_float32"),
            Self::Float16 => Some("half"),
            Self::BFloat16 => None,
        }
    }

    /// The dtype the weights must have, where this compute type decides it.
    pub fn weight_kind(self) -> Option<Kind> {
        match self {
            Self::Float16 => Some(Kind::Half),
            Self::BFloat16 => Some(Kind::BFloat16),
            Self::Float32 | Self::Int8 => Some(Kind::Float),
            Self::Exact => None,
        }
    }

    /// Whether it runs on the CPU only (its kernels are host or fbgemm code).
    pub fn cpu_only(self) -> bool {
        self == Self::Int8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_and_alias_parses_to_its_compute_type_and_nothing_else_does() {
        for c in ComputeType::ALL {
            assert_eq!(c.name().parse::<ComputeType>(), Ok(c));
            assert_eq!(c.to_string(), c.name());
            if let Some(alias) = c.alias() {
                assert_eq!(alias.parse::<ComputeType>(), Ok(c));
            }
        }
        assert_eq!(ComputeType::ALL.map(ComputeType::name), ComputeType::NAMES);
        for bad in ["", "Exact", "fp16", "int4", "float32 "] {
            assert_eq!(bad.parse::<ComputeType>(), Err(UnknownComputeType(bad.to_string())));
        }
    }
}
