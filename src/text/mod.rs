//! Text pipeline: dictionaries, Moses, BPE, sentencepiece.

pub mod bpe;
pub mod dictionary;
pub mod moses;
pub mod pipeline;
pub mod pyutil;
pub mod replace_unk;
pub mod sentencepiece;
