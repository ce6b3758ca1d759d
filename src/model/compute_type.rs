//! `--compute-type`, in CTranslate2's terms: how the model computes.

use tch::Kind;

use super::host_gemm::Precision;
use super::host_isa::feature_hidden;
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
    /// The model halved as fairseq's `--fp16` halves it (softmax and log-softmax in fp32, where
    /// fairseq computes them so), with the fused decoder attention of `Float32`.
    Float16,
    /// fairseq's `--bf16` model. On a GPU as `Float16`, in bfloat16; on a CPU with AVX512_BF16
    /// as `Float32`, with every linear layer's products in bfloat16 on the host
    /// (`host_gemm_bf16.rs`), accumulated in fp32.
    BFloat16,
}

impl ComputeType {
    pub const NAMES: [&'static str; 5] = ["exact", "float32", "int8", "float16", "bfloat16"];

    pub fn from_name(name: &str) -> Result<Self, ModelError> {
        match name {
            "exact" | "default" => Ok(Self::Exact),
            "float32" | "float" => Ok(Self::Float32),
            "int8" | "int8_float32" => Ok(Self::Int8),
            "float16" | "half" => Ok(Self::Float16),
            "bfloat16" => Ok(Self::BFloat16),
            other => Err(ModelError::ComputeType(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Float32 => "float32",
            Self::Int8 => "int8",
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
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

    /// The precision of the host kernels' panels that its linear layers compute from on
    /// `device`, where this CPU runs them: `float32` and `bfloat16` on the CPU.
    pub(crate) fn host_precision(self, device: tch::Device) -> Option<Precision> {
        let precision = match self {
            Self::Float32 => Precision::F32,
            Self::BFloat16 => Precision::Bf16,
            _ => return None,
        };
        (device == tch::Device::Cpu && precision.available()).then_some(precision)
    }

    /// The dtype to load the weights in on `device`: [`ComputeType::weight_kind`], but fp32
    /// for `bfloat16` on the host's kernels (the model rounds its weights itself, without a
    /// second copy of them).
    pub fn load_kind(self, device: tch::Device) -> Option<Kind> {
        match self.host_precision(device) {
            Some(_) => Some(Kind::Float),
            None => self.weight_kind(),
        }
    }

    /// Whether it runs on the CPU only (its kernels are host or fbgemm code).
    pub fn cpu_only(self) -> bool {
        self == Self::Int8
    }

    /// The CPU instructions it needs to run on the CPU, when this CPU lacks them: bfloat16's
    /// products are only fast with AVX512_BF16 (AMX machines have it too); elsewhere libtorch
    /// would emulate them, slower than float32.
    pub fn missing_cpu_instructions(self) -> Option<&'static str> {
        (self == Self::BFloat16 && !cpu_feature("avx512bf16")).then_some("AVX512_BF16")
    }

    /// The compute types this CPU runs at full speed: `float16` only with AVX512_FP16.
    pub fn fast_on_this_cpu() -> Vec<Self> {
        let mut fast = vec![Self::Exact, Self::Float32];
        if cpu_feature("avx2") {
            fast.push(Self::Int8);
        }
        if cpu_feature("avx512fp16") {
            fast.push(Self::Float16);
        }
        if Self::BFloat16.missing_cpu_instructions().is_none() {
            fast.push(Self::BFloat16);
        }
        fast
    }
}

/// Whether the CPU has `feature` (`is_x86_feature_detected!`'s name), unless
/// `TCHSEQ_CPU_FEATURES_OFF` names it (how the tests see a CPU without it).
fn cpu_feature(feature: &str) -> bool {
    if feature_hidden(feature) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx2" => std::arch::is_x86_feature_detected!("avx2"),
            "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
            "avx512fp16" => std::arch::is_x86_feature_detected!("avx512fp16"),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}
