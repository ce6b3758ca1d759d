//! A Hugging Face model directory as files: which weights file and model class it holds, and
//! what it must hold, checked before anything is read from it, so that a broken copy is named by
//! what is wrong with it: its `config.json`, its `model_type`, a missing tokenizer or weights
//! file, or a Git LFS pointer left where a file's content belongs. `hf.rs` reads the model,
//! `hf_tokens.rs` its token ids; both build on this file, never the other way round.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The weights files of a Hugging Face directory, best first.
pub const WEIGHTS_FILES: [&str; 2] = ["model.safetensors", "pytorch_model.bin"];

/// The model classes read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfArchitecture {
    /// `M2M100ForConditionalGeneration`: fairseq's `transformer` with pre-norm layers, one
    /// shared table, sinusoidal positions, the multilingual task's language tokens.
    M2m100,
    /// `FSMTForConditionalGeneration`: fairseq's `transformer` (post-norm), two dictionaries,
    /// Moses and BPE.
    Fsmt,
}


/// The directory's `config.json`, when `weights` is the weights file of a Hugging Face model.
pub(super) fn config_beside(weights: &Path) -> Option<PathBuf> {
    let name = weights.file_name()?.to_str()?;
    let config = weights.with_file_name("config.json");
    (WEIGHTS_FILES.contains(&name) && config.is_file()).then_some(config)
}

/// Whether `weights` is the weights file of a Hugging Face directory this reader knows, and which.
pub fn architecture(weights: &Path) -> Option<HfArchitecture> {
    let text = std::fs::read(config_beside(weights)?).ok()?;
    let v: Value = serde_json::from_slice(&text).ok()?;
    let model_type = v.get("model_type")?.as_str()?;
    MODEL_TYPES.iter().find(|(t, _)| *t == model_type).map(|(_, a)| *a)
}

/// The weights file of `dir`, if it is a Hugging Face directory this reader knows.
pub fn find_weights(dir: &Path) -> Option<PathBuf> {
    WEIGHTS_FILES.iter().map(|n| dir.join(n)).find(|p| p.is_file() && architecture(p).is_some())
}

/// Whether `path` is the weights file of a Hugging Face directory (a `config.json` beside it),
/// readable or not: [`super::hf::load`] says what is wrong with one it cannot read.
pub fn is_weights_file(path: &Path) -> bool {
    config_beside(path).is_some()
}


/// NLLB-200's directories: an M2M-100 model whose tokenizer (`NllbTokenizer`) has no
/// `vocab.json`: its dictionary is the sentencepiece model's pieces (id = piece id + 1 after
/// fairseq's four specials), or where transformers 5 saved the tokenizer without that model,
/// `tokenizer.json`'s vocabulary, which gives the same ids; then the added tokens at the ids the
/// tokenizer files give them (the language codes, `eng_Latn`, which fairseq names
/// `__eng_Latn__`, then `<mask>`; see [`super::hf_tokens`]).
pub fn is_nllb(dir: &Path) -> bool {
    let m2m100 = || tokenizer_class(dir).is_some_and(|c| c == "M2M100Tokenizer");
    let vocabulary = dir.join(NLLB_VOCABULARY).is_file() || dir.join(NLLB_TOKENIZER_JSON).is_file();
    !dir.join("vocab.json").is_file() && vocabulary && !m2m100()
}

/// The file an NLLB directory's dictionary and sentencepiece are read from, where it holds it.
pub const NLLB_VOCABULARY: &str = "sentencepiece.bpe.model";

/// The file they are read from where the sentencepiece model is not there (transformers 5).
pub const NLLB_TOKENIZER_JSON: &str = "tokenizer.json";

/// The file the dictionary and the subword pieces of the NLLB directory `dir` are read from: its
/// sentencepiece model, which fairseq reads, else its `tokenizer.json`.
pub fn nllb_vocabulary(dir: &Path) -> &'static str {
    match dir.join(NLLB_VOCABULARY).is_file() || !dir.join(NLLB_TOKENIZER_JSON).is_file() {
        true => NLLB_VOCABULARY,
        false => NLLB_TOKENIZER_JSON,
    }
}


/// The first line of a Git LFS pointer file.
pub const LFS_POINTER_START: &[u8] = b"version https://git-lfs.github.com/spec/v1";

/// Whether `bytes` are a Git LFS pointer (a small text file) rather than the content it stands for.
pub fn is_lfs_pointer(bytes: &[u8]) -> bool {
    bytes.len() <= 1024 && bytes.starts_with(LFS_POINTER_START)
}

/// Whether the file at `path` is a Git LFS pointer (false when it cannot be read).
pub fn file_is_lfs_pointer(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else { return false };
    if file.metadata().map_or(true, |m| m.len() > 1024) {
        return false;
    }
    let mut head = Vec::new();
    file.take(1024).read_to_end(&mut head).is_ok() && is_lfs_pointer(&head)
}

/// The `model_type`s read, with their architectures.
pub const MODEL_TYPES: [(&str, HfArchitecture); 2] = [("m2m_100", HfArchitecture::M2m100), ("fsmt", HfArchitecture::Fsmt)];

/// The sharded weights indexes transformers writes.
const WEIGHTS_INDEXES: [&str; 2] = ["model.safetensors.index.json", "pytorch_model.bin.index.json"];

/// Files a tokenizer of a Hugging Face directory leaves beside `config.json`.
const TOKENIZER_FILES: [&str; 7] =
    ["tokenizer_config.json", "vocab.json", "sentencepiece.bpe.model", "vocab-src.json", "vocab-tgt.json", "merges.txt", "tokenizer.json"];

fn supported() -> String {
    MODEL_TYPES.map(|(t, _)| t).join(", ")
}

/// Why a Hugging Face directory cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HfDirError {
    /// `config.json` could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `config.json` is not JSON, or not a transformers config (the error names the line).
    #[error("{}: not a valid transformers config: {source}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// serde_json's error, with its line and column.
        source: serde_json::Error,
    },
    /// A config file that is JSON but not one object.
    #[error("{}: not a JSON object, as transformers writes its configs", path.display())]
    NotAnObject {
        /// The file.
        path: PathBuf,
    },
    /// A config field that is neither compared with the fairseq model nor known to leave
    /// transformers' output unchanged (see `hf_fields`).
    #[error("{}: field {field:?} is not one tchseq knows the meaning of in a {class}: it cannot say whether the conversion computes what the fairseq model does", path.display())]
    UnknownField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// transformers' class the file is read by.
        class: &'static str,
    },
    /// `config.json` names no `model_type`.
    #[error("{}: no model_type (tchseq reads {})", path.display(), supported())]
    NoModelType {
        /// The file.
        path: PathBuf,
    },
    /// A `model_type` that is not one of fairseq's translation models.
    #[error("{}: model_type {model_type:?} is not a model tchseq reads (it reads {})", path.display(), supported())]
    UnknownModelType {
        /// The file.
        path: PathBuf,
        /// What it names.
        model_type: String,
    },
    /// A file the model's tokenizer needs is not there.
    #[error("{}: no {file}, which {needed_by} needs", dir.display())]
    MissingFile {
        /// The model directory.
        dir: PathBuf,
        /// The file's name.
        file: &'static str,
        /// The tokenizer (or model) that reads it.
        needed_by: &'static str,
    },
    /// No weights file.
    #[error("{}: no weights: looked for {} (a Hugging Face {model_type} model)", dir.display(), WEIGHTS_FILES.join(" and "))]
    NoWeights {
        /// The model directory.
        dir: PathBuf,
        /// Its `model_type`.
        model_type: String,
    },
    /// Weights split over several files, which are not read.
    #[error("{}: sharded weights, which tchseq does not read; save the model as one {} file", index.display(), WEIGHTS_FILES[0])]
    Sharded {
        /// The shards' index file.
        index: PathBuf,
    },
    /// Two tokenizer files (or two entries of one) give one token two ids, or one id two tokens.
    #[error("{}: the added tokens of {} disagree: {:?} at id {}, {:?} at id {}", .0.dir.display(), .0.files, .0.token, .0.id, .0.other, .0.other_id)]
    AddedTokens(Box<AddedTokensClash>),
    /// No reading of the tokenizer files gives as many token ids as the model's embedding has rows.
    #[error(
        "{}: the tokenizer gives ids 0..{} ({} from {}, {} more pinned by {}{}), at most {} more unused (num_madeup_words), but {} has {} embedding rows",
        .0.dir.display(),
        .0.named_len,
        .0.base_len,
        .0.base_file,
        .0.pinned,
        .0.pin_files,
        .0.language_codes.as_ref().map_or(String::new(), |(name, n)| format!(", {n} from language_codes {name:?}")),
        .0.madeup,
        .0.weights.display(),
        .0.rows
    )]
    TokenIds(Box<TokenIdCounts>),
    /// A Git LFS pointer where a file's content belongs.
    #[error("{} is a Git LFS pointer, not the {what}: run `git lfs pull`", path.display())]
    LfsPointer {
        /// The pointer file.
        path: PathBuf,
        /// What the file should hold (`weights`, `sentencepiece model`, ...).
        what: &'static str,
    },
}

/// Two readings of one added token (see [`HfDirError::AddedTokens`]).
#[derive(Debug)]
pub struct AddedTokensClash {
    /// The model directory.
    pub dir: PathBuf,
    /// The files that pin tokens to ids.
    pub files: String,
    /// The token.
    pub token: String,
    /// Its id.
    pub id: usize,
    /// The token (or the same token) the other reading gives.
    pub other: String,
    /// Its id there.
    pub other_id: usize,
}

/// The counts of a tokenizer whose ids disagree with the weights (see [`HfDirError::TokenIds`]).
#[derive(Debug)]
pub struct TokenIdCounts {
    /// The model directory.
    pub dir: PathBuf,
    /// The base vocabulary file (`vocab.json`, `sentencepiece.bpe.model`).
    pub base_file: String,
    /// Its tokens.
    pub base_len: usize,
    /// The tokens the added tokens place past it.
    pub pinned: usize,
    /// The files that pin tokens (`added_tokens.json`, ...).
    pub pin_files: String,
    /// `language_codes` and its count, where its tokens were placed.
    pub language_codes: Option<(String, usize)>,
    /// One past the highest id the tokenizer gives a token.
    pub named_len: usize,
    /// The unused rows allowed past it (and between).
    pub madeup: usize,
    /// The weights file (or `config.json`, whose `vocab_size` stood in for it).
    pub weights: PathBuf,
    /// The embedding's rows.
    pub rows: usize,
}

/// `config.json`, parsed.
pub(super) fn read_config_json(path: &Path) -> Result<Value, HfDirError> {
    let text = std::fs::read(path).map_err(|source| HfDirError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&text).map_err(|source| HfDirError::Config { path: path.to_path_buf(), source })
}

/// The architecture `config.json`'s `model_type` names.
pub(super) fn architecture_of(path: &Path, config: &Value) -> Result<HfArchitecture, HfDirError> {
    let Some(model_type) = config.get("model_type") else {
        return Err(HfDirError::NoModelType { path: path.to_path_buf() });
    };
    let model_type = model_type.as_str().map_or_else(|| model_type.to_string(), str::to_string);
    MODEL_TYPES
        .iter()
        .find(|(t, _)| *t == model_type)
        .map(|(_, a)| *a)
        .ok_or(HfDirError::UnknownModelType { path: path.to_path_buf(), model_type })
}

/// `tokenizer_config.json`'s `tokenizer_class`, if it names one.
pub(super) fn tokenizer_class(dir: &Path) -> Option<String> {
    let text = std::fs::read(dir.join("tokenizer_config.json")).ok()?;
    let v: Value = serde_json::from_slice(&text).ok()?;
    v.get("tokenizer_class")?.as_str().map(str::to_string)
}

fn need(dir: &Path, file: &'static str, needed_by: &'static str) -> Result<(), HfDirError> {
    let path = dir.join(file);
    if !path.is_file() {
        return Err(HfDirError::MissingFile { dir: dir.to_path_buf(), file, needed_by });
    }
    if file.ends_with(".model") && file_is_lfs_pointer(&path) {
        return Err(HfDirError::LfsPointer { path, what: "sentencepiece model" });
    }
    if file == NLLB_TOKENIZER_JSON && file_is_lfs_pointer(&path) {
        return Err(HfDirError::LfsPointer { path, what: "tokenizer file" });
    }
    Ok(())
}

/// The tokenizer files `arch` reads are all there (and are no LFS pointers).
pub(super) fn check_tokenizer_files(dir: &Path, arch: HfArchitecture) -> Result<(), HfDirError> {
    match arch {
        HfArchitecture::M2m100 if is_nllb(dir) || tokenizer_class(dir).is_some_and(|c| c == "NllbTokenizer") => {
            match nllb_vocabulary(dir) {
                NLLB_VOCABULARY if !dir.join(NLLB_VOCABULARY).is_file() => need(dir, "sentencepiece.bpe.model or tokenizer.json", "NllbTokenizer")?,
                file => need(dir, file, "NllbTokenizer")?,
            }
            need(dir, "tokenizer_config.json", "NllbTokenizer")
        }
        HfArchitecture::M2m100 => {
            need(dir, "vocab.json", "M2M100Tokenizer")?;
            need(dir, "sentencepiece.bpe.model", "M2M100Tokenizer")
        }
        HfArchitecture::Fsmt => {
            need(dir, "vocab-src.json", "FSMTTokenizer")?;
            need(dir, "vocab-tgt.json", "FSMTTokenizer")?;
            need(dir, "merges.txt", "FSMTTokenizer")
        }
    }
}

/// The weights file of a Hugging Face directory: None when `dir` is no Hugging Face directory (no
/// `config.json`, or one with neither a `model_type` nor tokenizer files beside it, or a
/// CTranslate2 directory's), else the weights file or why the directory cannot be read.
pub fn find(dir: &Path) -> Result<Option<PathBuf>, HfDirError> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Ok(None);
    }
    let ctranslate2 = dir.join("model.bin").is_file() && !WEIGHTS_FILES.iter().any(|w| dir.join(w).is_file());
    let config = match read_config_json(&config_path) {
        Ok(config) => config,
        Err(_) if ctranslate2 => return Ok(None),
        Err(e) => return Err(e),
    };
    let has_tokenizer = TOKENIZER_FILES.iter().any(|f| dir.join(f).is_file());
    if config.get("model_type").is_none() && (ctranslate2 || !has_tokenizer) {
        return Ok(None);
    }
    let arch = architecture_of(&config_path, &config)?;
    check_tokenizer_files(dir, arch)?;
    let Some(weights) = WEIGHTS_FILES.iter().map(|w| dir.join(w)).find(|p| p.is_file()) else {
        if let Some(index) = WEIGHTS_INDEXES.iter().map(|i| dir.join(i)).find(|p| p.is_file()) {
            return Err(HfDirError::Sharded { index });
        }
        let model_type = MODEL_TYPES.iter().find(|(_, a)| *a == arch).map_or("", |(t, _)| t).to_string();
        return Err(HfDirError::NoWeights { dir: dir.to_path_buf(), model_type });
    };
    if file_is_lfs_pointer(&weights) {
        return Err(HfDirError::LfsPointer { path: weights, what: "weights" });
    }
    Ok(Some(weights))
}
