//! Legacy torch checkpoints (torch < 1.6, `_use_new_zipfile_serialization=False`): five pickles
//! in a row (magic number, protocol version 1001, sys_info, the object, the sorted list of storage
//! keys), then for every key in that order a little-endian u64 element count and the raw bytes.
//! Storages are located by walking that table; their bytes are only read when a tensor needs them.

use std::collections::HashMap;

use super::{ContainerError, ContainerFormat, RawFile, StorageSource};
use crate::checkpoint::pickle::{self, Node, Value};

/// `0x1950a86a20f9469cfc6c` as `LONG1` stores it (little-endian).
const MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
const PROTOCOL_VERSION: i64 = 1001;

pub fn is_legacy(data: &[u8]) -> bool {
    data.first() == Some(&0x80) && data.len() > 14 && data[..16.min(data.len())].windows(MAGIC.len()).any(|w| w == MAGIC)
}

fn table_err(msg: impl Into<String>) -> ContainerError {
    ContainerError::LegacyTable(msg.into())
}

pub fn read(data: &[u8]) -> Result<RawFile, ContainerError> {
    let mut pos = 0usize;
    let next = |pos: &mut usize| -> Result<pickle::Pickle, ContainerError> {
        let (p, used) = pickle::parse(&data[*pos..], *pos)?;
        *pos += used;
        Ok(p)
    };
    let magic = next(&mut pos)?;
    if magic.root != Value::BigInt(std::rc::Rc::from(&MAGIC[..])) {
        return Err(ContainerError::Unsupported("legacy torch file with a wrong magic number".into()));
    }
    let version = next(&mut pos)?;
    if version.root != Value::Int(PROTOCOL_VERSION) {
        return Err(ContainerError::Unsupported(format!("legacy torch protocol version {:?}, expected {PROTOCOL_VERSION}", version.root)));
    }
    let sys_info = next(&mut pos)?;
    if let Some(d) = sys_info.dict(&sys_info.root) {
        if d.get("little_endian") == Some(&Value::Bool(false)) {
            return Err(ContainerError::Unsupported("big-endian legacy torch files are not supported".into()));
        }
    }
    let main = next(&mut pos)?;
    let keys_pickle = next(&mut pos)?;
    let keys: Vec<String> = match keys_pickle.node(&keys_pickle.root) {
        Some(Node::List(items)) | Some(Node::Tuple(items)) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => Ok(s.to_string()),
                _ => Err(table_err("storage key list holds a non-string")),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(table_err("the storage key list is missing")),
    };
    let mut ranges = HashMap::with_capacity(keys.len());
    for key in keys {
        let &id = main.storages.get(&key).ok_or_else(|| table_err(format!("storage {key} is listed but no tensor refers to it")))?;
        let Node::Storage(s) = &main.nodes[id] else {
            return Err(table_err(format!("storage {key} is not a storage")));
        };
        let header = data.get(pos..pos + 8).ok_or_else(|| table_err(format!("file ends in the header of storage {key} at byte {pos}")))?;
        let mut n = [0u8; 8];
        n.copy_from_slice(header);
        let numel = u64::from_le_bytes(n);
        if numel != s.numel {
            return Err(table_err(format!("storage {key} at byte {pos} declares {numel} elements, the pickle says {}", s.numel)));
        }
        let start = pos + 8;
        let len = numel
            .checked_mul(s.dtype.element_size() as u64)
            .and_then(|l| usize::try_from(l).ok())
            .filter(|&l| start.checked_add(l).is_some_and(|end| end <= data.len()))
            .ok_or_else(|| table_err(format!("storage {key} at byte {pos} declares {numel} elements, more than the file holds")))?;
        ranges.insert(key, (start, start + len));
        pos = start + len;
    }
    Ok(RawFile { format: ContainerFormat::Legacy, pickle: main, storages: StorageSource::Ranges { ranges }, big_endian: false })
}
