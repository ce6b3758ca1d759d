//! Text pipeline: dictionaries, Moses, BPE, sentencepiece.
