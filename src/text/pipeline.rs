//! `TextPipeline`: fairseq's `tokenizer` + `bpe` encoders chained as the hub interface and
//! `fairseq-interactive` chain them: `encode` = tokenizer.encode then bpe.encode, `decode` =
//! bpe.decode then tokenizer.decode.
//!
//! The constructor takes plain options ([`PipelineOptions`]) so callers can fill them from a
//! checkpoint config, a model directory and command-line overrides, in that order of precedence
//! (lowest first).

use std::path::{Path, PathBuf};

use super::bpe::{remove_bpe, Bpe, BpeError};
use super::hf_bpe::{self, TokenizerJsonError};
use super::moses::{self, MosesDetokenizer, MosesError, MosesTokenizer};
use super::sentencepiece::{self, SentencePieceError, SentencePieceModel};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Bpe(#[from] BpeError),
    #[error(transparent)]
    SentencePiece(#[from] SentencePieceError),
    #[error(transparent)]
    Moses(#[from] MosesError),
    #[error(transparent)]
    TokenizerJson(#[from] TokenizerJsonError),
    #[error("unknown tokenizer {0:?} (supported: moses, space, none)")]
    UnknownTokenizer(String),
    #[error("unknown bpe {0:?} (supported: subword_nmt, fastbpe, sentencepiece, none)")]
    UnknownBpe(String),
    #[error("BPE {0} needs a codes file (`bpecodes` in the model directory, or one given explicitly)")]
    MissingCodes(&'static str),
    #[error("sentencepiece needs a model file (`sentencepiece.bpe.model` in the model directory, or one given explicitly)")]
    MissingSentencePieceModel,
}

/// fairseq's tokenizer/bpe options (`--tokenizer`, `--bpe`, `--bpe-codes`,
/// `--sentencepiece-model`, the moses options); `None` means "none".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineOptions {
    pub tokenizer: Option<String>,
    pub bpe: Option<String>,
    pub bpe_codes: Option<PathBuf>,
    pub sentencepiece_model: Option<PathBuf>,
    /// The language `encode` tokenizes (fairseq: MosesTokenizerConfig.source_lang).
    pub source_lang: String,
    /// The language `decode` detokenizes (fairseq: MosesTokenizerConfig.target_lang).
    pub target_lang: String,
    pub moses_no_dash_splits: bool,
    pub moses_no_escape: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            tokenizer: None,
            bpe: None,
            bpe_codes: None,
            sentencepiece_model: None,
            source_lang: "en".to_string(),
            target_lang: "en".to_string(),
            moses_no_dash_splits: false,
            moses_no_escape: false,
        }
    }
}

impl PipelineOptions {
    /// The checkpoint's `tokenizer`, `bpe` and moses options. Moses languages are the
    /// tokenizer's own (`moses_source_lang`/`moses_target_lang`), else the task's, else `en`.
    pub fn from_config(cfg: &crate::config::TransformerConfig) -> Self {
        let lang = |moses: &Option<String>, task: &Option<String>| {
            moses.clone().or_else(|| task.clone()).unwrap_or_else(|| "en".to_string())
        };
        PipelineOptions {
            tokenizer: cfg.tokenizer.clone(),
            bpe: cfg.bpe.clone(),
            bpe_codes: None,
            sentencepiece_model: None,
            source_lang: lang(&cfg.moses_source_lang, &cfg.source_lang),
            target_lang: lang(&cfg.moses_target_lang, &cfg.target_lang),
            moses_no_dash_splits: cfg.moses_no_dash_splits,
            moses_no_escape: cfg.moses_no_escape,
        }
    }

    /// Fills `bpe_codes` / `sentencepiece_model` from the fairseq-hub model-directory files
    /// (`bpecodes`, `sentencepiece.bpe.model`) when they are not set.
    pub fn with_model_dir(mut self, dir: &Path) -> Self {
        if self.bpe_codes.is_none() {
            let codes = dir.join("bpecodes");
            if codes.is_file() {
                self.bpe_codes = Some(codes);
            }
        }
        if self.sentencepiece_model.is_none() {
            let model = dir.join("sentencepiece.bpe.model");
            if model.is_file() {
                self.sentencepiece_model = Some(model);
            }
        }
        self
    }
}

#[derive(Debug)]
enum Tokenizer {
    Moses { tok: Box<MosesTokenizer>, detok: MosesDetokenizer, dash_splits: bool, escape: bool },
    Space,
    None,
}

#[derive(Debug)]
enum Subword {
    Bpe(Bpe),
    SentencePiece(SentencePieceModel),
    /// NLLB's sentencepiece BPE as transformers 5 saves it, `tokenizer.json`.
    TokenizerJson(hf_bpe::Tokenizer),
    None,
}

#[derive(Debug)]
pub struct TextPipeline {
    tokenizer: Tokenizer,
    subword: Subword,
    /// Languages the Moses tokenizer has no data for (they get sacremoses' generic rules).
    fallback_languages: Vec<String>,
}

fn is_none(name: &Option<String>) -> bool {
    name.as_deref().is_none_or(|n| n.is_empty() || n.eq_ignore_ascii_case("none"))
}

impl TextPipeline {
    pub fn new(opts: &PipelineOptions) -> Result<Self, PipelineError> {
        let mut fallback_languages = Vec::new();
        let tokenizer = if is_none(&opts.tokenizer) {
            Tokenizer::None
        } else {
            match opts.tokenizer.as_deref().unwrap_or_default() {
                "moses" => {
                    for lang in [&opts.source_lang, &opts.target_lang] {
                        if !moses::has_language_data(lang) && !fallback_languages.contains(lang) {
                            fallback_languages.push(lang.clone());
                        }
                    }
                    Tokenizer::Moses {
                        tok: Box::new(MosesTokenizer::new(&opts.source_lang)),
                        detok: MosesDetokenizer::new(&opts.target_lang),
                        dash_splits: !opts.moses_no_dash_splits,
                        escape: !opts.moses_no_escape,
                    }
                }
                "space" => Tokenizer::Space,
                other => return Err(PipelineError::UnknownTokenizer(other.to_string())),
            }
        };
        let subword = if is_none(&opts.bpe) {
            Subword::None
        } else {
            match opts.bpe.as_deref().unwrap_or_default() {
                kind @ ("subword_nmt" | "fastbpe") => {
                    let fastbpe = kind == "fastbpe";
                    let codes = opts
                        .bpe_codes
                        .as_deref()
                        .ok_or(PipelineError::MissingCodes(if fastbpe { "fastbpe" } else { "subword_nmt" }))?;
                    Subword::Bpe(Bpe::load(codes, fastbpe)?)
                }
                "sentencepiece" => {
                    let model = opts.sentencepiece_model.as_deref().ok_or(PipelineError::MissingSentencePieceModel)?;
                    match model.extension().is_some_and(|e| e == "json") {
                        true => Subword::TokenizerJson(hf_bpe::Tokenizer::from_file(model)?),
                        false => Subword::SentencePiece(SentencePieceModel::load(model)?),
                    }
                }
                other => return Err(PipelineError::UnknownBpe(other.to_string())),
            }
        };
        Ok(TextPipeline { tokenizer, subword, fallback_languages })
    }

    /// Languages for which Moses falls back to sacremoses' generic rules and English prefixes.
    pub fn fallback_languages(&self) -> &[String] {
        &self.fallback_languages
    }

    /// Raw text -> the subword string fairseq would look up in the dictionary.
    pub fn encode(&self, raw: &str) -> String {
        let tokenized = match &self.tokenizer {
            Tokenizer::Moses { tok, dash_splits, escape, .. } => tok.tokenize(raw, *dash_splits, *escape),
            Tokenizer::Space => space_encode(raw),
            Tokenizer::None => raw.to_string(),
        };
        match &self.subword {
            Subword::Bpe(bpe) => bpe.encode(&tokenized),
            Subword::SentencePiece(sp) => sp.encode_as_string(&tokenized),
            Subword::TokenizerJson(t) => tokenizer_json_encode(t, &tokenized),
            Subword::None => tokenized,
        }
    }

    /// A subword string (e.g. a hypothesis) -> detokenized text.
    pub fn decode(&self, subwords: &str) -> Result<String, PipelineError> {
        let text = match &self.subword {
            Subword::Bpe(_) => remove_bpe(subwords),
            Subword::SentencePiece(_) => sentencepiece::decode(subwords),
            Subword::TokenizerJson(t) => t.decode(&subwords.split(' ').filter(|s| !s.is_empty()).collect::<Vec<_>>()),
            Subword::None => subwords.to_string(),
        };
        Ok(match &self.tokenizer {
            Tokenizer::Moses { detok, .. } => detok.detokenize_str(&text)?,
            Tokenizer::Space | Tokenizer::None => text,
        })
    }

    /// The `post_process` / `--remove-bpe` symbol name fairseq uses for this pipeline's bpe.
    pub fn post_process(&self) -> Option<&'static str> {
        match &self.subword {
            Subword::Bpe(_) => Some("subword_nmt"),
            Subword::SentencePiece(_) | Subword::TokenizerJson(_) => Some("sentencepiece"),
            Subword::None => None,
        }
    }
}

/// The tokens of `text` as the dictionary names them: NLLB's language tokens (added tokens that
/// are no `<...>` specials, outside the vocabulary) are fairseq's `__eng_Latn__`.
fn tokenizer_json_encode(t: &hf_bpe::Tokenizer, text: &str) -> String {
    let tokens: Vec<String> = t
        .encode(text)
        .into_iter()
        .map(|id| {
            let token = t.id_to_token(id).unwrap_or(super::dictionary::UNK_WORD);
            let language = !(token.starts_with('<') && token.ends_with('>')) && !t.vocab().contains_key(token);
            if language { format!("__{token}__") } else { token.to_string() }
        })
        .collect();
    tokens.join(" ")
}

/// fairseq's `SpaceTokenizer.encode`: `re.sub(r"\s+", " ", x)` (Python's `\s`).
fn space_encode(x: &str) -> String {
    let mut out = String::with_capacity(x.len());
    let mut in_space = false;
    for c in x.chars() {
        if super::pyutil::is_py_space(c) {
            if !in_space {
                out.push(' ');
            }
            in_space = true;
        } else {
            out.push(c);
            in_space = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_errors_are_reported() {
        let mut opts = PipelineOptions { bpe: Some("subword_nmt".into()), ..Default::default() };
        assert!(matches!(TextPipeline::new(&opts), Err(PipelineError::MissingCodes(_))));
        opts.bpe = Some("gpt2".into());
        assert!(matches!(TextPipeline::new(&opts), Err(PipelineError::UnknownBpe(_))));
        let p = TextPipeline::new(&PipelineOptions { tokenizer: Some("space".into()), ..Default::default() }).unwrap();
        assert_eq!(p.encode(" a\x1c\tb  "), " a b ");
        assert_eq!(p.decode("a b").unwrap(), "a b");
    }

    #[test]
    fn a_tokenizer_json_named_as_the_sentencepiece_model_is_read_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = serde_json::json!({
            "added_tokens": [{ "id": 5, "content": "eng_Latn", "special": true }, { "id": 1, "content": "<unk>", "special": true }],
            "pre_tokenizer": { "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "always", "split": true },
            "decoder": { "type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "always", "split": true },
            "model": { "type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "vocab": { "<unk>": 1, "\u{2581}": 2, "a": 3, "\u{2581}a": 4 }, "merges": [["\u{2581}", "a"]] }
        });
        std::fs::write(dir.path().join("tokenizer.json"), file.to_string()).unwrap();
        let opts = PipelineOptions { bpe: Some("sentencepiece".into()), sentencepiece_model: Some(dir.path().join("tokenizer.json")), ..Default::default() };
        let p = TextPipeline::new(&opts).unwrap();
        assert_eq!(p.encode("a xy eng_Latn"), "\u{2581}a \u{2581} <unk> \u{2581} __eng_Latn__");
        assert_eq!(p.decode("\u{2581}a \u{2581}a a").unwrap(), "a aa");
        assert_eq!(p.post_process(), Some("sentencepiece"));
    }
}
