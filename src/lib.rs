//! tchseq: load fairseq Transformer checkpoints and run them exactly as fairseq does, on libtorch,
//! without Python.
//!
//! Layout (one module per concern, named as fairseq names things):
//! - [`checkpoint`]: the safe pickle reader, torch zip/legacy containers, fairseq's upgrades;
//! - [`config`]: the typed `TransformerConfig` resolved from `args`/`cfg`;
//! - [`kernels`]: the host kernels beneath the model (packed GEMMs, norms, softmax, attention of
//!   one query, int8 quantization) and the compute types;
//! - [`model`]: `TransformerModel` piece by piece;
//! - [`generate`]: beam search, sampling and the sequence scorer;
//! - [`hub`]: the one place that assembles a model, its dictionaries and text pipelines;
//! - [`text`]: dictionaries, Moses, BPE, sentencepiece;
//! - [`plot`]: attention heatmaps and positional-embedding plots.

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod generate;
pub mod hub;
pub mod kernels;
pub mod libtorch;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod text;
#[cfg(test)]
mod testing;
// the one table of the tests' tolerances, shared with tests/it
#[cfg(test)]
#[path = "../tests/it/util/tolerance.rs"]
#[allow(dead_code)]
mod tolerance;
