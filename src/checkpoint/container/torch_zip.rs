//! torch >= 1.6 zip checkpoints: `<prefix>/data.pkl`, `<prefix>/data/<key>`, `<prefix>/byteorder`.
//! torch writes entries STORED (uncompressed), so their bytes are sliced straight out of the
//! file (an mmap); every entry read is checked against the CRC32 in the central directory.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::sync::{Mutex, PoisonError};

use ::zip::read::{ArchiveOffset, Config};
use ::zip::{CompressionMethod, ZipArchive};

use super::{ContainerError, ContainerFormat, RawFile, StorageSource, MAX_PICKLE_BYTES};
use crate::checkpoint::pickle;
use crate::libtorch::parallel::parallel_for;

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    index: usize,
    data_start: u64,
    compressed_size: u64,
    size: u64,
    crc32: u32,
    stored: bool,
}

/// The storage entries of a zip checkpoint, by storage key.
#[derive(Debug)]
pub struct ZipStorages {
    entries: HashMap<String, Entry>,
}

impl ZipStorages {
    pub(super) fn read<'a>(&self, data: &'a [u8], key: &str, needed: u64) -> Result<Cow<'a, [u8]>, ContainerError> {
        let e = self.entries.get(key).ok_or_else(|| ContainerError::MissingStorage { key: key.to_string() })?;
        if e.size < needed {
            return Err(ContainerError::Zip(format!("entry {} holds {} bytes, the storage needs {needed}", e.name, e.size)));
        }
        read_entry(data, e)
    }
}

fn zip_err(e: ::zip::result::ZipError) -> ContainerError {
    ContainerError::Zip(e.to_string())
}

fn read_entry<'a>(data: &'a [u8], e: &Entry) -> Result<Cow<'a, [u8]>, ContainerError> {
    let bytes: Cow<'a, [u8]> = if e.stored {
        if e.size != e.compressed_size {
            return Err(ContainerError::Zip(format!("stored entry {} has different sizes", e.name)));
        }
        let start = usize::try_from(e.data_start).map_err(|_| ContainerError::Zip(format!("entry {} beyond the file", e.name)))?;
        let end = start
            .checked_add(usize::try_from(e.size).unwrap_or(usize::MAX))
            .filter(|&end| end <= data.len())
            .ok_or_else(|| ContainerError::Truncated { len: data.len() as u64, what: format!("entry {} runs past its end", e.name) })?;
        Cow::Borrowed(&data[start..end])
    } else {
        // Compressed entries: torch never writes them, but a re-zipped file may have them.
        if e.size > data.len() as u64 * 1032 {
            return Err(ContainerError::Zip(format!("entry {} declares an impossible size {}", e.name, e.size)));
        }
        let mut archive = open_archive(data)?;
        let mut f = archive.by_index(e.index).map_err(zip_err)?;
        let mut out = Vec::with_capacity(usize::try_from(e.size).unwrap_or(0).min(1 << 30));
        (&mut f).take(e.size).read_to_end(&mut out).map_err(|err| ContainerError::Zip(format!("entry {}: {err}", e.name)))?;
        Cow::Owned(out)
    };
    let computed = crc32(&bytes);
    if computed != e.crc32 {
        return Err(ContainerError::Crc { name: e.name.clone(), stored: e.crc32, computed });
    }
    Ok(bytes)
}

/// An entry longer than this is checked in pieces of this size on the intra-op threads.
const CRC_PIECE_BYTES: usize = 1 << 22;

/// The CRC32 of `bytes`; a large entry's pieces are hashed on the intra-op threads (which
/// also read its pages from the file on both cores) and their CRCs combined in order.
fn crc32(bytes: &[u8]) -> u32 {
    if bytes.len() <= CRC_PIECE_BYTES {
        return crc32fast::hash(bytes);
    }
    let pieces: Vec<&[u8]> = bytes.chunks(CRC_PIECE_BYTES).collect();
    let hashers: Vec<Mutex<crc32fast::Hasher>> = pieces.iter().map(|_| Mutex::new(crc32fast::Hasher::new())).collect();
    parallel_for(pieces.len(), 1, |start, end| {
        for (piece, hasher) in pieces[start..end].iter().zip(&hashers[start..end]) {
            hasher.lock().unwrap_or_else(PoisonError::into_inner).update(piece);
        }
    });
    let mut whole = crc32fast::Hasher::new();
    for hasher in hashers {
        whole.combine(&hasher.into_inner().unwrap_or_else(PoisonError::into_inner));
    }
    whole.finalize()
}

/// torch writes the archive from byte 0. The zip crate's default offset detection can misplace
/// the central directory of a valid torch file (seen with a 22-entry `torch.save` to a path), so
/// the offset is pinned to 0.
fn open_archive(data: &[u8]) -> Result<ZipArchive<Cursor<&[u8]>>, ContainerError> {
    ZipArchive::with_config(Config { archive_offset: ArchiveOffset::Known(0) }, Cursor::new(data)).map_err(|e| {
        if has_end_record(data) {
            zip_err(e)
        } else {
            ContainerError::Truncated { len: data.len() as u64, what: "it has no zip end record".into() }
        }
    })
}

/// Whether the file holds a whole end-of-central-directory record (22 bytes and its comment)
/// where a whole zip has it: at its end.
fn has_end_record(data: &[u8]) -> bool {
    let from = data.len().saturating_sub(22 + usize::from(u16::MAX));
    (from..data.len().saturating_sub(21)).rev().any(|p| {
        let comment = usize::from(u16::from_le_bytes([data[p + 20], data[p + 21]]));
        data[p..p + 4] == *b"PK\x05\x06" && p + 22 + comment <= data.len()
    })
}

pub fn read(data: &[u8]) -> Result<RawFile, ContainerError> {
    let mut archive = open_archive(data)?;
    let mut entries = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let f = archive.by_index_raw(index).map_err(zip_err)?;
        let name = f.name().map_err(zip_err)?.to_string();
        let data_start = f.data_start().ok_or_else(|| ContainerError::Zip(format!("entry {name} has no data offset")))?;
        let stored = match f.compression() {
            CompressionMethod::Stored => true,
            CompressionMethod::Deflated => false,
            other => return Err(ContainerError::Zip(format!("entry {name} uses unsupported compression {other}"))),
        };
        entries.push(Entry {
            name,
            index,
            data_start,
            compressed_size: f.compressed_size(),
            size: f.size(),
            crc32: f.crc32(),
            stored,
        });
    }
    let pkl = entries
        .iter()
        .filter(|e| e.name.ends_with("data.pkl") && (e.name == "data.pkl" || e.name.ends_with("/data.pkl")))
        .min_by_key(|e| e.name.len())
        .ok_or_else(|| ContainerError::Zip("no data.pkl entry: not a torch.save zip file".into()))?
        .clone();
    let prefix = pkl.name[..pkl.name.len() - "data.pkl".len()].to_string();
    if pkl.size > MAX_PICKLE_BYTES {
        return Err(ContainerError::Zip(format!("{} is {} bytes, more than the {MAX_PICKLE_BYTES} accepted", pkl.name, pkl.size)));
    }
    let big_endian = match entries.iter().find(|e| e.name == format!("{prefix}byteorder")) {
        Some(e) => {
            let b = read_entry(data, e)?;
            match b.trim_ascii() {
                b"little" => false,
                b"big" => true,
                other => return Err(ContainerError::Zip(format!("byteorder entry says {:?}", String::from_utf8_lossy(other)))),
            }
        }
        None => false,
    };
    let pkl_bytes = read_entry(data, &pkl)?;
    let (pickle, _) = pickle::parse(&pkl_bytes, 0)?;
    let data_prefix = format!("{prefix}data/");
    let storages = entries
        .into_iter()
        .filter_map(|e| e.name.strip_prefix(&data_prefix).map(|k| (k.to_string(), e.clone())))
        .collect();
    Ok(RawFile { format: ContainerFormat::Zip, pickle, storages: StorageSource::Zip(ZipStorages { entries: storages }), big_endian })
}

#[cfg(test)]
mod tests {
    use super::{crc32, CRC_PIECE_BYTES};

    #[test]
    fn an_entry_hashed_in_pieces_has_the_crc_of_the_whole() {
        let bytes: Vec<u8> = (0..2 * CRC_PIECE_BYTES + 12_345).map(|i| (i * 7 + i / 251) as u8).collect();
        assert_eq!(crc32(&bytes), crc32fast::hash(&bytes));
        let mut flipped = bytes.clone();
        flipped[CRC_PIECE_BYTES + 1] ^= 1;
        assert_ne!(crc32(&flipped), crc32(&bytes));
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }
}
