//! The token ids of a Hugging Face tokenizer past its base vocabulary (M2M-100's `vocab.json`,
//! NLLB's sentencepiece pieces): the tokens the tokenizer files pin to ids (`added_tokens.json`,
//! `tokenizer_config.json`'s `added_tokens_decoder`, `tokenizer.json`'s `added_tokens`, as
//! `convert_tokens_to_ids` reads them first), else `M2M100Tokenizer`'s own convention (one
//! `__xx__` for each code of `language_codes` after the vocabulary), then up to
//! `num_madeup_words` unused rows: the reading must give the weights' row count, or the directory
//! is refused with the counts of each file.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::hf_dir::{AddedTokensClash, HfDirError, TokenIdCounts};
use super::pickle::Node;
use super::{invalid, CheckpointError};

/// `M2M100Tokenizer`'s language codes (`FAIRSEQ_LANGUAGE_CODES`), by `language_codes`.
const M2M100_CODES: [&str; 100] = [
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga",
    "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt",
    "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr",
    "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu",
];
const WMT21_CODES: [&str; 8] = ["en", "ha", "is", "ja", "cs", "ru", "zh", "de"];

/// transformers' default `num_madeup_words`, and the unused rows allowed where a tokenizer names none.
const NUM_MADEUP_WORDS: usize = 8;

/// The most unused rows read past a tokenizer's ids, whatever `num_madeup_words` says.
const MAX_MADEUP_WORDS: usize = 1024;

/// The tokenizer whose ids are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// `M2M100Tokenizer`: `vocab.json`, languages `__xx__`.
    M2m100,
    /// `NllbTokenizer`: sentencepiece pieces, languages `eng_Latn` (fairseq's `__eng_Latn__`).
    Nllb,
}

/// What the tokenizer files give past the base vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenTable {
    /// The dictionary's symbols after the base vocabulary, by id, in fairseq's names.
    pub after: Vec<String>,
    /// The languages, in id order (fairseq's `langs`).
    pub langs: Vec<String>,
}

fn read_json(path: &Path) -> Result<Option<Value>, CheckpointError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&text).map(Some).map_err(|e| invalid(path, format!("not what transformers writes there: {e}")))
}

fn is_special(token: &str) -> bool {
    token.starts_with('<') && token.ends_with('>')
}

fn m2m100_lang(token: &str) -> Option<&str> {
    token.strip_prefix("__").and_then(|t| t.strip_suffix("__")).filter(|l| !l.is_empty())
}

/// The added tokens of the tokenizer files, id → token, and the files that pin any.
#[derive(Debug, Default)]
struct Pins {
    by_id: BTreeMap<usize, String>,
    files: Vec<&'static str>,
    /// `additional_special_tokens` / `extra_special_tokens`: special tokens named without an id.
    named: Vec<String>,
}

impl Pins {
    fn add(&mut self, dir: &Path, file: &'static str, id: usize, token: &str) -> Result<(), HfDirError> {
        if !self.files.contains(&file) {
            self.files.push(file);
        }
        let clash = |other: String, other_id: usize| HfDirError::AddedTokens(Box::new(AddedTokensClash { dir: dir.to_path_buf(), files: self.files.join(", "), token: token.to_string(), id, other, other_id }));
        if let Some(t) = self.by_id.get(&id).filter(|t| *t != token) {
            return Err(clash(t.clone(), id));
        }
        if let Some((&i, _)) = self.by_id.iter().find(|(&i, t)| *t == token && i != id) {
            return Err(clash(token.to_string(), i));
        }
        self.by_id.insert(id, token.to_string());
        Ok(())
    }

    fn read(dir: &Path) -> Result<Self, CheckpointError> {
        let mut pins = Pins::default();
        if let Some(Value::Object(map)) = read_json(&dir.join("added_tokens.json"))? {
            for (token, id) in &map {
                if let Some(id) = id.as_u64() {
                    pins.add(dir, "added_tokens.json", id as usize, token)?;
                }
            }
        }
        if let Some(config) = read_json(&dir.join("tokenizer_config.json"))? {
            for (id, t) in config.get("added_tokens_decoder").and_then(Value::as_object).into_iter().flatten() {
                if let (Ok(id), Some(token)) = (id.parse::<usize>(), t.get("content").and_then(Value::as_str)) {
                    pins.add(dir, "tokenizer_config.json", id, token)?;
                }
            }
            for key in ["additional_special_tokens", "extra_special_tokens"] {
                for t in config.get(key).and_then(Value::as_array).into_iter().flatten() {
                    if let Some(token) = t.as_str().or_else(|| t.get("content").and_then(Value::as_str)) {
                        if !pins.named.iter().any(|n| n == token) {
                            pins.named.push(token.to_string());
                        }
                    }
                }
            }
        }
        if let Some(tokenizer) = read_json(&dir.join("tokenizer.json"))? {
            for t in tokenizer.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
                if let (Some(id), Some(token)) = (t.get("id").and_then(Value::as_u64), t.get("content").and_then(Value::as_str)) {
                    pins.add(dir, "tokenizer.json", id as usize, token)?;
                }
            }
        }
        Ok(pins)
    }
}

/// `tokenizer_config.json`'s field `key`, if it is there.
fn tokenizer_setting(dir: &Path, key: &str) -> Result<Option<Value>, CheckpointError> {
    Ok(read_json(&dir.join("tokenizer_config.json"))?.and_then(|c| c.get(key).cloned()))
}

/// `M2M100Tokenizer`'s `language_codes` and its list.
fn language_codes(dir: &Path) -> Result<(String, Vec<String>), CheckpointError> {
    let name = tokenizer_setting(dir, "language_codes")?.and_then(|v| v.as_str().map(String::from)).unwrap_or_else(|| "m2m100".into());
    let codes: &[&str] = match name.as_str() {
        "m2m100" => &M2M100_CODES,
        "wmt21" => &WMT21_CODES,
        other => return Err(invalid(&dir.join("tokenizer_config.json"), format!("language_codes {other:?} (M2M100Tokenizer knows m2m100 and wmt21)"))),
    };
    Ok((name, codes.iter().map(|c| c.to_string()).collect()))
}

/// The rows of the model's token embedding, and the file that holds it (None where the weights
/// name no such table).
fn embedding_rows(dir: &Path) -> Result<Option<(usize, PathBuf)>, CheckpointError> {
    let Some(weights) = super::hf_dir::find_weights(dir) else { return Ok(None) };
    let file = super::open(&weights, false)?;
    let raw = super::read_container(&weights, &file.map)?;
    let p = &raw.pickle;
    let Some(root) = p.dict(&p.root) else { return Ok(None) };
    const TABLES: [&str; 4] = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"];
    let rows = TABLES.iter().find_map(|name| {
        root.entries.iter().find_map(|(k, v)| match (k, p.node(v)) {
            (super::pickle::Value::Str(n), Some(Node::Tensor(t))) if &**n == *name => t.size.first().copied(),
            _ => None,
        })
    });
    Ok(rows.map(|r| (r.max(0) as usize, weights)))
}

/// The tokens after a base vocabulary of `base_len` symbols (`base`: its token → id map where the
/// tokenizer has one, `vocab.json`), as the tokenizer files of `dir` give them, checked against
/// the weights' row count.
pub fn token_table(dir: &Path, kind: TokenizerKind, base_file: &str, base_len: usize, base: &HashMap<String, i64>) -> Result<TokenTable, CheckpointError> {
    let pins = Pins::read(dir)?;
    let fairseq_name = |t: &str| match kind {
        TokenizerKind::Nllb if !is_special(t) => format!("__{t}__"),
        _ => t.to_string(),
    };
    let by_id: HashMap<i64, &str> = base.iter().map(|(t, &i)| (i, t.as_str())).collect();
    let mut table: BTreeMap<usize, String> = BTreeMap::new();
    for (&id, token) in &pins.by_id {
        if id >= base_len {
            table.insert(id, fairseq_name(token));
        } else if let Some(&there) = by_id.get(&(id as i64)).filter(|&&t| t != token) {
            let clash = HfDirError::AddedTokens(Box::new(AddedTokensClash { dir: dir.to_path_buf(), files: pins.files.join(", "), token: token.clone(), id, other: there.to_string(), other_id: id }));
            return Err(clash.into());
        }
    }
    let is_lang = |t: &str| m2m100_lang(t).is_some();
    let mut base_langs: Vec<(i64, &str)> = base.iter().filter(|(t, _)| is_lang(t)).map(|(t, &i)| (i, t.as_str())).collect();
    base_langs.sort();
    let mut codes = None;
    if kind == TokenizerKind::M2m100 && base_langs.is_empty() && !table.values().any(|t| is_lang(t)) {
        let (name, list) = language_codes(dir)?;
        for (i, code) in list.iter().enumerate() {
            let token = format!("__{code}__");
            if let Some(there) = table.get(&(base_len + i)).filter(|t| **t != token) {
                let files = pins.files.join(", ");
                return Err(HfDirError::AddedTokens(Box::new(AddedTokensClash { dir: dir.to_path_buf(), files, token, id: base_len + i, other: there.clone(), other_id: base_len + i })).into());
            }
            table.insert(base_len + i, token);
        }
        codes = Some((name, list.len()));
    }
    // special tokens named without an id: added after the highest id, as `add_tokens` does
    // (M2M-100's `__xx__` are the tokenizer's own, never added)
    for token in &pins.named {
        let name = fairseq_name(token);
        let own = kind == TokenizerKind::M2m100 && m2m100_lang(token).is_some();
        if !own && !base.contains_key(token) && !table.values().any(|t| *t == name) {
            let next = table.keys().next_back().map_or(base_len, |&i| i + 1);
            table.insert(next, name);
        }
    }
    if kind == TokenizerKind::Nllb && !table.values().any(|t| is_lang(t)) {
        return Err(invalid(&dir.join("tokenizer_config.json"), "no language tokens among the added tokens: not an NllbTokenizer's"));
    }
    let pinned = table.len() - codes.as_ref().map_or(0, |(_, n): &(String, usize)| *n);
    let named_len = table.keys().next_back().map_or(base_len, |&i| i + 1);
    let madeup = tokenizer_setting(dir, "num_madeup_words")?.and_then(|v| v.as_u64()).map_or(NUM_MADEUP_WORDS, |n| n as usize);
    let madeup = madeup.min(MAX_MADEUP_WORDS);
    // the weights' table; else config.json's vocab_size; else the tokenizer's own count
    let config = dir.join("config.json");
    let vocab_size = || -> Result<Option<usize>, CheckpointError> {
        Ok(read_json(&config)?.and_then(|c| c.get("vocab_size").and_then(Value::as_u64)).map(|n| n as usize))
    };
    let (rows, weights) = match embedding_rows(dir)? {
        Some(found) => found,
        None => (vocab_size()?.unwrap_or(named_len), config),
    };
    let gaps = named_len - base_len - table.len();
    if rows < named_len || gaps + (rows - named_len) > madeup {
        return Err(HfDirError::TokenIds(Box::new(TokenIdCounts {
            dir: dir.to_path_buf(),
            base_file: base_file.to_string(),
            base_len,
            pinned,
            pin_files: if pins.files.is_empty() { "no added tokens".into() } else { pins.files.join(", ") },
            language_codes: codes,
            named_len,
            madeup,
            weights,
            rows,
        }))
        .into());
    }
    let len = rows;
    // ids the tokenizer gives no token: unused rows, named as fairseq pads a dictionary
    let taken: HashSet<&str> = base.keys().map(String::as_str).chain(table.values().map(String::as_str)).collect();
    let mut free = (0..).map(|i| format!("madeupword{i:04}")).filter(|t| !taken.contains(t.as_str()));
    let after: Vec<String> = (base_len..len).map(|id| table.get(&id).cloned().unwrap_or_else(|| free.next().unwrap_or_default())).collect();
    let langs: Vec<String> = match base_langs.is_empty() {
        false => base_langs.iter().filter_map(|(_, t)| m2m100_lang(t).map(String::from)).collect(),
        true => after.iter().filter(|t| is_lang(t)).filter_map(|t| m2m100_lang(t).map(String::from)).collect(),
    };
    Ok(TokenTable { after, langs })
}

/// NLLB's languages without the base vocabulary's size: the tokens the tokenizer files add that
/// are no `<...>` specials, pinned ones in id order, then those named without an id.
pub fn token_table_langs_only(dir: &Path) -> Result<Vec<String>, CheckpointError> {
    let pins = Pins::read(dir)?;
    let mut langs: Vec<String> = pins.by_id.values().filter(|t| !is_special(t)).cloned().collect();
    for token in pins.named.iter().filter(|t| !is_special(t)) {
        if !langs.contains(token) {
            langs.push(token.clone());
        }
    }
    if langs.is_empty() {
        return Err(invalid(&dir.join("tokenizer_config.json"), "no added tokens: not an NllbTokenizer's config"));
    }
    Ok(langs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: [&str; 6] = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "b"];

    /// A directory without weights (the row count is `config.json`'s `vocab_size`) and `files`.
    fn dir(vocab_size: usize, files: &[(&str, Value)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), serde_json::json!({ "model_type": "m2m_100", "vocab_size": vocab_size }).to_string()).unwrap();
        for (name, value) in files {
            std::fs::write(dir.path().join(name), value.to_string()).unwrap();
        }
        dir
    }

    fn m2m100(dir: &tempfile::TempDir) -> Result<TokenTable, CheckpointError> {
        let vocab: HashMap<String, i64> = VOCAB.iter().enumerate().map(|(i, t)| (t.to_string(), i as i64)).collect();
        token_table(dir.path(), TokenizerKind::M2m100, "vocab.json", vocab.len(), &vocab)
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn language_codes_then_madeup_words_without_added_tokens() {
        let d = dir(6 + 8 + 2, &[("tokenizer_config.json", serde_json::json!({ "language_codes": "wmt21" }))]);
        let t = m2m100(&d).unwrap();
        assert_eq!(t.langs, strings(&WMT21_CODES));
        assert_eq!(&t.after[8..], &strings(&["madeupword0000", "madeupword0001"]));
    }

    #[test]
    fn pinned_language_tokens_win_over_language_codes() {
        let d = dir(9, &[("added_tokens.json", serde_json::json!({ "__fr__": 6, "__de__": 8 }))]);
        let t = m2m100(&d).unwrap();
        assert_eq!(t.after, strings(&["__fr__", "madeupword0000", "__de__"]));
        assert_eq!(t.langs, strings(&["fr", "de"]));
        // tokenizer.json's added tokens alone pin as well
        let added = serde_json::json!({ "added_tokens": [{ "id": 6, "content": "__en__" }, { "id": 7, "content": "__fr__" }] });
        let t = m2m100(&dir(8, &[("tokenizer.json", added)])).unwrap();
        assert_eq!(t.langs, strings(&["en", "fr"]));
    }

    #[test]
    fn a_row_count_no_reading_gives_is_the_counts() {
        let d = dir(6 + 3 + 9, &[("added_tokens.json", serde_json::json!({ "__fr__": 6, "__en__": 7, "__de__": 8 }))]);
        let e = m2m100(&d).unwrap_err().to_string();
        for want in ["ids 0..9", "6 from vocab.json", "3 more pinned by added_tokens.json", "at most 8 more unused", "has 18 embedding rows"] {
            assert!(e.contains(want), "{want}: {e}");
        }
        let d = dir(6 + 100 - 1, &[]);
        let e = m2m100(&d).unwrap_err().to_string();
        assert!(e.contains("100 from language_codes \"m2m100\"") && e.contains("has 105 embedding rows"), "{e}");
    }

    #[test]
    fn added_tokens_that_disagree_are_refused() {
        let decoder = serde_json::json!({ "added_tokens_decoder": { "6": { "content": "__en__" } } });
        let d = dir(7, &[("added_tokens.json", serde_json::json!({ "__fr__": 6 })), ("tokenizer_config.json", decoder)]);
        let e = m2m100(&d).unwrap_err().to_string();
        assert!(e.contains("the added tokens of added_tokens.json, tokenizer_config.json disagree"), "{e}");
        // a pin inside vocab.json that is not vocab.json's token there
        let d = dir(6, &[("added_tokens.json", serde_json::json!({ "__fr__": 4 }))]);
        assert!(m2m100(&d).is_err());
    }

    #[test]
    fn nllb_language_codes_named_without_ids_follow_the_pinned_tokens() {
        let config = serde_json::json!({ "extra_special_tokens": ["eng_Latn", "deu_Latn"], "added_tokens_decoder": { "6": { "content": "fra_Latn" } } });
        let d = dir(9, &[("tokenizer_config.json", config)]);
        let t = token_table(d.path(), TokenizerKind::Nllb, "sentencepiece.bpe.model", 6, &HashMap::new()).unwrap();
        assert_eq!(t.after, strings(&["__fra_Latn__", "__eng_Latn__", "__deu_Latn__"]));
        assert_eq!(token_table_langs_only(d.path()).unwrap(), strings(&["fra_Latn", "eng_Latn", "deu_Latn"]));
    }
}
