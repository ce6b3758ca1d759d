//! fairseq's `Dictionary` (`fairseq/data/dictionary.py`): `<s>`, `<pad>`, `</s>`, `<unk>` at
//! 0..=3, then one symbol per line of `dict.<lang>.txt` (`<symbol> <count> [#fairseq:overwrite]`,
//! split at the *last* space so symbols may contain spaces).

use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DictionaryError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not valid UTF-8 (fairseq: \"Incorrect encoding detected\")")]
    Encoding,
    #[error("line {line}: expected '<token> <cnt> [flags]', got {text:?}")]
    Format { line: usize, text: String },
    #[error("line {line}: duplicate word {word:?} (add the #fairseq:overwrite flag to allow it)")]
    Duplicate { line: usize, word: String },
    #[error("not a vocabulary (a JSON object of token ids): {0}")]
    Vocabulary(String),
    #[error("token id {id} of {token:?}: the ids must run 0, 1, 2, ... with <s> <pad> </s> <unk> first")]
    VocabularyIds { id: i64, token: String },
}

pub const BOS_WORD: &str = "<s>";
pub const PAD_WORD: &str = "<pad>";
pub const EOS_WORD: &str = "</s>";
pub const UNK_WORD: &str = "<unk>";

#[derive(Debug, Clone)]
pub struct Dictionary {
    symbols: Vec<String>,
    counts: Vec<i64>,
    indices: HashMap<String, i64>,
}

/// `dictionary.__eq__`: equal symbol -> index maps.
impl PartialEq for Dictionary {
    fn eq(&self, other: &Self) -> bool {
        self.indices == other.indices
    }
}

/// Python's `str.isspace` (what `re.sub(r"\s+")`, `strip()` and `split()` use): Unicode
/// White_Space plus the ASCII separators U+001C..U+001F.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

impl Default for Dictionary {
    fn default() -> Self {
        Self::new()
    }
}

impl Dictionary {
    /// A dictionary holding only the four special symbols.
    pub fn new() -> Self {
        let mut d = Dictionary { symbols: Vec::new(), counts: Vec::new(), indices: HashMap::new() };
        for w in [BOS_WORD, PAD_WORD, EOS_WORD, UNK_WORD] {
            d.insert(w, 1, false);
        }
        d
    }

    /// `Dictionary.add_symbol(word)`: the index of `word`, added at the end if absent.
    pub fn add_symbol(&mut self, word: &str) -> i64 {
        self.insert(word, 1, false)
    }

    fn insert(&mut self, word: &str, n: i64, overwrite: bool) -> i64 {
        if !overwrite {
            if let Some(&idx) = self.indices.get(word) {
                self.counts[idx as usize] += n;
                return idx;
            }
        }
        let idx = self.symbols.len() as i64;
        self.indices.insert(word.to_string(), idx);
        self.symbols.push(word.to_string());
        self.counts.push(n);
        idx
    }

    /// `Dictionary.load(path)`.
    pub fn load(path: &Path) -> Result<Self, DictionaryError> {
        let bytes = std::fs::read(path)?;
        Self::from_bytes(&bytes)
    }

    /// Parses the text of a `dict.*.txt` (`add_from_file`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DictionaryError> {
        let text = std::str::from_utf8(bytes).map_err(|_| DictionaryError::Encoding)?;
        // Python text mode: universal newlines.
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        let mut d = Self::new();
        for (i, raw) in text.split_inclusive('\n').enumerate() {
            let line_no = i + 1;
            let line = raw.trim_end_matches(is_py_space);
            let bad = || DictionaryError::Format { line: line_no, text: line.chars().take(80).collect() };
            let (mut word, mut field) = line.rsplit_once(' ').ok_or_else(bad)?;
            let overwrite = field == "#fairseq:overwrite";
            if overwrite {
                (word, field) = word.rsplit_once(' ').ok_or_else(bad)?;
            }
            let count: i64 = field.trim_matches(is_py_space).parse().map_err(|_| bad())?;
            if !overwrite && d.indices.contains_key(word) {
                return Err(DictionaryError::Duplicate { line: line_no, word: word.to_string() });
            }
            d.insert(word, count, overwrite);
        }
        Ok(d)
    }

    /// The dictionary a Hugging Face vocabulary file (`vocab.json`, FSMT's `vocab-src.json`)
    /// was written from: its tokens by id. FSMT's converter marks a word's last piece with
    /// `</w>` and drops fairseq's `@@` from the others; that is undone here.
    pub fn from_vocab_json(bytes: &[u8]) -> Result<Self, DictionaryError> {
        let vocab: HashMap<String, i64> = serde_json::from_slice(bytes).map_err(|e| DictionaryError::Vocabulary(e.to_string()))?;
        Self::from_vocab(&vocab)
    }

    /// A vocabulary's token → id map as a dictionary, as [`Self::from_vocab_json`] reads one.
    pub fn from_vocab(vocab: &HashMap<String, i64>) -> Result<Self, DictionaryError> {
        let mut by_id: Vec<(i64, &str)> = vocab.iter().map(|(t, &id)| (id, t.as_str())).collect();
        by_id.sort();
        let word_ends = by_id.iter().any(|(_, t)| t.ends_with("</w>"));
        let mut d = Self::new();
        for (expected, &(id, token)) in by_id.iter().enumerate() {
            let special = [BOS_WORD, PAD_WORD, EOS_WORD, UNK_WORD].get(expected);
            if id != expected as i64 || special.is_some_and(|w| *w != token) {
                return Err(DictionaryError::VocabularyIds { id, token: token.to_string() });
            }
            if special.is_some() {
                continue;
            }
            let word = match (word_ends, token.strip_suffix("</w>")) {
                (true, Some(end)) => end.to_string(),
                (true, None) => format!("{token}@@"),
                (false, _) => token.to_string(),
            };
            d.insert(&word, 1, false);
            if d.len() != expected + 1 {
                return Err(DictionaryError::VocabularyIds { id, token: token.to_string() });
            }
        }
        Ok(d)
    }

    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.symbols.is_empty()
    }

    pub fn bos(&self) -> i64 {
        0
    }

    pub fn pad(&self) -> i64 {
        1
    }

    pub fn eos(&self) -> i64 {
        2
    }

    pub fn unk(&self) -> i64 {
        3
    }

    pub fn nspecial(&self) -> usize {
        4
    }

    /// Index of `word`, or `unk`.
    pub fn index(&self, word: &str) -> i64 {
        self.indices.get(word).copied().unwrap_or(self.unk())
    }

    /// `dictionary[i]`: the symbol, or `<unk>` for an id outside the dictionary.
    pub fn symbol(&self, i: i64) -> &str {
        usize::try_from(i).ok().and_then(|i| self.symbols.get(i)).map_or(UNK_WORD, String::as_str)
    }

    pub fn count(&self, i: i64) -> Option<i64> {
        usize::try_from(i).ok().and_then(|i| self.counts.get(i)).copied()
    }

    /// `encode_line(line, add_if_not_exist=False, append_eos)`.
    pub fn encode_line(&self, line: &str, append_eos: bool) -> Vec<i64> {
        let mut ids: Vec<i64> = line.split(is_py_space).filter(|w| !w.is_empty()).map(|w| self.index(w)).collect();
        if append_eos {
            ids.push(self.eos());
        }
        ids
    }

    /// `string(tokens, bpe_symbol, escape_unk, extra_symbols_to_ignore)`: drops EOS and BOS and
    /// the extra symbols, joins with spaces, then `post_process(sentence, bpe_symbol)`.
    pub fn string(&self, tokens: &[i64], bpe_symbol: Option<&str>, escape_unk: bool, extra_symbols_to_ignore: &[i64]) -> String {
        let words: Vec<&str> = self.kept_symbols(tokens, escape_unk, extra_symbols_to_ignore).map(|(_, w)| w).collect();
        post_process(&words.join(" "), bpe_symbol)
    }

    /// The symbols [`Self::string`] joins, each with its token's position in `tokens`: EOS, BOS
    /// and `extra_symbols_to_ignore` dropped, `<unk>` spelled as fairseq spells it.
    pub fn kept_symbols<'a>(
        &'a self,
        tokens: &'a [i64],
        escape_unk: bool,
        extra_symbols_to_ignore: &'a [i64],
    ) -> impl Iterator<Item = (usize, &'a str)> + 'a {
        tokens
            .iter()
            .enumerate()
            .filter(move |&(_, &t)| t != self.eos() && t != self.bos() && !extra_symbols_to_ignore.contains(&t))
            .map(move |(i, &t)| (i, if t == self.unk() { if escape_unk { "<<unk>>" } else { UNK_WORD } } else { self.symbol(t) }))
    }
}

fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// `fairseq.data.data_utils.post_process`. fairseq 0.12 raises on an unknown symbol; like
/// older fairseq, any other literal is removed the way `@@ ` is.
pub fn post_process(sentence: &str, symbol: Option<&str>) -> String {
    match symbol {
        None | Some("none") => sentence.to_string(),
        Some("sentencepiece") => py_strip(&sentence.replace(' ', "").replace('\u{2581}', " ")).to_string(),
        Some("wordpiece") => py_strip(&sentence.replace(' ', "").replace('_', " ")).to_string(),
        Some("letter") => py_strip(&sentence.replace(' ', "").replace('|', " ")).to_string(),
        Some("silence") => {
            let s = sentence.replace("<SIL>", "");
            let parts: Vec<&str> = s.split(' ').filter(|p| !p.is_empty()).collect();
            py_strip(&parts.join(" ")).to_string()
        }
        Some("_EOW") => py_strip(&sentence.replace(' ', "").replace("_EOW", " ")).to_string(),
        Some(sym) => {
            let sym = if sym == "subword_nmt" { "@@ " } else { sym };
            format!("{sentence} ").replace(sym, "").trim_end_matches(is_py_space).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_then_file_order_with_overwrite_and_spaces() {
        let d = Dictionary::from_bytes("the 10\nNew York 3\n<s> 1 #fairseq:overwrite\nmadeupword0000 0\n".as_bytes()).unwrap();
        assert_eq!(d.len(), 8);
        assert_eq!(d.index("the"), 4);
        assert_eq!(d.index("New York"), 5);
        // overwrite appends a new slot and points the word at it; the old slot stays.
        assert_eq!(d.index("<s>"), 6);
        assert_eq!(d.symbol(0), "<s>");
        assert_eq!(d.index("nope"), 3);
        assert_eq!(d.symbol(99), "<unk>");
        assert_eq!(d.count(4), Some(10));
    }

    #[test]
    fn format_errors_name_the_line() {
        let e = Dictionary::from_bytes(b"a 1\nb\n").unwrap_err();
        assert!(matches!(e, DictionaryError::Format { line: 2, .. }), "{e}");
        let e = Dictionary::from_bytes(b"a 1\na 2\n").unwrap_err();
        assert!(matches!(e, DictionaryError::Duplicate { line: 2, .. }), "{e}");
        assert!(Dictionary::from_bytes(b"a x\n").is_err());
        assert!(Dictionary::from_bytes(b"\xff 1\n").is_err());
    }

    #[test]
    fn encode_and_string_follow_fairseq() {
        let d = Dictionary::from_bytes("a@@ 5\nb 4\n\u{2581}c 2\n".as_bytes()).unwrap();
        assert_eq!(d.encode_line("  a@@\u{1f}b\tzz ", true), vec![4, 5, 3, 2]);
        assert_eq!(d.encode_line("", false), Vec::<i64>::new());
        assert_eq!(d.string(&[0, 4, 5, 3, 2], Some("subword_nmt"), false, &[]), "ab <unk>");
        assert_eq!(d.string(&[4, 3], None, true, &[]), "a@@ <<unk>>");
        assert_eq!(d.string(&[6, 5, 6], Some("sentencepiece"), false, &[5]), "c c");
    }
}
