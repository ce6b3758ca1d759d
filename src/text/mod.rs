//! Text pipeline: dictionaries, Moses, BPE, sentencepiece.
pub mod dictionary;
