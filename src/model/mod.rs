//! fairseq's `TransformerModel`, module by module (fairseq 0.12.2 on torch 2.13).
//!
//! One struct per fairseq module, each built from a [`weights::Weights`] accessor whose prefix
//! is the module's state-dict name, so the constructor tree is the state-dict key tree.
//!
//! Autograd: weights `require_grad` like fairseq's parameters (libtorch picks some kernels by
//! it, see [`weights::Weights::get`]), so nothing may run in grad mode: the entry points
//! ([`TransformerModel::from_state_dict`], [`TransformerEncoder::forward`],
//! [`TransformerDecoder::forward`]) take a `tch::no_grad_guard` themselves (grad mode is
//! thread-local, so this holds on whatever thread calls them). Callers of the individual
//! modules' `forward` must hold one.

mod attention;
mod decoder;
mod embedding;
mod encoder;
mod fixed_cache;
mod fused;
mod host_step;
mod incremental;
mod kv_room;
mod language_model;
mod layer;
mod nn;
mod options;
mod graph_state;
mod step_graphs;
mod transformer;
pub mod weights;

pub use attention::MultiheadAttention;
pub use decoder::{DecoderOut, TransformerDecoder};
pub use embedding::{
    make_positions, Embedding, EmbeddingFrontEnd, LearnedPositionalEmbedding, PositionalEmbedding,
    SinusoidalPositionalEmbedding,
};
pub use encoder::{EncoderOut, EncoderPath, TransformerEncoder};
pub use incremental::{AttentionState, IncrementalState, LayerState};
pub use crate::kernels::log_softmax_in_place;
pub use language_model::TransformerLanguageModel;
pub use layer::{TransformerDecoderLayer, TransformerEncoderLayer};
pub use nn::{python_float, ActivationFn, LayerNorm, Linear};
pub use step_graphs::{cuda_graph_factory, cuda_graph_requested, GraphFactory, GraphKey, GraphStats, StepGraph, StepGraphs, CUDA_GRAPH_ENV, WARMUP_STEPS};
pub use transformer::TransformerModel;
pub use weights::LoadReport;

use tch::{Kind, Tensor};

/// fairseq's `Dictionary.pad()`; every fairseq dictionary puts `<pad>` at index 1.
pub const PADDING_IDX: i64 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("state dict has no `{0}`")]
    MissingKey(String),
    #[error("`{key}` has shape {actual:?}, the config needs {expected:?}")]
    Shape { key: String, expected: Vec<i64>, actual: Vec<i64> },
    #[error("unsupported model: model dtype {0:?}")]
    Dtype(Kind),
    #[error("unsupported model: {name} = {value}")]
    Setting { name: String, value: i64 },
    #[error("unsupported model: {0} positions is too many")]
    TooManyPositions(usize),
    #[error("unsupported model: {0}")]
    Sinusoid(#[source] crate::config::sinusoid::SinusoidError),
    #[error("unsupported model: activation function {0:?}")]
    Activation(String),
    #[error("unsupported model: {module}: embed_dim {embed_dim} is not divisible by {heads} heads")]
    Heads { module: String, embed_dim: i64, heads: i64 },
    #[error("unsupported model: linear without bias")]
    LinearWithoutBias,
    #[error("unsupported model: `{0}` is not a transformer_lm architecture")]
    NotALanguageModel(String),
    #[error(transparent)]
    Kernel(#[from] crate::kernels::KernelError),
    #[error("compute type {compute_type} runs on the CPU only, not on {device:?}")]
    CpuOnly { compute_type: crate::config::ComputeType, device: tch::Device },
    #[error("bad model input: {0}")]
    Input(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// The dtypes a model's weights may have.
pub(crate) fn check_model_kind(kind: Kind) -> Result<(), ModelError> {
    match kind {
        Kind::Float | Kind::Half | Kind::BFloat16 | Kind::Double => Ok(()),
        other => Err(ModelError::Dtype(other)),
    }
}

/// fairseq's `get_normalized_probs`: `utils.log_softmax` / `utils.softmax` over the vocabulary
/// with `dtype=torch.float32`, so the result is always f32.
pub fn get_normalized_probs(logits: &Tensor, log_probs: bool) -> Tensor {
    if log_probs {
        logits.log_softmax(-1, Kind::Float)
    } else {
        logits.softmax(-1, Kind::Float)
    }
}
