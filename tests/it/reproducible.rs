//! The reproducible mode (`--reproducible`, `TCHSEQ_REPRODUCIBLE=1`): the same bits at one
//! thread and at two, on whatever CPU runs the tests; and, against goldens fairseq 0.12.2 made
//! under the same pinned kernels (tests/fixtures/reproducible, made by
//! reference/reproducible_goldens.sh), what every golden test checks: the same hypotheses (a
//! differing one must be a proven near-tie), scores within 1e-4, activations within verify's
//! tolerance. Pinned bits differ between CPU vendors (an Intel Xeon and an AMD Zen give other
//! last digits), so equality with fairseq's bits is checked live, by `make parity`.

use std::f64::consts::LN_2;
use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::fairseq_out::{compare, fixture_model_args, lenpen_of, parse_fairseq, settle_near_ties};
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

/// `args` with `--reproducible` at `--threads 1` and at `--threads 2`: the two outputs must be
/// the same bytes (timings aside); returns the output.
fn same_at_one_and_two_threads(args: &dyn Fn(&mut assert_cmd::Command), what: &str) -> String {
    let runs: Vec<String> = THREADS
        .iter()
        .map(|threads| {
            let mut cmd = tchseq_bare();
            cmd.args(["--reproducible", "--threads", threads]);
            args(&mut cmd);
            run_ok(&mut cmd)
        })
        .collect();
    let (one, two) = (result_lines(&runs[0]), result_lines(&runs[1]));
    assert!(!one.is_empty(), "{what}: no output");
    let differing = one.iter().zip(&two).filter(|(a, b)| a != b).count();
    assert!(differing == 0 && one.len() == two.len(), "{what}: {differing} lines differ between --threads 1 and 2");
    runs.into_iter().next().unwrap()
}

/// fairseq-format output against the pinned fairseq golden `file`, as every golden test reads it.
fn assert_matches_golden(file: &str, got: &str, model: &[String], lenpen: f64) {
    let want = parse_fairseq(&fs::read_to_string(golden(file)).unwrap());
    assert!(!want.is_empty(), "{file}: empty golden");
    let mut c = compare(&want, &parse_fairseq(got));
    settle_near_ties(&mut c, model, lenpen);
    assert!(c.ok(), "{file}: {:?}", c.failures());
    eprintln!(
        "{file}: {} hypotheses, {} of {} lines bit-identical to fairseq's pinned golden, {} near-ties",
        c.hyps, c.identical_lines, c.total_lines, c.near_ties
    );
}

#[test]
fn bundled_raw_text_is_bit_identical_at_one_and_two_threads() {
    let model = vec!["-m".to_string(), repo("weights/multi30k.en-de").display().to_string()];
    for (file, batching) in [
        ("bundled/interactive_nbest2_batch16.txt", vec!["--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"]),
        ("bundled/interactive_batch1.txt", vec!["--batch-size", "1"]),
    ] {
        let args = |cmd: &mut assert_cmd::Command| {
            cmd.arg("translate").args(&model).args(["--format", "fairseq", "--beam", "5", "--input"]);
            cmd.arg(fixture("bundled/input.en")).args(&batching);
        };
        let got = same_at_one_and_two_threads(&args, file);
        assert_matches_golden(file, &got, &model, 1.0);
    }
}

/// `TCHSEQ_REPRODUCIBLE=1` is the same switch, and it overrides other kernel choices.
#[test]
fn the_environment_variable_pins_the_same_kernels() {
    let args = ["--threads", "2", "translate", "-m"];
    let options = ["--format", "fairseq", "--beam", "5", "--nbest", "2", "--buffer-size", "1024", "--batch-size", "16", "--input"];
    let flag = run_ok(
        tchseq_bare()
            .arg("--reproducible")
            .args(args)
            .arg(repo("weights/multi30k.en-de"))
            .args(options)
            .arg(fixture("bundled/input.en")),
    );
    let variable = run_ok(
        tchseq_bare()
            .env("TCHSEQ_REPRODUCIBLE", "1")
            .env("ATEN_CPU_CAPABILITY", "default")
            .env("MKL_CBWR", "COMPATIBLE")
            .args(args)
            .arg(repo("weights/multi30k.en-de"))
            .args(options)
            .arg(fixture("bundled/input.en")),
    );
    assert_eq!(result_lines(&flag), result_lines(&variable), "TCHSEQ_REPRODUCIBLE=1 against --reproducible");
}

#[test]
fn every_fixture_translates_bit_identically_at_one_and_two_threads() {
    let m = manifest();
    let mut runs = 0;
    for (name, sets) in m["fixtures"].as_object().unwrap() {
        for (set, g) in sets.as_object().unwrap() {
            let Some(argv) = g["argv"].as_array() else { continue };
            let argv: Vec<String> = argv.iter().map(|a| a.as_str().unwrap().to_string()).collect();
            // fairseq-interactive DATA --path P -s src -t tgt --cpu --input F <options>
            let input = argv.iter().position(|a| a == "--input").unwrap() + 1;
            let options = &argv[input + 1..];
            let model = fixture_model_args(&repo(&argv[1]));
            let args = |cmd: &mut assert_cmd::Command| {
                cmd.args(["translate", "--path"]).arg(repo(&argv[3])).arg("--data").arg(repo(&argv[1]));
                cmd.args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", "fairseq", "--input"]);
                cmd.arg(repo(&argv[input])).args(options);
            };
            let got = same_at_one_and_two_threads(&args, &format!("{name}/{set}"));
            assert_matches_golden(g["file"].as_str().unwrap(), &got, &model, lenpen_of(options));
            runs += 1;
        }
    }
    assert_eq!(runs, 6 * 3, "six fixtures, three option sets");
}

/// Every activation at `--threads 1` and `--threads 2` differs from the pinned golden by the
/// same amount, within verify's tolerance.
#[test]
fn every_verify_tensor_is_the_same_at_one_and_two_threads() {
    let m = manifest();
    let mut compared = 0;
    for (name, files) in m["fixtures"].as_object().unwrap() {
        for side in ["verify_left", "verify_right"] {
            let reference = golden(files[side]["file"].as_str().unwrap());
            let report = |threads: &str| -> Value {
                let out = tchseq_bare()
                    .args(["--reproducible", "--threads", threads, "verify", "-m"])
                    .arg(repo(&format!("tests/fixtures/models/{name}")))
                    .arg("--reference")
                    .arg(&reference)
                    .arg("--json")
                    .output()
                    .unwrap();
                assert_eq!(out.status.code(), Some(0), "{name} {side}: {}", String::from_utf8_lossy(&out.stderr));
                serde_json::from_slice(&out.stdout).unwrap()
            };
            let (one, two) = (report("1"), report("2"));
            let tensors = one["tensors"].as_array().unwrap();
            assert!(tensors.len() >= 10, "{name} {side}: {} tensors compared", tensors.len());
            assert_eq!(one["failed"], 0, "{name} {side}: {one}");
            for (a, b) in tensors.iter().zip(two["tensors"].as_array().unwrap()) {
                assert_eq!(a["name"], b["name"]);
                assert_eq!(a["max_abs_diff"].as_f64().map(f64::to_bits), b["max_abs_diff"].as_f64().map(f64::to_bits), "{name} {side}: {a} vs {b}");
                assert_eq!(a["max_rel_diff"].as_f64().map(f64::to_bits), b["max_rel_diff"].as_f64().map(f64::to_bits), "{name} {side}: {a} vs {b}");
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
    let args = |cmd: &mut assert_cmd::Command| {
        cmd.args(["score", "-m"]).arg(repo("weights/multi30k.en-de"));
        cmd.args(["--tokenized", "--per-token", "--batch-size", "16", "-q", "--input"]).arg(&csv_path);
    };
    let out = same_at_one_and_two_threads(&args, "score --reproducible");
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(out.as_bytes()).records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 100);
    // P- values carry 4 decimals: a difference below 1e-4 may still flip the last digit
    const TOL: f64 = 1e-4 + 1e-9;
    let mut identical = 0;
    for (i, row) in rows.iter().enumerate() {
        let avg: f32 = row[4].parse().unwrap();
        let ours = f64::from(avg / LN_2 as f32);
        let theirs: f64 = h[&i].parse().unwrap();
        assert!((ours - theirs).abs() <= TOL, "row {i}: {ours} vs fairseq's {theirs}");
        identical += usize::from(ours == theirs);
        let per_token: Vec<(String, f64)> = serde_json::from_str(&row[7]).unwrap();
        let theirs: Vec<f64> = p[&i].split(' ').map(|v| v.parse().unwrap()).collect();
        assert_eq!(per_token.len(), theirs.len(), "row {i}");
        for ((_, lp), want) in per_token.iter().zip(&theirs) {
            let printed: f64 = format!("{:.4}", f64::from(*lp as f32 / LN_2 as f32)).parse().unwrap();
            assert!((printed - want).abs() <= TOL, "row {i}: {printed} vs fairseq's {want}");
        }
    }
    eprintln!("score --reproducible: 100 rows within 1e-4 of fairseq's pinned golden, {identical} bit-identical");
}
