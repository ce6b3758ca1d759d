//! CTranslate2 conversions of fairseq models (`ct2-fairseq-converter`'s output directory) read
//! back into fairseq 0.12.2's state dict. CTranslate2's counterpart: `models::Model::load`
//! (`src/models/model.cc`) reading what `ModelSpec.save` (`python/ctranslate2/specs/model_spec.py`)
//! wrote, in the layout `python/ctranslate2/converters/fairseq.py` fills.
//!
//! [`model_bin`] parses the file; [`names`] maps names. Here the variables become fp32 CPU
//! tensors under fairseq's names: quantized ones are dequantized as CTranslate2's
//! `ops::Dequantize` does (`value * (1 / scale)`, per output row for int8, one scale for int16),
//! and their stored values and scales are kept in [`Ct2Model::quantized`]; fused projections
//! are split (CTranslate2 stores them concatenated, unscaled: the converter does not fold
//! `1/sqrt(head_dim)` into q, the attention applies it); aliases (equal variables stored once)
//! resolve to what they name.
//!
//! What a conversion does not store, so cannot be compared: `*.version`,
//! `*.embed_positions._float_tensor` and fairseq 0.12.2's encoder fast-path copies
//! (`encoder.layers.N.in_proj_weight`, ...), which fairseq derives; the sinusoidal tables, which
//! fairseq computes (CTranslate2 stores the table the converter read, rows `padding_idx + 1 ..`,
//! in [`Ct2Model::position_encodings`]; for learned positions that is `embed_positions.weight`
//! without its first `padding_idx + 1` rows); the dictionaries' `<pad>`, which the vocabulary
//! calls `<blank>`; the LayerNorm epsilon (`layer_norm_epsilon: null`, i.e. 1e-5); whether two
//! equal tensors were one parameter (aliases are made by value).

pub mod fields;
mod flags;
pub mod model_bin;
pub mod names;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Map, Value as Json};
use tch::{Kind, Tensor};

use crate::libtorch::host::largest;

pub use flags::{Activation, Ct2Flags, SideFlags};
pub use model_bin::{DataType, ModelBin, ModelBinError, Variable};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Ct2Error {
    #[error("{} is a Git LFS pointer, not the weights: run `git lfs pull`", path.display())]
    LfsPointer { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: ModelBinError },
    #[error("{path}: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    #[error("{path}: {spec} revision {revision}: {msg}")]
    Unsupported { path: PathBuf, spec: String, revision: u32, msg: String },
    #[error("{path}: variable {name}: {msg}")]
    Variable { path: PathBuf, name: String, msg: String },
    #[error("{path}: variable {name}: {source}")]
    Torch { path: PathBuf, name: String, source: tch::TchError },
}

/// `common_spec.Activation` (`include/ctranslate2/ops/activation.h`), stored as
/// A rank-0 variable.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Scalar {
    pub dtype: DataType,
    pub value: f64,
}

/// How a fairseq weight was stored when not as float32.
#[derive(Debug)]
pub struct Quantization {
    /// The stored variable (an alias resolved).
    pub ct2_name: String,
    pub dtype: DataType,
    /// The stored values of this weight's rows, in `dtype`.
    pub values: Tensor,
    /// float32: `[rows]` for int8 (`127 / max|row|`), a scalar for int16 (`2^10 / max|w|`, or
    /// CTranslate2's 1000 when none is stored); None for float16 / bfloat16.
    pub scale: Option<Tensor>,
    /// Binary version >= 5: the quantization rounded before the cast; earlier ones truncated.
    pub rounded: bool,
}

impl Quantization {
    /// The largest |fairseq weight - dequantized weight| the storage allows, broadcastable to
    /// the weight: for int8 `[rows, 1]`, for int16 a scalar: half a step (a whole step when
    /// truncated) plus the float32 rounding of the quantization's own `w * scale` and of the
    /// dequantization (4 * max|q| * 2^-24 steps); for float16 / bfloat16, per element, half a
    /// unit in the last place of the stored value.
    pub fn max_abs_error(&self) -> Result<Tensor, tch::TchError> {
        let step = if self.rounded { 0.5 } else { 1.0 };
        match (self.dtype, &self.scale) {
            (DataType::Int8 | DataType::Int16, Some(scale)) => {
                let qmax = if self.dtype == DataType::Int8 { 127.0 } else { 32767.0 };
                let bound = scale.f_reciprocal()?.f_mul_scalar(step + 4.0 * qmax * 2f64.powi(-24))?;
                if self.dtype == DataType::Int8 {
                    bound.f_unsqueeze(1)
                } else {
                    Ok(bound)
                }
            }
            (DataType::Float16, _) => half_ulp(&self.values, 2f64.powi(-11), 2f64.powi(-25)),
            (DataType::BFloat16, _) => half_ulp(&self.values, 2f64.powi(-8), 2f64.powi(-134)),
            _ => Err(tch::TchError::Kind(format!("{}: {} has no quantization bound", self.ct2_name, self.dtype))),
        }
    }
}

/// `|x - fl(x)| <= u |x|` for normal numbers, at most half the smallest subnormal below;
/// bounded through the stored value `fl(x)`: `u |fl(x)| / (1 - u)`.
fn half_ulp(values: &Tensor, u: f64, subnormal: f64) -> Result<Tensor, tch::TchError> {
    values.f_to_kind(Kind::Float)?.f_abs()?.f_mul_scalar(u / (1.0 - u))?.f_add_scalar(subnormal)
}

/// One fairseq name and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NameMap {
    /// The CTranslate2 name (possibly an alias).
    pub ct2: String,
    pub fairseq: String,
    /// The stored variable `ct2` is or names.
    pub stored_as: String,
    /// The rows of a fused variable this name is (`[begin, end)`), None for all of it.
    pub rows: Option<(i64, i64)>,
}

/// The vocabulary files (`shared_vocabulary`, else `source_vocabulary` or `source_N_vocabulary`
/// and `target_vocabulary`, or a language model's one `vocabulary`, each `.json` or `.txt`, as
/// `load_vocabularies` looks for them). The tokens are the file's; the converter wrote fairseq's `<pad>` as `<blank>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Vocabularies {
    pub files: Vec<String>,
    pub shared: bool,
    pub source: Vec<Vec<String>>,
    pub target: Vec<String>,
}

/// A CTranslate2 model directory read back into fairseq's terms.
#[derive(Debug)]
pub struct Ct2Model {
    pub dir: PathBuf,
    pub binary_version: u32,
    pub spec: String,
    pub revision: u32,
    /// `config.json` (Null when there is none: CTranslate2 does not require it).
    pub config: Json,
    pub vocabularies: Vocabularies,
    pub flags: Ct2Flags,
    /// Every rank-0 variable, by CTranslate2 name.
    pub scalars: IndexMap<String, Scalar>,
    /// fairseq state-dict names -> fp32 CPU tensors, in fairseq's `state_dict()` order; names
    /// stored once (aliases) are views of one tensor.
    pub state_dict: IndexMap<String, Tensor>,
    /// fairseq names whose variable was not float32.
    pub quantized: IndexMap<String, Quantization>,
    /// `encoder.embed_positions` / `decoder.embed_positions` -> the stored table, fp32: row `i`
    /// is fairseq's position `i + padding_idx + 1`.
    pub position_encodings: IndexMap<String, Tensor>,
    /// CTranslate2 variables (and aliases) with no fairseq counterpart.
    pub unmapped: Vec<String>,
    pub name_map: Vec<NameMap>,
    /// alias -> stored variable, as the file lists them.
    pub aliases: Vec<(String, String)>,
}

/// CTranslate2's `ops::Quantize::global_int16_scale`, for int16 models saved without a scale.
const GLOBAL_INT16_SCALE: f32 = 1000.0;

/// The stored table differs from fairseq's sinusoidal one by at most this (sin/cos of the
/// same float32 arguments, from two math libraries) when it is that table, beyond what its
/// arguments may differ by (`sinusoid::argument_rounding`).
const SINUSOIDAL_TOLERANCE: f64 = 1e-6;

struct Ctx<'a> {
    path: &'a Path,
}

impl Ctx<'_> {
    fn var(&self, name: &str, msg: impl Into<String>) -> Ct2Error {
        Ct2Error::Variable { path: self.path.to_path_buf(), name: name.to_string(), msg: msg.into() }
    }

    fn torch(&self, name: &str) -> impl Fn(tch::TchError) -> Ct2Error + '_ {
        let name = name.to_string();
        move |source| Ct2Error::Torch { path: self.path.to_path_buf(), name: name.clone(), source }
    }
}

fn kind_of(dtype: DataType) -> Kind {
    match dtype {
        DataType::Float32 => Kind::Float,
        DataType::Int8 => Kind::Int8,
        DataType::Int16 => Kind::Int16,
        DataType::Int32 => Kind::Int,
        DataType::Float16 => Kind::Half,
        DataType::BFloat16 => Kind::BFloat16,
    }
}

/// A variable as a CPU tensor of its own dtype.
fn stored_tensor(v: &Variable) -> Result<Tensor, tch::TchError> {
    let shape: Vec<i64> = v.shape.iter().map(|&d| i64::from(d)).collect();
    let kind = kind_of(v.dtype);
    if cfg!(target_endian = "big") {
        let n = v.dtype.item_size() as usize;
        let swapped: Vec<u8> = v.data.chunks_exact(n).flat_map(|c| c.iter().rev().copied()).collect();
        return Tensor::f_from_data_size(&swapped, &shape, kind);
    }
    Tensor::f_from_data_size(v.data, &shape, kind)
}

/// A stored variable as fp32, and how it was stored when not as fp32.
struct Dequantized {
    value: Tensor,
    stored: Option<(Tensor, Option<Tensor>)>,
}

/// A quantization scale is `max / max|w|`: finite and above 0.
fn positive(ctx: &Ctx, name: &str, scale: Tensor) -> Result<Tensor, Ct2Error> {
    let bad = scale.f_le(0.0).and_then(|b| b.f_logical_or(&scale.f_isfinite()?.f_logical_not()?)).and_then(|b| b.f_any()).map_err(ctx.torch(name))?;
    if bool::try_from(&bad).map_err(ctx.torch(name))? {
        return Err(ctx.var(name, "a scale that is not a finite number above 0"));
    }
    Ok(scale)
}

fn dequantize(ctx: &Ctx, bin: &ModelBin, v: &Variable) -> Result<Dequantized, Ct2Error> {
    let torch = ctx.torch(&v.name);
    let stored = stored_tensor(v).map_err(&torch)?;
    match v.dtype {
        DataType::Float32 => Ok(Dequantized { value: stored, stored: None }),
        DataType::Float16 | DataType::BFloat16 => {
            let value = stored.f_to_kind(Kind::Float).map_err(&torch)?;
            Ok(Dequantized { value, stored: Some((stored, None)) })
        }
        DataType::Int8 => {
            let scale_name = format!("{}_scale", v.name);
            let scale = bin.variables.get(&scale_name).ok_or_else(|| ctx.var(&v.name, format!("int8 without {scale_name}")))?;
            let rows = v.shape.first().copied();
            if v.shape.len() != 2 || scale.dtype != DataType::Float32 || scale.shape.len() != 1 || Some(scale.shape[0]) != rows {
                return Err(ctx.var(
                    &v.name,
                    format!("int8 {:?} needs a float32 [rows] scale, {scale_name} is {} {:?}", v.shape, scale.dtype, scale.shape),
                ));
            }
            let scale = positive(ctx, &scale_name, stored_tensor(scale).map_err(&torch)?)?;
            let r_scale = scale.f_reciprocal().and_then(|r| r.f_unsqueeze(1)).map_err(&torch)?;
            let value = stored.f_to_kind(Kind::Float).and_then(|x| x.f_mul(&r_scale)).map_err(&torch)?;
            Ok(Dequantized { value, stored: Some((stored, Some(scale))) })
        }
        DataType::Int16 => {
            let scale_name = format!("{}_scale", v.name);
            let scale = match bin.variables.get(&scale_name) {
                Some(s) if s.dtype == DataType::Float32 && s.is_scalar() => positive(ctx, &scale_name, stored_tensor(s).map_err(&torch)?)?,
                Some(s) => return Err(ctx.var(&v.name, format!("int16 needs a float32 scalar scale, {scale_name} is {} {:?}", s.dtype, s.shape))),
                None => Tensor::from(GLOBAL_INT16_SCALE),
            };
            let r_scale = scale.f_reciprocal().map_err(&torch)?;
            let value = stored.f_to_kind(Kind::Float).and_then(|x| x.f_mul(&r_scale)).map_err(&torch)?;
            Ok(Dequantized { value, stored: Some((stored, Some(scale))) })
        }
        DataType::Int32 => Err(ctx.var(&v.name, "an int32 tensor: CTranslate2 dequantizes only int8 and int16")),
    }
}

/// Reads a CTranslate2 model directory (or its `model.bin`, with its directory).
pub fn load(path: &Path) -> Result<Ct2Model, Ct2Error> {
    let (dir, bin_path) = if path.is_dir() { (path.to_path_buf(), path.join("model.bin")) } else { (path.parent().unwrap_or(Path::new(".")).to_path_buf(), path.to_path_buf()) };
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Ct2Error::Io { path: p.clone(), source }
    };
    let bytes = std::fs::read(&bin_path).map_err(io(&bin_path))?;
    if crate::checkpoint::hf_dir::is_lfs_pointer(&bytes) {
        return Err(Ct2Error::LfsPointer { path: bin_path });
    }
    let config_path = dir.join("config.json");
    let config = match std::fs::read(&config_path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|source| Ct2Error::Json { path: config_path.clone(), source })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Json::Null,
        Err(e) => return Err(io(&config_path)(e)),
    };
    let vocabularies = read_vocabularies(&dir)?;
    from_bytes(&bin_path, &bytes, config, vocabularies)
}

fn read_vocabulary(dir: &Path, stem: &str) -> Result<Option<(String, Vec<String>)>, Ct2Error> {
    let json = dir.join(format!("{stem}.json"));
    match std::fs::read(&json) {
        Ok(b) => {
            let tokens = serde_json::from_slice(&b).map_err(|source| Ct2Error::Json { path: json.clone(), source })?;
            return Ok(Some((format!("{stem}.json"), tokens)));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(Ct2Error::Io { path: json, source }),
    }
    let txt = dir.join(format!("{stem}.txt"));
    match std::fs::read(&txt) {
        Ok(b) => {
            let text = String::from_utf8(b).map_err(|_| Ct2Error::Invalid { path: txt.clone(), msg: "not UTF-8".into() })?;
            // Vocabulary::from_text_file: lines; a trailing \r is dropped only if every line has one
            let mut tokens: Vec<String> = text.split('\n').map(str::to_string).collect();
            if tokens.last().is_some_and(String::is_empty) {
                tokens.pop();
            }
            if !tokens.is_empty() && tokens.iter().all(|t| t.ends_with('\r')) {
                for t in &mut tokens {
                    t.pop();
                }
            }
            Ok(Some((format!("{stem}.txt"), tokens)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Ct2Error::Io { path: txt, source }),
    }
}

fn read_vocabularies(dir: &Path) -> Result<Vocabularies, Ct2Error> {
    let mut v = Vocabularies::default();
    if let Some((file, tokens)) = read_vocabulary(dir, "shared_vocabulary")? {
        v.files.push(file);
        v.shared = true;
        v.source.push(tokens.clone());
        v.target = tokens;
        return Ok(v);
    }
    if let Some((file, tokens)) = read_vocabulary(dir, "vocabulary")? {
        v.files.push(file);
        v.target = tokens;
        return Ok(v);
    }
    let missing = |what: &str| Ct2Error::Invalid { path: dir.to_path_buf(), msg: format!("no {what} vocabulary (shared_vocabulary, {what}_vocabulary .json or .txt)") };
    let (file, target) = read_vocabulary(dir, "target_vocabulary")?.ok_or_else(|| missing("target"))?;
    v.files.push(file);
    v.target = target;
    if let Some((file, tokens)) = read_vocabulary(dir, "source_vocabulary")? {
        v.files.push(file);
        v.source.push(tokens);
    } else {
        while let Some((file, tokens)) = read_vocabulary(dir, &format!("source_{}_vocabulary", v.source.len() + 1))? {
            v.files.push(file);
            v.source.push(tokens);
        }
    }
    if v.source.is_empty() {
        return Err(missing("source"));
    }
    Ok(v)
}

/// The value of scalar `name`: an int8, int16, int32 or float32 rank-0 variable.
fn scalar(ctx: &Ctx, bin: &ModelBin, name: &str) -> Result<Option<f64>, Ct2Error> {
    match bin.variables.get(name) {
        None => Ok(None),
        Some(v) => v.scalar().map(Some).ok_or_else(|| ctx.var(name, format!("{} {:?} where a scalar belongs", v.dtype, v.shape))),
    }
}

/// Reads `model.bin`'s bytes; `path` names it in errors.
pub fn from_bytes(path: &Path, bytes: &[u8], config: Json, vocabularies: Vocabularies) -> Result<Ct2Model, Ct2Error> {
    let ctx = Ctx { path };
    let bin = model_bin::parse(bytes).map_err(|source| Ct2Error::Format { path: path.to_path_buf(), source })?;
    let unsupported = |msg: String| Ct2Error::Unsupported { path: path.to_path_buf(), spec: bin.spec.clone(), revision: bin.revision, msg };
    // TransformerSpec keeps its flags under encoder/ and decoder/ from revision 5 on,
    // TransformerDecoderSpec from revision 2 (models/transformer.cc aliases older ones)
    let with_encoder = match (bin.spec.as_str(), bin.revision) {
        ("TransformerSpec", 5..=7) => true,
        ("TransformerDecoderSpec", 2..=8) => false,
        ("TransformerSpec" | "TransformerDecoderSpec", _) => return Err(unsupported("this reader reads TransformerSpec revisions 5 to 7 and TransformerDecoderSpec revisions 2 to 8".into())),
        _ => return Err(unsupported("not a Transformer spec, which is what ct2-fairseq-converter writes".into())),
    };

    let mut scalars = IndexMap::new();
    let mut unmapped = Vec::new();
    let mut state_dict: IndexMap<String, Tensor> = IndexMap::new();
    let mut quantized = IndexMap::new();
    let mut position_encodings = IndexMap::new();
    let mut name_map = Vec::new();
    let mut cache: HashMap<String, Dequantized> = HashMap::new();
    let names: Vec<&str> = bin.variables.keys().chain(bin.aliases.keys()).map(String::as_str).collect();
    for name in names {
        let stored_as = bin.resolve(name);
        let Some(v) = bin.variables.get(stored_as) else { continue };
        if let Some(of) = name.strip_suffix("_scale") {
            if bin.get(of).is_some_and(|w| !w.dtype.is_float()) {
                continue;
            }
        }
        if v.is_scalar() {
            match v.scalar() {
                Some(value) => {
                    scalars.insert(name.to_string(), Scalar { dtype: v.dtype, value });
                    if !names::is_flag(name) {
                        unmapped.push(name.to_string());
                    }
                }
                None => unmapped.push(name.to_string()),
            }
            continue;
        }
        if let Some(module) = names::position_module(name) {
            if v.shape.len() != 2 || !v.dtype.is_float() {
                return Err(ctx.var(name, format!("a position table of {} {:?}, not a float matrix", v.dtype, v.shape)));
            }
            let table = stored_tensor(v).and_then(|t| t.f_to_kind(Kind::Float)).map_err(ctx.torch(name))?;
            position_encodings.insert(module, table);
            continue;
        }
        let Some(fairseq) = names::fairseq_names(name) else {
            unmapped.push(name.to_string());
            continue;
        };
        let is_weight = fairseq[0].ends_with(".weight") && !name.ends_with("/gamma");
        let rank = if is_weight { 2 } else { 1 };
        if v.shape.len() != rank {
            return Err(ctx.var(name, format!("shape {:?}, where fairseq's {} has {rank} dimension(s)", v.shape, fairseq[0])));
        }
        let rows = i64::from(v.shape[0]);
        let parts = fairseq.len() as i64;
        if rows % parts != 0 {
            return Err(ctx.var(name, format!("{rows} rows do not split into {parts} equal projections ({})", fairseq.join(", "))));
        }
        if !cache.contains_key(stored_as) {
            cache.insert(stored_as.to_string(), dequantize(&ctx, &bin, v)?);
        }
        let Some(d) = cache.get(stored_as) else { continue };
        let n = rows / parts;
        for (i, fname) in fairseq.into_iter().enumerate() {
            let begin = n * i as i64;
            let torch = ctx.torch(name);
            let (value, split) = if parts == 1 { (d.value.shallow_clone(), None) } else { (d.value.f_narrow(0, begin, n).map_err(&torch)?, Some((begin, begin + n))) };
            if let Some((values, scale)) = &d.stored {
                let values = if parts == 1 { values.shallow_clone() } else { values.f_narrow(0, begin, n).map_err(&torch)? };
                let scale = match scale {
                    Some(s) if s.dim() == 1 && parts > 1 => Some(s.f_narrow(0, begin, n).map_err(&torch)?),
                    Some(s) => Some(s.shallow_clone()),
                    None => None,
                };
                let q = Quantization { ct2_name: stored_as.to_string(), dtype: v.dtype, values, scale, rounded: bin.binary_version >= 5 };
                quantized.insert(fname.clone(), q);
            }
            if state_dict.contains_key(&fname) {
                return Err(ctx.var(name, format!("a second variable for {fname}")));
            }
            name_map.push(NameMap { ct2: name.to_string(), fairseq: fname.clone(), stored_as: stored_as.to_string(), rows: split });
            state_dict.insert(fname, value);
        }
    }
    drop(cache);
    state_dict.sort_by_cached_key(|k, _| names::fairseq_order(k));
    quantized.sort_by_cached_key(|k, _| names::fairseq_order(k));
    position_encodings.sort_by_cached_key(|k, _| names::fairseq_order(k));

    let flags = flags::flags(&ctx, &bin, with_encoder, &position_encodings)?;
    let embed_rows = |name: &str| bin.get(name).and_then(|v| v.shape.first().copied()).map_or(0, |r| r as usize);
    let check_vocab = |what: &str, tokens: &[String], table: &str| {
        let rows = embed_rows(table);
        if tokens.len() == rows {
            Ok(())
        } else {
            Err(Ct2Error::Invalid { path: path.to_path_buf(), msg: format!("the {what} vocabulary has {} tokens, {table} {rows} rows", tokens.len()) })
        }
    };
    if !vocabularies.target.is_empty() || !vocabularies.source.is_empty() {
        check_vocab("target", &vocabularies.target, names::embeddings("decoder"))?;
        if with_encoder {
            let first = vocabularies.source.first().map_or(&[][..], Vec::as_slice);
            check_vocab("source", first, names::embeddings("encoder"))?;
        }
    }
    let aliases = bin.aliases.iter().map(|(a, t)| (a.clone(), t.clone())).collect();
    Ok(Ct2Model {
        dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        binary_version: bin.binary_version,
        spec: bin.spec.clone(),
        revision: bin.revision,
        config,
        vocabularies,
        flags,
        scalars,
        state_dict,
        quantized,
        position_encodings,
        unmapped,
        name_map,
        aliases,
    })
}

impl Ct2Model {
    /// The padding index of a side's dictionary: where its vocabulary has `<blank>` (the
    /// converter's name for fairseq's `<pad>`), else fairseq's default 1.
    pub fn padding_idx(&self, side: &str) -> i64 {
        let tokens = if side == "encoder" { self.vocabularies.source.first() } else { Some(&self.vocabularies.target) };
        tokens.and_then(|t| t.iter().position(|s| s == "<blank>")).map_or(1, |i| i as i64)
    }

    /// Max |stored table - fairseq's sinusoidal table| for `encoder.embed_positions` or
    /// `decoder.embed_positions` (rows `padding_idx + 1 ..` of
    /// `SinusoidalPositionalEmbedding.get_embedding`), beyond what the table's CPU may give the
    /// same arguments and the rounding of a 16-bit table; None when none is stored.
    pub fn sinusoidal_max_abs_diff(&self, module: &str) -> Result<Option<f64>, Ct2Error> {
        use crate::config::sinusoid::{SinusoidError, StoredTable};
        let Some(table) = self.position_encodings.get(module) else { return Ok(None) };
        let side = module.split('.').next().unwrap_or_default();
        let pad = self.padding_idx(side);
        let error = |e: SinusoidError| match e {
            SinusoidError::Torch(source) => Ct2Error::Torch { path: self.dir.clone(), name: module.to_string(), source },
            e => Ct2Error::Variable { path: self.dir.clone(), name: module.to_string(), msg: e.to_string() },
        };
        let excess = match StoredTable::compare(table, pad + 1, pad).and_then(|t| t.excess()) {
            // no sinusoidal table of this width exists (fewer than 4 columns)
            Err(SinusoidError::TooNarrow(_)) => return Ok(Some(f64::INFINITY)),
            excess => excess.map_err(error)?,
        };
        Ok(Some(largest(&excess).map_err(|e| error(e.into()))?))
    }

    /// The fairseq model options this conversion implies (`--arch transformer` and every
    /// dimension and flag given explicitly), for `TransformerConfig::from_namespace`; an error
    /// for what a fairseq `transformer` cannot be.
    pub fn fairseq_args(&self) -> Result<Map<String, Json>, Ct2Error> {
        let unsupported = |msg: String| Ct2Error::Unsupported { path: self.dir.clone(), spec: self.spec.clone(), revision: self.revision, msg };
        let Some(enc) = &self.flags.encoder else {
            return Err(unsupported("a decoder-only model (fairseq's transformer_lm), not a translation model".into()));
        };
        let dec = &self.flags.decoder;
        if !self.unmapped.is_empty() {
            return Err(unsupported(format!("variables fairseq has no place for: {}", self.unmapped.join(", "))));
        }
        for flag in ["encoder/multi_query_attention", "decoder/alibi", "decoder/start_from_zero_embedding"] {
            if self.scalars.get(flag).is_some_and(|s| s.value != 0.0) {
                return Err(unsupported(format!("{flag} is set")));
            }
        }
        if !self.flags.with_encoder_attention && dec.layers > 0 {
            return Err(unsupported("decoder layers without encoder attention".into()));
        }
        if enc.activation != dec.activation || enc.layernorm_embedding != dec.layernorm_embedding {
            return Err(unsupported("encoder/activation and decoder/activation (or the sides' layernorm_embedding) differ, which fairseq sets once for both".into()));
        }
        let activation = dec.activation.fairseq_name().ok_or_else(|| unsupported(format!("activation {:?}", dec.activation)))?;
        let sqrt_dim = |f: &SideFlags| (f.embed_dim as f32).sqrt();
        let no_scale_embedding = if enc.embed_scale == 1.0 && dec.embed_scale == 1.0 {
            true
        } else if enc.embed_scale == sqrt_dim(enc) && dec.embed_scale == sqrt_dim(dec) {
            false
        } else {
            return Err(unsupported(format!("encoder/scale_embeddings {} and decoder/scale_embeddings {}: neither 1 nor sqrt(embed_dim) on both sides", enc.embed_scale, dec.embed_scale)));
        };
        let learned = |module: &str| -> Result<bool, Ct2Error> {
            match self.sinusoidal_max_abs_diff(module)? {
                Some(d) => Ok(d > SINUSOIDAL_TOLERANCE),
                None => Err(unsupported(format!("no {module} table: CTranslate2 would compute its own sinusoids"))),
            }
        };
        let mut m = Map::new();
        m.insert("arch".into(), "transformer".into());
        for (side, f) in [("encoder", enc), ("decoder", dec)] {
            m.insert(format!("{side}_embed_dim"), f.embed_dim.into());
            m.insert(format!("{side}_ffn_embed_dim"), f.ffn_embed_dim.into());
            m.insert(format!("{side}_layers"), f.layers.into());
            m.insert(format!("{side}_attention_heads"), f.num_heads.into());
            m.insert(format!("{side}_normalize_before"), f.pre_norm.into());
            m.insert(format!("{side}_learned_pos"), learned(&format!("{side}.embed_positions"))?.into());
        }
        m.insert("decoder_output_dim".into(), dec.embed_dim.into());
        m.insert("decoder_input_dim".into(), dec.embed_dim.into());
        m.insert("no_decoder_final_norm".into(), (dec.pre_norm && !dec.final_layer_norm).into());
        m.insert("activation_fn".into(), activation.into());
        m.insert("share_all_embeddings".into(), self.flags.shared_embeddings.into());
        m.insert("share_decoder_input_output_embed".into(), (self.flags.tied_projection || self.flags.shared_embeddings).into());
        m.insert("no_scale_embedding".into(), no_scale_embedding.into());
        m.insert("layernorm_embedding".into(), dec.layernorm_embedding.into());
        m.insert("max_source_positions".into(), enc.max_positions.unwrap_or(1024).into());
        m.insert("max_target_positions".into(), dec.max_positions.unwrap_or(1024).into());
        Ok(m)
    }
}

#[cfg(test)]
mod storage_tests;
#[cfg(test)]
mod tests;
