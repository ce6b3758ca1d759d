//! The `.idx` files of fairseq's binarized datasets (`fairseq/data/indexed_dataset.py`), read from
//! bytes that are never trusted: `MMapIndexedDataset.Index` (`MMIDIDX\x00\x00`) and
//! `IndexedDataset` (`TNTIDX\x00\x00`, the `lazy` and `cached` formats), checked whole against
//! the length of their `.bin` before any item is read.
//!
//! This file imports nothing from the crate: the fuzz target `data_bin` compiles it in alone.

/// `MMapIndexedDataset.Index._HDR_MAGIC`.
pub const MMAP_MAGIC: &[u8; 9] = b"MMIDIDX\x00\x00";
/// `IndexedDataset._HDR_MAGIC`.
pub const LEGACY_MAGIC: &[u8; 8] = b"TNTIDX\x00\x00";
/// `HuffmanMMapIndex._HDR_MAGIC` (its first 8 bytes, what `infer_dataset_impl` compares).
pub const HUFFMAN_MAGIC: &[u8; 8] = b"HUFFIDX\x00";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    #[error("empty file")]
    Empty,
    #[error("truncated: {what} needs {needed} bytes, the file has {len}")]
    Truncated { what: &'static str, needed: u64, len: u64 },
    #[error("{len} bytes where the header's counts make {expected}: trailing bytes")]
    TrailingBytes { len: u64, expected: u64 },
    #[error("magic {found:?} is not {expected:?} (the wrong --dataset-impl, or not a fairseq index)")]
    BadMagic { found: String, expected: String },
    #[error("index version {0}, fairseq 0.12.2 reads only version 1")]
    UnsupportedVersion(u64),
    #[error("unknown dtype code {0} (fairseq's _code_to_dtype has 1..=10)")]
    UnknownDtype(u64),
    #[error("element size {element_size} does not fit dtype {dtype} ({itemsize} bytes)")]
    ElementSize { element_size: u64, dtype: &'static str, itemsize: u64 },
    #[error("{what} count {count} overflows the file's size")]
    CountOverflow { what: &'static str, count: u64 },
    #[error("{what}[{index}] = {value} is negative")]
    Negative { what: &'static str, index: u64, value: i64 },
    #[error("{what}[{index}] = {value} goes back from {previous}: offsets must not decrease")]
    NonMonotonic { what: &'static str, index: u64, value: i64, previous: i64 },
    #[error("{what}[0] = {value}, fairseq's writer starts it at 0")]
    NonZeroStart { what: &'static str, value: i64 },
    #[error("pointers[{index}] = {pointer}, where the sizes before it put item {index} at byte {expected}")]
    Pointer { index: u64, pointer: i64, expected: u64 },
    #[error("item {index}: its dims multiply to {elements} elements, its data_offsets span {span}")]
    DimsMismatch { index: u64, elements: u64, span: u64 },
    #[error("dim_offsets end at {end}, the index holds {sizes} sizes")]
    DimOffsetsEnd { end: i64, sizes: u64 },
    #[error("the index describes {expected} data bytes, the .bin holds {len}: a mismatched .idx/.bin pair")]
    DataLength { expected: u64, len: u64 },
    #[error("item {index} of {len} asked for")]
    ItemIndex { index: usize, len: usize },
    #[error("item {index}: element {element} = {value} is not a finite integer")]
    NotAnInteger { index: usize, element: usize, value: f64 },
    #[error("item {index}: element {element} = {value} overflows int64")]
    ValueOverflow { index: usize, element: usize, value: u64 },
}

/// `_code_to_dtype` of fairseq 0.12.2, code for code (6 and 7 are both `np.float64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Uint8,
    Int8,
    Int16,
    Int32,
    Int64,
    Float64,
    Double,
    Uint16,
    Uint32,
    Uint64,
}

impl Dtype {
    pub fn from_code(code: u64) -> Option<Dtype> {
        Some(match code {
            1 => Dtype::Uint8,
            2 => Dtype::Int8,
            3 => Dtype::Int16,
            4 => Dtype::Int32,
            5 => Dtype::Int64,
            6 => Dtype::Float64,
            7 => Dtype::Double,
            8 => Dtype::Uint16,
            9 => Dtype::Uint32,
            10 => Dtype::Uint64,
            _ => return None,
        })
    }

    /// `_dtype_header_code`: the first code of the dtype (`np.float64` and `np.double` are one
    /// dtype, so both answer 6).
    pub fn code(self) -> u8 {
        match self {
            Dtype::Uint8 => 1,
            Dtype::Int8 => 2,
            Dtype::Int16 => 3,
            Dtype::Int32 => 4,
            Dtype::Int64 => 5,
            Dtype::Float64 | Dtype::Double => 6,
            Dtype::Uint16 => 8,
            Dtype::Uint32 => 9,
            Dtype::Uint64 => 10,
        }
    }

    pub fn itemsize(self) -> usize {
        match self {
            Dtype::Uint8 | Dtype::Int8 => 1,
            Dtype::Int16 | Dtype::Uint16 => 2,
            Dtype::Int32 | Dtype::Uint32 => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Float64 | Dtype::Double => 8,
        }
    }

    /// numpy's name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Uint8 => "uint8",
            Dtype::Int8 => "int8",
            Dtype::Int16 => "int16",
            Dtype::Int32 => "int32",
            Dtype::Int64 => "int64",
            Dtype::Float64 | Dtype::Double => "float64",
            Dtype::Uint16 => "uint16",
            Dtype::Uint32 => "uint32",
            Dtype::Uint64 => "uint64",
        }
    }

    /// `best_fitting_int_dtype(vocab_size)`: what `fairseq-preprocess --dataset-impl mmap` writes.
    pub fn best_fitting_int_dtype(max_int_to_represent: Option<u64>) -> Dtype {
        match max_int_to_represent {
            None => Dtype::Uint32,
            Some(n) if n < 65500 => Dtype::Uint16,
            Some(n) if n < 4294967295 => Dtype::Uint32,
            Some(_) => Dtype::Int64,
        }
    }

    /// One element (`itemsize` little-endian bytes) as `.astype(np.int64)` gives it; a float
    /// that is not finite or outside int64 and a uint64 above `i64::MAX` are errors, not
    /// numpy's unspecified casts.
    fn decode(self, b: &[u8], index: usize, element: usize) -> Result<i64, IndexError> {
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        Ok(match self {
            Dtype::Uint8 => i64::from(b[0]),
            Dtype::Int8 => i64::from(b[0] as i8),
            Dtype::Int16 => i64::from(i16::from_le_bytes([b[0], b[1]])),
            Dtype::Uint16 => i64::from(u16::from_le_bytes([b[0], b[1]])),
            Dtype::Int32 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Dtype::Uint32 => i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Dtype::Int64 => i64::from_le_bytes(w),
            Dtype::Uint64 => {
                let v = u64::from_le_bytes(w);
                i64::try_from(v).map_err(|_| IndexError::ValueOverflow { index, element, value: v })?
            }
            Dtype::Float64 | Dtype::Double => {
                let v = f64::from_le_bytes(w);
                // int64's range is [-2^63, 2^63); NaN and the infinities are outside it too.
                let limit = 2f64.powi(63);
                if !(-limit..limit).contains(&v) {
                    return Err(IndexError::NotAnInteger { index, element, value: v });
                }
                v.trunc() as i64
            }
        })
    }
}

/// Which of the two index layouts a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexFormat {
    /// `MMapIndexedDataset` (`--dataset-impl mmap`).
    MMap,
    /// `IndexedDataset` / `IndexedCachedDataset` (`--dataset-impl lazy` or `cached`).
    Legacy,
}

/// What `infer_dataset_impl` sees in the first 8 bytes of an `.idx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Magic {
    MMap,
    Legacy,
    Huffman,
    Unknown,
}

pub fn sniff_magic(idx: &[u8]) -> Magic {
    match idx.get(..8) {
        Some(m) if m == LEGACY_MAGIC => Magic::Legacy,
        Some(m) if m == &MMAP_MAGIC[..8] => Magic::MMap,
        Some(m) if m == HUFFMAN_MAGIC => Magic::Huffman,
        _ => Magic::Unknown,
    }
}

/// A parsed, checked index: for every item, its byte range in the `.bin`.
#[derive(Debug, Clone)]
pub struct Index {
    pub format: IndexFormat,
    pub dtype: Dtype,
    /// Byte ranges `[start, end)` into the `.bin`, one per item, checked against its length.
    ranges: Vec<(usize, usize)>,
    /// `fix_lua_indexing=True` (what `load_indexed_dataset` passes): the legacy writer stores
    /// every id plus one.
    lua_offset: i64,
}

/// Bounds-checked little-endian reads from the header.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], IndexError> {
        let end = self.pos.checked_add(n).ok_or(IndexError::CountOverflow { what, count: n as u64 })?;
        let s = self.data.get(self.pos..end).ok_or(IndexError::Truncated {
            what,
            needed: end as u64,
            len: self.data.len() as u64,
        })?;
        self.pos = end;
        Ok(s)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, IndexError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, IndexError> {
        Ok(self.take(1, what)?[0])
    }

    /// `count` elements of `width` bytes, after checking that they fit in what is left.
    fn array(&mut self, count: u64, width: usize, what: &'static str) -> Result<&'a [u8], IndexError> {
        let bytes = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(width))
            .ok_or(IndexError::CountOverflow { what, count })?;
        self.take(bytes, what)
    }

    fn finish(&self) -> Result<(), IndexError> {
        if self.pos == self.data.len() {
            Ok(())
        } else {
            Err(IndexError::TrailingBytes { len: self.data.len() as u64, expected: self.pos as u64 })
        }
    }
}

fn i64s(bytes: &[u8]) -> impl Iterator<Item = i64> + '_ {
    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
}

fn check_magic(r: &mut Reader<'_>, magic: &[u8]) -> Result<(), IndexError> {
    if r.data.is_empty() {
        return Err(IndexError::Empty);
    }
    let found = r.take(magic.len(), "the magic")?;
    if found != magic {
        return Err(IndexError::BadMagic {
            found: String::from_utf8_lossy(found).into_owned(),
            expected: String::from_utf8_lossy(magic).into_owned(),
        });
    }
    let version = r.u64("the version")?;
    if version != 1 {
        return Err(IndexError::UnsupportedVersion(version));
    }
    Ok(())
}

fn to_usize(v: u64, what: &'static str) -> Result<usize, IndexError> {
    usize::try_from(v).map_err(|_| IndexError::CountOverflow { what, count: v })
}

impl Index {
    /// Parses `idx` as `format` and checks it against a `.bin` of `bin_len` bytes.
    pub fn parse(idx: &[u8], bin_len: u64, format: IndexFormat) -> Result<Index, IndexError> {
        match format {
            IndexFormat::MMap => Self::parse_mmap(idx, bin_len),
            IndexFormat::Legacy => Self::parse_legacy(idx, bin_len),
        }
    }

    /// `MMapIndexedDataset.Index.__init__`: magic, version, dtype code (one byte), `len`, then
    /// `sizes` (int32) and `pointers` (int64). The pointers must be where the writer's
    /// `_get_pointers` puts them (item after item, no gaps) and the last item must end the `.bin`.
    pub fn parse_mmap(idx: &[u8], bin_len: u64) -> Result<Index, IndexError> {
        let mut r = Reader { data: idx, pos: 0 };
        check_magic(&mut r, MMAP_MAGIC)?;
        let code = r.u8("the dtype code")?;
        let dtype = Dtype::from_code(u64::from(code)).ok_or(IndexError::UnknownDtype(u64::from(code)))?;
        let len = r.u64("the item count")?;
        let sizes = r.array(len, 4, "sizes")?;
        let pointers = r.array(len, 8, "pointers")?;
        r.finish()?;
        let itemsize = dtype.itemsize() as u64;
        let mut ranges = Vec::with_capacity(to_usize(len, "items")?);
        let mut address: u64 = 0;
        for (i, (size, pointer)) in sizes.chunks_exact(4).zip(i64s(pointers)).enumerate() {
            let size = i32::from_le_bytes(size.try_into().unwrap_or([0; 4]));
            let index = i as u64;
            let size = u64::try_from(size).map_err(|_| IndexError::Negative { what: "sizes", index, value: i64::from(size) })?;
            if u64::try_from(pointer).ok() != Some(address) {
                return Err(IndexError::Pointer { index, pointer, expected: address });
            }
            let end = size
                .checked_mul(itemsize)
                .and_then(|n| address.checked_add(n))
                .ok_or(IndexError::CountOverflow { what: "sizes", count: size })?;
            if end > bin_len {
                return Err(IndexError::DataLength { expected: end, len: bin_len });
            }
            ranges.push((to_usize(address, "pointers")?, to_usize(end, "pointers")?));
            address = end;
        }
        if address != bin_len {
            return Err(IndexError::DataLength { expected: address, len: bin_len });
        }
        Ok(Index { format: IndexFormat::MMap, dtype, ranges, lua_offset: 0 })
    }

    /// `IndexedDataset.read_index`: magic, version, dtype code, element size, `_len`, `s`, then
    /// `dim_offsets` and `data_offsets` (`_len + 1` int64 each) and `sizes` (`s` int64). Each
    /// item's dims must multiply to its span of `data_offsets`, and the last offset must end
    /// the `.bin`.
    pub fn parse_legacy(idx: &[u8], bin_len: u64) -> Result<Index, IndexError> {
        let mut r = Reader { data: idx, pos: 0 };
        check_magic(&mut r, LEGACY_MAGIC)?;
        let code = r.u64("the dtype code")?;
        let element_size = r.u64("the element size")?;
        let dtype = Dtype::from_code(code).ok_or(IndexError::UnknownDtype(code))?;
        let itemsize = dtype.itemsize() as u64;
        if element_size != itemsize {
            return Err(IndexError::ElementSize { element_size, dtype: dtype.name(), itemsize });
        }
        let len = r.u64("the item count")?;
        let s = r.u64("the size count")?;
        let offsets = len.checked_add(1).ok_or(IndexError::CountOverflow { what: "items", count: len })?;
        let dim_offsets: Vec<i64> = i64s(r.array(offsets, 8, "dim_offsets")?).collect();
        let data_offsets: Vec<i64> = i64s(r.array(offsets, 8, "data_offsets")?).collect();
        let sizes: Vec<i64> = i64s(r.array(s, 8, "sizes")?).collect();
        r.finish()?;
        for (what, offsets) in [("dim_offsets", &dim_offsets), ("data_offsets", &data_offsets)] {
            if offsets[0] != 0 {
                return Err(IndexError::NonZeroStart { what, value: offsets[0] });
            }
            for (i, w) in offsets.windows(2).enumerate() {
                if w[1] < w[0] {
                    return Err(IndexError::NonMonotonic { what, index: i as u64 + 1, value: w[1], previous: w[0] });
                }
            }
        }
        let dims_end = dim_offsets[dim_offsets.len() - 1];
        if u64::try_from(dims_end).ok() != Some(s) {
            return Err(IndexError::DimOffsetsEnd { end: dims_end, sizes: s });
        }
        if let Some((i, &v)) = sizes.iter().enumerate().find(|(_, &v)| v < 0) {
            return Err(IndexError::Negative { what: "sizes", index: i as u64, value: v });
        }
        let data_end = data_offsets[data_offsets.len() - 1] as u64;
        let data_bytes = data_end
            .checked_mul(itemsize)
            .ok_or(IndexError::CountOverflow { what: "data_offsets", count: data_end })?;
        if data_bytes != bin_len {
            return Err(IndexError::DataLength { expected: data_bytes, len: bin_len });
        }
        let mut ranges = Vec::with_capacity(to_usize(len, "items")?);
        for i in 0..dim_offsets.len() - 1 {
            // Non-negative and non-decreasing, ending at `s`: in range of `sizes`.
            let dims = &sizes[dim_offsets[i] as usize..dim_offsets[i + 1] as usize];
            let elements = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
                .ok_or(IndexError::CountOverflow { what: "sizes", count: i as u64 })?;
            let (start, end) = (data_offsets[i] as u64, data_offsets[i + 1] as u64);
            if elements != end - start {
                return Err(IndexError::DimsMismatch { index: i as u64, elements, span: end - start });
            }
            // end * itemsize <= data_bytes, which did not overflow.
            ranges.push((to_usize(start * itemsize, "data_offsets")?, to_usize(end * itemsize, "data_offsets")?));
        }
        Ok(Index { format: IndexFormat::Legacy, dtype, ranges, lua_offset: 1 })
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The number of elements of every item (`sizes` of a 1-D dataset).
    pub fn sizes(&self) -> Vec<i64> {
        let w = self.dtype.itemsize();
        self.ranges.iter().map(|&(s, e)| ((e - s) / w) as i64).collect()
    }

    /// Item `i` read from `bin` as int64, as `__getitem__` returns it (after
    /// `fix_lua_indexing` for the legacy format).
    pub fn item(&self, bin: &[u8], i: usize) -> Result<Vec<i64>, IndexError> {
        let &(start, end) = self.ranges.get(i).ok_or(IndexError::ItemIndex { index: i, len: self.len() })?;
        let bytes = bin
            .get(start..end)
            .ok_or(IndexError::DataLength { expected: end as u64, len: bin.len() as u64 })?;
        bytes
            .chunks_exact(self.dtype.itemsize())
            .enumerate()
            .map(|(k, b)| {
                let v = self.dtype.decode(b, i, k)?;
                // i64::MIN - 1 is the one value that cannot be shifted back.
                v.checked_sub(self.lua_offset).ok_or(IndexError::ValueOverflow { index: i, element: k, value: v as u64 })
            })
            .collect()
    }
}
