//! The reproducible mode (`--reproducible`, `TCHSEQ_REPRODUCIBLE=1`) against goldens fairseq
//! 0.12.2 made under the same pinned kernels (tests/fixtures/reproducible, made by
//! reference/reproducible_goldens.sh): bit for bit, at one thread and at two.

use std::f64::consts::LN_2;
use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::util::{fixture, repo, tchseq_bare};

const THREADS: [&str; 2] = ["1", "2"];

fn manifest() -> Value {
    serde_json::from_str(&fs::read_to_string(fixture("reproducible/manifest.json")).unwrap()).unwrap()
}

fn golden(rel: &str) -> PathBuf {
    fixture("reproducible").join(rel)
}

/// Output lines that carry results (no `W-` timings).
fn result_lines(text: &str) -> Vec<String> {
    text.lines().filter(|l| !l.starts_with("W-")).map(str::to_string).collect()
}

fn run_ok(cmd: &mut assert_cmd::Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "tchseq failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn assert_identical(want: &[String], got: &[String], what: &str) {
    assert!(!want.is_empty(), "{what}: empty golden");
    let differing: Vec<String> =
        want.iter().zip(got).filter(|(w, g)| w != g).map(|(w, g)| format!("fairseq {w:?}\ntchseq  {g:?}")).take(3).collect();
    assert!(differing.is_empty() && want.len() == got.len(), "{what}: {} vs {} lines\n{}", want.len(), got.len(), differing.join("\n"));
}

#[test]
fn bundled_raw_text_is_bit_identical_at_one_and_two_threads() {
    let input = fixture("bundled/input.en");
    for (file, batching) in [
        ("bundled/interactive_nbest2_batch16.txt", vec!["--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"]),
        ("bundled/interactive_batch1.txt", vec!["--batch-size", "1"]),
    ] {
        let want = result_lines(&fs::read_to_string(golden(file)).unwrap());
        for threads in THREADS {
            let got = run_ok(
                tchseq_bare()
                    .args(["--reproducible", "--threads", threads, "translate", "-m"])
                    .arg(repo("weights/multi30k.en-de"))
                    .args(["--format", "fairseq", "--beam", "5", "--input"])
                    .arg(&input)
                    .args(&batching),
            );
            assert_identical(&want, &result_lines(&got), &format!("{file} at --threads {threads}"));
        }
    }
}

/// `TCHSEQ_REPRODUCIBLE=1` is the same switch, and it overrides other kernel choices.
#[test]
fn the_environment_variable_pins_the_same_kernels() {
    let want = result_lines(&fs::read_to_string(golden("bundled/interactive_nbest2_batch16.txt")).unwrap());
    let got = run_ok(
        tchseq_bare()
            .env("TCHSEQ_REPRODUCIBLE", "1")
            .env("ATEN_CPU_CAPABILITY", "default")
            .env("MKL_CBWR", "COMPATIBLE")
            .args(["--threads", "2", "translate", "-m"])
            .arg(repo("weights/multi30k.en-de"))
            .args(["--format", "fairseq", "--beam", "5", "--nbest", "2", "--buffer-size", "1024", "--batch-size", "16", "--input"])
            .arg(fixture("bundled/input.en")),
    );
    assert_identical(&want, &result_lines(&got), "TCHSEQ_REPRODUCIBLE=1");
}

#[test]
fn every_fixture_translates_bit_identically_at_one_and_two_threads() {
    let m = manifest();
    let mut runs = 0;
    for (name, sets) in m["fixtures"].as_object().unwrap() {
        for (set, g) in sets.as_object().unwrap() {
            let Some(argv) = g["argv"].as_array() else { continue };
            let argv: Vec<&str> = argv.iter().map(|a| a.as_str().unwrap()).collect();
            // fairseq-interactive DATA --path P -s src -t tgt --cpu --input F <options>
            let options = &argv[argv.iter().position(|a| *a == "--input").unwrap() + 2..];
            let want = result_lines(&fs::read_to_string(golden(g["file"].as_str().unwrap())).unwrap());
            for threads in THREADS {
                let got = run_ok(
                    tchseq_bare()
                        .args(["--reproducible", "--threads", threads, "translate", "--path"])
                        .arg(repo(argv[3]))
                        .arg("--data")
                        .arg(repo(argv[1]))
                        .args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", "fairseq", "--input"])
                        .arg(repo(argv[argv.iter().position(|a| *a == "--input").unwrap() + 1]))
                        .args(options),
                );
                assert_identical(&want, &result_lines(&got), &format!("{name}/{set} at --threads {threads}"));
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 6 * 3 * 2, "six fixtures, three option sets, two thread counts");
}

#[test]
fn every_verify_tensor_is_bit_identical() {
    let m = manifest();
    let mut compared = 0;
    for (name, files) in m["fixtures"].as_object().unwrap() {
        for side in ["verify_left", "verify_right"] {
            let reference = golden(files[side]["file"].as_str().unwrap());
            let threads = if side == "verify_left" { "1" } else { "2" };
            let out = tchseq_bare()
                .args(["--reproducible", "--threads", threads, "verify", "-m"])
                .arg(repo(&format!("tests/fixtures/models/{name}")))
                .arg("--reference")
                .arg(&reference)
                .arg("--json")
                .output()
                .unwrap();
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            assert_eq!(out.status.code(), Some(0), "{name} {side}: {}", String::from_utf8_lossy(&out.stderr));
            let tensors = report["tensors"].as_array().unwrap();
            assert!(tensors.len() >= 10, "{name} {side}: {} tensors compared", tensors.len());
            for t in tensors {
                assert_eq!(t["max_abs_diff"].as_f64(), Some(0.0), "{name} {side}: {t}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 12 * 10, "compared only {compared} tensors");
}

#[test]
fn bundled_score_reference_is_bit_identical_at_one_and_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("pairs.csv");
    let src = fs::read_to_string(fixture("bundled/score_reference/test.bpe.en")).unwrap();
    let tgt = fs::read_to_string(fixture("bundled/score_reference/test.bpe.de")).unwrap();
    let mut w = csv::Writer::from_path(&csv_path).unwrap();
    w.write_record(["source", "target"]).unwrap();
    for (s, t) in src.lines().zip(tgt.lines()) {
        w.write_record([s, t]).unwrap();
    }
    w.flush().unwrap();
    // fairseq-generate prints H-{id}\t{f32 score / ln 2}\t... and P-{id}\t{:.4f} of each token's
    let text = fs::read_to_string(golden("bundled/score_reference_batch16.txt")).unwrap();
    let field = |prefix: &str| -> std::collections::BTreeMap<usize, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|l| {
                let mut f = l.split('\t');
                (f.next().unwrap().parse().unwrap(), f.next().unwrap().to_string())
            })
            .collect()
    };
    let (h, p) = (field("H-"), field("P-"));
    assert_eq!(h.len(), 100);
    for threads in THREADS {
        let out = run_ok(
            tchseq_bare()
                .args(["--reproducible", "--threads", threads, "score", "-m"])
                .arg(repo("weights/multi30k.en-de"))
                .args(["--tokenized", "--per-token", "--batch-size", "16", "-q", "--input"])
                .arg(&csv_path),
        );
        let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(out.as_bytes()).records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 100);
        for (i, row) in rows.iter().enumerate() {
            let avg: f32 = row[4].parse().unwrap();
            let ours = f64::from(avg / LN_2 as f32);
            assert_eq!(ours, h[&i].parse::<f64>().unwrap(), "row {i} at --threads {threads}");
            let per_token: Vec<(String, f64)> = serde_json::from_str(&row[7]).unwrap();
            let printed: Vec<String> =
                per_token.iter().map(|(_, lp)| format!("{:.4}", f64::from(*lp as f32 / LN_2 as f32))).collect();
            assert_eq!(printed.join(" "), p[&i], "row {i} at --threads {threads}");
        }
    }
}
