//! One model against a conversion of it (`verify --against`): the conversion read back into
//! fairseq's names from any format tchseq reads (a fairseq checkpoint, a Hugging Face directory,
//! a CTranslate2 directory), then compared config field by config field and weight by weight,
//! each weight to its storage's own bound (0 for float32, half a quantization step for int8),
//! and the position tables a format stores to fairseq's sinusoids.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::Serialize;
use tch::{Kind, Tensor};

use tchseq::hub::model_dir::find_checkpoint;
use tchseq::hub::HubError;
use tchseq::checkpoint::{ctranslate2, hf, hf_fields, load_checkpoint, upgrade, Checkpoint, CheckpointError};
use tchseq::config::TransformerConfig;
use tchseq::text::dictionary::Dictionary;
use tchseq::config::sinusoid::{SinusoidError, StoredTable};
use tchseq::libtorch::host::largest;
use tchseq::model::{ModelError, PADDING_IDX};

/// The formats a conversion may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// A fairseq checkpoint.
    Fairseq,
    /// A Hugging Face directory (`checkpoint::hf`).
    HuggingFace,
    /// A CTranslate2 directory (`checkpoint::ctranslate2`).
    Ctranslate2,
}

/// One stored weight of a conversion and the fairseq weight it stands for.
#[derive(Debug)]
pub struct StoredWeight {
    /// Its name in the conversion (a CTranslate2 variable's rows: `name[a..b]`).
    pub stored_as: String,
    /// The fairseq weight it stands for.
    pub fairseq: String,
    /// fp32, dequantized where it was stored otherwise.
    pub tensor: Tensor,
    /// The largest difference its storage allows (broadcastable), None for float32.
    pub bound: Option<Tensor>,
}

/// A stored position table: row `r` is fairseq's position `first + r`.
#[derive(Debug)]
pub struct StoredPositions {
    /// `encoder.embed_positions` or `decoder.embed_positions`.
    pub module: String,
    /// Its name in the conversion.
    pub stored_as: String,
    /// `[rows, C]`, fp32.
    pub table: Tensor,
    /// The position of row 0.
    pub first: i64,
}

/// A conversion read back into fairseq's terms.
#[derive(Debug)]
pub struct Converted {
    /// The format it was read from.
    pub format: Format,
    /// The file read (a checkpoint, a weights file, a `model.bin`).
    pub path: PathBuf,
    /// Its config, as fairseq's.
    pub config: TransformerConfig,
    /// Every stored weight, under fairseq's name.
    pub weights: Vec<StoredWeight>,
    /// The position tables it stores.
    pub positions: Vec<StoredPositions>,
    /// fairseq names → tensors (the first stored weight of each), to build the model from.
    pub state_dict: IndexMap<String, Tensor>,
    /// A CTranslate2 directory as read, for its own fields.
    pub ct2: Option<ctranslate2::Ct2Model>,
}

impl Format {
    /// The format as its makers name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fairseq => "fairseq",
            Self::HuggingFace => "Hugging Face",
            Self::Ctranslate2 => "CTranslate2",
        }
    }
}

fn checkpoint_error(source: CheckpointError) -> HubError {
    HubError::Checkpoint(source)
}

/// Reads `path` (a model directory, a checkpoint, a weights file, or a CTranslate2 directory or
/// `model.bin`) as a conversion.
pub fn read_converted(path: &Path) -> Result<Converted, HubError> {
    let ct2_bin = if path.is_dir() { path.join("model.bin") } else { path.to_path_buf() };
    if ct2_bin.file_name().is_some_and(|n| n == "model.bin") && ct2_bin.is_file() {
        return read_ctranslate2(&ct2_bin);
    }
    let file = match path.is_dir() {
        true => find_checkpoint(path)?.ok_or_else(|| HubError::NoConversion { dir: path.to_path_buf() })?,
        false => path.to_path_buf(),
    };
    if hf::architecture(&file).is_some() {
        let (config, named) = hf::read_named(&file).map_err(checkpoint_error)?;
        let mut weights = Vec::new();
        let mut positions = Vec::new();
        for (name, fairseq, tensor) in named {
            if let Some(module) = name.strip_prefix("model.").and_then(|n| n.strip_suffix(".weight")).filter(|n| n.ends_with(".embed_positions")) {
                positions.push(StoredPositions { module: module.to_string(), stored_as: name.clone(), table: tensor.f_to_kind(Kind::Float).map_err(torch)?, first: 0 });
                continue;
            }
            for f in fairseq {
                weights.push(StoredWeight { stored_as: name.clone(), fairseq: f, tensor: tensor.f_to_kind(Kind::Float).map_err(torch)?, bound: None });
            }
        }
        let state_dict = built_state_dict(&config, &weights)?;
        return Ok(Converted { format: Format::HuggingFace, path: file, config, weights, positions, state_dict, ct2: None });
    }
    let ckpt = load_checkpoint(&file).map_err(checkpoint_error)?;
    let weights = comparable(&ckpt).into_iter().map(|(n, t)| StoredWeight { stored_as: n.clone(), fairseq: n, tensor: t, bound: None }).collect();
    Ok(Converted { format: Format::Fairseq, path: file, config: ckpt.config.clone(), weights, positions: Vec::new(), state_dict: ckpt.state_dict, ct2: None })
}

fn torch(source: tch::TchError) -> HubError {
    HubError::Model { path: PathBuf::from("the conversion"), source: ModelError::Torch(source) }
}

fn read_ctranslate2(model_bin: &Path) -> Result<Converted, HubError> {
    let m = ctranslate2::load(model_bin)?;
    let args = m.fairseq_args()?;
    let config = TransformerConfig::from_namespace(&args, None, None, None)
        .map_err(|source| HubError::Checkpoint(CheckpointError::Config { path: model_bin.to_path_buf(), source }))?;
    let mut weights = Vec::new();
    for map in &m.name_map {
        let Some(tensor) = m.state_dict.get(&map.fairseq) else { continue };
        let bound = m.quantized.get(&map.fairseq).map(|q| q.max_abs_error()).transpose().map_err(torch)?;
        let stored_as = match map.rows {
            Some((a, b)) => format!("{}[{a}..{b}]", map.ct2),
            None => map.ct2.clone(),
        };
        weights.push(StoredWeight { stored_as, fairseq: map.fairseq.clone(), tensor: tensor.shallow_clone(), bound });
    }
    let positions = m
        .position_encodings
        .iter()
        .map(|(module, table)| {
            let side = module.split('.').next().unwrap_or("encoder");
            StoredPositions { module: module.clone(), stored_as: format!("{side}/position_encodings/encodings"), table: table.shallow_clone(), first: m.padding_idx(side) + 1 }
        })
        .collect();
    let state_dict = built_state_dict(&config, &weights)?;
    Ok(Converted { format: Format::Ctranslate2, path: model_bin.to_path_buf(), config, weights, positions, state_dict, ct2: Some(m) })
}

/// The state dict a conversion's model is built from: each fairseq name's first stored weight,
/// with what fairseq derives (versions, position buffers, the encoder's fast-path copies).
fn built_state_dict(config: &TransformerConfig, weights: &[StoredWeight]) -> Result<IndexMap<String, Tensor>, HubError> {
    let mut sd: IndexMap<String, Tensor> = IndexMap::new();
    for w in weights {
        sd.entry(w.fairseq.clone()).or_insert_with(|| w.tensor.shallow_clone());
    }
    for key in ["encoder.version", "decoder.version"] {
        sd.entry(key.to_string()).or_insert(Tensor::f_from_slice(&[3f32]).map_err(torch)?);
    }
    let copy: IndexMap<String, Tensor> = sd.iter().map(|(k, t)| (k.clone(), t.shallow_clone())).collect();
    // a conversion that lacks weights still compares: its model is then simply not built
    Ok(upgrade::upgrade_state_dict(config, copy).unwrap_or(sd))
}

/// The weights worth comparing: all but what fairseq derives from the others or computes.
fn comparable(ckpt: &Checkpoint) -> IndexMap<String, Tensor> {
    ckpt.state_dict
        .iter()
        .filter(|(n, _)| !derived(n))
        .filter_map(|(n, t)| t.f_to_kind(Kind::Float).ok().map(|t| (n.clone(), t)))
        .collect()
}

fn derived(name: &str) -> bool {
    upgrade::is_derived_copy(name) || name.ends_with(".version") || name.ends_with("._float_tensor")
}

/// What a comparison found of one thing (a weight, a table, a config field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Within its bound.
    Ok,
    /// Missing, extra, misshapen or over its bound.
    Fail,
}

/// One fairseq weight against the conversion's.
#[derive(Debug, Serialize)]
pub struct WeightRow {
    /// The fairseq name (a position table: its module).
    pub fairseq: String,
    /// Where the conversion stores it (None: it does not).
    pub stored_as: Option<String>,
    /// The reference's shape.
    pub shape: Vec<i64>,
    /// `max |reference - conversion|`, where the shapes agree.
    pub max_abs_diff: Option<f64>,
    /// `max |reference - conversion| / |reference|`.
    pub max_rel_diff: Option<f64>,
    /// The largest difference allowed (0: equal).
    pub bound: f64,
    /// The verdict.
    pub status: Status,
    /// Why it failed, where the numbers do not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One field of the two configs.
#[derive(Debug, Serialize)]
pub struct ConfigRow {
    /// fairseq's name of the field, or the conversion's where `file` names its file.
    pub field: String,
    /// The conversion's file that holds the field (`config.json`, ...), where it is compared
    /// under the conversion's own name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<&'static str>,
    /// The reference's value.
    pub reference: serde_json::Value,
    /// The conversion's value.
    pub converted: serde_json::Value,
}

const ARCHITECTURE: [&str; 21] = [
    "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads", "encoder_normalize_before", "encoder_learned_pos",
    "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads", "decoder_normalize_before", "decoder_learned_pos",
    "no_decoder_final_norm", "decoder_output_dim", "activation_fn", "share_decoder_input_output_embed", "share_all_embeddings",
    "no_token_positional_embeddings", "no_scale_embedding", "layernorm_embedding", "max_source_positions",
];

/// The architecture fields on which the two configs differ.
pub fn compare_config(reference: &TransformerConfig, converted: &TransformerConfig) -> Vec<ConfigRow> {
    let (a, b) = (serde_json::to_value(reference).unwrap_or_default(), serde_json::to_value(converted).unwrap_or_default());
    ARCHITECTURE
        .iter()
        .filter(|f| a.get(**f) != b.get(**f))
        .map(|f| ConfigRow { field: f.to_string(), file: None, reference: a.get(*f).cloned().unwrap_or_default(), converted: b.get(*f).cloned().unwrap_or_default() })
        .collect()
}

/// The fields of a conversion's own files that differ from what a faithful conversion of
/// `reference` holds, each under the conversion's name: a Hugging Face directory's
/// `config.json` and `generation_config.json` (`hf_fields`), a CTranslate2 directory's
/// `config.json` and spec flags (`ctranslate2::fields`); an error for a field tchseq does not
/// know.
pub fn compare_fields(reference: &Checkpoint, tgt_dict: &Dictionary, converted: &Converted) -> anyhow::Result<Vec<ConfigRow>> {
    let rows = |name: &str| reference.state_dict.get(name).and_then(|t| t.size().first().copied()).unwrap_or(0);
    let model = hf_fields::FairseqModel {
        config: &reference.config,
        bos: tgt_dict.bos(),
        pad: tgt_dict.pad(),
        eos: tgt_dict.eos(),
        bos_word: tgt_dict.symbol(tgt_dict.bos()),
        eos_word: tgt_dict.symbol(tgt_dict.eos()),
        unk_word: tgt_dict.symbol(tgt_dict.unk()),
        source_rows: rows("encoder.embed_tokens.weight"),
        target_rows: rows("decoder.embed_tokens.weight"),
    };
    let diffs = match (&converted.ct2, hf::architecture(&converted.path)) {
        (Some(ct2), _) => ctranslate2::fields::check(ct2, &model)?,
        (None, Some(arch)) => hf_fields::check(converted.path.parent().unwrap_or(Path::new(".")), arch, &model)?,
        (None, None) => Vec::new(),
    };
    Ok(diffs.into_iter().map(|d| ConfigRow { field: d.field, file: Some(d.file), reference: d.faithful, converted: d.found }).collect())
}

/// Every fairseq weight of `reference` against the conversion's (missing ones fail), then every
/// stored weight the reference lacks (extra ones fail), then the stored position tables.
pub fn compare_weights(reference: &Checkpoint, converted: &Converted) -> Result<Vec<WeightRow>, HubError> {
    let ours = comparable(reference);
    let mut rows = Vec::new();
    for (name, t) in &ours {
        let stored: Vec<&StoredWeight> = converted.weights.iter().filter(|w| &w.fairseq == name).collect();
        if stored.is_empty() {
            rows.push(WeightRow { fairseq: name.clone(), stored_as: None, shape: t.size(), max_abs_diff: None, max_rel_diff: None, bound: 0.0, status: Status::Fail, note: Some("missing from the conversion".into()) });
        }
        for w in stored {
            rows.push(weight_row(name, t, w).map_err(torch)?);
        }
    }
    for w in converted.weights.iter().filter(|w| !ours.contains_key(&w.fairseq)) {
        rows.push(WeightRow {
            fairseq: w.fairseq.clone(),
            stored_as: Some(w.stored_as.clone()),
            shape: w.tensor.size(),
            max_abs_diff: None,
            max_rel_diff: None,
            bound: 0.0,
            status: Status::Fail,
            note: Some("the reference has no such weight".into()),
        });
    }
    for p in &converted.positions {
        rows.push(positions_row(p, &converted.config).map_err(torch)?);
    }
    Ok(rows)
}

fn weight_row(name: &str, ours: &Tensor, w: &StoredWeight) -> Result<WeightRow, tch::TchError> {
    let mut row = WeightRow { fairseq: name.to_string(), stored_as: Some(w.stored_as.clone()), shape: ours.size(), max_abs_diff: None, max_rel_diff: None, bound: 0.0, status: Status::Fail, note: None };
    if ours.size() != w.tensor.size() {
        row.note = Some(format!("shape {:?} in the conversion", w.tensor.size()));
        return Ok(row);
    }
    let diff = ours.f_sub(&w.tensor)?.f_abs()?;
    let max_abs = largest(&diff)?;
    let rel = diff.f_div(&ours.f_abs()?.f_clamp_min(f64::MIN_POSITIVE)?)?;
    row.max_abs_diff = Some(max_abs);
    row.max_rel_diff = Some(largest(&rel)?);
    let within = match &w.bound {
        Some(bound) => {
            row.bound = largest(bound)?;
            diff.f_le_tensor(&bound.f_expand_as(&diff)?)?.f_all()?.int64_value(&[]) == 1
        }
        None => max_abs == 0.0,
    };
    if within && max_abs.is_finite() {
        row.status = Status::Ok;
    }
    Ok(row)
}

/// A stored position table against fairseq's sinusoids (the formats here store only those).
fn positions_row(p: &StoredPositions, config: &TransformerConfig) -> Result<WeightRow, tch::TchError> {
    let size = p.table.size();
    let rows = size.first().copied().unwrap_or(0);
    let mut row = WeightRow { fairseq: p.module.clone(), stored_as: Some(p.stored_as.clone()), shape: size.clone(), max_abs_diff: None, max_rel_diff: None, bound: 1e-6, status: Status::Fail, note: None };
    let learned = if p.module.starts_with("encoder") { config.encoder_learned_pos } else { config.decoder_learned_pos };
    if learned || size.len() != 2 || rows == 0 {
        row.note = Some("not a sinusoidal table".into());
        return Ok(row);
    }
    let stored = match StoredTable::compare(&p.table, p.first, PADDING_IDX) {
        Ok(stored) => stored,
        Err(SinusoidError::Torch(e)) => return Err(e),
        Err(e) => {
            row.note = Some(e.to_string());
            return Ok(row);
        }
    };
    let max_abs = largest(&stored.abs_diff)?;
    let beyond_arguments = largest(&stored.beyond_arguments()?)?;
    // a table stored in float16 or bfloat16 is the sinusoids rounded to it: half a unit in its
    // last place more
    if let Some(sixteen) = stored.stored_as {
        row.bound += sixteen.u * largest(&stored.fairseq.f_abs()?)?;
    }
    row.max_abs_diff = Some(max_abs);
    // sin and cos of the same float32 arguments from two math libraries
    let within = beyond_arguments <= row.bound;
    row.bound += largest(&stored.argument_rounding)?;
    if within {
        row.status = Status::Ok;
    } else {
        row.note = Some("differs from fairseq's sinusoids (rows offset, or another formula)".into());
    }
    Ok(row)
}
