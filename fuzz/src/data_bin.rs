//! The `data_bin` target's check, shared with the stable-Rust corpus replay
//! (tests/it/data_bin.rs): an `.idx`/`.bin` pair parsed in both of fairseq's index layouts
//! (`src/data/indexed_dataset.rs`), then every item read.

use super::indexed_dataset::{Index, IndexFormat};

/// `[u32 LE length of the .idx][.idx][.bin]`; shorter inputs are all `.idx` with an empty `.bin`.
pub fn data_bin(data: &[u8]) {
    let (idx, bin) = match data.split_first_chunk::<4>() {
        Some((len, rest)) => {
            let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
            rest.split_at(len)
        }
        None => (data, &[][..]),
    };
    for format in [IndexFormat::MMap, IndexFormat::Legacy] {
        if let Ok(index) = Index::parse(idx, bin.len() as u64, format) {
            let _ = index.sizes();
            for i in 0..index.len() {
                let _ = index.item(bin, i);
            }
        }
    }
}
