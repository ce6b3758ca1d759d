//! fairseq's binarized datasets (`fairseq-preprocess`'s `data-bin/`), read as the translation
//! task reads them: `mmap`, `lazy`/`cached` and `raw` files, shards concatenated, the language
//! pair and the format inferred when not given. Every file is untrusted: a bad one is a
//! [`DataError`] naming it.
//!
//! Files, each using only those after it: `language_pair.rs` (`DataBin`, `PairDataset`) →
//! `dataset.rs` (one file, `--dataset-impl`) → `error.rs` → `indexed_dataset.rs` (the `.idx`
//! parsers, on bytes alone).

pub mod dataset;
pub mod error;
pub mod indexed_dataset;
pub mod language_pair;

pub use dataset::{DatasetImpl, IndexedDataset};
pub use error::DataError;
pub use indexed_dataset::{Dtype, Index, IndexError, IndexFormat};
pub use language_pair::{infer_language_pair, DataBin, LoadOptions, PairDataset, Shard};

#[cfg(test)]
mod tests;
