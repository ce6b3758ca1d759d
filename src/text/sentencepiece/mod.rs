//! A pure-Rust reader and encoder for sentencepiece `.model` files, reproducing
//! sentencepiece 0.2.1's `SentencePieceProcessor.Encode(text, out_type=str)`:
//! the normalizer (precompiled charsmap through a Darts double-array trie, dummy prefix,
//! whitespace handling), unigram Viterbi (`EncodeOptimized`), BPE merges by score, user-defined
//! symbols and byte fallback. fairseq decodes pieces by string replacement, see [`decode`].

use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

mod normalizer;
mod proto;

use normalizer::*;
use proto::*;

#[derive(Debug, thiserror::Error)]
pub enum SentencePieceError {
    #[error("{} is a Git LFS pointer, not the sentencepiece model: run `git lfs pull`", path.display())]
    LfsPointer { path: PathBuf },
    #[error("cannot read sentencepiece model {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("invalid sentencepiece model: {0}")]
    Format(String),
    #[error("unsupported sentencepiece model type {0} (only unigram=1 and bpe=2)")]
    UnsupportedModelType(i64),
}

fn format_err(msg: impl Into<String>) -> SentencePieceError {
    SentencePieceError::Format(msg.into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelType {
    Unigram,
    Bpe,
}

#[derive(Debug, Clone)]
pub struct Piece {
    pub piece: String,
    pub score: f32,
    pub kind: PieceType,
}


#[derive(Debug, Clone)]
pub struct SentencePieceModel {
    pieces: Vec<Piece>,
    model_type: ModelType,
    byte_fallback: bool,
    unk_id: Option<usize>,
    normalizer: Normalizer,
    /// NORMAL, USER_DEFINED and UNUSED pieces (sentencepiece's `pieces_`).
    piece_ids: HashMap<String, usize>,
    /// CONTROL, UNKNOWN and BYTE pieces (`reserved_id_map_`).
    reserved_ids: HashMap<String, usize>,
    /// Unigram: pieces_ as a byte trie, for Viterbi.
    trie: ByteTrie,
    min_score: f32,
    max_score: f32,
}

/// A plain byte trie over the vocabulary (sentencepiece uses a Darts double array; only the
/// set of matches matters, and both report them shortest first).
#[derive(Debug, Clone, Default)]
struct ByteTrie {
    nodes: Vec<(HashMap<u8, usize>, Option<usize>)>,
}

impl ByteTrie {
    fn insert(&mut self, key: &[u8], id: usize) {
        if self.nodes.is_empty() {
            self.nodes.push((HashMap::new(), None));
        }
        let mut node = 0;
        for &b in key {
            node = match self.nodes[node].0.get(&b) {
                Some(&next) => next,
                None => {
                    self.nodes.push((HashMap::new(), None));
                    let next = self.nodes.len() - 1;
                    self.nodes[node].0.insert(b, next);
                    next
                }
            };
        }
        self.nodes[node].1 = Some(id);
    }
}

impl SentencePieceModel {
    pub fn load(path: &Path) -> Result<Self, SentencePieceError> {
        let bytes = std::fs::read(path).map_err(|source| SentencePieceError::Io { path: path.to_path_buf(), source })?;
        if crate::checkpoint::hf_dir::is_lfs_pointer(&bytes) {
            return Err(SentencePieceError::LfsPointer { path: path.to_path_buf() });
        }
        Self::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SentencePieceError> {
        let mut pieces = Vec::new();
        let mut model_type = 1i64;
        let mut byte_fallback = false;
        let mut treat_whitespace_as_suffix = false;
        let mut normalizer_spec: &[u8] = &[];
        let mut r = Reader::new(bytes);
        while let Some((field, value)) = r.next()? {
            match (field, value) {
                (1, Value::Bytes(b)) => pieces.push(parse_piece(b)?),
                (2, Value::Bytes(b)) => {
                    let mut t = Reader::new(b);
                    while let Some((f, v)) = t.next()? {
                        match (f, v) {
                            (3, Value::Varint(v)) => model_type = v as i64,
                            (24, Value::Varint(v)) => treat_whitespace_as_suffix = v != 0,
                            (35, Value::Varint(v)) => byte_fallback = v != 0,
                            _ => {}
                        }
                    }
                }
                (3, Value::Bytes(b)) => normalizer_spec = b,
                _ => {}
            }
        }
        let model_type = match model_type {
            1 => ModelType::Unigram,
            2 => ModelType::Bpe,
            other => return Err(SentencePieceError::UnsupportedModelType(other)),
        };
        if pieces.is_empty() {
            return Err(format_err("the model has no pieces"));
        }
        let mut piece_ids = HashMap::new();
        let mut reserved_ids = HashMap::new();
        let mut unk_id = None;
        let mut user_defined = Vec::new();
        // sentencepiece starts max_score_ at FLT_MIN (the smallest positive float), not -FLT_MAX.
        let (mut min_score, mut max_score) = (f32::MAX, f32::MIN_POSITIVE);
        for (i, p) in pieces.iter().enumerate() {
            if p.piece.is_empty() {
                return Err(format_err(format!("piece {i} is empty")));
            }
            let normal = matches!(p.kind, PieceType::Normal | PieceType::UserDefined | PieceType::Unused);
            let map = if normal { &mut piece_ids } else { &mut reserved_ids };
            if map.insert(p.piece.clone(), i).is_some() {
                return Err(format_err(format!("piece {:?} is defined twice", p.piece)));
            }
            match p.kind {
                PieceType::UserDefined => user_defined.push(p.piece.clone()),
                PieceType::Unknown if unk_id.replace(i).is_some() => {
                    return Err(format_err("more than one <unk> piece"));
                }
                PieceType::Normal => {
                    min_score = min_score.min(p.score);
                    max_score = max_score.max(p.score);
                }
                _ => {}
            }
        }
        let mut trie = ByteTrie::default();
        for (piece, &id) in &piece_ids {
            trie.insert(piece.as_bytes(), id);
        }
        Ok(SentencePieceModel {
            normalizer: Normalizer::from_spec(normalizer_spec, treat_whitespace_as_suffix, user_defined)?,
            pieces,
            model_type,
            byte_fallback,
            unk_id,
            piece_ids,
            reserved_ids,
            trie,
            min_score,
            max_score,
        })
    }

    pub fn model_type(&self) -> ModelType {
        self.model_type
    }

    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// sentencepiece's `PieceToId` (unknown pieces map to `<unk>`).
    pub fn piece_to_id(&self, piece: &str) -> Option<usize> {
        self.reserved_ids.get(piece).or_else(|| self.piece_ids.get(piece)).copied().or(self.unk_id)
    }

    /// The normalized text the model segments (`▁` for spaces, dummy prefix applied).
    pub fn normalize(&self, text: &str) -> String {
        self.normalizer.normalize(text)
    }

    /// `Encode(text, out_type=str)` with ids: the pieces and their vocabulary ids.
    pub fn encode(&self, text: &str) -> Vec<(String, usize)> {
        let normalized = self.normalize(text);
        let segments = match self.model_type {
            ModelType::Unigram => self.encode_unigram(&normalized),
            ModelType::Bpe => self.encode_bpe(&normalized),
        };
        let mut out: Vec<(String, usize)> = Vec::with_capacity(segments.len());
        let mut prev_is_unk = false;
        for (piece, id) in segments {
            let is_unk = id.is_none() || id == self.unk_id;
            let unk_id = self.unk_id.unwrap_or(0);
            if is_unk && self.byte_fallback {
                for b in piece.bytes() {
                    let byte_piece = format!("<0x{b:02X}>");
                    let id = self.piece_to_id(&byte_piece).unwrap_or(unk_id);
                    out.push((byte_piece, id));
                }
            } else if is_unk && prev_is_unk && !out.is_empty() {
                // sentencepiece merges a run of unknown pieces into one.
                if let Some(last) = out.last_mut() {
                    last.0.push_str(piece);
                }
            } else {
                out.push((piece.to_string(), id.unwrap_or(unk_id)));
            }
            prev_is_unk = is_unk;
        }
        out
    }

    /// fairseq's `SentencepieceBPE.encode`: the pieces joined with single spaces.
    pub fn encode_as_string(&self, text: &str) -> String {
        let pieces: Vec<String> = self.encode(text).into_iter().map(|(p, _)| p).collect();
        pieces.join(" ")
    }

    fn is_unused(&self, id: usize) -> bool {
        self.pieces.get(id).is_some_and(|p| p.kind == PieceType::Unused)
    }

    /// `unigram::Model::EncodeOptimized`.
    fn encode_unigram<'a>(&self, normalized: &'a str) -> Vec<(&'a str, Option<usize>)> {
        #[derive(Clone, Copy)]
        struct Best {
            id: Option<usize>,
            score: f32,
            starts_at: Option<usize>,
        }
        let bytes = normalized.as_bytes();
        let size = bytes.len();
        if size == 0 || self.trie.nodes.is_empty() {
            return Vec::new();
        }
        // kUnkPenalty = 10.0
        let unk_score = self.min_score - 10.0;
        let mut best = vec![Best { id: None, score: 0.0, starts_at: None }; size + 1];
        let mut starts_at = 0;
        while starts_at < size {
            let till_here = best[starts_at].score;
            let mblen = normalized[starts_at..].chars().next().map_or(1, char::len_utf8);
            let mut has_single_node = false;
            let mut node = 0;
            for (key_pos, byte) in bytes.iter().enumerate().skip(starts_at) {
                let Some(&next) = self.trie.nodes[node].0.get(byte) else { break };
                node = next;
                let Some(id) = self.trie.nodes[node].1 else { continue };
                if self.is_unused(id) {
                    continue;
                }
                let end = key_pos + 1;
                let length = end - starts_at;
                let piece = &self.pieces[id];
                let candidate = if piece.kind == PieceType::UserDefined {
                    (length as f64 * f64::from(self.max_score) - 0.1 + f64::from(till_here)) as f32
                } else {
                    piece.score + till_here
                };
                let target = &mut best[end];
                if target.starts_at.is_none() || candidate > target.score {
                    *target = Best { id: Some(id), score: candidate, starts_at: Some(starts_at) };
                }
                if !has_single_node && length == mblen {
                    has_single_node = true;
                }
            }
            if !has_single_node {
                let candidate = unk_score + till_here;
                let target = &mut best[starts_at + mblen];
                if target.starts_at.is_none() || candidate > target.score {
                    *target = Best { id: self.unk_id, score: candidate, starts_at: Some(starts_at) };
                }
            }
            starts_at += mblen;
        }
        let mut out = Vec::new();
        let mut ends_at = size;
        while ends_at > 0 {
            let node = best[ends_at];
            let start = node.starts_at.unwrap_or(0);
            out.push((&normalized[start..ends_at], node.id));
            ends_at = start;
        }
        out.reverse();
        out
    }

    /// `bpe::Model::Encode` (no dropout).
    fn encode_bpe<'a>(&self, normalized: &'a str) -> Vec<(&'a str, Option<usize>)> {
        struct Symbol {
            prev: Option<usize>,
            next: Option<usize>,
            freeze: bool,
            start: usize,
            len: usize,
        }
        #[derive(PartialEq)]
        struct Pair {
            score: f32,
            left: usize,
            right: usize,
            size: usize,
        }
        impl Eq for Pair {}
        impl Ord for Pair {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                // Highest score first; on ties the leftmost pair.
                self.score
                    .partial_cmp(&other.score)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then_with(|| other.left.cmp(&self.left))
            }
        }
        impl PartialOrd for Pair {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        let mut symbols: Vec<Symbol> = Vec::new();
        let mut rest = normalized;
        let mut start = 0;
        while !rest.is_empty() {
            let (len, freeze) = match self.normalizer.user_defined_prefix(rest) {
                Some(len) => (len, true),
                None => (rest.chars().next().map_or(1, char::len_utf8), false),
            };
            let index = symbols.len();
            rest = &rest[len..];
            symbols.push(Symbol {
                prev: index.checked_sub(1),
                next: (!rest.is_empty()).then_some(index + 1),
                freeze,
                start,
                len,
            });
            start += len;
        }
        if symbols.is_empty() {
            return Vec::new();
        }
        let mut agenda = BinaryHeap::new();
        let mut rev_merge: HashMap<&'a str, (&'a str, &'a str)> = HashMap::new();
        let maybe_add = |symbols: &[Symbol], agenda: &mut BinaryHeap<Pair>, rev_merge: &mut HashMap<&'a str, (&'a str, &'a str)>, left: Option<usize>, right: Option<usize>| {
            let (Some(l), Some(r)) = (left, right) else { return };
            if symbols[l].freeze || symbols[r].freeze {
                return;
            }
            let size = symbols[l].len + symbols[r].len;
            let piece = &normalized[symbols[l].start..symbols[l].start + size];
            let Some(&id) = self.piece_ids.get(piece) else { return };
            agenda.push(Pair { score: self.pieces[id].score, left: l, right: r, size });
            if self.is_unused(id) {
                let lp = &normalized[symbols[l].start..symbols[l].start + symbols[l].len];
                let rp = &normalized[symbols[r].start..symbols[r].start + symbols[r].len];
                rev_merge.insert(piece, (lp, rp));
            }
        };
        for i in 1..symbols.len() {
            maybe_add(&symbols, &mut agenda, &mut rev_merge, Some(i - 1), Some(i));
        }
        while let Some(top) = agenda.pop() {
            let (l, r) = (top.left, top.right);
            if symbols[l].len == 0 || symbols[r].len == 0 || symbols[l].len + symbols[r].len != top.size {
                continue;
            }
            symbols[l].len += symbols[r].len;
            symbols[l].next = symbols[r].next;
            if let Some(n) = symbols[r].next {
                symbols[n].prev = Some(l);
            }
            symbols[r].len = 0;
            let prev = symbols[l].prev;
            let next = symbols[l].next;
            maybe_add(&symbols, &mut agenda, &mut rev_merge, prev, Some(l));
            maybe_add(&symbols, &mut agenda, &mut rev_merge, Some(l), next);
        }
        let mut out = Vec::new();
        let mut index = Some(0);
        while let Some(i) = index {
            let piece = &normalized[symbols[i].start..symbols[i].start + symbols[i].len];
            self.resegment(piece, &rev_merge, &mut out);
            index = symbols[i].next;
        }
        out
    }

    fn resegment<'a>(&self, piece: &'a str, rev_merge: &HashMap<&'a str, (&'a str, &'a str)>, out: &mut Vec<(&'a str, Option<usize>)>) {
        let id = self.piece_to_id(piece);
        match (id, id.and_then(|i| rev_merge.get(piece).filter(|_| self.is_unused(i)))) {
            (_, Some(&(left, right))) => {
                self.resegment(left, rev_merge, out);
                self.resegment(right, rev_merge, out);
            }
            (id, None) => out.push((piece, id)),
        }
    }
}

/// fairseq's `SentencepieceBPE.decode` and `post_process(x, "sentencepiece")`:
/// `x.replace(" ", "").replace("\u2581", " ").strip()`.
pub fn decode(x: &str) -> String {
    crate::text::pyutil::py_strip(&x.replace(' ', "").replace(SPACE_SYMBOL, " ")).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage() {
        assert!(SentencePieceModel::from_bytes(b"\xff\xff\xff").is_err());
        assert!(SentencePieceModel::from_bytes(b"").is_err());
        assert_eq!(decode("\u{2581}He llo \u{2581}world"), "Hello world");
    }
}
