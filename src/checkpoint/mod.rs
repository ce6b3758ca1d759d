//! Reading fairseq checkpoints: pickle VM, torch containers, fairseq upgrades.
//!
//! Layers, each usable on its own: [`pickle`] (bytes -> value tree, never executes anything),
//! [`container`] (zip / legacy / safetensors -> pickle + storage locations, CRC-checked),
//! [`pyjson`] (pickled `args`/`cfg` -> JSON), then here: tensors are materialised with libtorch
//! only for entries under `model` (optimizer state is never read), the config is resolved with
//! fairseq's precedence (`args` if present and not None, else `cfg.model`) and [`upgrade`] applies
//! fairseq's state-dict upgrades so names and order equal fairseq's `model.state_dict()`.
//!
//! Cost of a load (no timed tests; measure with `time tchseq inspect -m DIR --json >/dev/null`):
//! the file is memory-mapped, the pickle is parsed once (linear in its size), and every storage
//! that `model` refers to is CRC32-checked and becomes a libtorch tensor, read in place where the
//! zip stores it as is (`file_storage.rs`; copied once when loading is done, if still in use),
//! else copied once; optimizer state and other unreferenced storages are neither read nor
//! copied. fairseq 0.12.2's encoder-layer BetterTransformer copies (`in_proj_weight` =
//! cat(q, k, v), ...) are CRC-checked but never copied: the upgrade derives them from each
//! layer's own weights, as fairseq's loading does, which adds one copy of each encoder layer's
//! attention input projection.

pub mod average;
pub mod container;
pub mod ctranslate2;
mod file_storage;
pub mod hf;
pub mod hf_dir;
pub mod hf_fields;
pub mod hf_tokens;
pub mod pickle;
pub mod pyjson;
pub mod upgrade;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Map, Value as Json};
use tch::{Kind, Tensor};

pub use container::ContainerFormat;

use crate::config::{ConfigError, TransformerConfig};
use container::{ContainerError, RawFile};
use file_storage::{open, release_pages, FileBytes};
pub use file_storage::{own_storage, FileStorages, StorageError};
use pickle::{Node, NodeId, Pickle, StorageDtype, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigSource {
    Args,
    Cfg,
    /// A Hugging Face directory's `config.json` ([`hf`]).
    HuggingFace,
}

impl ConfigSource {
    /// Where the config came from, as `inspect` and the load report name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Args => "args",
            Self::Cfg => "cfg",
            Self::HuggingFace => "config.json",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Container { path: PathBuf, source: ContainerError },
    #[error("{path}: {source}")]
    Config { path: PathBuf, source: ConfigError },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    #[error("{path}: tensor {name}: {msg}")]
    Tensor { path: PathBuf, name: String, msg: String },
    #[error("{path}: tensor {name}: {source}")]
    TensorData { path: PathBuf, name: String, source: ContainerError },
    #[error("{path}: tensor {name}: {source}")]
    Torch { path: PathBuf, name: String, source: tch::TchError },
    #[error("{path}: {source}")]
    Upgrade { path: PathBuf, source: upgrade::UpgradeError },
    #[error(transparent)]
    HuggingFace(#[from] hf_dir::HfDirError),
    #[error("{path} is a Git LFS pointer, not the weights: run `git lfs pull`")]
    LfsPointer { path: PathBuf },
}

/// A loaded checkpoint: config plus fairseq's post-upgrade state dict.
#[derive(Debug)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub format: ContainerFormat,
    pub config_source: ConfigSource,
    pub config: TransformerConfig,
    /// fairseq's post-upgrade state-dict names -> tensors in the stored dtype, on CPU,
    /// in the order fairseq's model.state_dict() lists them.
    pub state_dict: IndexMap<String, Tensor>,
    /// The storages that still read the file (`file_storage.rs`): when this is dropped (after
    /// `state_dict`, as declared), or on [`FileStorages::detach`], each one still in use moves
    /// into memory of its own.
    pub file_storages: FileStorages,
}

fn read_container(path: &Path, bytes: &[u8]) -> Result<RawFile, CheckpointError> {
    container::read(bytes).map_err(|source| CheckpointError::Container { path: path.to_path_buf(), source })
}

fn kind_of(d: StorageDtype) -> Kind {
    match d {
        StorageDtype::Float32 => Kind::Float,
        StorageDtype::Float16 => Kind::Half,
        StorageDtype::BFloat16 => Kind::BFloat16,
        StorageDtype::Float64 => Kind::Double,
        StorageDtype::Int64 => Kind::Int64,
        StorageDtype::Int32 => Kind::Int,
        StorageDtype::Int16 => Kind::Int16,
        StorageDtype::Int8 => Kind::Int8,
        StorageDtype::UInt8 => Kind::Uint8,
        StorageDtype::Bool => Kind::Bool,
    }
}

/// The torch dtype name of a tch kind (`float32`, `float16`, ...).
pub fn dtype_name(k: Kind) -> String {
    match k {
        Kind::Float => "float32".into(),
        Kind::Half => "float16".into(),
        Kind::BFloat16 => "bfloat16".into(),
        Kind::Double => "float64".into(),
        Kind::Int64 => "int64".into(),
        Kind::Int => "int32".into(),
        Kind::Int16 => "int16".into(),
        Kind::Int8 => "int8".into(),
        Kind::Uint8 => "uint8".into(),
        Kind::Bool => "bool".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Turns pickled tensor references into tch tensors; storages are built once and shared, so
/// tensors viewing one storage (tied embeddings) alias like they do after `torch.load`.
struct Materializer<'a> {
    path: &'a Path,
    raw: &'a RawFile,
    file: &'a Arc<FileBytes>,
    bytes: &'a [u8],
    storages: HashMap<NodeId, Tensor>,
    file_storages: FileStorages,
}

impl<'a> Materializer<'a> {
    fn new(path: &'a Path, raw: &'a RawFile, file: &'a Arc<FileBytes>) -> Self {
        Self { path, raw, file, bytes: &file.map, storages: HashMap::new(), file_storages: FileStorages::new() }
    }
}

impl<'a> Materializer<'a> {
    /// The tensor entry `v` and its storage, its view checked against the storage.
    fn entry(&self, name: &str, v: &Value) -> Result<(pickle::TensorRef, &pickle::StorageRef), CheckpointError> {
        let err = |msg: String| CheckpointError::Tensor { path: self.path.to_path_buf(), name: name.to_string(), msg };
        let p = &self.raw.pickle;
        let Some(Node::Tensor(t)) = p.node(v) else {
            return Err(err(format!("is a {}, not a tensor", p.type_name(v))));
        };
        let Some(Node::Storage(s)) = p.nodes.get(t.storage) else {
            return Err(err("refers to no storage".into()));
        };
        check_view(&t.size, &t.stride, t.storage_offset, s.numel).map_err(|e| err(e.to_string()))?;
        Ok((t.clone(), s))
    }

    /// A storage's bytes, CRC-checked.
    fn storage_data(&self, name: &str, s: &pickle::StorageRef) -> Result<Cow<'a, [u8]>, CheckpointError> {
        self.raw.storage_bytes(self.bytes, s).map_err(|source| CheckpointError::TensorData {
            path: self.path.to_path_buf(),
            name: name.to_string(),
            source,
        })
    }

    /// What [`Materializer::tensor`] checks of an entry (its view and its storage's CRC-32),
    /// without copying the storage into a tensor: for entries the model derives.
    fn check(&mut self, name: &str, v: &Value) -> Result<(), CheckpointError> {
        let (t, s) = self.entry(name, v)?;
        if !self.storages.contains_key(&t.storage) {
            if let Cow::Borrowed(part) = self.storage_data(name, s)? {
                release_pages(self.bytes, part);
            }
        }
        Ok(())
    }

    fn tensor(&mut self, name: &str, v: &Value) -> Result<Tensor, CheckpointError> {
        let err = |msg: String| CheckpointError::Tensor { path: self.path.to_path_buf(), name: name.to_string(), msg };
        let tch_err = |source| CheckpointError::Torch { path: self.path.to_path_buf(), name: name.to_string(), source };
        let (t, s) = self.entry(name, v)?;
        let s = s.clone();
        let kind = kind_of(s.dtype);
        if !self.storages.contains_key(&t.storage) {
            let data = self.storage_data(name, &s)?;
            let numel = i64::try_from(s.numel).map_err(|_| err("storage too large".into()))?;
            // in place where the zip stores it as is, else a copy (whose file pages go back)
            let in_place = match &data {
                Cow::Borrowed(part) if !self.raw.big_endian => self.file_storages.tensor_over(self.file, part, kind).map_err(|e| err(e.to_string()))?,
                _ => None,
            };
            let st = match in_place {
                Some(st) => {
                    // read for the CRC: handed back, so that the checkpoint is not resident all
                    // at once before its weights are packed one by one
                    if let Cow::Borrowed(part) = data {
                        release_pages(self.bytes, part);
                    }
                    st
                }
                None if self.raw.big_endian => {
                    let es = s.dtype.element_size();
                    let swapped: Vec<u8> = data.chunks_exact(es).flat_map(|c| c.iter().rev().copied()).collect();
                    Tensor::f_from_data_size(&swapped, &[numel], kind).map_err(tch_err)?
                }
                None => {
                    let st = Tensor::f_from_data_size(&data, &[numel], kind).map_err(tch_err)?;
                    if let Cow::Borrowed(part) = data {
                        release_pages(self.bytes, part);
                    }
                    st
                }
            };
            if st.numel() as i64 != numel {
                return Err(err(format!("a storage of {} elements where {numel} were declared", st.numel())));
            }
            self.storages.insert(t.storage, st);
        }
        let st = &self.storages[&t.storage];
        st.f_as_strided(&t.size, &t.stride, t.storage_offset).map_err(tch_err)
    }

    /// A strided nested tensor, `torch._utils._rebuild_nested_tensor(buffer, sizes, strides,
    /// offsets)` (what `torch.save` writes for one), as `to_padded_tensor(0.0)`: component `b`
    /// is `buffer.as_strided(sizes[b], strides[b], offsets[b])`, the result `[B, max sizes...]`.
    fn nested(&mut self, name: &str, args: &[Value]) -> Result<Tensor, CheckpointError> {
        let path = self.path;
        let err = |msg: String| CheckpointError::Tensor { path: path.to_path_buf(), name: name.to_string(), msg };
        let tch_err = |source| CheckpointError::Torch { path: path.to_path_buf(), name: name.to_string(), source };
        let [buffer, sizes, strides, offsets] = args else {
            return Err(err(format!("nested tensor: _rebuild_nested_tensor takes 4 arguments, got {}", args.len())));
        };
        let buffer = self.tensor(name, buffer)?;
        if buffer.dim() != 1 {
            return Err(err(format!("nested tensor: buffer has shape {:?}, not one dimension", buffer.size())));
        }
        // a fresh copy, so that the components' offsets count from its start
        let mut flat = Tensor::f_zeros_like(&buffer).map_err(tch_err)?;
        flat.f_copy_(&buffer).map_err(tch_err)?;
        let mut int_rows = |v: &Value, what: &str| -> Result<Vec<Vec<i64>>, CheckpointError> {
            let t = self.tensor(name, v)?;
            if t.kind() != Kind::Int64 || !(1..=2).contains(&t.dim()) {
                return Err(err(format!("nested tensor: {what} is {:?} {:?}, not int64 [B] or [B, D]", t.kind(), t.size())));
            }
            let t = if t.dim() == 1 { t.f_unsqueeze(1).map_err(tch_err)? } else { t };
            Vec::<Vec<i64>>::try_from(&t.f_contiguous().map_err(tch_err)?).map_err(tch_err)
        };
        let sizes = int_rows(sizes, "sizes")?;
        let strides = int_rows(strides, "strides")?;
        let offsets: Vec<i64> = int_rows(offsets, "offsets")?.into_iter().flatten().collect();
        let rank = sizes.first().map_or(0, Vec::len);
        if sizes.is_empty() || rank == 0 || strides.len() != sizes.len() || offsets.len() != sizes.len() || sizes.iter().chain(&strides).any(|r| r.len() != rank) {
            return Err(err(format!("nested tensor: {} sizes, {} strides and {} offsets do not describe one batch", sizes.len(), strides.len(), offsets.len())));
        }
        let numel = flat.size()[0] as u64;
        for (b, ((size, stride), &offset)) in sizes.iter().zip(&strides).zip(&offsets).enumerate() {
            check_view(size, stride, offset, numel).map_err(|m| err(format!("nested tensor component {b}: {m}")))?;
        }
        let mut padded = vec![sizes.len() as i64];
        padded.extend((0..rank).map(|d| sizes.iter().map(|r| r[d]).max().unwrap_or(0)));
        // each padded row holds at most the whole buffer when the components differ in one
        // dimension only (as fairseq's do); anything larger is not worth allocating
        let total = padded.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        if total.is_none_or(|t| t > (sizes.len() as u64).saturating_mul(numel)) {
            return Err(err(format!("nested tensor: its components padded to {padded:?} would exceed {} times its {numel}-element buffer", sizes.len())));
        }
        let out = Tensor::f_zeros(&padded, (flat.kind(), flat.device())).map_err(tch_err)?;
        for (b, ((size, stride), &offset)) in sizes.iter().zip(&strides).zip(&offsets).enumerate() {
            let part = flat.f_as_strided(size, stride, offset).map_err(tch_err)?;
            let mut slot = out.f_select(0, b as i64).map_err(tch_err)?;
            for (d, &len) in size.iter().enumerate() {
                slot = slot.f_narrow(d as i64, 0, len).map_err(tch_err)?;
            }
            slot.f_copy_(&part).map_err(tch_err)?;
        }
        Ok(out)
    }
}

/// Why a tensor's strided view does not fit its storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ViewError {
    #[error("size {size:?} and stride {stride:?} differ in rank")]
    Rank { size: Vec<i64>, stride: Vec<i64> },
    #[error("negative size/stride/offset (size {size:?}, stride {stride:?}, offset {offset})")]
    Negative { size: Vec<i64>, stride: Vec<i64>, offset: i64 },
    #[error("view (size {size:?}, stride {stride:?}, offset {offset}) exceeds its storage of {numel} elements")]
    OutOfStorage { size: Vec<i64>, stride: Vec<i64>, offset: i64, numel: u64 },
}

/// A strided view must stay inside its storage of `numel` elements.
fn check_view(size: &[i64], stride: &[i64], offset: i64, numel: u64) -> Result<(), ViewError> {
    let (size_v, stride_v) = (size.to_vec(), stride.to_vec());
    if size.len() != stride.len() {
        return Err(ViewError::Rank { size: size_v, stride: stride_v });
    }
    if offset < 0 || size.iter().chain(stride).any(|&d| d < 0) {
        return Err(ViewError::Negative { size: size_v, stride: stride_v, offset });
    }
    if size.contains(&0) {
        return Ok(());
    }
    let last = size.iter().zip(stride).try_fold(i128::from(offset), |acc, (&d, &st)| acc.checked_add(i128::from(d - 1) * i128::from(st)));
    if last.is_none_or(|l| l >= i128::from(numel)) {
        return Err(ViewError::OutOfStorage { size: size_v, stride: stride_v, offset, numel });
    }
    Ok(())
}

fn invalid(path: &Path, msg: impl Into<String>) -> CheckpointError {
    CheckpointError::Invalid { path: path.to_path_buf(), msg: msg.into() }
}

/// A reference file's tensors, as [`read_tensor_dict`] found them.
#[derive(Debug, Default)]
pub struct TensorDict {
    pub tensors: IndexMap<String, Tensor>,
    /// Entries that were strided nested tensors, read as `to_padded_tensor(0.0)`.
    pub nested: Vec<String>,
    /// Entries that are not tensors: (name, Python type).
    pub skipped: Vec<(String, String)>,
}

/// Any torch.save'd dict of tensors (zip or legacy) or a .safetensors file; used by `verify`.
/// Entries that are not tensors are skipped; a nested `model`/`state_dict` is not unwrapped.
pub fn load_tensor_dict(path: &Path) -> Result<IndexMap<String, Tensor>, CheckpointError> {
    Ok(read_tensor_dict(path)?.tensors)
}

/// [`load_tensor_dict`], also reading nested tensors (as fairseq's encoder fast path returns
/// for right-padded batches) and naming what it read as nested and what it skipped.
pub fn read_tensor_dict(path: &Path) -> Result<TensorDict, CheckpointError> {
    let file = open(path, true)?;
    let raw = read_container(path, &file.map)?;
    let root = raw.pickle.dict(&raw.pickle.root).ok_or_else(|| invalid(path, format!("top level is a {}, not a dict of tensors", raw.pickle.type_name(&raw.pickle.root))))?;
    let mut m = Materializer::new(path, &raw, &file);
    let mut out = TensorDict::default();
    for (k, v) in &root.entries {
        let Value::Str(name) = k else { continue };
        match raw.pickle.node(v) {
            Some(Node::Tensor(_)) => {
                out.tensors.insert(name.to_string(), m.tensor(name, v)?);
            }
            Some(Node::Object { class, args, .. }) if class == "torch._utils._rebuild_nested_tensor" => {
                out.tensors.insert(name.to_string(), m.nested(name, args)?);
                out.nested.push(name.to_string());
            }
            _ => out.skipped.push((name.to_string(), raw.pickle.type_name(v))),
        }
    }
    // the tensors read in place move into memory of their own
    drop(m);
    Ok(out)
}

/// The model config, by fairseq's precedence: `args` if present and not None, else `cfg`.
fn resolve_config(path: &Path, p: &Pickle, root: &pickle::Dict) -> Result<(TransformerConfig, ConfigSource), CheckpointError> {
    let json = |v: &Value| pyjson::to_json(p, v).map_err(|e| invalid(path, e.to_string()));
    let cfg_err = |source| CheckpointError::Config { path: path.to_path_buf(), source };
    if let Some(args) = root.get("args").filter(|v| **v != Value::None) {
        let Json::Object(ns) = json(args)? else {
            return Err(invalid(path, format!("`args` is a {}, not an argparse.Namespace", p.type_name(args))));
        };
        let cfg = TransformerConfig::from_namespace(&ns, None, None, None).map_err(cfg_err)?;
        return Ok((cfg, ConfigSource::Args));
    }
    let cfg_v = root.get("cfg").filter(|v| **v != Value::None).ok_or_else(|| invalid(path, "has neither `args` nor `cfg`: not a fairseq checkpoint"))?;
    let mut cfg = json(cfg_v)?;
    crate::config::resolve_interpolations(&mut cfg).map_err(cfg_err)?;
    let Json::Object(cfg) = cfg else {
        return Err(invalid(path, format!("`cfg` is a {}, not a dict", p.type_name(cfg_v))));
    };
    let model = match cfg.get("model") {
        Some(Json::Object(m)) => m.clone(),
        _ => return Err(invalid(path, "`cfg` has no `model` section")),
    };
    let task: Option<Map<String, Json>> = cfg.get("task").and_then(|t| t.as_object()).cloned();
    let config = TransformerConfig::from_namespace(&model, task.as_ref(), Some(cfg.get("tokenizer").unwrap_or(&Json::Null)), Some(cfg.get("bpe").unwrap_or(&Json::Null))).map_err(cfg_err)?;
    Ok((config, ConfigSource::Cfg))
}

fn model_dict<'a>(path: &Path, p: &'a Pickle, root: &'a pickle::Dict) -> Result<&'a pickle::Dict, CheckpointError> {
    let model_v = root.get("model").ok_or_else(|| invalid(path, "no `model` entry: not a fairseq checkpoint"))?;
    p.dict(model_v).ok_or_else(|| invalid(path, format!("`model` is a {}, not a state dict", p.type_name(model_v))))
}

pub fn load_checkpoint(path: &Path) -> Result<Checkpoint, CheckpointError> {
    if hf::is_weights_file(path) {
        return hf::load(path);
    }
    let file = open(path, true)?;
    let raw = read_container(path, &file.map)?;
    let p = &raw.pickle;
    let root = p.dict(&p.root).ok_or_else(|| invalid(path, format!("top level is a {}, not a fairseq checkpoint dict", p.type_name(&p.root))))?;
    let model = model_dict(path, p, root)?;
    let (config, config_source) = resolve_config(path, p, root)?;
    let mut m = Materializer::new(path, &raw, &file);
    let mut sd = IndexMap::with_capacity(model.len());
    for (k, v) in &model.entries {
        let Value::Str(name) = k else {
            return Err(invalid(path, format!("`model` has a {} key", p.type_name(k))));
        };
        if upgrade::is_derived_copy(name) {
            // fairseq 0.12.2's encoder fast-path copies: the upgrade derives them from the
            // layer's own weights, as fairseq's loading does, so the stored ones are only checked
            // (their CRC-32), never held
            m.check(name, v)?;
            continue;
        }
        sd.insert(name.to_string(), m.tensor(name, v)?);
    }
    let state_dict = upgrade::upgrade_state_dict(&config, sd)
        .map_err(|source| CheckpointError::Upgrade { path: path.to_path_buf(), source })?;
    let file_storages = m.file_storages;
    Ok(Checkpoint { path: path.to_path_buf(), format: raw.format, config_source, config, state_dict, file_storages })
}

/// What can be known about a checkpoint without materialising any tensor.
#[derive(Debug, Clone)]
pub struct CheckpointSummary {
    pub format: ContainerFormat,
    pub config_source: ConfigSource,
    pub config: TransformerConfig,
    /// Rows of `encoder.embed_tokens.weight` / `decoder.embed_tokens.weight` as stored.
    pub src_embed_rows: Option<i64>,
    pub tgt_embed_rows: Option<i64>,
}

impl Checkpoint {
    /// What [`read_summary`] reads, from a checkpoint already loaded.
    pub fn summary(&self) -> CheckpointSummary {
        let rows = |name: &str| self.state_dict.get(name).and_then(|t| t.size().first().copied());
        CheckpointSummary {
            format: self.format,
            config_source: self.config_source,
            config: self.config.clone(),
            src_embed_rows: rows("encoder.embed_tokens.weight"),
            tgt_embed_rows: rows("decoder.embed_tokens.weight"),
        }
    }
}

/// Parses the container and the config only (storages are not read).
pub fn read_summary(path: &Path) -> Result<CheckpointSummary, CheckpointError> {
    if hf::is_weights_file(path) {
        return hf::read_summary(path);
    }
    let file = open(path, false)?;
    let raw = read_container(path, &file.map)?;
    let p = &raw.pickle;
    let root = p.dict(&p.root).ok_or_else(|| invalid(path, format!("top level is a {}, not a fairseq checkpoint dict", p.type_name(&p.root))))?;
    model_dict(path, p, root)?;
    let (config, config_source) = resolve_config(path, p, root)?;
    let rows = |name: &str| -> Option<i64> {
        let model = p.dict(root.get("model")?)?;
        match p.node(model.get(name)?)? {
            Node::Tensor(t) => t.size.first().copied(),
            _ => None,
        }
    };
    Ok(CheckpointSummary {
        format: raw.format,
        config_source,
        config,
        src_embed_rows: rows("encoder.embed_tokens.weight"),
        tgt_embed_rows: rows("decoder.embed_tokens.weight"),
    })
}

#[cfg(test)]
mod tests {
    use super::check_view;

    /// A view that ends on its storage's last element fits; one element more does not.
    #[test]
    fn a_view_is_checked_at_its_storage_s_exact_end() {
        // [3, 4] contiguous from offset 2 ends at element 2 + 2*4 + 3 = 13: 14 elements needed
        for (numel, fits) in [(13, false), (14, true), (15, true)] {
            assert_eq!(check_view(&[3, 4], &[4, 1], 2, numel).is_ok(), fits, "storage of {numel}");
        }
        // a transposed view of a 4 x 3 storage ends at element (4-1)*1 + (3-1)*4 = 11
        for (numel, fits) in [(11, false), (12, true), (13, true)] {
            assert_eq!(check_view(&[4, 3], &[1, 4], 0, numel).is_ok(), fits, "transposed, storage of {numel}");
        }
        // a scalar at offset n - 1 fits in n, not in n - 1
        assert!(check_view(&[], &[], 9, 10).is_ok());
        assert!(check_view(&[], &[], 9, 9).is_err());
        // an empty view fits anywhere, a negative stride nowhere
        assert!(check_view(&[0, 5], &[5, 1], 100, 1).is_ok());
        assert!(check_view(&[2], &[-1], 1, 10).is_err());
    }
}
