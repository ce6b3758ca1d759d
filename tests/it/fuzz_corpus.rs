//! The fuzz corpus, replayed on stable Rust through the fuzz targets' own entry points
//! (fuzz/fuzz_targets, fuzz/src/lib.rs): the minimized inputs the campaigns kept
//! (fuzz/corpus-min/<target>/) and the checkpoints they were seeded with (fuzz/seed.sh: the
//! fixtures). Each must return, Ok or Err, without a panic.

use std::path::PathBuf;

use tchseq::checkpoint::container::{self, legacy, safetensors, torch_zip, RawFile};
use tchseq::checkpoint::pickle::{self, Node};
use tchseq::checkpoint::pyjson;
use tchseq::text::bpe::Bpe;
use tchseq::text::dictionary::Dictionary;
use tchseq::text::sentencepiece::SentencePieceModel;

use crate::util::repo;

// `score`'s table reader and the csv_rows target's check, compiled in as the fuzz crate does.
#[allow(dead_code)]
#[path = "../../src/cli/score/columns.rs"]
mod columns;
#[path = "../../fuzz/src/csv_rows.rs"]
mod csv_rows;
// the data-bin index parser and the data_bin target's check, likewise
#[allow(dead_code)]
#[path = "../../src/data/indexed_dataset.rs"]
mod indexed_dataset;
#[path = "../../fuzz/src/data_bin.rs"]
mod data_bin;

const TARGETS: [&str; 10] = [
    "pickle",
    "container",
    "torch_zip",
    "legacy",
    "safetensors",
    "dictionary",
    "bpe_codes",
    "sentencepiece_model",
    "csv_rows",
    "data_bin",
];

/// What the text targets encode with what they read (fuzz/src/lib.rs's `SENTENCE`).
const SENTENCE: &str = "A man in an orange hat, staring at something — \u{e9}t\u{e9} 2024!";

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = repo("fuzz/corpus-min").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// Every `.pt` file under the fixtures `fuzz/seed.sh` seeds the container targets from
/// (checkpoints, and the tensor files of the goldens).
fn seeds() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "pt") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo("tests/fixtures/models"), &mut files);
    walk(&repo("tests/fixtures/wild"), &mut files);
    files
}

fn storages(raw: &RawFile, data: &[u8]) {
    for n in &raw.pickle.nodes {
        if let Node::Storage(s) = n {
            let _ = raw.storage_bytes(data, s);
        }
    }
}

fn replay(target: &str, data: &[u8]) {
    match target {
        "pickle" => {
            if let Ok((p, _)) = pickle::parse(data, 0) {
                let _ = pyjson::to_json(&p, &p.root);
            }
        }
        "container" => {
            if let Ok(raw) = container::read(data) {
                let _ = pyjson::to_json(&raw.pickle, &raw.pickle.root);
                storages(&raw, data);
            }
        }
        "torch_zip" => torch_zip::read(data).iter().for_each(|raw| storages(raw, data)),
        "legacy" => legacy::read(data).iter().for_each(|raw| storages(raw, data)),
        "safetensors" => safetensors::read(data).iter().for_each(|raw| storages(raw, data)),
        "dictionary" => {
            if let Ok(d) = Dictionary::from_bytes(data) {
                let ids = d.encode_line(SENTENCE, true);
                let _ = d.string(&ids, Some("@@ "), false, &[]);
            }
        }
        "bpe_codes" => {
            let text = String::from_utf8_lossy(data);
            for codes in [Bpe::subword_nmt_from_str(&text), Bpe::fastbpe_from_str(&text)].into_iter().flatten() {
                let _ = codes.encode(SENTENCE);
            }
        }
        "sentencepiece_model" => {
            if let Ok(m) = SentencePieceModel::from_bytes(data) {
                let _ = m.encode_as_string(SENTENCE);
            }
        }
        "csv_rows" => csv_rows::csv_rows(data),
        "data_bin" => data_bin::data_bin(data),
        other => panic!("unknown target {other}"),
    }
}

#[test]
fn the_fuzz_corpus_replays_without_a_panic() {
    let mut replayed = 0;
    for target in TARGETS {
        let files = corpus(target);
        assert!(!files.is_empty(), "fuzz/corpus-min/{target} is empty");
        for path in files {
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| replay(target, &data));
            assert!(outcome.is_ok(), "{target}: {} panicked", path.display());
            replayed += 1;
        }
    }
    let seeds = seeds();
    assert!(seeds.len() >= 9, "{} seed checkpoints", seeds.len());
    for path in seeds {
        let data = std::fs::read(&path).unwrap();
        for target in ["container", "torch_zip", "legacy"] {
            assert!(std::panic::catch_unwind(|| replay(target, &data)).is_ok(), "{target}: {} panicked", path.display());
        }
    }
    eprintln!("replayed {replayed} minimized inputs and the seed checkpoints");
}
