//! torch file containers: the zip format (torch >= 1.6), the legacy magic-number stream
//! (torch < 1.6) and safetensors. Each reader turns a file into a [`RawFile`]: the parsed pickle
//! (for safetensors, a synthesised dict of tensors) plus a [`StorageSource`] that hands out the
//! bytes of one storage on demand, so storages that nobody asks for (optimizer state) are never
//! copied, and every zip entry that is read is CRC-checked.
//!
//! Nothing here needs libtorch, so the readers can be fuzzed from bytes (see `fuzz/`).

pub mod legacy;
pub mod safetensors;
pub mod torch_zip;
pub mod torch_zip_write;

use std::borrow::Cow;
use std::collections::HashMap;

use super::pickle::{Pickle, PickleError, StorageRef};

/// Largest pickle accepted inside a checkpoint (pytorch-reader uses the same bound).
pub const MAX_PICKLE_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerFormat {
    Zip,
    Legacy,
    Safetensors,
}

impl ContainerFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Zip => "zip",
            Self::Legacy => "legacy",
            Self::Safetensors => "safetensors",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    #[error("empty file")]
    Empty,
    #[error("not a torch checkpoint (no zip, legacy torch or safetensors signature)")]
    UnknownFormat,
    #[error("torch tar archives (torch < 0.1.10) are not supported")]
    TarFormat,
    #[error("{0}")]
    Pickle(#[from] PickleError),
    #[error("zip: {0}")]
    Zip(String),
    /// The file ends before its format says it does: an interrupted download or copy.
    #[error("the file is truncated ({len} bytes): {what}; download or copy it again")]
    Truncated { len: u64, what: String },
    #[error("zip entry {name} fails its CRC32 check (stored {stored:08x}, computed {computed:08x})")]
    Crc { name: String, stored: u32, computed: u32 },
    #[error("storage {key} is missing from the file")]
    MissingStorage { key: String },
    #[error("storage {key} holds {actual} bytes but {declared} elements of {dtype} need {needed}")]
    StorageSize { key: String, declared: u64, dtype: &'static str, needed: u64, actual: u64 },
    #[error("legacy storage table: {0}")]
    LegacyTable(String),
    #[error("safetensors: {0}")]
    Safetensors(String),
    #[error("{0}")]
    Unsupported(String),
}

/// Where the bytes of each storage live.
#[derive(Debug)]
pub enum StorageSource {
    Zip(torch_zip::ZipStorages),
    /// Legacy files and safetensors: storage key -> byte range in the file.
    Ranges { ranges: HashMap<String, (usize, usize)> },
}

/// A parsed container.
#[derive(Debug)]
pub struct RawFile {
    pub format: ContainerFormat,
    pub pickle: Pickle,
    pub storages: StorageSource,
    /// Storage bytes are big-endian (zip `byteorder` entry says `big`).
    pub big_endian: bool,
}

impl RawFile {
    /// The raw bytes of `storage` (exactly `numel * element_size` bytes). `data` must be the
    /// same file bytes the container was parsed from.
    pub fn storage_bytes<'a>(&self, data: &'a [u8], storage: &StorageRef) -> Result<Cow<'a, [u8]>, ContainerError> {
        let needed = storage.numel.checked_mul(storage.dtype.element_size() as u64).ok_or_else(|| ContainerError::StorageSize {
            key: storage.key.clone(),
            declared: storage.numel,
            dtype: storage.dtype.torch_name(),
            needed: u64::MAX,
            actual: 0,
        })?;
        let bytes = match &self.storages {
            StorageSource::Zip(z) => z.read(data, &storage.key, needed)?,
            StorageSource::Ranges { ranges } => {
                let &(start, end) = ranges.get(&storage.key).ok_or_else(|| ContainerError::MissingStorage { key: storage.key.clone() })?;
                Cow::Borrowed(data.get(start..end).ok_or_else(|| ContainerError::MissingStorage { key: storage.key.clone() })?)
            }
        };
        if (bytes.len() as u64) < needed {
            return Err(ContainerError::StorageSize {
                key: storage.key.clone(),
                declared: storage.numel,
                dtype: storage.dtype.torch_name(),
                needed,
                actual: bytes.len() as u64,
            });
        }
        Ok(match bytes {
            Cow::Borrowed(b) => Cow::Borrowed(&b[..needed as usize]),
            Cow::Owned(mut v) => {
                v.truncate(needed as usize);
                Cow::Owned(v)
            }
        })
    }
}

/// Detects the container from its first bytes and parses it.
pub fn read(data: &[u8]) -> Result<RawFile, ContainerError> {
    if data.is_empty() {
        return Err(ContainerError::Empty);
    }
    if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
        return torch_zip::read(data);
    }
    if legacy::is_legacy(data) {
        return legacy::read(data);
    }
    if data.len() > 262 && &data[257..262] == b"ustar" {
        return Err(ContainerError::TarFormat);
    }
    if safetensors::is_safetensors(data) {
        return safetensors::read(data);
    }
    Err(ContainerError::UnknownFormat)
}
