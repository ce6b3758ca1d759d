//! `--compute-type`, in CTranslate2's terms: how the model computes.

use super::ModelError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeType {
    /// fairseq's own kernels and order: bit-identical to fairseq on the same machine.
    #[default]
    Exact,
    /// fp32 with fewer, larger ops in the incremental decoder (`fused.rs`): the same weights,
    /// another summation order.
    Float32,
    /// int8 linear layers (`int8.rs`), with the fused decoder attention of `Float32`.
    Int8,
}

impl ComputeType {
    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        match name {
            "exact" | "default" => Ok(Self::Exact),
            "float32" | "float" => Ok(Self::Float32),
            "int8" | "int8_float32" => Ok(Self::Int8),
            other => Err(ModelError::ComputeType(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Float32 => "float32",
            Self::Int8 => "int8",
        }
    }
}
