//! A `tokenizers` BPE tokenizer read from its `tokenizer.json`, as transformers 5 saves NLLB's
//! `NllbTokenizer` (without the sentencepiece model): the added tokens split off the input, the
//! `Metaspace` pre-tokenizer, the `BPE` model ([`model`]); the `Metaspace` decoder back. What the
//! file asks for that is not implemented here (another model, a normalizer, BPE dropout, ...) is
//! refused, naming the field. The `post_processor` is not run: fairseq's task adds the language
//! token and `</s>` itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod added_tokens;
mod model;

pub use added_tokens::AddedToken;
use model::Bpe;

/// Why a `tokenizer.json` cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerJsonError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not JSON.
    #[error("{}: not a tokenizers file: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// serde_json's error, with its line and column.
        source: serde_json::Error,
    },
    /// A component or setting tchseq does not implement.
    #[error("{}: {field} {value} is not implemented in tchseq (it reads {reads})", path.display())]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The field, as `model.type`.
        field: String,
        /// What the file gives there.
        value: String,
        /// What tchseq reads there.
        reads: &'static str,
    },
    /// A field that is not what `tokenizers` writes there.
    #[error("{}: {field}: {why}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The file being read, for its errors.
struct Reader<'a> {
    path: &'a Path,
}

impl Reader<'_> {
    fn invalid(&self, field: &str, why: impl Into<String>) -> TokenizerJsonError {
        TokenizerJsonError::Invalid { path: self.path.to_path_buf(), field: field.to_string(), why: why.into() }
    }

    fn unsupported(&self, field: &str, value: String, reads: &'static str) -> TokenizerJsonError {
        TokenizerJsonError::Unsupported { path: self.path.to_path_buf(), field: field.to_string(), value, reads }
    }

    /// The `type` of the component at `field`; None where the field is null or absent.
    fn component_type<'v>(&self, root: &'v Value, field: &str) -> Result<Option<(&'v str, &'v Value)>, TokenizerJsonError> {
        match root.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.get("type").and_then(Value::as_str) {
                Some(t) => Ok(Some((t, v))),
                None => Err(self.invalid(&format!("{field}.type"), "not there")),
            },
        }
    }
}

/// `Metaspace`'s `prepend_scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrependScheme {
    Always,
    First,
    Never,
}

/// The `Metaspace` pre-tokenizer and decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metaspace {
    pub replacement: char,
    pub prepend_scheme: PrependScheme,
    pub split: bool,
}

impl Metaspace {
    fn from_json(r: &Reader, v: &Value, field: &str) -> Result<Self, TokenizerJsonError> {
        let replacement = match v.get("replacement") {
            None => '\u{2581}',
            Some(Value::String(s)) if s.chars().count() == 1 => s.chars().next().unwrap_or('\u{2581}'),
            Some(other) => return Err(r.invalid(&format!("{field}.replacement"), format!("{other} is not one character"))),
        };
        let prepend_scheme = match (v.get("prepend_scheme"), v.get("add_prefix_space")) {
            (Some(Value::String(s)), _) => match s.as_str() {
                "always" => PrependScheme::Always,
                "first" => PrependScheme::First,
                "never" => PrependScheme::Never,
                _ => return Err(r.invalid(&format!("{field}.prepend_scheme"), format!("{s:?} is not always, first or never"))),
            },
            (None | Some(Value::Null), Some(Value::Bool(false))) => PrependScheme::Never,
            (None | Some(Value::Null), None | Some(Value::Bool(true))) => PrependScheme::Always,
            (Some(other), _) => return Err(r.invalid(&format!("{field}.prepend_scheme"), format!("{other} is not always, first or never"))),
            (_, Some(other)) => return Err(r.invalid(&format!("{field}.add_prefix_space"), format!("{other} is not true or false"))),
        };
        let split = match v.get("split") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => return Err(r.invalid(&format!("{field}.split"), format!("{other} is not true or false"))),
        };
        Ok(Metaspace { replacement, prepend_scheme, split })
    }

    /// The words of a section of the input that starts at byte `offset`.
    fn pre_tokenize(&self, offset: usize, text: &str) -> Vec<String> {
        let mut s = text.replace(' ', self.replacement.encode_utf8(&mut [0; 4]));
        let prepend = match self.prepend_scheme {
            PrependScheme::Always => true,
            PrependScheme::First => offset == 0,
            PrependScheme::Never => false,
        };
        if prepend && !s.starts_with(self.replacement) {
            s.insert(0, self.replacement);
        }
        if !self.split {
            return vec![s];
        }
        let mut words: Vec<String> = Vec::new();
        for c in s.chars() {
            match words.last_mut() {
                Some(word) if c != self.replacement => word.push(c),
                _ => words.push(c.to_string()),
            }
        }
        words
    }

    /// The decoder: the first token without its replacement characters (unless nothing was
    /// prepended), the others' as spaces.
    fn decode(&self, tokens: &[&str]) -> String {
        let mut out = String::new();
        for (i, token) in tokens.iter().enumerate() {
            for c in token.chars() {
                match c == self.replacement {
                    true if i == 0 && self.prepend_scheme != PrependScheme::Never => {}
                    true => out.push(' '),
                    false => out.push(c),
                }
            }
        }
        out
    }
}

/// A `tokenizer.json` of a BPE model.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    added_tokens: Vec<AddedToken>,
    pre_tokenizer: Option<Metaspace>,
    model: Bpe,
    decoder: Option<Metaspace>,
    id_to_token: HashMap<u32, String>,
}

impl Tokenizer {
    /// Reads `path`.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerJsonError> {
        let bytes = std::fs::read(path).map_err(|source| TokenizerJsonError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(path, &bytes)
    }

    /// Reads the content of `path`.
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, TokenizerJsonError> {
        let r = Reader { path };
        let root: Value = serde_json::from_slice(bytes).map_err(|source| TokenizerJsonError::Json { path: path.to_path_buf(), source })?;
        if !root.is_object() {
            return Err(r.invalid("(top level)", "not an object"));
        }
        if let Some((t, _)) = r.component_type(&root, "normalizer")? {
            return Err(r.unsupported("normalizer.type", format!("{t:?}"), "no normalizer (null)"));
        }
        let pre_tokenizer = match r.component_type(&root, "pre_tokenizer")? {
            None => None,
            Some(("Metaspace", v)) => Some(Metaspace::from_json(&r, v, "pre_tokenizer")?),
            Some((t, _)) => return Err(r.unsupported("pre_tokenizer.type", format!("{t:?}"), "Metaspace or null")),
        };
        let decoder = match r.component_type(&root, "decoder")? {
            None => None,
            Some(("Metaspace", v)) => Some(Metaspace::from_json(&r, v, "decoder")?),
            Some((t, _)) => return Err(r.unsupported("decoder.type", format!("{t:?}"), "Metaspace or null")),
        };
        let model = match r.component_type(&root, "model")? {
            Some(("BPE", v)) => Bpe::from_json(&r, v)?,
            Some((t, _)) => return Err(r.unsupported("model.type", format!("{t:?}"), "BPE")),
            None => return Err(r.invalid("model", "not there")),
        };
        let added_tokens = AddedToken::list_from_json(&r, root.get("added_tokens"))?;
        let mut id_to_token: HashMap<u32, String> = model.vocab.iter().map(|(t, &id)| (id, t.clone())).collect();
        id_to_token.extend(added_tokens.iter().map(|t| (t.id, t.content.clone())));
        Ok(Tokenizer { added_tokens, pre_tokenizer, model, decoder, id_to_token })
    }

    /// `model.vocab`: token → id.
    pub fn vocab(&self) -> &HashMap<String, u32> {
        &self.model.vocab
    }

    /// `added_tokens`.
    pub fn added_tokens(&self) -> &[AddedToken] {
        &self.added_tokens
    }

    /// The token of `id`: an added token's content, else the vocabulary's.
    pub fn id_to_token(&self, id: u32) -> Option<&str> {
        self.id_to_token.get(&id).map(String::as_str)
    }

    /// The ids of `text`, without the post-processor's tokens.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        for (offset, section, added) in added_tokens::split(&self.added_tokens, text) {
            match (added, &self.pre_tokenizer) {
                (Some(id), _) => ids.push(id),
                (None, Some(metaspace)) => metaspace.pre_tokenize(offset, section).iter().for_each(|w| self.model.tokenize(w, &mut ids)),
                (None, None) => self.model.tokenize(section, &mut ids),
            }
        }
        ids
    }

    /// The text of `tokens`, as the decoder gives it (no decoder: the tokens joined by spaces).
    pub fn decode(&self, tokens: &[&str]) -> String {
        match &self.decoder {
            Some(metaspace) => metaspace.decode(tokens),
            None => tokens.join(" "),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tokenizer(file: Value) -> Result<Tokenizer, TokenizerJsonError> {
        Tokenizer::from_bytes(Path::new("dir/tokenizer.json"), file.to_string().as_bytes())
    }

    fn nllb_like() -> Value {
        json!({
            "added_tokens": [
                { "id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true },
                { "id": 1, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true },
                { "id": 9, "content": "eng_Latn", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true }
            ],
            "normalizer": null,
            "pre_tokenizer": { "type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true },
            "decoder": { "type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true },
            "model": {
                "type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
                "vocab": { "<s>": 0, "<unk>": 1, "▁": 2, "a": 3, "b": 4, "▁a": 5, "▁ab": 6, "ab": 7 },
                "merges": [["▁", "a"], ["▁a", "b"], ["a", "b"]]
            }
        })
    }

    #[test]
    fn metaspace_words_then_bpe_with_added_tokens_whole() {
        let t = tokenizer(nllb_like()).unwrap();
        assert_eq!(t.encode("ab ab"), [6, 6]);
        assert_eq!(t.encode("ab  a"), [6, 2, 5]);
        // each section between added tokens gets its ▁
        assert_eq!(t.encode("ab<s>ab"), [6, 0, 6]);
        assert_eq!(t.encode("eng_Latn ab"), [9, 6]);
        assert_eq!(t.encode("axyb"), [5, 1, 4]);
        assert_eq!(t.id_to_token(9), Some("eng_Latn"));
        assert_eq!(t.id_to_token(6), Some("▁ab"));
    }

    #[test]
    fn metaspace_prepend_schemes_and_split() {
        let m = |prepend_scheme, split| Metaspace { replacement: '▁', prepend_scheme, split };
        assert_eq!(m(PrependScheme::Always, true).pre_tokenize(3, "a b"), ["▁a", "▁b"]);
        assert_eq!(m(PrependScheme::Always, true).pre_tokenize(0, " a  "), ["▁a", "▁", "▁"]);
        assert_eq!(m(PrependScheme::First, true).pre_tokenize(3, "a b"), ["a", "▁b"]);
        assert_eq!(m(PrependScheme::First, true).pre_tokenize(0, "a b"), ["▁a", "▁b"]);
        assert_eq!(m(PrependScheme::Never, false).pre_tokenize(0, "a b"), ["a▁b"]);
        assert_eq!(m(PrependScheme::Always, true).decode(&["▁Hal", "lo", "▁Welt", "▁"]), "Hallo Welt ");
        assert_eq!(m(PrependScheme::Never, true).decode(&["▁a", "▁b"]), " a b");
    }

    #[test]
    fn what_is_not_implemented_is_one_error_naming_the_field() {
        let with = |key: &str, value: Value| {
            let mut file = nllb_like();
            file[key] = value;
            tokenizer(file).unwrap_err().to_string()
        };
        let e = with("model", json!({ "type": "Unigram", "vocab": [["<unk>", 0.0]], "unk_id": 0 }));
        assert_eq!(e, "dir/tokenizer.json: model.type \"Unigram\" is not implemented in tchseq (it reads BPE)");
        let e = with("normalizer", json!({ "type": "NFKC" }));
        assert!(e.starts_with("dir/tokenizer.json: normalizer.type \"NFKC\""), "{e}");
        let e = with("pre_tokenizer", json!({ "type": "ByteLevel" }));
        assert!(e.starts_with("dir/tokenizer.json: pre_tokenizer.type \"ByteLevel\""), "{e}");
        let e = with("decoder", json!({ "type": "Metaspace", "prepend_scheme": "sometimes" }));
        assert!(e.starts_with("dir/tokenizer.json: decoder.prepend_scheme"), "{e}");
        let e = with("added_tokens", json!([{ "content": "x" }]));
        assert!(e.starts_with("dir/tokenizer.json: added_tokens[0].id"), "{e}");
        let e = with("model", json!({ "vocab": {} }));
        assert!(e.starts_with("dir/tokenizer.json: model.type"), "{e}");
        let e = Tokenizer::from_bytes(Path::new("tokenizer.json"), b"{").unwrap_err().to_string();
        assert!(e.starts_with("tokenizer.json: not a tokenizers file"), "{e}");
    }
}
