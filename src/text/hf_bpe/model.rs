//! `tokenizers`' `models::bpe::BPE` on one pre-tokenized word: its characters as symbols (an
//! unknown one as `unk_token`, consecutive ones fused under `fuse_unk`, or its UTF-8 bytes as
//! `<0xNN>` under `byte_fallback`), then the adjacent pair of lowest merge rank merged, leftmost
//! first, until no pair merges.

use std::collections::HashMap;

use serde_json::Value;

use super::{Reader, TokenizerJsonError};

/// `BPE`: the vocabulary and the merges, by token id.
#[derive(Debug, Clone)]
pub(super) struct Bpe {
    pub(super) vocab: HashMap<String, u32>,
    /// `(a, b)` → (rank, id of `a + b`).
    merges: HashMap<(u32, u32), (u32, u32)>,
    unk_id: Option<u32>,
    fuse_unk: bool,
    byte_fallback: bool,
    ignore_merges: bool,
}

fn bool_field(r: &Reader, model: &Value, key: &str, default: bool) -> Result<bool, TokenizerJsonError> {
    match model.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(r.invalid(&format!("model.{key}"), format!("{v} is not true or false"))),
    }
}

impl Bpe {
    /// `tokenizer.json`'s `model`, whose `type` is `BPE`.
    pub(super) fn from_json(r: &Reader, model: &Value) -> Result<Self, TokenizerJsonError> {
        match model.get("dropout") {
            None | Some(Value::Null) => {}
            Some(p) if p.as_f64() == Some(0.0) => {}
            Some(p) => return Err(r.unsupported("model.dropout", p.to_string(), "null (no BPE dropout)")),
        }
        for key in ["continuing_subword_prefix", "end_of_word_suffix"] {
            match model.get(key) {
                None | Some(Value::Null) => {}
                Some(v) if v.as_str() == Some("") => {}
                Some(v) => return Err(r.unsupported(&format!("model.{key}"), v.to_string(), "null")),
            }
        }
        let Some(vocab_json) = model.get("vocab").and_then(Value::as_object) else {
            return Err(r.invalid("model.vocab", "not an object of token ids"));
        };
        let mut vocab = HashMap::with_capacity(vocab_json.len());
        for (token, id) in vocab_json {
            let Some(id) = id.as_u64().and_then(|i| u32::try_from(i).ok()) else {
                return Err(r.invalid("model.vocab", format!("{token:?}: {id} is not a token id")));
            };
            vocab.insert(token.clone(), id);
        }
        let Some(merges_json) = model.get("merges").and_then(Value::as_array) else {
            return Err(r.invalid("model.merges", "not a list of merges"));
        };
        let mut merges = HashMap::with_capacity(merges_json.len());
        for (rank, merge) in merges_json.iter().enumerate() {
            let pair: Option<(&str, &str)> = match merge {
                Value::String(s) => s.split_once(' ').filter(|(_, b)| !b.contains(' ')),
                Value::Array(p) if p.len() == 2 => p[0].as_str().zip(p[1].as_str()),
                _ => None,
            };
            let Some((a, b)) = pair else {
                return Err(r.invalid("model.merges", format!("merge {rank}: {merge} is not a pair of tokens")));
            };
            let id = |t: &str| vocab.get(t).copied().ok_or_else(|| r.invalid("model.merges", format!("merge {rank}: {t:?} is not in model.vocab")));
            let (a_id, b_id, new_id) = (id(a)?, id(b)?, id(&format!("{a}{b}"))?);
            merges.insert((a_id, b_id), (rank as u32, new_id));
        }
        let unk_id = match model.get("unk_token") {
            None | Some(Value::Null) => None,
            Some(Value::String(unk)) => Some(*vocab.get(unk).ok_or_else(|| r.invalid("model.unk_token", format!("{unk:?} is not in model.vocab")))?),
            Some(v) => return Err(r.invalid("model.unk_token", format!("{v} is not a token"))),
        };
        Ok(Bpe {
            vocab,
            merges,
            unk_id,
            fuse_unk: bool_field(r, model, "fuse_unk", false)?,
            byte_fallback: bool_field(r, model, "byte_fallback", false)?,
            ignore_merges: bool_field(r, model, "ignore_merges", false)?,
        })
    }

    /// The ids of `word`, appended to `out`.
    pub(super) fn tokenize(&self, word: &str, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if let Some(&id) = self.vocab.get(word).filter(|_| self.ignore_merges) {
            out.push(id);
            return;
        }
        let mut symbols: Vec<u32> = Vec::with_capacity(word.len());
        let mut pending_unk = false;
        let mut buf = [0u8; 4];
        for c in word.chars() {
            let s = c.encode_utf8(&mut buf);
            let bytes: Option<Vec<u32>> = match self.byte_fallback {
                true => s.bytes().map(|b| self.vocab.get(&format!("<0x{b:02X}>")).copied()).collect(),
                false => None,
            };
            let known = self.vocab.get(&*s).map(|&id| vec![id]).or(bytes);
            match (known, self.unk_id) {
                (Some(ids), unk) => {
                    if let (true, Some(unk)) = (pending_unk, unk) {
                        symbols.push(unk);
                    }
                    pending_unk = false;
                    symbols.extend(ids);
                }
                (None, Some(unk)) => {
                    if pending_unk && !self.fuse_unk {
                        symbols.push(unk);
                    }
                    pending_unk = true;
                }
                (None, None) => {}
            }
        }
        if let (true, Some(unk)) = (pending_unk, self.unk_id) {
            symbols.push(unk);
        }
        loop {
            let best = symbols.windows(2).enumerate().filter_map(|(i, w)| self.merges.get(&(w[0], w[1])).map(|&(rank, new)| (rank, i, new))).min();
            let Some((_, i, new)) = best else { break };
            symbols[i] = new;
            symbols.remove(i + 1);
        }
        out.extend(symbols);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn bpe(model: Value) -> Result<Bpe, TokenizerJsonError> {
        Bpe::from_json(&Reader { path: Path::new("tokenizer.json") }, &model)
    }

    fn ids(b: &Bpe, word: &str) -> Vec<u32> {
        let mut out = Vec::new();
        b.tokenize(word, &mut out);
        out
    }

    fn vocab() -> Value {
        json!({ "<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6, "<0xC3>": 7, "<0xA9>": 8 })
    }

    #[test]
    fn the_pair_of_lowest_rank_merges_first_leftmost_on_ties() {
        let b = bpe(json!({ "type": "BPE", "vocab": vocab(), "merges": [["b", "c"], "a b", ["a", "bc"]], "unk_token": "<unk>" })).unwrap();
        // b c (rank 0) before a b (rank 1), then a bc
        assert_eq!(ids(&b, "abc"), [6]);
        assert_eq!(ids(&b, "abab"), [4, 4]);
        let b = bpe(json!({ "type": "BPE", "vocab": vocab(), "merges": [["a", "b"], ["b", "c"]] })).unwrap();
        assert_eq!(ids(&b, "abc"), [4, 3]);
        assert_eq!(ids(&b, "bcab"), [5, 4]);
    }

    #[test]
    fn unknown_characters_are_unk_fused_or_bytes() {
        let model = |fuse: bool, fallback: bool| bpe(json!({ "vocab": vocab(), "merges": [], "unk_token": "<unk>", "fuse_unk": fuse, "byte_fallback": fallback })).unwrap();
        assert_eq!(ids(&model(true, false), "axyb"), [1, 0, 2]);
        assert_eq!(ids(&model(false, false), "axyb"), [1, 0, 0, 2]);
        // é is C3 A9; ü's bytes are not all there: <unk>
        assert_eq!(ids(&model(true, true), "aéüx"), [1, 7, 8, 0]);
        let no_unk = bpe(json!({ "vocab": vocab(), "merges": [] })).unwrap();
        assert_eq!(ids(&no_unk, "axb"), [1, 2]);
    }

    #[test]
    fn ignore_merges_takes_a_word_in_the_vocabulary_whole() {
        let b = bpe(json!({ "vocab": vocab(), "merges": [], "ignore_merges": true })).unwrap();
        assert_eq!(ids(&b, "abc"), [6]);
        assert_eq!(ids(&b, "ca"), [3, 1]);
    }

    #[test]
    fn what_is_not_implemented_or_broken_is_named() {
        let e = bpe(json!({ "vocab": vocab(), "merges": [], "dropout": 0.1 })).unwrap_err().to_string();
        assert!(e.starts_with("tokenizer.json: model.dropout 0.1"), "{e}");
        let e = bpe(json!({ "vocab": vocab(), "merges": [], "continuing_subword_prefix": "##" })).unwrap_err().to_string();
        assert!(e.contains("model.continuing_subword_prefix"), "{e}");
        let e = bpe(json!({ "vocab": vocab(), "merges": [["a", "x"]] })).unwrap_err().to_string();
        assert!(e.contains("model.merges: merge 0: \"x\" is not in model.vocab"), "{e}");
        let e = bpe(json!({ "vocab": vocab(), "merges": ["a b c"] })).unwrap_err().to_string();
        assert!(e.contains("model.merges: merge 0"), "{e}");
        let e = bpe(json!({ "vocab": [], "merges": [] })).unwrap_err().to_string();
        assert!(e.contains("model.vocab"), "{e}");
        let e = bpe(json!({ "vocab": vocab(), "merges": [], "unk_token": "<oov>" })).unwrap_err().to_string();
        assert!(e.contains("model.unk_token"), "{e}");
    }
}
