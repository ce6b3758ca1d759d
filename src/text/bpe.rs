//! One merge engine for subword-nmt (`apply_bpe.BPE`, codes `a b` with an optional
//! `#version:` header) and fastBPE (`fastBPE.apply`, codes `a b count`), with fairseq's
//! `@@ ` continuation marker and its removal.
//!
//! Merge loop shared by both: among the adjacent symbol pairs that have a code, take the one with
//! the lowest rank (first position on ties), merge all of its non-overlapping occurrences left
//! to right, repeat. Symbols are Unicode scalar values (Python `str` / UTF-8 lead bytes).
//! Glossaries, vocabulary filtering and BPE-dropout are not supported: fairseq passes none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum BpeError {
    #[error("cannot read BPE codes {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("invalid line {line} in BPE codes file: {text:?} (expected {expected})")]
    InvalidLine { line: usize, text: String, expected: &'static str },
    #[error("unsupported subword-nmt codes version {0:?} (only 0.1 and 0.2 exist)")]
    UnsupportedVersion(String),
    #[error("fastBPE codes line {line} repeats the pair or merged symbol {text:?} (fastBPE aborts on this)")]
    Duplicate { line: usize, text: String },
}

const END_OF_WORD: &str = "</w>";

/// Which tool's semantics to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpeFlavor {
    /// subword-nmt 0.3.8 `BPE.process_line`; `#version: 0.2` codes (default 0.1 without header).
    SubwordNmt { version_0_1: bool },
    /// fastBPE 0.1.0 `fastBPE.apply`.
    FastBpe,
}

#[derive(Debug)]
pub struct Bpe {
    flavor: BpeFlavor,
    /// Every symbol named in the codes (left, right and merged), interned.
    symbols: HashMap<String, u32>,
    /// (left, right) -> (rank, merged symbol)
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Merged symbols seen so far (fastBPE refuses a codes file that repeats one).
    merged: std::collections::HashSet<u32>,
    separator: String,
    /// word -> pieces, as subword-nmt's own cache (bounded: cleared when it grows past
    /// `CACHE_LIMIT` words).
    cache: std::sync::Mutex<HashMap<String, Vec<String>>>,
}

const CACHE_LIMIT: usize = 1 << 20;

#[derive(Debug, Clone)]
struct Symbol {
    id: Option<u32>,
    text: String,
}

impl Bpe {
    pub fn load(path: &Path, fastbpe: bool) -> Result<Self, BpeError> {
        let mut text = std::fs::read_to_string(path).map_err(|source| BpeError::Io { path: path.to_path_buf(), source })?;
        // Hugging Face's FSMT directories hold subword-nmt's codes as `merges.txt`, without the
        // `#version: 0.2` header; FSMTTokenizer merges as version 0.2 does
        if path.file_name().is_some_and(|n| n == "merges.txt") && !text.starts_with("#version:") {
            text.insert_str(0, "#version: 0.2\n");
        }
        if fastbpe {
            Self::fastbpe_from_str(&text)
        } else {
            Self::subword_nmt_from_str(&text)
        }
    }

    /// `apply_bpe.BPE(codes, separator="@@")` reading the file in Python text mode.
    pub fn subword_nmt_from_str(codes: &str) -> Result<Self, BpeError> {
        // Universal newlines, as Python's text-mode file objects do.
        let codes = codes.replace("\r\n", "\n").replace('\r', "\n");
        let (first, rest) = codes.split_once('\n').unwrap_or((&codes, ""));
        let (version_0_1, body, offset) = if first.starts_with("#version:") {
            let raw = crate::text::pyutil::py_split(first).last().unwrap_or("");
            let mut v = raw;
            while let Some(stripped) = strip_zero_component(v) {
                v = stripped;
            }
            match v {
                "0.1" => (true, rest, 2),
                "0.2" => (false, rest, 2),
                _ => return Err(BpeError::UnsupportedVersion(raw.to_string())),
            }
        } else {
            (true, codes.as_str(), 1)
        };
        let mut bpe = Bpe::empty(BpeFlavor::SubwordNmt { version_0_1 });
        for (n, item) in body.trim_end_matches('\n').split('\n').enumerate() {
            let fields: Vec<&str> = item.trim_matches(['\r', '\n', ' ']).split(' ').collect();
            let [a, b] = fields[..] else {
                return Err(BpeError::InvalidLine { line: n + offset, text: fields.join(" "), expected: "exactly two subword units separated by a space" });
            };
            bpe.add(a, b, false, n + offset)?;
        }
        Ok(bpe)
    }

    /// `fastBPE.fastBPE(codes)`: lines of `a b count` (fields split on single spaces).
    pub fn fastbpe_from_str(codes: &str) -> Result<Self, BpeError> {
        let mut bpe = Bpe::empty(BpeFlavor::FastBpe);
        // C++ getline: split on '\n' only; a final newline does not start another line.
        let body = codes.strip_suffix('\n').unwrap_or(codes);
        if body.is_empty() && codes.is_empty() {
            return Ok(bpe);
        }
        for (n, line) in body.split('\n').enumerate() {
            let fields: Vec<&str> = line.split(' ').filter(|f| !f.is_empty()).collect();
            let [a, b, _count] = fields[..] else {
                return Err(BpeError::InvalidLine { line: n + 1, text: line.to_string(), expected: "`a b count`" });
            };
            bpe.add(a, b, true, n + 1)?;
        }
        Ok(bpe)
    }

    fn empty(flavor: BpeFlavor) -> Self {
        Bpe { flavor, symbols: HashMap::new(), merges: HashMap::new(), merged: Default::default(), separator: "@@".to_string(), cache: Default::default() }
    }

    fn intern(&mut self, s: &str) -> u32 {
        let next = self.symbols.len() as u32;
        *self.symbols.entry(s.to_string()).or_insert(next)
    }

    fn add(&mut self, a: &str, b: &str, strict: bool, line: usize) -> Result<(), BpeError> {
        let merged = format!("{a}{b}");
        let (ia, ib, im) = (self.intern(a), self.intern(b), self.intern(&merged));
        if strict && !self.merged.insert(im) {
            return Err(BpeError::Duplicate { line, text: merged });
        }
        let rank = self.merges.len() as u32;
        if self.merges.contains_key(&(ia, ib)) {
            if strict {
                return Err(BpeError::Duplicate { line, text: format!("{a} {b}") });
            }
            // subword-nmt: a pair's rank is its first occurrence.
            return Ok(());
        }
        self.merges.insert((ia, ib), (rank, im));
        Ok(())
    }

    pub fn flavor(&self) -> BpeFlavor {
        self.flavor
    }

    pub fn num_merges(&self) -> usize {
        self.merges.len()
    }

    /// fairseq's `bpe.encode(x)`: subword-nmt `process_line` or fastBPE `apply([x])[0]`.
    pub fn encode(&self, line: &str) -> String {
        match self.flavor {
            BpeFlavor::FastBpe => {
                let words: Vec<String> = line
                    .split(' ')
                    .filter(|w| !w.is_empty())
                    .map(|w| self.segment_word(w).join(&format!("{} ", self.separator)))
                    .collect();
                words.join(" ")
            }
            BpeFlavor::SubwordNmt { .. } => {
                let ws = |c: char| matches!(c, '\r' | '\n' | ' ');
                let body = line.trim_matches(ws);
                let mut out = String::with_capacity(line.len() * 2);
                let leading = &line[..line.len() - line.trim_start_matches(ws).len()];
                out.push_str(leading);
                let mut first = true;
                for word in body.split(' ').filter(|w| !w.is_empty()) {
                    let pieces = self.segment_word(word);
                    let last = pieces.len().saturating_sub(1);
                    for (k, piece) in pieces.iter().enumerate() {
                        if !first {
                            out.push(' ');
                        }
                        first = false;
                        out.push_str(piece);
                        if k < last {
                            out.push_str(&self.separator);
                        }
                    }
                }
                let trailing = line.len() - line.trim_end_matches(ws).len();
                if trailing > 0 && trailing != line.len() {
                    out.push_str(&line[line.len() - trailing..]);
                }
                out
            }
        }
    }

    /// The subword units of one word (without separators).
    pub fn segment_word(&self, word: &str) -> Vec<String> {
        if let Some(pieces) = self.cache.lock().ok().and_then(|c| c.get(word).cloned()) {
            return pieces;
        }
        let pieces = self.segment_word_uncached(word);
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(word.to_string(), pieces.clone());
        }
        pieces
    }

    fn segment_word_uncached(&self, word: &str) -> Vec<String> {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() <= 1 && matches!(self.flavor, BpeFlavor::SubwordNmt { .. }) {
            return vec![word.to_string()];
        }
        let mut symbols: Vec<Symbol> = chars.iter().map(|c| self.symbol(c.to_string())).collect();
        match self.flavor {
            BpeFlavor::SubwordNmt { version_0_1: true } => symbols.push(self.symbol(END_OF_WORD.to_string())),
            _ => {
                if let Some(last) = symbols.pop() {
                    symbols.push(self.symbol(format!("{}{END_OF_WORD}", last.text)));
                }
            }
        }
        while symbols.len() > 1 {
            let mut best: Option<(u32, u32, u32, u32)> = None; // rank, left, right, merged
            for w in symbols.windows(2) {
                if let (Some(a), Some(b)) = (w[0].id, w[1].id) {
                    if let Some(&(rank, merged)) = self.merges.get(&(a, b)) {
                        if best.is_none_or(|(r, ..)| rank < r) {
                            best = Some((rank, a, b, merged));
                        }
                    }
                }
            }
            let Some((_, a, b, merged)) = best else { break };
            let mut next: Vec<Symbol> = Vec::with_capacity(symbols.len());
            let mut i = 0;
            while i < symbols.len() {
                if i + 1 < symbols.len() && symbols[i].id == Some(a) && symbols[i + 1].id == Some(b) {
                    let text = format!("{}{}", symbols[i].text, symbols[i + 1].text);
                    next.push(Symbol { id: Some(merged), text });
                    i += 2;
                } else {
                    next.push(symbols[i].clone());
                    i += 1;
                }
            }
            symbols = next;
        }
        let mut out: Vec<String> = symbols.into_iter().map(|s| s.text).collect();
        if out.last().is_some_and(|s| s == END_OF_WORD) {
            out.pop();
        } else if let Some(last) = out.last_mut() {
            if let Some(stripped) = last.strip_suffix(END_OF_WORD) {
                *last = stripped.to_string();
            }
        }
        out
    }

    fn symbol(&self, text: String) -> Symbol {
        Symbol { id: self.symbols.get(&text).copied(), text }
    }
}

/// `re.sub(r'(\.0+)*$', '', v)` one component at a time.
fn strip_zero_component(v: &str) -> Option<&str> {
    let dot = v.rfind('.')?;
    let tail = &v[dot + 1..];
    (!tail.is_empty() && tail.bytes().all(|b| b == b'0')).then_some(&v[..dot])
}

/// fairseq's decode for subword_nmt/fastbpe and `post_process(s, "subword_nmt")`:
/// `(x + " ").replace("@@ ", "").rstrip()`.
pub fn remove_bpe(x: &str) -> String {
    format!("{x} ").replace("@@ ", "").trim_end_matches(crate::text::pyutil::is_py_space).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODES: &str = "#version: 0.2\nl o\nlo w</w>\ne r</w>\nn e\nne w\n";

    #[test]
    fn subword_nmt_v02_merges_and_markers() {
        let bpe = Bpe::subword_nmt_from_str(CODES).unwrap();
        assert_eq!(bpe.encode("low lower newer"), "low lo@@ w@@ er new@@ er");
        assert_eq!(bpe.encode("  low \n"), "  low \n");
        assert_eq!(remove_bpe("lo@@ w@@ er new@@ er"), "lower newer");
        // a hypothesis that ends inside a word: fairseq's trailing space removes that marker too
        assert_eq!(remove_bpe("a new@@"), "a new");
    }

    #[test]
    fn version_header_and_errors() {
        let v01 = Bpe::subword_nmt_from_str("l o\nlo w\nw </w>\n").unwrap();
        assert_eq!(v01.flavor(), BpeFlavor::SubwordNmt { version_0_1: true });
        assert_eq!(v01.encode("low"), "low");
        assert!(matches!(Bpe::subword_nmt_from_str("#version: 0.2\na b c\n"), Err(BpeError::InvalidLine { line: 2, .. })));
        assert!(matches!(Bpe::subword_nmt_from_str("#version: 0.3\na b\n"), Err(BpeError::UnsupportedVersion(_))));
        assert!(Bpe::subword_nmt_from_str("#version: 0.2.0\na b\n").is_ok());
    }

    /// FSMT's `merges.txt` is version 0.2's codes without their header; another file without one
    /// is version 0.1, as subword-nmt reads it.
    #[test]
    fn a_hugging_face_merges_file_is_read_as_version_0_2() {
        let dir = tempfile::tempdir().unwrap();
        let body = CODES.trim_start_matches("#version: 0.2\n");
        for (name, flavor) in [("merges.txt", BpeFlavor::SubwordNmt { version_0_1: false }), ("bpecodes", BpeFlavor::SubwordNmt { version_0_1: true })] {
            std::fs::write(dir.path().join(name), body).unwrap();
            let bpe = Bpe::load(&dir.path().join(name), false).unwrap();
            assert_eq!(bpe.flavor(), flavor, "{name}");
        }
        let merges = Bpe::load(&dir.path().join("merges.txt"), false).unwrap();
        assert_eq!(merges.encode("low lower newer"), Bpe::subword_nmt_from_str(CODES).unwrap().encode("low lower newer"));
    }

    #[test]
    fn fastbpe_matches_v02_segmentation() {
        let fast = Bpe::fastbpe_from_str("l o 10\nlo w</w> 9\ne r</w> 8\nn e 7\nne w 6\n").unwrap();
        // A tab is part of a word (fastBPE splits on spaces only).
        assert_eq!(fast.encode("  low lower\tx newer "), "low lo@@ w@@ e@@ r@@ \t@@ x new@@ er");
        assert!(matches!(Bpe::fastbpe_from_str("a b\n"), Err(BpeError::InvalidLine { .. })));
        assert!(matches!(Bpe::fastbpe_from_str("a b 1\na b 2\n"), Err(BpeError::Duplicate { .. })));
    }
}
