//! The libtorch-free layers of tchseq's readers (checkpoints, text files, `score`'s tables),
//! compiled from the main crate's sources so the fuzz targets exercise exactly that code.
#![allow(dead_code)]

#[path = "../../src/checkpoint/pickle/mod.rs"]
pub mod pickle;
#[path = "../../src/checkpoint/pyjson.rs"]
pub mod pyjson;
#[path = "../../src/checkpoint/container/mod.rs"]
pub mod container;

#[path = "../../src/text/dictionary.rs"]
pub mod dictionary;
#[path = "../../src/text/bpe.rs"]
pub mod bpe;
#[path = "../../src/text/sentencepiece/mod.rs"]
pub mod sentencepiece;
#[path = "../../src/text/pyutil.rs"]
pub mod pyutil;

#[path = "../../src/cli/score/columns.rs"]
pub mod columns;
pub mod csv_rows;

/// Mirrors the main crate's paths (`crate::checkpoint::pickle`) used inside the readers.
pub mod checkpoint {
    pub use crate::{container, pickle, pyjson};
}

/// Mirrors `crate::text::pyutil`.
pub mod text {
    pub use crate::pyutil;
}

/// A sentence every text target encodes with what it read.
pub const SENTENCE: &str = "A man in an orange hat, staring at something — \u{e9}t\u{e9} 2024!";

/// A fairseq dictionary from bytes, then a sentence through it and back.
pub fn dictionary(data: &[u8]) {
    if let Ok(d) = dictionary::Dictionary::from_bytes(data) {
        let ids = d.encode_line(SENTENCE, true);
        let _ = d.string(&ids, Some("@@ "), false, &[]);
    }
}

/// BPE codes from bytes, read both as subword-nmt and as fastBPE, then a sentence encoded.
pub fn bpe_codes(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for codes in [bpe::Bpe::subword_nmt_from_str(&text), bpe::Bpe::fastbpe_from_str(&text)].into_iter().flatten() {
        let _ = codes.encode(SENTENCE);
    }
}

/// A sentencepiece model from bytes, then a sentence encoded.
pub fn sentencepiece_model(data: &[u8]) {
    if let Ok(m) = sentencepiece::SentencePieceModel::from_bytes(data) {
        let _ = m.encode_as_string(SENTENCE);
    }
}

/// Everything a checkpoint reader does with bytes before libtorch: container, pickle, the
/// storage byte ranges of every tensor (CRC checks included) and the config tree.
pub fn read_all(data: &[u8]) {
    use pickle::Node;
    let Ok(raw) = container::read(data) else { return };
    let p = &raw.pickle;
    let _ = pyjson::to_json(p, &p.root);
    for n in &p.nodes {
        if let Node::Storage(s) = n {
            let _ = raw.storage_bytes(data, s);
        }
    }
}
