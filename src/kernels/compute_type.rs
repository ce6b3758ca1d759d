//! `--compute-type`, in CTranslate2's terms: how the model computes.

use tch::Kind;

use super::gemm::Precision;
use super::isa::cpu_has;

/// How the model computes, named as CTranslate2 names its compute types. The CLI's
/// `--compute-type` takes it as it is; the server and Python parse their strings with
/// [`str::parse`], and `hub` resolves it once against the device and this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum ComputeType {
    // (a variant's doc line is its help in `--help`; how each computes: the comments)
    /// fairseq's arithmetic, bit for bit
    #[default]
    #[value(alias = "default")]
    Exact,
    /// fp32, faster: scores move in the last digits
    // the decoder's attention fused (`model/fused.rs`) and, on the CPU, every linear layer on
    // weights packed once (`gemm.rs`): the same weights, another summation order
    #[value(alias = "float")]
    Float32,
    /// int8 linear layers, faster still: hypotheses may differ
    // `gemm_i8.rs` (AVX2 or VNNI) or libtorch's fbgemm (`int8.rs`), with float32's fused
    // decoder attention
    #[value(alias = "int8_float32")]
    Int8,
    /// the model halved as fairseq's --fp16 halves it (for GPUs: slow on a CPU without AVX512_FP16)
    // softmax and log-softmax in fp32 where fairseq computes them so, with float32's fused
    // decoder attention
    #[value(alias = "half")]
    Float16,
    /// the model in bfloat16 as fairseq's --bf16 (on a CPU, it needs AVX512_BF16)
    // on a GPU as float16; on a CPU as float32, with the products in bfloat16 (`gemm_bf16.rs`),
    // accumulated in fp32
    #[value(name = "bfloat16")]
    BFloat16,
}

/// A compute type's name that is none of [`ComputeType::NAMES`] (nor an alias of one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown compute type {0:?} (available: \"exact\", \"float32\", \"int8\", \"float16\", \"bfloat16\")")]
pub struct UnknownComputeType(pub String);

impl std::str::FromStr for ComputeType {
    type Err = UnknownComputeType;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        <Self as clap::ValueEnum>::from_str(name, false).map_err(|_| UnknownComputeType(name.to_string()))
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
        (self == Self::BFloat16 && !cpu_has("avx512bf16")).then_some("AVX512_BF16")
    }

    /// The compute types this CPU runs at full speed: `float16` only with AVX512_FP16.
    pub fn fast_on_this_cpu() -> Vec<Self> {
        let mut fast = vec![Self::Exact, Self::Float32];
        if cpu_has("avx2") {
            fast.push(Self::Int8);
        }
        if cpu_has("avx512fp16") {
            fast.push(Self::Float16);
        }
        if Self::BFloat16.missing_cpu_instructions().is_none() {
            fast.push(Self::BFloat16);
        }
        fast
    }
}

