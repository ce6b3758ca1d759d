//! The reproducible mode (`--reproducible`, `TCHSEQ_REPRODUCIBLE=1`): the same bits at one
//! thread and at two, on whatever CPU runs the tests; and the same bits as fairseq 0.12.2 run
//! under the same pinned kernels on a CPU of the same vendor (tests/fixtures/reproducible/VENDOR,
//! made by reference/reproducible_goldens.sh): every line of translate and score, and every
//! activation of verify (a difference of 0). Pinned bits differ between CPU vendors (an Intel
//! Xeon and an AMD Zen give other last digits), and within one: fairseq on a Zen 3 gives other
//! last digits for three of the six fixture models than on a Zen 1, 4 or 5, which agree; and
//! oneDNN, which runs ATen's CPU gelu, keeps the CPU's own ISA, so an Intel CPU without AVX-512
//! gives other bits for the three fixture models with gelu than one with it. So a vendor has a
//! set for each class of CPU that fairseq ran on (`amd`, `amd-zen3`, `intel`, `intel-avx2`), and
//! each output must be bit-identical to one of them; a CPU of another vendor fails here, naming
//! the set it lacks.

use std::f64::consts::LN_2;
use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::util::fairseq_out::assert_same_bits;
use crate::util::{fixture, repo, result_lines, run_ok, strings, tchseq_bare, write_pairs_csv};

const THREADS: [&str; 2] = ["1", "2"];

/// This CPU's vendor, as the pinned golden sets are named.
fn vendor() -> &'static str {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap();
    let id = info.lines().find_map(|l| l.strip_prefix("vendor_id")).map(|v| v.trim_start_matches([' ', '\t', ':']).trim());
    match id {
        Some("GenuineIntel") => "intel",
        Some("AuthenticAMD") => "amd",
        other => panic!(
            "no pinned fairseq goldens for CPU vendor {other:?} (tests/fixtures/reproducible has intel and amd): \
             make them on this machine with `bash reference/reproducible_goldens.sh`"
        ),
    }
}

/// The manifest of this vendor's first set (every set holds the same fixtures).
fn manifest() -> Value {
    let mut first = None;
    for set in golden_sets() {
        let m = crate::util::json_at(&set.join("manifest.json"));
        assert_eq!(m["environment"]["MKL_CBWR"], "AVX2,STRICT", "{}", set.display());
        first.get_or_insert(m);
    }
    first.unwrap()
}

/// This CPU vendor's pinned golden sets, `VENDOR` first, then each `VENDOR-CLASS`.
fn golden_sets() -> Vec<PathBuf> {
    let vendor = vendor();
    let mut sets: Vec<PathBuf> = fs::read_dir(fixture("reproducible"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == vendor || n.starts_with(&format!("{vendor}-"))))
        .collect();
    sets.sort();
    assert!(sets.first().is_some_and(|s| s.ends_with(vendor)), "no pinned golden set {vendor} in {:?}", sets);
    sets
}

/// File `rel` of each of this vendor's sets, the vendor's own first.
fn goldens(rel: &str) -> Vec<PathBuf> {
    golden_sets().into_iter().map(|set| set.join(rel)).collect()
}

/// The set a golden file belongs to, as its directory is named.
fn set_name(file: &std::path::Path, rel: &str) -> String {
    let set = file.to_str().unwrap().strip_suffix(rel).unwrap().trim_end_matches('/');
    std::path::Path::new(set).file_name().unwrap().to_string_lossy().into_owned()
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
    assert_same_bits(&runs[0], &runs[1], &format!("{what}: --threads 1 against 2"));
    runs.into_iter().next().unwrap()
}

/// fairseq-format output against the pinned fairseq golden `file` of one of this vendor's sets:
/// the same bytes, timings aside. Fails with the difference from the vendor's first set.
fn assert_matches_golden(file: &str, got: &str) {
    let candidates = goldens(file);
    for path in &candidates {
        let want = fs::read_to_string(path).unwrap();
        if result_lines(&want) == result_lines(got) {
            eprintln!("{file}: {} lines bit-identical to fairseq's pinned golden ({})", result_lines(&want).len(), set_name(path, file));
            return;
        }
    }
    let first = &candidates[0];
    let what = format!("{}: fairseq's pinned golden (nor any of {} other sets)", first.display(), candidates.len() - 1);
    assert_same_bits(&fs::read_to_string(first).unwrap(), got, &what);
}

#[test]
fn bundled_raw_text_is_fairseq_s_pinned_bits_at_one_and_two_threads() {
    let model = crate::util::fairseq_out::bundled_model_args();
    for (file, batching) in [
        ("bundled/interactive_nbest2_batch16.txt", vec!["--nbest", "2", "--buffer-size", "1024", "--batch-size", "16"]),
        ("bundled/interactive_batch1.txt", vec!["--batch-size", "1"]),
    ] {
        let args = |cmd: &mut assert_cmd::Command| {
            cmd.arg("translate").args(&model).args(["--format", "fairseq", "--beam", "5", "--input"]);
            cmd.arg(fixture("bundled/input.en")).args(&batching);
        };
        let got = same_at_one_and_two_threads(&args, file);
        assert_matches_golden(file, &got);
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
fn every_fixture_translates_to_fairseq_s_pinned_bits_at_one_and_two_threads() {
    let m = manifest();
    let mut runs = 0;
    for (name, sets) in m["fixtures"].as_object().unwrap() {
        for (set, g) in sets.as_object().unwrap() {
            if g.get("argv").is_none() {
                continue;
            }
            let argv = strings(&g["argv"]);
            // fairseq-interactive DATA --path P -s src -t tgt --cpu --input F <options>
            let input = argv.iter().position(|a| a == "--input").unwrap() + 1;
            let options = &argv[input + 1..];
            let args = |cmd: &mut assert_cmd::Command| {
                cmd.args(["translate", "--path"]).arg(repo(&argv[3])).arg("--data").arg(repo(&argv[1]));
                cmd.args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", "fairseq", "--input"]);
                cmd.arg(repo(&argv[input])).args(options);
            };
            let got = same_at_one_and_two_threads(&args, &format!("{name}/{set}"));
            assert_matches_golden(g["file"].as_str().unwrap(), &got);
            runs += 1;
        }
    }
    assert_eq!(runs, 6 * 3, "six fixtures, three option sets");
}

/// Every activation at `--threads 1` and `--threads 2` is fairseq's pinned bits: a difference
/// of 0.
#[test]
fn every_verify_tensor_is_fairseq_s_pinned_bits_at_one_and_two_threads() {
    let m = manifest();
    let mut compared = 0;
    for (name, files) in m["fixtures"].as_object().unwrap() {
        for side in ["verify_left", "verify_right"] {
            let rel = files[side]["file"].as_str().unwrap();
            let report = |reference: &PathBuf, threads: &str| -> Value {
                let out = tchseq_bare()
                    .args(["--reproducible", "--threads", threads, "verify", "-m"])
                    .arg(repo(&format!("tests/fixtures/models/{name}")))
                    .arg("--reference")
                    .arg(reference)
                    .arg("--json")
                    .output()
                    .unwrap();
                assert_eq!(out.status.code(), Some(0), "{name} {side}: {}", String::from_utf8_lossy(&out.stderr));
                serde_json::from_slice(&out.stdout).unwrap()
            };
            let exact = |r: &Value| r["tensors"].as_array().unwrap().iter().all(|t| t["max_abs_diff"].as_f64() == Some(0.0));
            // the first set whose tensors this run equals at one thread, else the vendor's own
            let candidates = goldens(rel);
            let mut tried = candidates.iter().map(|c| (c, report(c, "1")));
            let first = tried.next().unwrap();
            let (reference, one) = if exact(&first.1) { first } else { tried.find(|(_, r)| exact(r)).unwrap_or(first) };
            let two = report(reference, "2");
            eprintln!("{name} {side}: against set {}", set_name(reference, rel));
            let tensors = one["tensors"].as_array().unwrap();
            assert_eq!(tensors.len(), 12, "{name} {side}: tensors compared");
            assert_eq!(one["failed"], 0, "{name} {side}: {one}");
            assert_eq!(tensors.len(), two["tensors"].as_array().unwrap().len());
            for report in [&one, &two] {
                for t in report["tensors"].as_array().unwrap() {
                    assert_eq!(t["max_abs_diff"].as_f64(), Some(0.0), "{name} {side}: {t}");
                }
            }
            compared += tensors.len();
        }
    }
    // 6 fixtures x {left, right} x 12 tensors
    assert_eq!(compared, 6 * 2 * 12, "tensors compared");
}

#[test]
fn bundled_score_reference_is_fairseq_s_pinned_bits_at_one_and_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("pairs.csv");
    let src = fs::read_to_string(fixture("bundled/score_reference/test.bpe.en")).unwrap();
    let tgt = fs::read_to_string(fixture("bundled/score_reference/test.bpe.de")).unwrap();
    write_pairs_csv(&csv_path, src.lines().zip(tgt.lines()));
    // fairseq-generate prints H-{id}\t{f32 score / ln 2}\t... and P-{id}\t{:.4f} of each token's
    // one file in every set of this vendor: the Zen classes agree on it
    let rel = "bundled/score_reference_batch16.txt";
    let candidates = goldens(rel);
    let text = fs::read_to_string(&candidates[0]).unwrap();
    for other in &candidates[1..] {
        assert_eq!(result_lines(&fs::read_to_string(other).unwrap()), result_lines(&text), "{}: the sets differ", other.display());
    }
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
    for (i, row) in rows.iter().enumerate() {
        let avg: f32 = row[4].parse().unwrap();
        let ours = f64::from(avg / LN_2 as f32);
        let theirs: f64 = h[&i].parse().unwrap();
        assert_eq!(ours.to_bits(), theirs.to_bits(), "row {i}: {ours} vs fairseq's {theirs}");
        let per_token: Vec<(String, f64)> = serde_json::from_str(&row[7]).unwrap();
        let theirs: Vec<f64> = p[&i].split(' ').map(|v| v.parse().unwrap()).collect();
        assert_eq!(per_token.len(), theirs.len(), "row {i}");
        for ((_, lp), want) in per_token.iter().zip(&theirs) {
            let printed: f64 = format!("{:.4}", f64::from(*lp as f32 / LN_2 as f32)).parse().unwrap();
            assert_eq!(printed, *want, "row {i}: a token's score");
        }
    }
    eprintln!("score --reproducible: 100 rows bit-identical to fairseq's pinned golden ({})", vendor());
}
