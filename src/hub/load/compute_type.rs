//! The compute type asked for, resolved once against the device and this CPU, as CTranslate2's
//! `resolve_compute_type` does: every door (the CLI's `--compute-type`, the server's, Python's
//! `compute_type=`) loads through [`ModelBundle::load`](super::ModelBundle::load), which calls
//! [`resolve_compute_type`] and [`load_kind`] before a checkpoint is read, and
//! [`apply_compute_type`] once the models are built.

use tch::{Device, Kind};

use super::HubError;
use crate::config::ComputeType;
use crate::model::{cuda_graph_factory, cuda_graph_requested, StepGraphs, TransformerModel, CUDA_GRAPH_ENV};

/// Why a compute type cannot run as asked, naming what is missing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComputeTypeError {
    /// Its kernels are host or fbgemm code (`int8`), and the device is a GPU.
    #[error("compute type {0} runs on the CPU only")]
    CpuOnly(ComputeType),
    /// This CPU lacks the instructions it needs.
    #[error("compute type {compute_type} on the CPU needs {needs}, which this CPU lacks (`tchseq doctor` lists its fast compute types); use float32 or int8")]
    MissingInstructions {
        /// The compute type asked for.
        compute_type: ComputeType,
        /// The instructions it needs (`AVX512_BF16`).
        needs: &'static str,
    },
    /// A dtype asked for besides a compute type that decides the dtype itself.
    #[error("dtype {} and compute type {compute_type} disagree: compute types float16 and bfloat16 halve the model themselves, and the others compute in fp32", dtype_name(*dtype))]
    DtypeDisagrees {
        /// The dtype asked for.
        dtype: Kind,
        /// The compute type asked for.
        compute_type: ComputeType,
    },
    /// A language model computes `exact` only.
    #[error("compute type {0}: a language model computes exact only")]
    LanguageModel(ComputeType),
    /// The model left `exact` already: its weights are fused or quantized for that compute type.
    #[error("the model already runs in {0}")]
    AlreadyRuns(ComputeType),
}

/// fairseq's names of the dtypes (`--fp16`, `--bf16`), as `--dtype` spells them.
pub fn dtype_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Half => "fp16",
        Kind::BFloat16 => "bf16",
        Kind::Double => "fp64",
        _ => "fp32",
    }
}

/// `requested` for a model asked for in `dtype` (`Kind::Float` when none was: `--dtype fp32`)
/// on `device`, or why it cannot run there. A `dtype` that contradicts the compute type is a
/// usage error, reported before what this CPU or device lacks: it is wrong on every machine,
/// and naming a missing instruction first would send the user after the wrong fix.
pub fn resolve_compute_type(requested: ComputeType, dtype: Kind, device: Device) -> Result<ComputeType, ComputeTypeError> {
    check_dtype(requested, dtype)?;
    match (requested, device) {
        (c, Device::Cuda(_)) if c.cpu_only() => Err(ComputeTypeError::CpuOnly(c)),
        (c, Device::Cpu) => match crate::kernels::compute_type::missing_cpu_instructions(c) {
            Some(needs) => Err(ComputeTypeError::MissingInstructions { compute_type: c, needs }),
            None => Ok(c),
        },
        (c, _) => Ok(c),
    }
}

/// A `dtype` other than fp32 must be the compute type's own, where the compute type decides one.
fn check_dtype(compute_type: ComputeType, dtype: Kind) -> Result<(), ComputeTypeError> {
    match compute_type.weight_kind() {
        Some(kind) if dtype != Kind::Float && kind != dtype => Err(ComputeTypeError::DtypeDisagrees { dtype, compute_type }),
        _ => Ok(()),
    }
}

/// The dtype to load the weights in: the compute type's where it decides one (`float16` loads
/// the model halved, as `--dtype fp16` does), else `dtype`. A `dtype` other than fp32 must be
/// the compute type's own.
pub fn load_kind(compute_type: ComputeType, dtype: Kind, device: Device) -> Result<Kind, ComputeTypeError> {
    check_dtype(compute_type, dtype)?;
    match compute_type.weight_kind() {
        None => Ok(dtype),
        Some(_) if dtype == Kind::Float => Ok(crate::kernels::compute_type::load_kind(compute_type, device).unwrap_or(dtype)),
        Some(kind) => Ok(kind),
    }
}

/// `TCHSEQ_KV_CACHE=fixed`: the fused path's self-attentions keep their keys and values at a
/// fixed capacity (`model/fixed_cache.rs`), the shapes a replayed GPU step needs; `growing` (the
/// default) grows them as fairseq does. The GPU check times both until a GPU run decides.
pub const KV_CACHE_ENV: &str = "TCHSEQ_KV_CACHE";

/// Whether `value` (of [`KV_CACHE_ENV`]) asks for the fixed-capacity cache, or a warning when it
/// names neither kind.
pub fn fixed_kv_cache(value: Option<&str>) -> (bool, Option<String>) {
    match value.map(str::trim) {
        Some("fixed") => (true, None),
        None | Some("" | "growing") => (false, None),
        Some(other) => (false, Some(format!("{KV_CACHE_ENV}={other:?}: not a cache kind (fixed or growing); the cache grows"))),
    }
}

/// What a user should know about `compute_type` on `device`: float16 on a CPU without
/// AVX512_FP16 runs, but several times slower than float32.
pub fn slow_here(compute_type: ComputeType, device: Device) -> Option<&'static str> {
    (device == Device::Cpu && compute_type == ComputeType::Float16 && !crate::kernels::compute_type::fast_on_this_cpu().contains(&compute_type))
        .then_some("compute type float16 on this CPU (no AVX512_FP16) runs several times slower than float32: float16 is for GPUs; use float32 or int8 here")
}

/// Switches `models` from `exact` to `compute_type`, resolved already (the weights are fused,
/// packed or quantized: there is no way back); returns what a user should know about it.
pub fn apply_compute_type(models: &mut [TransformerModel], compute_type: ComputeType, device: Device) -> Result<Vec<String>, HubError> {
    if compute_type == ComputeType::Exact {
        return Ok(Vec::new());
    }
    let (fixed, cache_warning) = fixed_kv_cache(std::env::var(KV_CACHE_ENV).ok().as_deref());
    let (graphs, graph_warning) = cuda_graphs(std::env::var(CUDA_GRAPH_ENV).ok().as_deref(), fixed, device);
    for model in models {
        model.set_compute_type(compute_type).map_err(|source| HubError::Model { path: "the loaded model".into(), source })?;
        model.decoder.fixed_kv_cache = fixed;
        model.decoder.cuda_graphs = graphs.then(|| StepGraphs::new(cuda_graph_factory));
    }
    Ok(slow_here(compute_type, device).map(String::from).into_iter().chain(cache_warning).chain(graph_warning).collect())
}

/// Whether the decoder step is replayed as a CUDA graph (`model/step_graphs.rs`): asked for by
/// `value` (of [`CUDA_GRAPH_ENV`]), with the fixed-capacity cache, on a CUDA device whose graphs
/// this build can capture; else why not, where it was asked for.
pub fn cuda_graphs(value: Option<&str>, fixed_kv_cache: bool, device: Device) -> (bool, Option<String>) {
    let (asked, warning) = cuda_graph_requested(value);
    if !asked {
        return (false, warning);
    }
    let refused = |why: String| (false, Some(format!("{CUDA_GRAPH_ENV}=1: {why}; the step runs eagerly")));
    if !fixed_kv_cache {
        return refused(format!("needs {KV_CACHE_ENV}=fixed"));
    }
    if !device.is_cuda() {
        return refused(format!("no CUDA device ({device:?})"));
    }
    match crate::libtorch::cuda_graphs_available() {
        Ok(()) => (true, None),
        Err(e) => refused(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dtype that contradicts the compute type is the answer on every CPU, before what the
    /// CPU lacks: the order does not depend on AVX512_BF16.
    #[test]
    fn a_contradicting_dtype_is_reported_before_a_missing_instruction() {
        for (dtype, compute_type) in [(Kind::Half, ComputeType::BFloat16), (Kind::BFloat16, ComputeType::Float16), (Kind::Half, ComputeType::Float32), (Kind::BFloat16, ComputeType::Int8)] {
            assert_eq!(
                resolve_compute_type(compute_type, dtype, Device::Cpu),
                Err(ComputeTypeError::DtypeDisagrees { dtype, compute_type }),
                "{compute_type}"
            );
            assert!(load_kind(compute_type, dtype, Device::Cpu).is_err());
        }
        // agreeing dtypes pass the check (bfloat16 then answers as the CPU allows)
        for (dtype, compute_type) in [(Kind::Half, ComputeType::Float16), (Kind::Half, ComputeType::Exact), (Kind::Float, ComputeType::Int8)] {
            assert_eq!(resolve_compute_type(compute_type, dtype, Device::Cpu), Ok(compute_type));
        }
        assert!(!matches!(resolve_compute_type(ComputeType::BFloat16, Kind::BFloat16, Device::Cpu), Err(ComputeTypeError::DtypeDisagrees { .. })));
    }

    #[test]
    fn the_cache_kind_is_fixed_only_when_asked_and_anything_else_is_named_in_a_warning() {
        assert_eq!(fixed_kv_cache(Some("fixed")), (true, None));
        assert_eq!(fixed_kv_cache(Some(" fixed\n")), (true, None));
        for growing in [None, Some(""), Some("growing")] {
            assert_eq!(fixed_kv_cache(growing), (false, None));
        }
        let (fixed, warning) = fixed_kv_cache(Some("static"));
        assert!(!fixed);
        assert_eq!(warning.unwrap(), r#"TCHSEQ_KV_CACHE="static": not a cache kind (fixed or growing); the cache grows"#);
    }

    /// The replayed step is off unless asked for, and asked for it needs the fixed cache and a
    /// CUDA device; every refusal says why.
    #[test]
    fn cuda_graphs_need_the_fixed_cache_and_a_cuda_device() {
        for off in [None, Some(""), Some("0"), Some("off")] {
            assert_eq!(cuda_graphs(off, true, Device::Cuda(0)), (false, None), "{off:?}");
        }
        let (on, warning) = cuda_graphs(Some("maybe"), true, Device::Cuda(0));
        assert!(!on);
        assert_eq!(warning.unwrap(), r#"TCHSEQ_CUDA_GRAPH="maybe": neither 1 nor 0; the step runs eagerly"#);
        let (on, warning) = cuda_graphs(Some("1"), false, Device::Cuda(0));
        assert!(!on);
        assert_eq!(warning.unwrap(), "TCHSEQ_CUDA_GRAPH=1: needs TCHSEQ_KV_CACHE=fixed; the step runs eagerly");
        let (on, warning) = cuda_graphs(Some(" ON\n"), true, Device::Cpu);
        assert!(!on);
        assert_eq!(warning.unwrap(), "TCHSEQ_CUDA_GRAPH=1: no CUDA device (Cpu); the step runs eagerly");
    }
}
