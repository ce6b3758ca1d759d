//! safetensors files: a little-endian u64 header length, a JSON header
//! `{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}`, then the data.
//! The header is turned into the same shape a torch pickle of a dict of tensors has, so the rest
//! of the loader does not care which container it read.

use std::collections::HashMap;

use super::{ContainerError, ContainerFormat, RawFile, StorageSource};
use crate::checkpoint::pickle::{Dict, Node, Pickle, StorageDtype, StorageRef, TensorRef, Value};

const MAX_HEADER: u64 = 100 << 20;

fn err(msg: impl Into<String>) -> ContainerError {
    ContainerError::Safetensors(msg.into())
}

pub fn is_safetensors(data: &[u8]) -> bool {
    data.len() >= 10 && {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[..8]);
        let n = u64::from_le_bytes(n);
        n <= MAX_HEADER && data[8] == b'{'
    }
}

pub fn read(data: &[u8]) -> Result<RawFile, ContainerError> {
    let mut n = [0u8; 8];
    n.copy_from_slice(data.get(..8).ok_or_else(|| err("file shorter than its header length"))?);
    let n = u64::from_le_bytes(n);
    let header_end = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&e| e <= data.len() && n <= MAX_HEADER)
        .ok_or_else(|| err(format!("header length {n} exceeds the file")))?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&data[8..header_end]).map_err(|e| err(format!("bad JSON header: {e}")))?;
    let mut pickle = Pickle::default();
    let mut root = Dict::default();
    let mut ranges = HashMap::new();
    for (name, info) in header {
        if name == "__metadata__" {
            continue;
        }
        let dtype_tag = info.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| err(format!("{name}: no dtype")))?;
        let dtype = StorageDtype::from_safetensors(dtype_tag).ok_or_else(|| err(format!("{name}: unsupported dtype {dtype_tag}")))?;
        let shape: Vec<i64> = info
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| err(format!("{name}: no shape")))?
            .iter()
            .map(|d| d.as_u64().and_then(|d| i64::try_from(d).ok()).ok_or_else(|| err(format!("{name}: bad shape"))))
            .collect::<Result<_, _>>()?;
        let offsets = info.get("data_offsets").and_then(|o| o.as_array()).ok_or_else(|| err(format!("{name}: no data_offsets")))?;
        let (Some(begin), Some(end)) = (offsets.first().and_then(|v| v.as_u64()), offsets.get(1).and_then(|v| v.as_u64())) else {
            return Err(err(format!("{name}: bad data_offsets")));
        };
        let numel = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64)).ok_or_else(|| err(format!("{name}: shape overflows")))?;
        let nbytes = numel.checked_mul(dtype.element_size() as u64).ok_or_else(|| err(format!("{name}: shape overflows")))?;
        if end < begin || end - begin != nbytes {
            return Err(err(format!("{name}: data_offsets [{begin}, {end}] do not match shape {shape:?} of {}", dtype.torch_name())));
        }
        let start = (header_end as u64).checked_add(begin).filter(|&s| s.checked_add(nbytes).is_some_and(|e| e <= data.len() as u64));
        let start = start.ok_or_else(|| err(format!("{name}: data beyond the end of the file")))? as usize;
        ranges.insert(name.clone(), (start, start + nbytes as usize));
        let mut stride = vec![1i64; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            stride[i] = stride[i + 1].saturating_mul(shape[i + 1].max(1));
        }
        pickle.nodes.push(Node::Storage(StorageRef { key: name.clone(), dtype, location: "cpu".into(), numel }));
        let storage = pickle.nodes.len() - 1;
        pickle.storages.insert(name.clone(), storage);
        pickle.nodes.push(Node::Tensor(TensorRef { storage, storage_offset: 0, size: shape, stride, requires_grad: false }));
        root.insert(Value::Str(name.as_str().into()), Value::Node(pickle.nodes.len() - 1));
    }
    pickle.nodes.push(Node::Dict(root));
    pickle.root = Value::Node(pickle.nodes.len() - 1);
    Ok(RawFile { format: ContainerFormat::Safetensors, pickle, storages: StorageSource::Ranges { ranges }, big_endian: false })
}
