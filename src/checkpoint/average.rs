//! fairseq's `scripts/average_checkpoints.py`: the parameters of `model` averaged over several
//! checkpoints, with the script's arithmetic and file selection, written back as the first
//! checkpoint with `model` replaced, as a checkpoint `torch.save` would write.
//!
//! Arithmetic, per parameter in the first checkpoint's order: a float16 tensor becomes float32
//! (`p.float()`), the first checkpoint's is copied (`p.clone()`), each later one added in input
//! order (`+=`), then the sum is divided by the number of checkpoints (`div_(n)` for floating
//! point, `//= n` for integers). libtorch runs the same kernels as torch, so the bits are
//! fairseq's. The averaged tensors are written contiguous, one storage each.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use indexmap::IndexMap;
use tch::{Kind, Tensor};

use super::container::torch_zip_write::write_checkpoint;
use super::container::RawFile;
use super::file_storage::FileBytes;
use super::pickle::write::{write, WriteError};
use super::pickle::{Dict, DictClass, Node, Pickle, StorageDtype, StorageRef, TensorRef, Value};
use super::{check_view, invalid, model_dict, open, read_container, CheckpointError, Materializer};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AverageError {
    #[error("no checkpoints to average")]
    NoInputs,
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{path}: cannot list the directory: {source}")]
    ListDir { path: PathBuf, source: std::io::Error },
    #[error("found {found} checkpoint files in {dir} but need at least {needed}")]
    TooFew { dir: PathBuf, found: usize, needed: usize },
    #[error("{path}: `model` does not hold the parameters of {first}: {detail}")]
    KeyMismatch { path: PathBuf, first: PathBuf, detail: String },
    #[error("{path}: parameter {name}: {source}")]
    Torch { path: PathBuf, name: String, source: tch::TchError },
    #[error("{path}: {source}")]
    Pickle { path: PathBuf, source: WriteError },
    #[error("writing the checkpoint: {0}")]
    Io(#[from] std::io::Error),
}

/// What `last_n_checkpoints` looks for: `checkpoint<epoch>.pt` or `checkpoint_<epoch>_<update>.pt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbered {
    Epoch,
    Update,
}

/// A decimal number as its digits without leading zeros, compared by value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Number(String);

impl Number {
    fn new(digits: &str) -> Self {
        let d = digits.trim_start_matches('0');
        Self(if d.is_empty() { "0".into() } else { d.into() })
    }
}

impl Ord for Number {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.len().cmp(&other.0.len()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Number {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The `n` newest checkpoints in `dir`, newest first, as fairseq's `last_n_checkpoints` picks
/// them: files named `checkpoint(\d+)\.pt` (epochs) or `checkpoint_\d+_(\d+)\.pt` (updates),
/// numbered at most `upper_bound`, sorted by (number, name) from the largest. Digits are ASCII.
pub fn last_n_checkpoints(dir: &Path, n: usize, numbered: Numbered, upper_bound: Option<u64>) -> Result<Vec<PathBuf>, AverageError> {
    let pattern = match numbered {
        Numbered::Epoch => r"\Acheckpoint([0-9]+)\.pt\z",
        Numbered::Update => r"\Acheckpoint_[0-9]+_([0-9]+)\.pt\z",
    };
    let re = regex::Regex::new(pattern).expect("a valid pattern");
    let list_err = |source| AverageError::ListDir { path: dir.to_path_buf(), source };
    let bound = upper_bound.map(|b| Number::new(&b.to_string()));
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list_err)? {
        let name = entry.map_err(list_err)?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(number) = re.captures(name).map(|c| Number::new(&c[1])) else { continue };
        if bound.as_ref().is_none_or(|b| number <= *b) {
            entries.push((number, name.to_string()));
        }
    }
    if entries.len() < n {
        return Err(AverageError::TooFew { dir: dir.to_path_buf(), found: entries.len(), needed: n });
    }
    entries.sort_by(|a, b| b.cmp(a));
    Ok(entries.into_iter().take(n).map(|(_, name)| dir.join(name)).collect())
}

/// The averaged parameters and the first checkpoint, whose other entries the output keeps.
pub struct Averaged {
    first: PathBuf,
    file: Arc<FileBytes>,
    raw: RawFile,
    /// Parameter name -> averaged tensor, in the first checkpoint's order.
    pub params: IndexMap<String, Tensor>,
}

/// What [`first_difference`] finds between two parameter lists.
fn first_difference(expected: &[String], found: &[String]) -> String {
    match expected.iter().zip(found).position(|(a, b)| a != b) {
        Some(i) => format!("parameter {i} is {} where it is {} there", found[i], expected[i]),
        None if found.len() > expected.len() => format!("{} more parameters, {} first", found.len() - expected.len(), found[expected.len()]),
        None => format!("{} parameters missing, {} first", expected.len() - found.len(), expected[found.len()]),
    }
}

/// Averages the `model` parameters of `inputs` (fairseq's `average_checkpoints`).
pub fn average_checkpoints(inputs: &[PathBuf]) -> Result<Averaged, AverageError> {
    let count = i64::try_from(inputs.len()).unwrap_or(i64::MAX);
    let mut params: IndexMap<String, Tensor> = IndexMap::new();
    let mut keys: Option<Vec<String>> = None;
    let mut first: Option<(PathBuf, Arc<FileBytes>, RawFile)> = None;
    for path in inputs {
        let file = open(path, true)?;
        let raw = read_container(path, &file.map)?;
        {
            let p = &raw.pickle;
            let root = p.dict(&p.root).ok_or_else(|| invalid(path, format!("top level is a {}, not a fairseq checkpoint dict", p.type_name(&p.root))))?;
            let model = model_dict(path, p, root)?;
            let names = model
                .entries
                .iter()
                .map(|(k, _)| match k {
                    Value::Str(s) => Ok(s.to_string()),
                    other => Err(invalid(path, format!("`model` has a {} key", p.type_name(other)))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            match &keys {
                None => keys = Some(names.clone()),
                Some(expected) if *expected != names => {
                    let first = first.as_ref().map(|f| f.0.clone()).unwrap_or_default();
                    return Err(AverageError::KeyMismatch { path: path.clone(), first, detail: first_difference(expected, &names) });
                }
                Some(_) => {}
            }
            let mut m = Materializer::new(path, &raw, &file);
            for (name, (_, v)) in names.iter().zip(&model.entries) {
                let torch_err = |source| AverageError::Torch { path: path.clone(), name: name.clone(), source };
                let t = m.tensor(name, v)?;
                let t = if t.kind() == Kind::Half { t.f_to_kind(Kind::Float).map_err(torch_err)? } else { t };
                match params.get_mut(name) {
                    Some(sum) => {
                        let _ = sum.f_add_(&t).map_err(torch_err)?;
                    }
                    None => {
                        let mut copy = Tensor::f_empty_like(&t).map_err(torch_err)?;
                        copy.f_copy_(&t).map_err(torch_err)?;
                        params.insert(name.clone(), copy);
                    }
                }
            }
        }
        if first.is_none() {
            first = Some((path.clone(), file, raw));
        }
    }
    let (first, file, raw) = first.ok_or(AverageError::NoInputs)?;
    for (name, sum) in params.iter_mut() {
        let torch_err = |source| AverageError::Torch { path: first.clone(), name: name.clone(), source };
        if sum.is_floating_point() {
            let _ = sum.f_div_scalar_(count).map_err(torch_err)?;
        } else {
            let _ = sum.f_floor_divide_scalar_(count).map_err(torch_err)?;
        }
    }
    Ok(Averaged { first, file, raw, params })
}

fn storage_dtype(kind: Kind) -> Option<StorageDtype> {
    Some(match kind {
        Kind::Float => StorageDtype::Float32,
        Kind::Half => StorageDtype::Float16,
        Kind::BFloat16 => StorageDtype::BFloat16,
        Kind::Double => StorageDtype::Float64,
        Kind::Int64 => StorageDtype::Int64,
        Kind::Int => StorageDtype::Int32,
        Kind::Int16 => StorageDtype::Int16,
        Kind::Int8 => StorageDtype::Int8,
        Kind::Uint8 => StorageDtype::UInt8,
        Kind::Bool => StorageDtype::Bool,
        _ => return None,
    })
}

/// Row-major strides of `size`.
fn contiguous_strides(size: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; size.len()];
    for i in (0..size.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * size[i + 1].max(1);
    }
    strides
}

impl Averaged {
    /// The first checkpoint's path: the other entries of the output are its own.
    pub fn first(&self) -> &Path {
        &self.first
    }

    /// The first checkpoint's value tree with `model` replaced by an OrderedDict of the
    /// averaged tensors, which are storages `base..` of the arena (storage, tensor, in turn).
    fn tree(&self) -> Result<(Pickle, usize), AverageError> {
        let src = &self.raw.pickle;
        let mut p = Pickle { nodes: src.nodes.clone(), root: src.root.clone(), storages: src.storages.clone(), lossy: src.lossy.clone() };
        for node in &p.nodes {
            if let Node::Tensor(t) = node {
                let Some(Node::Storage(s)) = p.nodes.get(t.storage) else {
                    return Err(invalid(&self.first, "a tensor refers to no storage").into());
                };
                check_view(&t.size, &t.stride, t.storage_offset, s.numel).map_err(|e| invalid(&self.first, format!("a tensor outside `model`: {e}")))?;
            }
        }
        let base = p.nodes.len();
        let mut model = Dict::default();
        model.class = Some(DictClass { name: Rc::from("collections.OrderedDict"), args: Vec::new(), state: None });
        for (i, (name, t)) in self.params.iter().enumerate() {
            let dtype = storage_dtype(t.kind()).ok_or_else(|| invalid(&self.first, format!("parameter {name}: no torch storage type for {:?}", t.kind())))?;
            let size = t.size();
            let storage = p.nodes.len();
            p.nodes.push(Node::Storage(StorageRef { key: format!("averaged/{i}"), dtype, location: "cpu".into(), numel: t.numel() as u64 }));
            p.nodes.push(Node::Tensor(TensorRef { storage, storage_offset: 0, stride: contiguous_strides(&size), size, requires_grad: false }));
            model.insert(Value::Str(Rc::from(name.as_str())), Value::Node(storage + 1));
        }
        let model_id = p.nodes.len();
        p.nodes.push(Node::Dict(model));
        match &p.root {
            Value::Node(root) => match p.nodes.get_mut(*root) {
                Some(Node::Dict(d)) => d.insert(Value::Str(Rc::from("model")), Value::Node(model_id)),
                _ => return Err(invalid(&self.first, "top level is not a dict").into()),
            },
            _ => return Err(invalid(&self.first, "top level is not a dict").into()),
        }
        Ok((p, base))
    }

    /// Writes the averaged checkpoint to `out` as `torch.save` writes it; returns `out`.
    pub fn save<W: Write>(&self, out: W) -> Result<W, AverageError> {
        let (p, base) = self.tree()?;
        let written = write(&p, &p.root).map_err(|source| AverageError::Pickle { path: self.first.clone(), source })?;
        let bytes: &[u8] = &self.file.map;
        write_checkpoint(out, &written.bytes, written.storages.len(), |i| -> Result<Cow<'_, [u8]>, AverageError> {
            let id = written.storages[i];
            if id >= base {
                let (name, t) = self.params.get_index((id - base) / 2).expect("an averaged storage");
                let torch_err = |source| AverageError::Torch { path: self.first.clone(), name: name.clone(), source };
                let numel = t.numel();
                let mut data = vec![0u8; numel * t.kind().elt_size_in_bytes()];
                t.f_contiguous().map_err(torch_err)?.f_copy_data_u8(&mut data, numel).map_err(torch_err)?;
                return Ok(Cow::Owned(data));
            }
            let Some(Node::Storage(s)) = p.nodes.get(id) else { unreachable!("the writer names storages only") };
            let data = self.raw.storage_bytes(bytes, s).map_err(|source| CheckpointError::Container { path: self.first.clone(), source })?;
            Ok(if self.raw.big_endian {
                Cow::Owned(data.chunks_exact(s.dtype.element_size()).flat_map(|c| c.iter().rev().copied()).collect())
            } else {
                data
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_compare_by_value() {
        assert!(Number::new("010") > Number::new("9"));
        assert_eq!(Number::new("007"), Number::new("7"));
        assert!(Number::new("100000000000000000000000") > Number::new(&u64::MAX.to_string()));
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), [12, 4, 1]);
        assert_eq!(contiguous_strides(&[]), Vec::<i64>::new());
        assert_eq!(contiguous_strides(&[3, 0, 2]), [2, 2, 1]);
    }
}
