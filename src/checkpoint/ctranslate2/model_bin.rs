//! CTranslate2's `model.bin`, as `ModelSpec._serialize` (`python/ctranslate2/specs/model_spec.py`)
//! writes it and `models::Model::load` (`src/models/model.cc`) reads it. Both use the machine's
//! byte order, little-endian wherever CTranslate2 runs:
//!
//! ```text
//! u32 binary_version                         (1 ..= 6; CTranslate2 4.x writes 6)
//! str spec name, u32 spec revision           (binary version >= 2)
//! u32 n, then n variables:
//!   str name, u8 rank, rank x u32 dim,
//!   u8 dtype id, u32 byte count              (binary version >= 4)
//!   u8 item size, u32 element count          (binary version < 4)
//!   the data, row-major
//! u32 n, then n aliases: str alias, str variable     (binary version >= 3)
//! ```
//!
//! `str` is a u16 length that counts a terminating NUL, the bytes, the NUL. Scalars (flags,
//! head counts, `scale_embeddings`) are rank-0 variables. Nothing here needs libtorch.

use indexmap::IndexMap;

/// The newest binary version CTranslate2 writes (`CURRENT_BINARY_VERSION`).
pub const CURRENT_BINARY_VERSION: u32 = 6;

/// No CTranslate2 spec stores more than 3 dimensions (Conv1D weights); a larger rank is
/// corruption, not a model.
pub const MAX_RANK: u8 = 8;

/// `DataType` of `include/ctranslate2/types.h`; the id is the enum's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    Float32,
    Int8,
    Int16,
    Int32,
    Float16,
    BFloat16,
}

impl DataType {
    pub fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => Self::Float32,
            1 => Self::Int8,
            2 => Self::Int16,
            3 => Self::Int32,
            4 => Self::Float16,
            5 => Self::BFloat16,
            _ => return None,
        })
    }

    /// `get_dtype_from_item_size`: binary versions < 4 stored only the width.
    fn from_item_size(size: u8) -> Option<Self> {
        Some(match size {
            4 => Self::Float32,
            2 => Self::Int16,
            1 => Self::Int8,
            _ => return None,
        })
    }

    pub fn item_size(self) -> u64 {
        match self {
            Self::Int8 => 1,
            Self::Int16 | Self::Float16 | Self::BFloat16 => 2,
            Self::Float32 | Self::Int32 => 4,
        }
    }

    /// `dtype_name`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Float32 => "float32",
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Float16 => "float16",
            Self::BFloat16 => "bfloat16",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Self::Float32 | Self::Float16 | Self::BFloat16)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelBinError {
    /// The file ends before its own fields say it does: an interrupted download or copy.
    #[error("the file is truncated ({len} bytes): {what} at byte {offset} needs {needed} bytes")]
    Truncated { len: u64, offset: u64, needed: u64, what: String },
    #[error("binary version {0}: CTranslate2 has written versions 1 to {CURRENT_BINARY_VERSION} (a newer CTranslate2, or not a model.bin)")]
    BinaryVersion(u32),
    #[error("{what} at byte {offset}: length 0, but CTranslate2's strings count their terminating NUL")]
    EmptyString { offset: u64, what: String },
    #[error("{what} at byte {offset}: not NUL-terminated")]
    Unterminated { offset: u64, what: String },
    #[error("{what} at byte {offset}: not UTF-8")]
    NotUtf8 { offset: u64, what: String },
    #[error("variable {name}: dtype id {id} (CTranslate2 knows 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16)")]
    Dtype { name: String, id: u8 },
    #[error("variable {name}: item size {size} (binary versions before 4 store 1, 2 or 4)")]
    ItemSize { name: String, size: u8 },
    #[error("variable {name}: rank {rank}, more than the {MAX_RANK} dimensions any model has")]
    Rank { name: String, rank: u8 },
    #[error("variable {name}: shape {shape:?} of {dtype} does not fit in 64 bits")]
    Overflow { name: String, shape: Vec<u32>, dtype: DataType },
    #[error("variable {name}: {nbytes} bytes of data, but shape {shape:?} of {dtype} needs {needed}")]
    Payload { name: String, shape: Vec<u32>, dtype: DataType, nbytes: u64, needed: u64 },
    #[error("{name} is stored twice")]
    Duplicate { name: String },
    #[error("alias {alias} names {target}, which is no variable of the file")]
    AliasTarget { alias: String, target: String },
    #[error("{extra} bytes after the aliases (at byte {offset}): not a model.bin, or more than one")]
    Trailing { offset: u64, extra: u64 },
}

/// One stored variable; `data` is its bytes in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable<'a> {
    pub name: String,
    pub shape: Vec<u32>,
    pub dtype: DataType,
    pub data: &'a [u8],
}

impl Variable<'_> {
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| u64::from(d)).product()
    }

    /// The value of a one-element integer or float32 variable (a flag, a count, a scale), as
    /// `StorageView::as_scalar` reads it; None for any other variable.
    pub fn scalar(&self) -> Option<f64> {
        if self.numel() != 1 {
            return None;
        }
        let b = self.data;
        Some(match self.dtype {
            DataType::Int8 => f64::from(i8::from_le_bytes([*b.first()?])),
            DataType::Int16 => f64::from(i16::from_le_bytes(b.get(..2)?.try_into().ok()?)),
            DataType::Int32 => f64::from(i32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
            DataType::Float32 => f64::from(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
            DataType::Float16 | DataType::BFloat16 => return None,
        })
    }
}

/// A parsed `model.bin`: its header, its variables in file order, its aliases.
#[derive(Debug, Clone)]
pub struct ModelBin<'a> {
    pub binary_version: u32,
    /// `""` for binary version 1, which stored no spec.
    pub spec: String,
    pub revision: u32,
    pub variables: IndexMap<String, Variable<'a>>,
    /// alias -> the variable it names (`_alias_variables`: of equal variables, the first in
    /// alphabetical order is stored, the others name it).
    pub aliases: IndexMap<String, String>,
}

impl<'a> ModelBin<'a> {
    /// The variable `name` is, or is an alias of.
    pub fn get(&self, name: &str) -> Option<&Variable<'a>> {
        self.variables.get(name).or_else(|| self.variables.get(self.aliases.get(name)?))
    }

    /// The name of the stored variable `name` is, or is an alias of.
    pub fn resolve<'s>(&'s self, name: &'s str) -> &'s str {
        self.aliases.get(name).map_or(name, String::as_str)
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], ModelBinError> {
        let len = self.data.len() as u64;
        let end = (self.pos as u64).checked_add(n).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(ModelBinError::Truncated { len, offset: self.pos as u64, needed: n, what: what() });
        };
        // end <= data.len(), so it fits in usize
        let part = &self.data[self.pos..end as usize];
        self.pos = end as usize;
        Ok(part)
    }

    fn u8(&mut self, what: impl FnOnce() -> String) -> Result<u8, ModelBinError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: impl FnOnce() -> String) -> Result<u16, ModelBinError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, ModelBinError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, ModelBinError> {
        let offset = self.pos as u64;
        let n = self.u16(|| format!("the length of {}", what()))?;
        if n == 0 {
            return Err(ModelBinError::EmptyString { offset, what: what() });
        }
        let bytes = self.take(u64::from(n), what)?;
        let (&last, text) = bytes.split_last().ok_or_else(|| ModelBinError::EmptyString { offset, what: what() })?;
        if last != 0 {
            return Err(ModelBinError::Unterminated { offset, what: what() });
        }
        String::from_utf8(text.to_vec()).map_err(|_| ModelBinError::NotUtf8 { offset, what: what() })
    }
}

/// Parses `data`, checking every length, dtype, shape and offset against the file.
pub fn parse(data: &[u8]) -> Result<ModelBin<'_>, ModelBinError> {
    let mut r = Reader { data, pos: 0 };
    let binary_version = r.u32(|| "the binary version".into())?;
    if !(1..=CURRENT_BINARY_VERSION).contains(&binary_version) {
        return Err(ModelBinError::BinaryVersion(binary_version));
    }
    let (spec, revision) = if binary_version >= 2 {
        let spec = r.string(&|| "the spec name".into())?;
        (spec, r.u32(|| "the spec revision".into())?)
    } else {
        (String::new(), 1)
    };
    let count = r.u32(|| "the number of variables".into())?;
    // the smallest variable takes 9 bytes besides its name: never reserve for more than fit
    let mut variables = IndexMap::with_capacity((count as usize).min(data.len() / 9));
    for i in 0..count {
        let name = r.string(&|| format!("the name of variable {i}"))?;
        let rank = r.u8(|| format!("the rank of {name}"))?;
        if rank > MAX_RANK {
            return Err(ModelBinError::Rank { name, rank });
        }
        let shape = (0..rank).map(|d| r.u32(|| format!("dimension {d} of {name}"))).collect::<Result<Vec<_>, _>>()?;
        let (dtype, nbytes) = if binary_version >= 4 {
            let id = r.u8(|| format!("the dtype of {name}"))?;
            let dtype = DataType::from_id(id).ok_or_else(|| ModelBinError::Dtype { name: name.clone(), id })?;
            (dtype, u64::from(r.u32(|| format!("the byte count of {name}"))?))
        } else {
            let size = r.u8(|| format!("the item size of {name}"))?;
            let dtype = DataType::from_item_size(size).ok_or_else(|| ModelBinError::ItemSize { name: name.clone(), size })?;
            (dtype, u64::from(r.u32(|| format!("the element count of {name}"))?) * u64::from(size))
        };
        let needed = shape
            .iter()
            .try_fold(dtype.item_size(), |acc, &d| acc.checked_mul(u64::from(d)))
            .ok_or_else(|| ModelBinError::Overflow { name: name.clone(), shape: shape.clone(), dtype })?;
        if needed != nbytes {
            return Err(ModelBinError::Payload { name, shape, dtype, nbytes, needed });
        }
        let data = r.take(nbytes, || format!("the data of {name} ({dtype} {shape:?})"))?;
        if variables.contains_key(&name) {
            return Err(ModelBinError::Duplicate { name });
        }
        variables.insert(name.clone(), Variable { name, shape, dtype, data });
    }
    let mut aliases = IndexMap::new();
    if binary_version >= 3 {
        let count = r.u32(|| "the number of aliases".into())?;
        for i in 0..count {
            let alias = r.string(&|| format!("alias {i}"))?;
            let target = r.string(&|| format!("the variable of alias {alias}"))?;
            if variables.contains_key(&alias) || aliases.contains_key(&alias) {
                return Err(ModelBinError::Duplicate { name: alias });
            }
            // CTranslate2 ignores an alias of an unknown name; the converter never writes one
            if !variables.contains_key(&target) {
                return Err(ModelBinError::AliasTarget { alias, target });
            }
            aliases.insert(alias, target);
        }
    }
    if r.pos != data.len() {
        return Err(ModelBinError::Trailing { offset: r.pos as u64, extra: (data.len() - r.pos) as u64 });
    }
    Ok(ModelBin { binary_version, spec, revision, variables, aliases })
}

/// Serializes as `ModelSpec._serialize` does (binary version 6): for tests that build or
/// corrupt files.
#[cfg(test)]
pub fn write(spec: &str, revision: u32, variables: &[(&str, &[u32], DataType, &[u8])], aliases: &[(&str, &str)]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u16 + 1).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
        out.push(0);
    }
    let mut out = CURRENT_BINARY_VERSION.to_le_bytes().to_vec();
    string(&mut out, spec);
    out.extend_from_slice(&revision.to_le_bytes());
    out.extend_from_slice(&(variables.len() as u32).to_le_bytes());
    for (name, shape, dtype, data) in variables {
        string(&mut out, name);
        out.push(shape.len() as u8);
        for d in *shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.push(*dtype as u8);
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    }
    out.extend_from_slice(&(aliases.len() as u32).to_le_bytes());
    for (alias, target) in aliases {
        string(&mut out, alias);
        string(&mut out, target);
    }
    out
}
