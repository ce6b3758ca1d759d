//! Text pipeline: dictionaries, Moses, BPE, sentencepiece, `tokenizer.json`'s BPE.

pub mod bpe;
pub mod dictionary;
pub mod hf_bpe;
pub mod moses;
pub mod pipeline;
pub mod pyutil;
pub mod replace_unk;
pub mod sentencepiece;
