//! A pure-Rust reader and encoder for sentencepiece `.model` files, reproducing
//! sentencepiece 0.2.1's `SentencePieceProcessor.Encode(text, out_type=str)`:
//! the normalizer (precompiled charsmap through a Darts double-array trie, dummy prefix,
//! whitespace handling), unigram Viterbi (`EncodeOptimized`), BPE merges by score, user-defined
//! symbols and byte fallback. fairseq decodes pieces by string replacement, see [`decode`].

use std::collections::{BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SentencePieceError {
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

// --- protobuf wire format, just what ModelProto needs --------------------------------------

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Value<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64,
    Bytes(&'a [u8]),
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, SentencePieceError> {
        let mut result = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or_else(|| format_err("truncated varint"))?;
            self.pos += 1;
            result |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(result);
            }
        }
        Err(format_err("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], SentencePieceError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| format_err("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn next(&mut self) -> Result<Option<(u64, Value<'a>)>, SentencePieceError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| format_err("length overflow"))?;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            t => return Err(format_err(format!("unsupported wire type {t}"))),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn as_str(b: &[u8], what: &str) -> Result<String, SentencePieceError> {
    String::from_utf8(b.to_vec()).map_err(|_| format_err(format!("{what} is not UTF-8")))
}

// --- Darts-clone double array (the precompiled charsmap's trie) ---------------------------

#[derive(Debug, Clone, Default)]
struct DoubleArray {
    units: Vec<u32>,
}

impl DoubleArray {
    fn unit(&self, pos: usize) -> Option<u32> {
        self.units.get(pos).copied()
    }

    /// `commonPrefixSearch`: (value, length) of every key that is a prefix of `key`.
    fn common_prefix_search(&self, key: &[u8], out: &mut Vec<(u32, usize)>) {
        out.clear();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let Some(root) = self.unit(0) else { return };
        let mut node = offset(root);
        for (i, &c) in key.iter().enumerate() {
            node ^= c as usize;
            let Some(unit) = self.unit(node) else { return };
            if unit & ((1 << 31) | 0xff) != u32::from(c) {
                return;
            }
            node ^= offset(unit);
            if (unit >> 8) & 1 == 1 {
                if let Some(leaf) = self.unit(node) {
                    out.push((leaf & ((1 << 31) - 1), i + 1));
                }
            }
        }
    }
}

// --- normalizer ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Normalizer {
    trie: Option<DoubleArray>,
    normalized: Vec<u8>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
    treat_whitespace_as_suffix: bool,
    /// user-defined symbols, matched longest-first before the charsmap
    user_defined: Vec<String>,
}

const SPACE_SYMBOL: &str = "\u{2581}";

impl Normalizer {
    fn from_spec(spec: &[u8], treat_whitespace_as_suffix: bool, user_defined: Vec<String>) -> Result<Self, SentencePieceError> {
        let mut n = Normalizer {
            trie: None,
            normalized: Vec::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
            treat_whitespace_as_suffix,
            user_defined,
        };
        let mut r = Reader::new(spec);
        while let Some((field, value)) = r.next()? {
            match (field, value) {
                (2, Value::Bytes(blob)) if !blob.is_empty() => {
                    let (trie, normalized) = decode_charsmap(blob)?;
                    n.trie = Some(trie);
                    n.normalized = normalized;
                }
                (3, Value::Varint(v)) => n.add_dummy_prefix = v != 0,
                (4, Value::Varint(v)) => n.remove_extra_whitespaces = v != 0,
                (5, Value::Varint(v)) => n.escape_whitespaces = v != 0,
                _ => {}
            }
        }
        Ok(n)
    }

    /// `NormalizePrefix`: the normalized form of the longest rule matching the start of `input`
    /// and how many bytes of `input` it consumes.
    fn normalize_prefix<'a>(&'a self, input: &'a str, scratch: &mut Vec<(u32, usize)>) -> (&'a str, usize) {
        if let Some(len) = self.user_defined_prefix(input) {
            return (&input[..len], len);
        }
        let mut longest: Option<(u32, usize)> = None;
        if let Some(trie) = &self.trie {
            trie.common_prefix_search(input.as_bytes(), scratch);
            for &(value, length) in scratch.iter() {
                if longest.is_none_or(|(_, l)| length > l) {
                    longest = Some((value, length));
                }
            }
        }
        match longest {
            // A rule may end inside a UTF-8 sequence only if the charsmap is corrupt; then fall
            // back to one character.
            Some((value, length)) if input.is_char_boundary(length) => {
                let start = value as usize;
                let tail = self.normalized.get(start..).unwrap_or(&[]);
                let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
                match std::str::from_utf8(&tail[..end]) {
                    Ok(s) => (s, length),
                    Err(_) => one_char(input),
                }
            }
            _ => one_char(input),
        }
    }

    fn user_defined_prefix(&self, input: &str) -> Option<usize> {
        self.user_defined.iter().filter(|s| input.starts_with(s.as_str())).map(|s| s.len()).max()
    }

    /// `Normalizer::Normalize` (without the offset mapping).
    fn normalize(&self, mut input: &str) -> String {
        let mut out = String::with_capacity(input.len() * 3 / 2 + 4);
        if input.is_empty() {
            return out;
        }
        let mut scratch = Vec::new();
        if self.remove_extra_whitespaces {
            while !input.is_empty() {
                let (s, len) = self.normalize_prefix(input, &mut scratch);
                if s != " " {
                    break;
                }
                input = &input[len..];
            }
        }
        if input.is_empty() {
            return out;
        }
        let space = if self.escape_whitespaces { SPACE_SYMBOL } else { " " };
        if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.push_str(space);
        }
        let mut is_prev_space = self.remove_extra_whitespaces;
        while !input.is_empty() {
            let (s, len) = self.normalize_prefix(input, &mut scratch);
            let sp = if is_prev_space { s.trim_start_matches(' ') } else { s };
            if !sp.is_empty() {
                for c in sp.chars() {
                    if self.escape_whitespaces && c == ' ' {
                        out.push_str(SPACE_SYMBOL);
                    } else {
                        out.push(c);
                    }
                }
                is_prev_space = sp.ends_with(' ');
            }
            input = &input[len..];
            if !self.remove_extra_whitespaces {
                is_prev_space = false;
            }
        }
        if self.remove_extra_whitespaces {
            while let Some(rest) = out.strip_suffix(space) {
                let keep = rest.len();
                out.truncate(keep);
            }
        }
        if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.push_str(space);
        }
        out
    }
}

fn one_char(input: &str) -> (&str, usize) {
    let len = input.chars().next().map_or(0, char::len_utf8);
    (&input[..len], len)
}

/// `DecodePrecompiledCharsMap`: u32 trie size, the trie's units, then NUL-separated outputs.
fn decode_charsmap(blob: &[u8]) -> Result<(DoubleArray, Vec<u8>), SentencePieceError> {
    let size_bytes = blob.get(..4).ok_or_else(|| format_err("precompiled charsmap too short"))?;
    let trie_size = u32::from_le_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]) as usize;
    let trie_bytes = blob
        .get(4..4usize.saturating_add(trie_size))
        .filter(|b| b.len() % 4 == 0)
        .ok_or_else(|| format_err("precompiled charsmap trie is truncated"))?;
    let units = trie_bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((DoubleArray { units }, blob[4 + trie_size..].to_vec()))
}

// --- the model ----------------------------------------------------------------------------

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

fn parse_piece(b: &[u8]) -> Result<Piece, SentencePieceError> {
    let mut piece = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut r = Reader::new(b);
    while let Some((field, value)) = r.next()? {
        match (field, value) {
            (1, Value::Bytes(s)) => piece.piece = as_str(s, "a piece")?,
            (2, Value::Fixed32(bits)) => piece.score = f32::from_bits(bits),
            (3, Value::Varint(t)) => {
                piece.kind = match t {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    other => return Err(format_err(format!("unknown piece type {other}"))),
                }
            }
            _ => {}
        }
    }
    Ok(piece)
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
