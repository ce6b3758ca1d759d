//! Hugging Face directories of fairseq's models, read back as the fairseq checkpoints they were
//! converted from: `M2M100ForConditionalGeneration` (M2M-100, NLLB-200 dense) and
//! `FSMTForConditionalGeneration` (fairseq's WMT19 models). transformers'
//! `convert_m2m100_original_checkpoint_to_pytorch.py` and
//! `convert_fsmt_original_pytorch_checkpoint_to_pytorch.py`, run backwards: `config.json` becomes
//! fairseq's `args`, the weights take fairseq's state-dict names, and the vocabulary files are the
//! dictionaries (`text::Dictionary::from_vocab_json`).
//!
//! The weights file (`model.safetensors`, or `pytorch_model.bin` through the same safe reader as a
//! `.pt`) is the checkpoint's path; `config.json` beside it says it is a Hugging Face model.

use std::collections::HashMap;
use std::path::Path;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tch::Tensor;

pub use super::hf_dir::{architecture, find_weights, is_nllb, is_weights_file, nllb_vocabulary, HfArchitecture, NLLB_TOKENIZER_JSON, NLLB_VOCABULARY, WEIGHTS_FILES};
use super::hf_dir::{self, config_beside, HfDirError};
use super::hf_tokens::{self, TokenizerKind};
use super::pickle::Node;
use super::{invalid, open, read_container, upgrade, Checkpoint, CheckpointError, CheckpointSummary, ConfigSource, Materializer};
use crate::config::TransformerConfig;

/// `config.json`, the fields that decide fairseq's config.
#[derive(Debug, Deserialize)]
struct HfConfig {
    d_model: i64,
    encoder_layers: i64,
    decoder_layers: i64,
    encoder_attention_heads: i64,
    decoder_attention_heads: i64,
    encoder_ffn_dim: i64,
    decoder_ffn_dim: i64,
    #[serde(default = "relu")]
    activation_function: String,
    max_position_embeddings: i64,
    /// Both classes default it to true.
    #[serde(default = "yes")]
    scale_embedding: bool,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    /// FSMT: `[source, target]`.
    #[serde(default)]
    langs: Vec<String>,
}

fn relu() -> String {
    "relu".into()
}

fn yes() -> bool {
    true
}

fn read_config(weights: &Path) -> Result<(HfArchitecture, HfConfig), CheckpointError> {
    let path = config_beside(weights).ok_or_else(|| invalid(weights, "no config.json beside it"))?;
    let value = hf_dir::read_config_json(&path)?;
    let arch = hf_dir::architecture_of(&path, &value)?;
    let text = std::fs::read(&path).map_err(|source| CheckpointError::Io { path: path.clone(), source })?;
    let config: HfConfig = serde_json::from_slice(&text).map_err(|source| HfDirError::Config { path: path.clone(), source })?;
    hf_dir::check_tokenizer_files(weights.parent().unwrap_or(Path::new(".")), arch)?;
    Ok((arch, config))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, CheckpointError> {
    let text = std::fs::read(path).map_err(|source| CheckpointError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_slice(&text).map_err(|e| invalid(path, format!("not what transformers writes there: {e}")))
}

/// M2M-100's languages, in id order, as the tokenizer files give them (see [`hf_tokens`]): the
/// `__xx__` tokens of `vocab.json` (a directory converted from a fairseq checkpoint), else the
/// language tokens the added tokens pin, else the tokenizer's `language_codes` list.
fn m2m100_langs(dir: &Path) -> Result<Vec<String>, CheckpointError> {
    if is_nllb(dir) {
        // their ids need the sentencepiece model's size: the dictionary's loading places them
        return hf_tokens::token_table_langs_only(dir);
    }
    let vocab: HashMap<String, i64> = read_json(&dir.join("vocab.json"))?;
    Ok(hf_tokens::token_table(dir, TokenizerKind::M2m100, "vocab.json", vocab.len(), &vocab)?.langs)
}

/// The tokens that follow a Hugging Face vocabulary file in the model's dictionary, as the
/// tokenizer files give their ids (see [`hf_tokens`]); none for FSMT's files.
pub fn tokens_after_vocabulary(vocab_path: &Path, vocabulary_len: usize) -> Result<Vec<String>, CheckpointError> {
    let dir = vocab_path.parent().unwrap_or(Path::new("."));
    let m2m100 = find_weights(dir).and_then(|w| architecture(&w)) == Some(HfArchitecture::M2m100);
    let name = vocab_path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if m2m100 && [NLLB_VOCABULARY, NLLB_TOKENIZER_JSON].contains(&name) && is_nllb(dir) {
        return Ok(hf_tokens::token_table(dir, TokenizerKind::Nllb, name, vocabulary_len, &HashMap::new())?.after);
    }
    if !m2m100 || name != "vocab.json" {
        return Ok(Vec::new());
    }
    let vocab: HashMap<String, i64> = read_json(vocab_path)?;
    Ok(hf_tokens::token_table(dir, TokenizerKind::M2m100, "vocab.json", vocabulary_len, &vocab)?.after)
}

/// fairseq's `args` for the model `config.json` describes.
fn namespace(arch: HfArchitecture, c: &HfConfig, dir: &Path) -> Result<Map<String, Value>, CheckpointError> {
    let mut ns = Map::new();
    for (k, v) in [
        ("arch", json!("transformer")),
        ("encoder_embed_dim", json!(c.d_model)),
        ("decoder_embed_dim", json!(c.d_model)),
        ("encoder_ffn_embed_dim", json!(c.encoder_ffn_dim)),
        ("decoder_ffn_embed_dim", json!(c.decoder_ffn_dim)),
        ("encoder_layers", json!(c.encoder_layers)),
        ("decoder_layers", json!(c.decoder_layers)),
        ("encoder_attention_heads", json!(c.encoder_attention_heads)),
        ("decoder_attention_heads", json!(c.decoder_attention_heads)),
        ("activation_fn", json!(c.activation_function)),
        ("no_scale_embedding", json!(!c.scale_embedding)),
        ("max_source_positions", json!(c.max_position_embeddings)),
        ("max_target_positions", json!(c.max_position_embeddings)),
    ] {
        ns.insert(k.into(), v);
    }
    match arch {
        HfArchitecture::M2m100 => {
            let langs = m2m100_langs(dir)?;
            let pairs: Vec<String> = langs.iter().flat_map(|s| langs.iter().filter(move |t| *t != s).map(move |t| format!("{s}-{t}"))).collect();
            for (k, v) in [
                ("encoder_normalize_before", json!(true)),
                ("decoder_normalize_before", json!(true)),
                ("share_all_embeddings", json!(true)),
                ("share_decoder_input_output_embed", json!(true)),
                ("task", json!("translation_multi_simple_epoch")),
                ("langs", json!(langs.join(","))),
                ("lang_pairs", json!(pairs.join(","))),
                ("encoder_langtok", json!("src")),
                ("decoder_langtok", json!(true)),
                ("source_dict", json!(m2m100_vocabulary(dir))),
                ("target_dict", json!(m2m100_vocabulary(dir))),
                ("bpe", json!("sentencepiece")),
                ("sentencepiece_model", json!(if is_nllb(dir) { nllb_vocabulary(dir) } else { NLLB_VOCABULARY })),
            ] {
                ns.insert(k.into(), v);
            }
        }
        HfArchitecture::Fsmt => {
            let [src, tgt] = c.langs.as_slice() else {
                return Err(invalid(&dir.join("config.json"), "an FSMT config names its two languages in `langs`"));
            };
            for (k, v) in [
                ("share_all_embeddings", json!(c.tie_word_embeddings.unwrap_or(false))),
                ("share_decoder_input_output_embed", json!(true)),
                ("source_lang", json!(src)),
                ("target_lang", json!(tgt)),
                ("tokenizer", json!("moses")),
                ("moses_source_lang", json!(src)),
                ("moses_target_lang", json!(tgt)),
            ] {
                ns.insert(k.into(), v);
            }
            // the converter writes an empty merges.txt for a model trained without BPE codes:
            // fairseq ran no BPE then, and neither does this
            if std::fs::metadata(dir.join("merges.txt")).is_ok_and(|m| m.len() > 0) {
                ns.insert("bpe".into(), json!("subword_nmt"));
                ns.insert("bpe_codes".into(), json!("merges.txt"));
            }
        }
    }
    Ok(ns)
}

/// The file an M2M-100 directory's dictionary is read from: `vocab.json`, or NLLB's
/// sentencepiece model (or `tokenizer.json`, see [`nllb_vocabulary`]).
fn m2m100_vocabulary(dir: &Path) -> &'static str {
    if is_nllb(dir) {
        nllb_vocabulary(dir)
    } else {
        "vocab.json"
    }
}

fn fairseq_config(weights: &Path) -> Result<(HfArchitecture, bool, TransformerConfig), CheckpointError> {
    let (arch, hf) = read_config(weights)?;
    let dir = weights.parent().unwrap_or(Path::new("."));
    let ns = namespace(arch, &hf, dir)?;
    let mut config = TransformerConfig::from_namespace(&ns, None, None, None).map_err(|source| CheckpointError::Config { path: weights.to_path_buf(), source })?;
    config.dictionary_files = Some(match arch {
        HfArchitecture::M2m100 => (m2m100_vocabulary(dir).into(), m2m100_vocabulary(dir).into()),
        HfArchitecture::Fsmt => ("vocab-src.json".into(), "vocab-tgt.json".into()),
    });
    let tied = config.share_all_embeddings;
    Ok((arch, tied, config))
}

/// The fairseq names of a Hugging Face weight (none for a weight fairseq computes itself, as the
/// sinusoidal positions). A table tied to others is all their fairseq names: M2M-100's shared
/// table, FSMT's encoder table under `tie_word_embeddings`, FSMT's decoder table (which is always
/// its output projection).
fn fairseq_names(arch: HfArchitecture, tied: bool, name: &str) -> Vec<String> {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    const ALL: [&str; 3] = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight"];
    match (arch, name) {
        (_, n) if n.contains(".embed_positions.") => Vec::new(),
        (HfArchitecture::M2m100, "model.shared.weight" | "model.encoder.embed_tokens.weight" | "model.decoder.embed_tokens.weight" | "lm_head.weight") => names(&ALL),
        (HfArchitecture::Fsmt, "model.encoder.embed_tokens.weight" | "model.decoder.embed_tokens.weight" | "model.decoder.output_projection.weight") if tied => names(&ALL),
        (HfArchitecture::Fsmt, "model.decoder.embed_tokens.weight" | "model.decoder.output_projection.weight") => names(&ALL[1..]),
        (_, n) => n.strip_prefix("model.").map(|s| vec![s.to_string()]).unwrap_or_default(),
    }
}

/// Reads the weights file of a Hugging Face directory as fairseq's checkpoint: the weights stay
/// over the file where it stores them as they are, as a `.pt`'s do.
pub fn load(weights: &Path) -> Result<Checkpoint, CheckpointError> {
    let (arch, tied, config) = fairseq_config(weights)?;
    let file = open(weights, true)?;
    let raw = read_container(weights, &file.map)?;
    let p = &raw.pickle;
    let root = p.dict(&p.root).ok_or_else(|| invalid(weights, format!("top level is a {}, not a dict of tensors", p.type_name(&p.root))))?;
    let mut m = Materializer::new(weights, &raw, &file);
    let mut sd: IndexMap<String, Tensor> = IndexMap::with_capacity(root.entries.len());
    for (k, v) in &root.entries {
        let super::pickle::Value::Str(name) = k else {
            return Err(invalid(weights, format!("a {} key", p.type_name(k))));
        };
        if !matches!(p.node(v), Some(Node::Tensor(_))) {
            continue;
        }
        for fairseq in fairseq_names(arch, tied, name) {
            // a tied table stored under several names is the same weight; the first wins
            if !sd.contains_key(&fairseq) {
                sd.insert(fairseq, m.tensor(name, v)?);
            }
        }
    }
    // transformers' converters drop the modules' `version` buffers; the model they were made from
    // is fairseq's current one (version 3: final layer norms as the config says)
    for key in ["encoder.version", "decoder.version"] {
        let version = Tensor::f_from_slice(&[3f32]).map_err(|source| CheckpointError::Torch { path: weights.to_path_buf(), name: key.into(), source })?;
        sd.entry(key.to_string()).or_insert(version);
    }
    let state_dict = upgrade::upgrade_state_dict(&config, sd).map_err(|source| CheckpointError::Upgrade { path: weights.to_path_buf(), source })?;
    let file_storages = m.file_storages;
    Ok(Checkpoint { path: weights.to_path_buf(), format: raw.format, config_source: ConfigSource::HuggingFace, config, state_dict, file_storages })
}

/// What [`load`] reads of the model, without its weights.
pub fn read_summary(weights: &Path) -> Result<CheckpointSummary, CheckpointError> {
    let (arch, tied, config) = fairseq_config(weights)?;
    let file = open(weights, false)?;
    let raw = read_container(weights, &file.map)?;
    let p = &raw.pickle;
    let root = p.dict(&p.root).ok_or_else(|| invalid(weights, format!("top level is a {}, not a dict of tensors", p.type_name(&p.root))))?;
    let rows = |fairseq: &str| -> Option<i64> {
        root.entries.iter().find_map(|(k, v)| match (k, p.node(v)) {
            (super::pickle::Value::Str(n), Some(Node::Tensor(t))) if fairseq_names(arch, tied, n).iter().any(|f| f == fairseq) => t.size.first().copied(),
            _ => None,
        })
    };
    Ok(CheckpointSummary {
        format: raw.format,
        config_source: ConfigSource::HuggingFace,
        src_embed_rows: rows("encoder.embed_tokens.weight"),
        tgt_embed_rows: rows("decoder.embed_tokens.weight"),
        config,
    })
}

/// Every weight of a Hugging Face directory under its own name, with the fairseq names it stands
/// for (none for one fairseq computes), and the config read as [`load`] reads it: what `verify
/// --against` compares name by name, so that two stored names for one fairseq weight (an untied
/// copy of a tied table) are both seen.
pub fn read_named(weights: &Path) -> Result<(TransformerConfig, Vec<(String, Vec<String>, Tensor)>), CheckpointError> {
    let (arch, tied, config) = fairseq_config(weights)?;
    let tensors = super::load_tensor_dict(weights)?;
    let named = tensors.into_iter().map(|(name, t)| (name.clone(), fairseq_names(arch, tied, &name), t)).collect();
    Ok((config, named))
}
