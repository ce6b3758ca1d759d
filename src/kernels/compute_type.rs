//! What a compute type ([`crate::config::ComputeType`]) needs of this CPU and its kernels.

use tch::Kind;

use super::gemm::Precision;
use super::isa::cpu_has;
use crate::config::ComputeType;

/// The precision of the host kernels' panels that `compute_type`'s linear layers compute from on
/// `device`, where this CPU runs them: `float32` and `bfloat16` on the CPU.
pub(crate) fn host_precision(compute_type: ComputeType, device: tch::Device) -> Option<Precision> {
    let precision = match compute_type {
        ComputeType::Float32 => Precision::F32,
        ComputeType::BFloat16 => Precision::Bf16,
        _ => return None,
    };
    (device == tch::Device::Cpu && precision.available()).then_some(precision)
}

/// The dtype to load the weights in on `device`: [`ComputeType::weight_kind`], but fp32 for
/// `bfloat16` on the host's kernels (the model rounds its weights itself, without a second copy
/// of them).
pub fn load_kind(compute_type: ComputeType, device: tch::Device) -> Option<Kind> {
    match host_precision(compute_type, device) {
        Some(_) => Some(Kind::Float),
        None => compute_type.weight_kind(),
    }
}

/// The CPU instructions `compute_type` needs to run on the CPU, when this CPU lacks them:
/// bfloat16's products are only fast with AVX512_BF16 (AMX machines have it too); elsewhere
/// libtorch would emulate them, slower than float32.
pub fn missing_cpu_instructions(compute_type: ComputeType) -> Option<&'static str> {
    (compute_type == ComputeType::BFloat16 && !cpu_has("avx512bf16")).then_some("AVX512_BF16")
}

/// The compute types this CPU runs at full speed: `float16` only with AVX512_FP16.
pub fn fast_on_this_cpu() -> Vec<ComputeType> {
    let mut fast = vec![ComputeType::Exact, ComputeType::Float32];
    if cpu_has("avx2") {
        fast.push(ComputeType::Int8);
    }
    if cpu_has("avx512fp16") {
        fast.push(ComputeType::Float16);
    }
    if missing_cpu_instructions(ComputeType::BFloat16).is_none() {
        fast.push(ComputeType::BFloat16);
    }
    fast
}
