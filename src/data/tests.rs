//! The `.idx` parsers on hand-built files: every dtype, the writers' layouts, and the checks.

use super::indexed_dataset::{Dtype, Index, IndexError, IndexFormat, LEGACY_MAGIC, MMAP_MAGIC};

/// What `MMapIndexedDatasetBuilder` + `Index.writer` write for `items`.
fn mmap_files(dtype: Dtype, items: &[Vec<i64>]) -> (Vec<u8>, Vec<u8>) {
    let mut idx = MMAP_MAGIC.to_vec();
    idx.extend(1u64.to_le_bytes());
    idx.push(dtype.code());
    idx.extend((items.len() as u64).to_le_bytes());
    let mut bin = Vec::new();
    let mut pointers = Vec::new();
    for item in items {
        idx.extend((item.len() as i32).to_le_bytes());
        pointers.push(bin.len() as i64);
        for &v in item {
            bin.extend(encode(dtype, v));
        }
    }
    for p in pointers {
        idx.extend(p.to_le_bytes());
    }
    (idx, bin)
}

/// What `IndexedDatasetBuilder` writes (ids plus one, for Lua).
fn legacy_files(dtype: Dtype, items: &[Vec<i64>]) -> (Vec<u8>, Vec<u8>) {
    let mut bin = Vec::new();
    let (mut data_offsets, mut dim_offsets, mut sizes) = (vec![0i64], vec![0i64], Vec::new());
    for item in items {
        for &v in item {
            bin.extend(encode(dtype, v + 1));
        }
        data_offsets.push(data_offsets.last().unwrap() + item.len() as i64);
        sizes.push(item.len() as i64);
        dim_offsets.push(dim_offsets.last().unwrap() + 1);
    }
    let mut idx = LEGACY_MAGIC.to_vec();
    for v in [1, u64::from(dtype.code()), dtype.itemsize() as u64, items.len() as u64, sizes.len() as u64] {
        idx.extend(v.to_le_bytes());
    }
    for v in dim_offsets.iter().chain(&data_offsets).chain(&sizes) {
        idx.extend(v.to_le_bytes());
    }
    (idx, bin)
}

fn encode(dtype: Dtype, v: i64) -> Vec<u8> {
    match dtype {
        Dtype::Uint8 => vec![v as u8],
        Dtype::Int8 => vec![v as i8 as u8],
        Dtype::Int16 => (v as i16).to_le_bytes().to_vec(),
        Dtype::Uint16 => (v as u16).to_le_bytes().to_vec(),
        Dtype::Int32 => (v as i32).to_le_bytes().to_vec(),
        Dtype::Uint32 => (v as u32).to_le_bytes().to_vec(),
        Dtype::Int64 => v.to_le_bytes().to_vec(),
        Dtype::Uint64 => (v as u64).to_le_bytes().to_vec(),
        Dtype::Float64 | Dtype::Double => (v as f64).to_le_bytes().to_vec(),
    }
}

fn items() -> Vec<Vec<i64>> {
    vec![vec![4, 17, 2], vec![], vec![120, 5, 6, 7, 2], vec![2]]
}

fn read_all(index: &Index, bin: &[u8]) -> Vec<Vec<i64>> {
    (0..index.len()).map(|i| index.item(bin, i).unwrap()).collect()
}

const ALL: [u64; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];

#[test]
fn every_dtype_of_fairseqs_table_reads_back() {
    for code in ALL {
        let dtype = Dtype::from_code(code).unwrap();
        let (idx, bin) = mmap_files(dtype, &items());
        let index = Index::parse(&idx, bin.len() as u64, IndexFormat::MMap).unwrap();
        assert_eq!(read_all(&index, &bin), items(), "mmap {}", dtype.name());
        assert_eq!(index.sizes(), [3, 0, 5, 1]);
        let (idx, bin) = legacy_files(dtype, &items());
        let index = Index::parse(&idx, bin.len() as u64, IndexFormat::Legacy).unwrap();
        assert_eq!(read_all(&index, &bin), items(), "legacy {}", dtype.name());
    }
    assert_eq!(Dtype::from_code(0), None);
    assert_eq!(Dtype::from_code(11), None);
    assert_eq!(Dtype::from_code(6).unwrap().itemsize(), 8, "code 6 is np.float64");
}

#[test]
fn best_fitting_int_dtype_is_fairseqs() {
    assert_eq!(Dtype::best_fitting_int_dtype(None), Dtype::Uint32);
    assert_eq!(Dtype::best_fitting_int_dtype(Some(65499)), Dtype::Uint16);
    assert_eq!(Dtype::best_fitting_int_dtype(Some(65500)), Dtype::Uint32);
    assert_eq!(Dtype::best_fitting_int_dtype(Some(4294967295)), Dtype::Int64);
}

#[test]
fn an_empty_dataset_and_an_empty_file() {
    let (idx, bin) = mmap_files(Dtype::Uint16, &[]);
    assert!(Index::parse(&idx, bin.len() as u64, IndexFormat::MMap).unwrap().is_empty());
    let (idx, bin) = legacy_files(Dtype::Int32, &[]);
    assert!(Index::parse(&idx, bin.len() as u64, IndexFormat::Legacy).unwrap().is_empty());
    assert_eq!(Index::parse(&[], 0, IndexFormat::MMap).unwrap_err(), IndexError::Empty);
    assert_eq!(Index::parse(&[], 0, IndexFormat::Legacy).unwrap_err(), IndexError::Empty);
}

#[test]
fn the_wrong_format_is_a_magic_error() {
    let (idx, bin) = mmap_files(Dtype::Uint16, &items());
    let e = Index::parse(&idx, bin.len() as u64, IndexFormat::Legacy).unwrap_err();
    assert!(matches!(e, IndexError::BadMagic { .. }), "{e}");
    let (idx, bin) = legacy_files(Dtype::Int32, &items());
    let e = Index::parse(&idx, bin.len() as u64, IndexFormat::MMap).unwrap_err();
    assert!(matches!(e, IndexError::BadMagic { .. }), "{e}");
}

fn patch(mut idx: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
    idx[at..at + bytes.len()].copy_from_slice(bytes);
    idx
}

#[test]
fn mmap_header_checks() {
    let (idx, bin) = mmap_files(Dtype::Uint16, &items());
    let n = bin.len() as u64;
    let err = |idx: &[u8], n: u64| Index::parse_mmap(idx, n).unwrap_err();
    assert_eq!(err(&patch(idx.clone(), 9, &2u64.to_le_bytes()), n), IndexError::UnsupportedVersion(2));
    assert_eq!(err(&patch(idx.clone(), 17, &[11]), n), IndexError::UnknownDtype(11));
    // An item count that overflows, and one larger than the file.
    assert!(matches!(err(&patch(idx.clone(), 18, &u64::MAX.to_le_bytes()), n), IndexError::CountOverflow { .. }));
    assert!(matches!(err(&patch(idx.clone(), 18, &5u64.to_le_bytes()), n), IndexError::Truncated { .. }));
    assert!(matches!(err(&patch(idx.clone(), 18, &3u64.to_le_bytes()), n), IndexError::TrailingBytes { .. }));
    // A negative size, a pointer out of place, a .bin of another length.
    assert!(matches!(err(&patch(idx.clone(), 26, &(-1i32).to_le_bytes()), n), IndexError::Negative { .. }));
    assert!(matches!(err(&patch(idx.clone(), 42 + 8, &2i64.to_le_bytes()), n), IndexError::Pointer { .. }));
    assert!(matches!(err(&patch(idx.clone(), 26, &i32::MAX.to_le_bytes()), n), IndexError::DataLength { .. }));
    assert!(matches!(err(&idx, n + 2), IndexError::DataLength { .. }));
    assert!(matches!(err(&idx, n - 2), IndexError::DataLength { .. }));
}

#[test]
fn legacy_header_checks() {
    let (idx, bin) = legacy_files(Dtype::Int32, &items());
    let n = bin.len() as u64;
    let err = |idx: &[u8], n: u64| Index::parse_legacy(idx, n).unwrap_err();
    assert_eq!(err(&patch(idx.clone(), 16, &0u64.to_le_bytes()), n), IndexError::UnknownDtype(0));
    assert!(matches!(err(&patch(idx.clone(), 24, &8u64.to_le_bytes()), n), IndexError::ElementSize { .. }));
    assert!(matches!(err(&patch(idx.clone(), 32, &u64::MAX.to_le_bytes()), n), IndexError::CountOverflow { .. }));
    assert!(matches!(err(&patch(idx.clone(), 40, &(u64::MAX / 4).to_le_bytes()), n), IndexError::CountOverflow { .. }));
    // dim_offsets start at 48, data_offsets at 48 + 5*8 = 88, sizes at 128.
    assert!(matches!(err(&patch(idx.clone(), 48, &1i64.to_le_bytes()), n), IndexError::NonZeroStart { .. }));
    assert!(matches!(err(&patch(idx.clone(), 96, &(-3i64).to_le_bytes()), n), IndexError::NonMonotonic { .. }));
    assert!(matches!(err(&patch(idx.clone(), 104, &1i64.to_le_bytes()), n), IndexError::NonMonotonic { .. }));
    assert!(matches!(err(&patch(idx.clone(), 128, &(-3i64).to_le_bytes()), n), IndexError::Negative { .. }));
    assert!(matches!(err(&patch(idx.clone(), 128, &2i64.to_le_bytes()), n), IndexError::DimsMismatch { .. }));
    assert!(matches!(err(&patch(idx.clone(), 120, &i64::MAX.to_le_bytes()), n), IndexError::CountOverflow { .. }));
    assert!(matches!(err(&patch(idx.clone(), 80, &3i64.to_le_bytes()), n), IndexError::DimOffsetsEnd { .. }));
    assert!(matches!(err(&idx, n + 4), IndexError::DataLength { .. }));
}

#[test]
fn values_that_are_no_token_ids_are_errors() {
    let (idx, mut bin) = mmap_files(Dtype::Float64, &[vec![1, 2]]);
    bin[8..16].copy_from_slice(&f64::NAN.to_le_bytes());
    let index = Index::parse_mmap(&idx, bin.len() as u64).unwrap();
    assert!(matches!(index.item(&bin, 0), Err(IndexError::NotAnInteger { index: 0, element: 1, .. })));
    let (idx, bin) = mmap_files(Dtype::Uint64, &[vec![-1]]);
    let index = Index::parse_mmap(&idx, bin.len() as u64).unwrap();
    assert!(matches!(index.item(&bin, 0), Err(IndexError::ValueOverflow { .. })));
    assert!(matches!(index.item(&bin, 1), Err(IndexError::ItemIndex { index: 1, len: 1 })));
    assert!(matches!(index.item(&[], 0), Err(IndexError::DataLength { .. })));
    // The legacy format's ids are stored plus one: i64::MIN cannot be shifted back.
    let (idx, mut bin) = legacy_files(Dtype::Int64, &[vec![5]]);
    bin.copy_from_slice(&i64::MIN.to_le_bytes());
    let index = Index::parse_legacy(&idx, bin.len() as u64).unwrap();
    assert!(matches!(index.item(&bin, 0), Err(IndexError::ValueOverflow { .. })));
}

#[test]
fn every_truncation_and_bit_flip_returns() {
    for (format, (idx, bin)) in
        [(IndexFormat::MMap, mmap_files(Dtype::Int32, &items())), (IndexFormat::Legacy, legacy_files(Dtype::Int16, &items()))]
    {
        for cut in 0..idx.len() {
            assert!(Index::parse(&idx[..cut], bin.len() as u64, format).is_err(), "{format:?} cut at {cut}");
        }
        for byte in 0..idx.len() {
            for bit in 0..8 {
                let mut bad = idx.clone();
                bad[byte] ^= 1 << bit;
                if let Ok(index) = Index::parse(&bad, bin.len() as u64, format) {
                    for i in 0..index.len() {
                        let _ = index.item(&bin, i);
                    }
                }
            }
        }
    }
}
