//! The CPU kernels beneath the model: what fairseq leaves to libtorch, done on the host for the
//! fast compute types (CTranslate2's `ops/`, apart from its `layers/`). `model/` holds fairseq's
//! modules and calls down into these; nothing here knows a module.
//!
//! - which instructions run here: `isa.rs`, and the compute types: `compute_type.rs`;
//! - linear layers from packed weights: `gemm.rs` (float32 and bfloat16 panels, packed by
//!   `pack.rs`, computed by `gemm_f32.rs` and `gemm_bf16.rs`, handed `panel.rs`'s jobs),
//!   `gemm_nt.rs` (a tied output projection from the embedding table as it is), `gemm_i8.rs`
//!   (int8, with `quantize_i8.rs`'s rows) and `int8.rs` (libtorch's fbgemm int8 linear);
//! - `norm.rs` (layer norm), `softmax.rs` (log-softmax and `exp`; `exp_avx2.rs` in vectors),
//!   `one_query.rs` (attention of one query position over `kv_cache.rs`'s host key/value cache);
//! - `step_buffers.rs`: the host decoder step's activations, kept from step to step.

pub mod compute_type;
pub(crate) mod gemm;
#[cfg(target_arch = "x86_64")]
mod exp_avx2;
mod gemm_bf16;
mod gemm_f32;
pub(crate) mod gemm_i8;
pub(crate) mod gemm_nt;
pub(crate) mod int8;
pub mod isa;
pub(crate) mod kv_cache;
pub(crate) mod norm;
pub(crate) mod one_query;
mod pack;
mod panel;
mod quantize_i8;
pub(crate) mod softmax;
pub(crate) mod step_buffers;

pub use gemm_i8::seven_bit_rows_here;
pub use softmax::log_softmax_in_place;

/// What a kernel refuses, in the terms of the model error it becomes.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// This CPU has no such kernel.
    #[error("no {kernel} kernel for this CPU (it needs {needs})")]
    NoKernel { kernel: &'static str, needs: &'static str },
    /// A libtorch op behind `csrc/` failed, with libtorch's first line.
    #[error("{op}: {message}")]
    Shim { op: String, message: String },
    /// An operand a kernel was handed has the wrong shape, device or size.
    #[error("{kernel}: {operand}")]
    Operand { kernel: &'static str, operand: String },
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}
