//! `tchseq::data` on the data-bins fairseq-preprocess 0.12.2 wrote (tests/fixtures/data_bin/,
//! reference/data_bin_fixtures.sh): the ids fairseq's own readers gave back (golden.json) for
//! every `--dataset-impl`, and every damaged or mismatched file a typed, one-line error naming it.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tchseq::data::dataset::infer_dataset_impl;
use tchseq::data::{DataBin, DataError, DatasetImpl, IndexError, LoadOptions};

use crate::util::repo;

/// What fuzz/src/data_bin.rs imports from its crate.
mod indexed_dataset {
    pub use tchseq::data::indexed_dataset::*;
}
#[path = "../../fuzz/src/data_bin.rs"]
mod fuzz_data_bin;

const FORMATS: [&str; 4] = ["mmap", "lazy", "cached", "raw"];

fn fixture(format: &str) -> PathBuf {
    repo("tests/fixtures/data_bin").join(format)
}

fn golden() -> Value {
    let text = std::fs::read_to_string(repo("tests/fixtures/data_bin/golden.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<Vec<i64>> {
    serde_json::from_value(v.clone()).unwrap()
}

/// A copy of a fixture directory to damage.
fn copy(format: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(format)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn open(dir: &Path, dataset_impl: Option<DatasetImpl>) -> Result<tchseq::data::PairDataset, DataError> {
    DataBin::open_with(dir, "test", Some("de"), Some("en"), LoadOptions { dataset_impl, combine: true })
}

/// The error's one line names `file`.
fn names(e: &DataError, file: &str) {
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "{msg}");
    assert!(msg.contains(file), "{msg:?} does not name {file}");
}

#[test]
fn every_format_reads_fairseqs_ids() {
    let golden = golden();
    for format in FORMATS {
        let want = &golden["formats"][format];
        let (src, tgt) = (ids(&want["src"]), ids(&want["tgt"]));
        let dataset_impl = DatasetImpl::from_name(format);
        for (label, ds) in [
            ("given", open(&fixture(format), dataset_impl)),
            ("inferred", DataBin::open(&fixture(format), "test", None, None)),
        ] {
            let ds = ds.unwrap_or_else(|e| panic!("{format} {label}: {e}"));
            assert_eq!((ds.source_lang.as_str(), ds.target_lang.as_str()), ("de", "en"));
            assert_eq!(ds.len(), src.len(), "{format} {label}");
            assert_eq!(ds.shards().len(), 2, "test and test1");
            assert_eq!((0..ds.len()).map(|i| ds.src(i)).collect::<Vec<_>>(), src, "{format} {label}");
            assert_eq!((0..ds.len()).map(|i| ds.tgt(i).unwrap()).collect::<Vec<_>>(), tgt, "{format} {label}");
            let sizes: Vec<i64> = serde_json::from_value(want["src_sizes"].clone()).unwrap();
            assert_eq!(ds.src_sizes(), sizes);
            let sizes: Vec<i64> = serde_json::from_value(want["tgt_sizes"].clone()).unwrap();
            assert_eq!(ds.tgt_sizes().unwrap(), sizes);
            assert_eq!(ds.src_dict.len() as u64, want["src_dict_len"].as_u64().unwrap());
            assert_eq!(ds.tgt_dict.len() as u64, want["tgt_dict_len"].as_u64().unwrap());
        }
        let inferred = infer_dataset_impl(&fixture(format).join("test.de-en.de")).unwrap().unwrap();
        assert_eq!(inferred.name(), want["inferred_impl"].as_str().unwrap(), "{format}");
    }
    assert_eq!(golden["formats"]["mmap"]["dtype"], "uint16");
}

#[test]
fn without_combine_only_the_first_shard() {
    let golden = golden();
    let ds = DataBin::open_with(&fixture("mmap"), "test", Some("de"), Some("en"), LoadOptions { dataset_impl: None, combine: false })
        .unwrap();
    assert_eq!(ds.len(), 3);
    assert_eq!(ds.src(2), ids(&golden["formats"]["mmap"]["src"])[2]);
    let ds = open(&fixture("lazy"), None).unwrap();
    assert_eq!(ds.shards()[1].split, "test1");
    assert_eq!(ds.shards()[1].src.dataset_impl, DatasetImpl::Cached);
}

#[test]
fn the_other_directions_file_names_are_found() {
    let golden = golden();
    for format in ["mmap", "raw"] {
        let dir = copy(format);
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name.contains("de-en") {
                std::fs::rename(&path, dir.path().join(name.replace("de-en", "en-de"))).unwrap();
            }
        }
        let ds = open(dir.path(), None).unwrap();
        assert_eq!((0..ds.len()).map(|i| ds.src(i)).collect::<Vec<_>>(), ids(&golden["formats"][format]["src"]));
        // The pair read from the names is then en -> de.
        let ds = DataBin::open(dir.path(), "test", None, None).unwrap();
        assert_eq!(ds.source_lang, "en");
        assert_eq!((0..ds.len()).map(|i| ds.tgt(i).unwrap()).collect::<Vec<_>>(), ids(&golden["formats"][format]["src"]));
    }
}

#[test]
fn a_split_without_files_and_a_split_without_targets() {
    let e = open(&fixture("mmap"), None).and(DataBin::open(&fixture("mmap"), "valid", None, None)).unwrap_err();
    assert!(matches!(e, DataError::NotFound { .. }));
    names(&e, "Dataset not found: valid");
    let dir = tempfile::tempdir().unwrap();
    let e = DataBin::open(dir.path(), "test", None, None).unwrap_err();
    assert!(matches!(e, DataError::LanguagePair { .. }), "{e}");

    // No target files at all: a source-only dataset, as fairseq-generate reads one.
    let dir = copy("mmap");
    for name in ["test.de-en.en", "test1.de-en.en"] {
        for ext in ["idx", "bin"] {
            std::fs::remove_file(dir.path().join(format!("{name}.{ext}"))).unwrap();
        }
    }
    let ds = open(dir.path(), None).unwrap();
    assert_eq!((ds.len(), ds.tgt(0), ds.tgt_sizes()), (5, None, None));

    // One shard with a target, the next without: fairseq's assertion, a typed error here.
    let dir = copy("lazy");
    std::fs::remove_file(dir.path().join("test1.de-en.en.idx")).unwrap();
    let e = open(dir.path(), None).unwrap_err();
    assert!(matches!(e, DataError::MissingTarget { .. }), "{e}");
    names(&e, "test1.de-en.en");
}

#[test]
fn mismatched_files_are_typed_errors() {
    // The .bin of another shard beside an .idx.
    let dir = copy("mmap");
    std::fs::copy(dir.path().join("test1.de-en.de.bin"), dir.path().join("test.de-en.de.bin")).unwrap();
    let e = open(dir.path(), None).unwrap_err();
    assert!(matches!(e, DataError::Index { source: IndexError::DataLength { .. }, .. }), "{e}");
    names(&e, "test.de-en.de.idx");

    // A target with fewer sentences than its source.
    let dir = copy("cached");
    for ext in ["idx", "bin"] {
        std::fs::copy(dir.path().join(format!("test1.de-en.en.{ext}")), dir.path().join(format!("test.de-en.en.{ext}"))).unwrap();
    }
    let e = open(dir.path(), None).unwrap_err();
    assert!(matches!(e, DataError::LengthMismatch { src_len: 3, tgt_len: 2, .. }), "{e}");
    names(&e, "test.de-en.en.bin");

    // An mmap index under --dataset-impl lazy, a legacy one under mmap.
    let e = open(&fixture("mmap"), Some(DatasetImpl::Lazy)).unwrap_err();
    assert!(matches!(e, DataError::Index { source: IndexError::BadMagic { .. }, .. }), "{e}");
    let e = open(&fixture("cached"), Some(DatasetImpl::MMap)).unwrap_err();
    assert!(matches!(e, DataError::Index { source: IndexError::BadMagic { .. }, .. }), "{e}");
    names(&e, "test.de-en.de.idx");

    // An mmap .idx over a legacy .bin.
    let dir = copy("lazy");
    std::fs::copy(fixture("mmap").join("test.de-en.de.idx"), dir.path().join("test.de-en.de.idx")).unwrap();
    let e = open(dir.path(), None).unwrap_err();
    assert!(matches!(e, DataError::Index { source: IndexError::DataLength { .. }, .. }), "{e}");

    // Empty files.
    for (file, format) in [("test.de-en.en.idx", "mmap"), ("test1.de-en.de.bin", "lazy"), ("test.de-en.de.idx", "cached")] {
        let dir = copy(format);
        std::fs::write(dir.path().join(file), b"").unwrap();
        let e = open(dir.path(), DatasetImpl::from_name(format)).unwrap_err();
        assert!(matches!(e, DataError::Index { .. }), "{e}");
        names(&e, &file[..file.len() - 4]);
    }
}

#[test]
fn a_token_outside_the_dictionary_names_the_file_and_sentence() {
    for format in ["mmap", "lazy", "cached"] {
        let dir = copy(format);
        // dict.de.txt cut to its first 10 symbols: ids up to 13 remain, sentence 0 has 19.
        let text = std::fs::read_to_string(dir.path().join("dict.de.txt")).unwrap();
        let short: String = text.lines().take(10).map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.path().join("dict.de.txt"), short).unwrap();
        let e = open(dir.path(), None).unwrap_err();
        assert!(matches!(e, DataError::TokenOutOfDictionary { index: 0, token: 19, dict_len: 14, .. }), "{format}: {e}");
        names(&e, "test.de-en.de.bin");
        names(&e, "sentence 0");
    }
    // Raw text cannot: its words are encoded with the dictionary (<unk> for unknown words).
    let dir = copy("raw");
    std::fs::write(dir.path().join("dict.de.txt"), "ein 3\n").unwrap();
    let ds = open(dir.path(), None).unwrap();
    assert_eq!(ds.src(2), [4, 3, 3, 3, 2]);
}

#[test]
fn raw_text_that_is_not_utf8_names_its_line() {
    let dir = copy("raw");
    std::fs::write(dir.path().join("test1.de-en.de"), b"ein Mann\r\nzwei \xff\n").unwrap();
    let e = open(dir.path(), None).unwrap_err();
    assert!(matches!(e, DataError::Encoding { line: 2, .. }), "{e}");
    names(&e, "test1.de-en.de");
}

fn binary_files() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for format in ["mmap", "lazy", "cached"] {
        for file in ["test.de-en.de", "test.de-en.en", "test1.de-en.de", "test1.de-en.en"] {
            out.push((format, file));
        }
    }
    out
}

#[test]
fn every_truncation_of_every_idx_is_a_typed_error() {
    let mut cases = 0;
    for (format, file) in binary_files() {
        let dir = copy(format);
        let idx_name = format!("{file}.idx");
        let idx = std::fs::read(dir.path().join(&idx_name)).unwrap();
        for cut in 0..idx.len() {
            std::fs::write(dir.path().join(&idx_name), &idx[..cut]).unwrap();
            for dataset_impl in [None, DatasetImpl::from_name(format)] {
                let outcome = std::panic::catch_unwind(|| open(dir.path(), dataset_impl));
                let e = outcome.unwrap_or_else(|_| panic!("{format}/{idx_name} cut at {cut}: panicked")).unwrap_err();
                names(&e, &idx_name);
                cases += 1;
            }
        }
    }
    eprintln!("{cases} truncations");
}

/// A small seeded generator (xorshift64*), local to this test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn seeded_bit_flips_return_errors_or_checked_ids() {
    let mut rng = Rng(0x5eed_da7a_0b15);
    let (mut errors, mut oks) = (0, 0);
    for (format, file) in binary_files() {
        let dir = copy(format);
        for ext in ["idx", "bin"] {
            let name = format!("{file}.{ext}");
            let good = std::fs::read(dir.path().join(&name)).unwrap();
            for _ in 0..60 {
                let mut bad = good.clone();
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(bad.len());
                    bad[at] ^= 1 << rng.below(8);
                }
                std::fs::write(dir.path().join(&name), &bad).unwrap();
                let outcome = std::panic::catch_unwind(|| {
                    open(dir.path(), None).map(|ds| {
                        for i in 0..ds.len() {
                            assert!(ds.src(i).iter().all(|&t| (0..ds.src_dict.len() as i64).contains(&t)));
                            assert!(ds.tgt(i).unwrap().iter().all(|&t| (0..ds.tgt_dict.len() as i64).contains(&t)));
                        }
                    })
                });
                match outcome.unwrap_or_else(|_| panic!("{format}/{name}: a flip panicked")) {
                    Ok(()) => oks += 1,
                    Err(e) => {
                        names(&e, file);
                        errors += 1;
                    }
                }
            }
            std::fs::write(dir.path().join(&name), &good).unwrap();
        }
    }
    assert!(errors > 0);
    eprintln!("{errors} errors, {oks} readable");
}

#[test]
fn the_fuzz_seeds_replay_without_a_panic() {
    let dir = repo("fuzz/corpus-min/data_bin");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 12, "{} seeds in {}", files.len(), dir.display());
    for path in files {
        let data = std::fs::read(&path).unwrap();
        assert!(std::panic::catch_unwind(|| fuzz_data_bin::data_bin(&data)).is_ok(), "{} panicked", path.display());
        for cut in 0..data.len() {
            assert!(std::panic::catch_unwind(|| fuzz_data_bin::data_bin(&data[..cut])).is_ok(), "{} cut at {cut}", path.display());
        }
    }
}
