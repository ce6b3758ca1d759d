//! One dataset file of a data-bin, as `indexed_dataset.make_dataset` opens it: a binary
//! `.idx`/`.bin` pair (the `.bin` memory-mapped) or a raw text file encoded with the dictionary.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::data::error::DataError;
use crate::data::indexed_dataset::{sniff_magic, Index, IndexFormat, Magic};
use crate::text::dictionary::Dictionary;

/// `--dataset-impl` (the formats fairseq's translation task reads; `fasta` and `huffman` are
/// not translation data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatasetImpl {
    Raw,
    Lazy,
    Cached,
    MMap,
}

impl DatasetImpl {
    pub fn from_name(name: &str) -> Option<DatasetImpl> {
        Some(match name {
            "raw" => DatasetImpl::Raw,
            "lazy" => DatasetImpl::Lazy,
            "cached" => DatasetImpl::Cached,
            "mmap" => DatasetImpl::MMap,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DatasetImpl::Raw => "raw",
            DatasetImpl::Lazy => "lazy",
            DatasetImpl::Cached => "cached",
            DatasetImpl::MMap => "mmap",
        }
    }
}

impl std::fmt::Display for DatasetImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `index_file_path`, `data_file_path`.
pub fn index_file_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".idx")
}

pub fn data_file_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".bin")
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `indexed_dataset.dataset_exists`; `None` (no `--dataset-impl`) accepts a binary pair or a
/// raw text file.
pub fn dataset_exists(prefix: &Path, dataset_impl: Option<DatasetImpl>) -> bool {
    let binary = || index_file_path(prefix).is_file() && data_file_path(prefix).is_file();
    match dataset_impl {
        Some(DatasetImpl::Raw) => prefix.is_file(),
        Some(_) => binary(),
        None => prefix.is_file() || binary(),
    }
}

/// `indexed_dataset.infer_dataset_impl`: a raw text file first, else the `.idx`'s magic
/// (`TNTIDX` → `cached`, `MMIDIDX` → `mmap`).
pub fn infer_dataset_impl(prefix: &Path) -> Result<Option<DatasetImpl>, DataError> {
    if prefix.is_file() {
        return Ok(Some(DatasetImpl::Raw));
    }
    if !dataset_exists(prefix, Some(DatasetImpl::MMap)) {
        return Ok(None);
    }
    let path = index_file_path(prefix);
    let mut head = Vec::with_capacity(8);
    let file = File::open(&path).map_err(|source| DataError::Io { path: path.clone(), source })?;
    std::io::Read::read_to_end(&mut std::io::Read::take(file, 8), &mut head)
        .map_err(|source| DataError::Io { path: path.clone(), source })?;
    Ok(match sniff_magic(&head) {
        Magic::Legacy => Some(DatasetImpl::Cached),
        Magic::MMap => Some(DatasetImpl::MMap),
        Magic::Huffman => {
            return Err(DataError::Unsupported { path, dataset_impl: "huffman".into(), why: "not translation data" })
        }
        Magic::Unknown => None,
    })
}

/// The `.bin`'s bytes: a map, or nothing for an empty file (which cannot be mapped).
#[derive(Debug)]
enum Bytes {
    Map(Mmap),
    Empty,
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Empty => &[],
        }
    }
}

#[derive(Debug)]
enum Items {
    Binary { index: Index, bin: Bytes },
    Raw { tokens_list: Vec<Vec<i64>>, lines: Vec<String> },
}

/// One opened dataset, every token id checked against its dictionary.
#[derive(Debug)]
pub struct IndexedDataset {
    pub path: PathBuf,
    pub dataset_impl: DatasetImpl,
    items: Items,
    sizes: Vec<i64>,
}

fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })
}

fn map(path: &Path) -> Result<Bytes, DataError> {
    let io = |source| DataError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() == 0 {
        return Ok(Bytes::Empty);
    }
    // SAFETY: the map is read-only and private to this process; as with fairseq's np.memmap,
    // a file truncated by someone else while mapped is outside what can be checked.
    let map = unsafe { Mmap::map(&file) }.map_err(io)?;
    Ok(Bytes::Map(map))
}

impl IndexedDataset {
    /// `make_dataset(prefix, impl, fix_lua_indexing=True, dictionary)`, then every sentence read
    /// once to check its ids against `dictionary` (`dict_path` names it in errors).
    pub fn open(prefix: &Path, dataset_impl: DatasetImpl, dictionary: &Dictionary, dict_path: &Path) -> Result<Self, DataError> {
        let ds = match dataset_impl {
            DatasetImpl::Raw => Self::open_raw(prefix, dictionary)?,
            _ => Self::open_binary(prefix, dataset_impl)?,
        };
        ds.check_tokens(dictionary, dict_path)?;
        Ok(ds)
    }

    fn open_binary(prefix: &Path, dataset_impl: DatasetImpl) -> Result<Self, DataError> {
        let (idx_path, bin_path) = (index_file_path(prefix), data_file_path(prefix));
        let idx = read(&idx_path)?;
        let bin = map(&bin_path)?;
        let format = if dataset_impl == DatasetImpl::MMap { IndexFormat::MMap } else { IndexFormat::Legacy };
        let index = Index::parse(&idx, bin.as_slice().len() as u64, format)
            .map_err(|source| DataError::Index { path: idx_path.clone(), source })?;
        let sizes = index.sizes();
        Ok(IndexedDataset { path: bin_path, dataset_impl, items: Items::Binary { index, bin }, sizes })
    }

    /// `IndexedRawTextDataset(path, dictionary)`: every line (Python's universal newlines)
    /// through `encode_line(line, add_if_not_exist=False, append_eos=True, reverse_order=False)`.
    fn open_raw(path: &Path, dictionary: &Dictionary) -> Result<Self, DataError> {
        let bytes = read(path)?;
        let (mut tokens_list, mut lines) = (Vec::new(), Vec::new());
        for (i, line) in universal_lines(&bytes).enumerate() {
            let line = std::str::from_utf8(line).map_err(|_| DataError::Encoding { path: path.to_path_buf(), line: i + 1 })?;
            tokens_list.push(dictionary.encode_line(line, true));
            lines.push(line.to_string());
        }
        let sizes = tokens_list.iter().map(|t| t.len() as i64).collect();
        Ok(IndexedDataset { path: path.to_path_buf(), dataset_impl: DatasetImpl::Raw, items: Items::Raw { tokens_list, lines }, sizes })
    }

    fn check_tokens(&self, dictionary: &Dictionary, dict_path: &Path) -> Result<(), DataError> {
        let dict_len = dictionary.len();
        for i in 0..self.len() {
            let ids = self.try_get(i)?;
            if let Some(&token) = ids.iter().find(|&&t| usize::try_from(t).map_or(true, |t| t >= dict_len)) {
                return Err(DataError::TokenOutOfDictionary {
                    path: self.path.clone(),
                    index: i,
                    token,
                    dictionary: dict_path.to_path_buf(),
                    dict_len,
                });
            }
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The number of tokens of every sentence.
    pub fn sizes(&self) -> &[i64] {
        &self.sizes
    }

    /// `get_original_text(i)`: line `i` as a raw text dataset read it; `None` for the binary
    /// formats, which keep only token ids.
    pub fn original_text(&self, i: usize) -> Option<&str> {
        match &self.items {
            Items::Raw { lines, .. } => lines.get(i).map(String::as_str),
            Items::Binary { .. } => None,
        }
    }

    /// Sentence `i`, or the typed error of a bad read.
    pub fn try_get(&self, i: usize) -> Result<Vec<i64>, DataError> {
        match &self.items {
            Items::Binary { index, bin } => {
                index.item(bin.as_slice(), i).map_err(|source| DataError::Index { path: self.path.clone(), source })
            }
            Items::Raw { tokens_list, .. } => tokens_list.get(i).cloned().ok_or_else(|| DataError::Index {
                path: self.path.clone(),
                source: crate::data::indexed_dataset::IndexError::ItemIndex { index: i, len: tokens_list.len() },
            }),
        }
    }
}

/// Lines as Python's text mode yields them: split after `\n`, `\r\n` or a lone `\r`, no empty
/// line after a final newline, the newline itself dropped (tokenization strips it anyway).
fn universal_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.iter().position(|&b| b == b'\n' || b == b'\r');
        let (line, next) = match end {
            None => (rest, &rest[rest.len()..]),
            Some(e) if rest[e] == b'\r' && rest.get(e + 1) == Some(&b'\n') => (&rest[..e], &rest[e + 2..]),
            Some(e) => (&rest[..e], &rest[e + 1..]),
        };
        rest = next;
        Some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::universal_lines;

    #[test]
    fn lines_split_as_python_text_mode_does() {
        let lines: Vec<&[u8]> = universal_lines(b"a\nb\r\nc\rd").collect();
        assert_eq!(lines, [&b"a"[..], b"b", b"c", b"d"]);
        assert_eq!(universal_lines(b"a\n\n").count(), 2);
        assert_eq!(universal_lines(b"").count(), 0);
    }
}
