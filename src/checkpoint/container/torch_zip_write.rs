//! Writes a torch zip checkpoint, the records `torch.save` writes to a file object:
//! `archive/data.pkl`, `.format_version`, `.storage_alignment`, `byteorder`, `archive/data/<key>`
//! for each storage in key order, `archive/version` and `.data/serialization_id`. Entries are
//! STORED with their data aligned to 64 bytes (a `FB` padding extra field, as torch pads them),
//! sizes and CRC-32 in the local headers, zip64 fields where a size or an offset needs them and
//! a zip64 end record always, as torch writes one.

use std::io::{self, Write};

const ALIGNMENT: u64 = 64;
const PREFIX: &str = "archive/";
/// torch's `kProducedFileFormatVersion`, as `torch.save` writes it to `archive/version`.
const FILE_FORMAT_VERSION: &[u8] = b"3\n";

struct CentralEntry {
    name: String,
    crc32: u32,
    size: u64,
    offset: u64,
}

/// A zip being written to `out`, one record at a time.
pub struct TorchZipWriter<W: Write> {
    out: W,
    offset: u64,
    entries: Vec<CentralEntry>,
    /// Sizes and offsets from this on take zip64 fields (`u32::MAX`; smaller in tests).
    zip64_from: u64,
}

impl<W: Write> TorchZipWriter<W> {
    pub fn new(out: W) -> Self {
        Self { out, offset: 0, entries: Vec::new(), zip64_from: u64::from(u32::MAX) }
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Writes `archive/<name>`.
    pub fn write_record(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let name = format!("{PREFIX}{name}");
        let crc32 = crc32fast::hash(data);
        let size = data.len() as u64;
        let zip64 = size >= self.zip64_from;
        let mut extra = Vec::new();
        if zip64 {
            extra.extend(1u16.to_le_bytes());
            extra.extend(16u16.to_le_bytes());
            extra.extend(size.to_le_bytes());
            extra.extend(size.to_le_bytes());
        }
        let before_padding = self.offset + 30 + name.len() as u64 + extra.len() as u64 + 4;
        let padding = (ALIGNMENT - before_padding % ALIGNMENT) % ALIGNMENT;
        extra.extend(b"FB");
        extra.extend((padding as u16).to_le_bytes());
        extra.extend(std::iter::repeat_n(b'Z', padding as usize));
        let size32 = if zip64 { u32::MAX } else { size as u32 };
        let mut header = Vec::with_capacity(30 + name.len() + extra.len());
        header.extend(0x0403_4b50u32.to_le_bytes());
        header.extend(version_needed(zip64).to_le_bytes());
        // flags, method (stored), time, date
        header.extend([0u8; 8]);
        header.extend(crc32.to_le_bytes());
        header.extend(size32.to_le_bytes());
        header.extend(size32.to_le_bytes());
        header.extend((name.len() as u16).to_le_bytes());
        header.extend((extra.len() as u16).to_le_bytes());
        header.extend(name.as_bytes());
        header.extend(&extra);
        let offset = self.offset;
        self.put(&header)?;
        self.put(data)?;
        self.entries.push(CentralEntry { name, crc32, size, offset });
        Ok(())
    }

    /// Writes `archive/version`, `.data/serialization_id` and the central directory; returns
    /// the writer, flushed.
    pub fn finish(mut self) -> io::Result<W> {
        self.write_record("version", FILE_FORMAT_VERSION)?;
        // torch writes an id of 40 digits derived from the records; this one is too
        let mut crcs = crc32fast::Hasher::new();
        for e in &self.entries {
            crcs.update(&e.crc32.to_le_bytes());
        }
        let id = format!("{:020}{:020}", crcs.finalize(), self.offset);
        self.write_record(".data/serialization_id", id.as_bytes())?;
        let cd_offset = self.offset;
        let entries = std::mem::take(&mut self.entries);
        for e in &entries {
            let mut zip64 = Vec::new();
            if e.size >= self.zip64_from {
                zip64.extend(e.size.to_le_bytes());
                zip64.extend(e.size.to_le_bytes());
            }
            if e.offset >= self.zip64_from {
                zip64.extend(e.offset.to_le_bytes());
            }
            let mut extra = Vec::new();
            if !zip64.is_empty() {
                extra.extend(1u16.to_le_bytes());
                extra.extend((zip64.len() as u16).to_le_bytes());
                extra.extend(zip64);
            }
            let size32 = if e.size >= self.zip64_from { u32::MAX } else { e.size as u32 };
            let offset32 = if e.offset >= self.zip64_from { u32::MAX } else { e.offset as u32 };
            let mut rec = Vec::with_capacity(46 + e.name.len() + extra.len());
            rec.extend(0x0201_4b50u32.to_le_bytes());
            // made by, needed
            rec.extend(45u16.to_le_bytes());
            rec.extend(version_needed(!extra.is_empty()).to_le_bytes());
            // flags, method, time, date
            rec.extend([0u8; 8]);
            rec.extend(e.crc32.to_le_bytes());
            rec.extend(size32.to_le_bytes());
            rec.extend(size32.to_le_bytes());
            rec.extend((e.name.len() as u16).to_le_bytes());
            rec.extend((extra.len() as u16).to_le_bytes());
            // comment length, disk, internal and external attributes
            rec.extend([0u8; 10]);
            rec.extend(offset32.to_le_bytes());
            rec.extend(e.name.as_bytes());
            rec.extend(&extra);
            self.put(&rec)?;
        }
        let cd_size = self.offset - cd_offset;
        let count = entries.len() as u64;
        let zip64_end = self.offset;
        let mut end = Vec::with_capacity(56 + 20 + 22);
        end.extend(0x0606_4b50u32.to_le_bytes());
        end.extend(44u64.to_le_bytes());
        end.extend(45u16.to_le_bytes());
        end.extend(45u16.to_le_bytes());
        // this disk, the disk where the central directory starts
        end.extend([0u8; 8]);
        end.extend(count.to_le_bytes());
        end.extend(count.to_le_bytes());
        end.extend(cd_size.to_le_bytes());
        end.extend(cd_offset.to_le_bytes());
        end.extend(0x0706_4b50u32.to_le_bytes());
        end.extend(0u32.to_le_bytes());
        end.extend(zip64_end.to_le_bytes());
        end.extend(1u32.to_le_bytes());
        let count16 = u16::try_from(count).unwrap_or(u16::MAX);
        let clamp = |v: u64| if v >= self.zip64_from { u32::MAX } else { v as u32 };
        end.extend(0x0605_4b50u32.to_le_bytes());
        end.extend([0u8; 4]);
        end.extend(count16.to_le_bytes());
        end.extend(count16.to_le_bytes());
        end.extend(clamp(cd_size).to_le_bytes());
        end.extend(clamp(cd_offset).to_le_bytes());
        end.extend(0u16.to_le_bytes());
        self.put(&end)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn version_needed(zip64: bool) -> u16 {
    if zip64 {
        45
    } else {
        20
    }
}

/// Writes a whole checkpoint: the pickle, then storage `i` as `archive/data/<i>` for each `i`
/// in `0..storages` (`storage(i)` hands its bytes, little-endian), then the closing records.
pub fn write_checkpoint<'a, W: Write, E: From<io::Error>>(
    out: W,
    pickle: &[u8],
    storages: usize,
    mut storage: impl FnMut(usize) -> Result<std::borrow::Cow<'a, [u8]>, E>,
) -> Result<W, E> {
    let mut zip = TorchZipWriter::new(out);
    zip.write_record("data.pkl", pickle)?;
    zip.write_record(".format_version", b"1")?;
    zip.write_record(".storage_alignment", ALIGNMENT.to_string().as_bytes())?;
    zip.write_record("byteorder", b"little")?;
    for i in 0..storages {
        let bytes = storage(i)?;
        zip.write_record(&format!("data/{i}"), &bytes)?;
    }
    Ok(zip.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::container::{self, StorageSource};
    use crate::checkpoint::pickle::{Node, Value};

    fn checkpoint(zip64_from: u64) -> Vec<u8> {
        // torch.save({'a': <a 3-element float32 storage>}) as written by our pickle writer
        let mut p = crate::checkpoint::pickle::Pickle::default();
        p.nodes.push(Node::Storage(crate::checkpoint::pickle::StorageRef { key: "k".into(), dtype: crate::checkpoint::pickle::StorageDtype::Float32, location: "cpu".into(), numel: 3 }));
        p.nodes.push(Node::Tensor(crate::checkpoint::pickle::TensorRef { storage: 0, storage_offset: 0, size: vec![3], stride: vec![1], requires_grad: false }));
        let mut d = crate::checkpoint::pickle::Dict::default();
        d.insert(Value::Str("a".into()), Value::Node(1));
        p.nodes.push(Node::Dict(d));
        let w = crate::checkpoint::pickle::write::write(&p, &Value::Node(2)).unwrap();
        let data: Vec<u8> = [1.0f32, 2.0, 3.5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut zip = TorchZipWriter::new(Vec::new());
        zip.zip64_from = zip64_from;
        zip.write_record("data.pkl", &w.bytes).unwrap();
        zip.write_record("byteorder", b"little").unwrap();
        zip.write_record("data/0", &data).unwrap();
        zip.finish().unwrap()
    }

    fn read_back(bytes: &[u8]) {
        let raw = container::read(bytes).unwrap();
        assert!(matches!(raw.storages, StorageSource::Zip(_)));
        let root = raw.pickle.dict(&raw.pickle.root).unwrap();
        let Some(Node::Tensor(t)) = raw.pickle.node(root.get("a").unwrap()) else { panic!() };
        let Some(Node::Storage(s)) = raw.pickle.nodes.get(t.storage) else { panic!() };
        let data = raw.storage_bytes(bytes, s).unwrap();
        assert_eq!(&data[..4], &1.0f32.to_le_bytes());
        assert_eq!(&data[8..], &3.5f32.to_le_bytes());
    }

    #[test]
    fn a_written_checkpoint_reads_back_with_its_data_aligned() {
        let bytes = checkpoint(u64::from(u32::MAX));
        read_back(&bytes);
        let mut archive = ::zip::ZipArchive::new(std::io::Cursor::new(&bytes[..])).unwrap();
        let mut names = Vec::new();
        for i in 0..archive.len() {
            let f = archive.by_index_raw(i).unwrap();
            names.push(f.name().unwrap().to_string());
            assert_eq!(f.data_start().unwrap() % ALIGNMENT, 0);
        }
        assert_eq!(names, ["archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/version", "archive/.data/serialization_id"]);
    }

    #[test]
    fn zip64_fields_read_back() {
        // every size and offset past the threshold: the zip64 paths of a > 4 GiB checkpoint
        read_back(&checkpoint(0));
        read_back(&checkpoint(100));
    }
}
