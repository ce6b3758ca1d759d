//! Shared helpers for the integration tests: the binary, fixture paths, manifests, pair CSVs,
//! output without timings, one-line errors; fairseq's printed output and its comparison
//! ([`fairseq_out`]); the tolerances with the drift they come from ([`tolerance`]).
#![allow(dead_code)]

pub mod fairseq_out;
pub mod sha256;
pub mod tolerance;

use std::path::{Path, PathBuf};

/// The built `tchseq` binary with `--threads` set to [`test_threads`].
pub fn tchseq() -> assert_cmd::Command {
    let mut cmd = tchseq_bare();
    cmd.arg("--threads").arg(test_threads().to_string());
    cmd
}

/// The built `tchseq` binary, run with no environment tweaks (it must find libtorch on its own;
/// cargo's `[env]` would hand it `LIBTORCH`) and no `--threads`.
pub fn tchseq_bare() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_tchseq"));
    cmd.env_remove("LD_LIBRARY_PATH").env_remove("LIBTORCH").env_remove("VIRTUAL_ENV");
    cmd
}

/// The intra-op thread count the tests run with: `TCHSEQ_TEST_THREADS`, else 1 (the goldens'
/// own). Every comparison with a golden holds at any thread count.
pub fn test_threads() -> usize {
    match std::env::var("TCHSEQ_TEST_THREADS") {
        Ok(v) => v.trim().parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| panic!("TCHSEQ_TEST_THREADS={v:?} is not a thread count")),
        Err(_) => 1,
    }
}

/// Sets libtorch's intra-op threads of this test process to [`test_threads`].
pub fn set_test_threads() {
    tch::set_num_threads(test_threads() as i32);
}

/// `tests/fixtures/...`
pub fn fixture(rel: &str) -> PathBuf {
    repo("tests/fixtures").join(rel)
}

/// A path relative to the repository root: the directory that holds `tests/`, links resolved
/// (a build for another libtorch, `builds/torch-*`, links its `tests` to the checkout's).
pub fn repo(rel: &str) -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = ROOT.get_or_init(|| {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let tests = std::fs::canonicalize(&tests).unwrap_or(tests);
        tests.parent().map(Path::to_path_buf).unwrap_or_default()
    });
    root.join(rel)
}

/// The torch release whose libtorch the `tch` pinned in this build's manifest binds (the default
/// Cargo.toml, or a `builds/torch-*` one): each `tch` release is made for one torch release.
pub fn manifest_torch_release() -> &'static str {
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let tch = manifest.lines().find_map(|l| l.strip_prefix("tch = ")).expect("the manifest pins tch");
    match tch.trim_matches('"') {
        "=0.26.0" => "2.13.0",
        "=0.24.0" => "2.11.0",
        other => panic!("tch {other}: which torch release does it bind? (docs/install.md lists the supported pairs)"),
    }
}

/// A JSON file (a golden manifest) under the repository.
pub fn json(rel: &str) -> serde_json::Value {
    json_at(&repo(rel))
}

/// A JSON file (a golden manifest) at `path`.
pub fn json_at(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e} (fixtures missing?)", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The largest |a - b| of two tensors of one shape, in f64 (0 for empty ones).
pub fn max_abs(a: &tch::Tensor, b: &tch::Tensor) -> f64 {
    if a.numel() == 0 {
        return 0.0;
    }
    (a.to_kind(tch::Kind::Double) - b.to_kind(tch::Kind::Double)).abs().max().double_value(&[])
}

/// `tchseq translate -m MODEL` (with [`tchseq`]'s `--threads`), on the CPU.
pub fn translate_cmd(model: &Path) -> assert_cmd::Command {
    let mut cmd = tchseq();
    cmd.args(["--device", "cpu", "translate", "-m"]).arg(model);
    cmd
}

/// The bundled model on `input` (raw text), fairseq's output format, fairseq-interactive's
/// batching of 16 over a buffer of 1,024, then `args`.
pub fn translate_bundled(input: &Path, args: &[&str]) -> std::process::Output {
    translate_cmd(&repo("weights/multi30k.en-de"))
        .args(["--format", "fairseq", "--buffer-size", "1024", "--batch-size", "16", "--input"])
        .arg(input)
        .args(args)
        .output()
        .unwrap()
}

/// A fixture model (`dir`) on pre-tokenized `input` (`-s src -t tgt`, no tokenizer or BPE) in
/// `format`, then `args`.
pub fn translate_fixture(dir: &Path, input: &Path, format: &str, args: &[&str]) -> std::process::Output {
    translate_fixture_cmd(dir, input, format, args).output().unwrap()
}

/// [`translate_fixture`]'s command, not yet run.
pub fn translate_fixture_cmd(dir: &Path, input: &Path, format: &str, args: &[&str]) -> assert_cmd::Command {
    let mut cmd = translate_cmd(dir);
    cmd.args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--format", format, "--input"]).arg(input).args(args);
    cmd
}

/// A JSON array of strings (an argv or option list of a manifest).
pub fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

/// Runs `cmd`, asserts success, returns its stdout.
#[track_caller]
pub fn run_ok(cmd: &mut assert_cmd::Command) -> String {
    stdout_ok(&cmd.output().unwrap())
}

/// The stdout of a run that must have succeeded.
#[track_caller]
pub fn stdout_ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "tchseq failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The lines of fairseq-format output that carry results: all but the `W-` timings.
pub fn result_lines(text: &str) -> Vec<String> {
    text.lines().filter(|l| !l.starts_with("W-")).map(str::to_string).collect()
}

/// Writes a CSV file: `header`, then `rows`.
pub fn write_csv<R: IntoIterator<Item = S>, S: AsRef<[u8]>>(path: &Path, header: &[&str], rows: impl IntoIterator<Item = R>) {
    let mut w = csv::Writer::from_path(path).unwrap();
    w.write_record(header).unwrap();
    for r in rows {
        w.write_record(r).unwrap();
    }
    w.flush().unwrap();
}

/// Writes a `source,target` CSV of pairs.
pub fn write_pairs_csv<'a>(path: &Path, pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    write_csv(path, &["source", "target"], pairs.into_iter().map(|(s, t)| [s, t]));
}

/// Exit 2 and exactly one `error: ` line on stderr (warnings aside) that contains `contains`;
/// returns that line.
#[track_caller]
pub fn one_line_error(out: &std::process::Output, contains: &str) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(contains), "{err}");
    lines[0].to_string()
}
