//! Faults on purpose: a file-size limit hit mid-write, an output path that cannot be created,
//! input cut off mid-row. Each is a one-line error (or one error row), exit 2, and no final
//! output file that is not complete.

use std::process::Command;

use crate::util::{repo, test_threads};

const MODEL: &str = "weights/multi30k.en-de";

/// `tchseq ARGS` under `ulimit -f BLOCKS` (512-byte blocks), stdin from `input`.
fn with_file_limit(blocks: u32, args: &str, input: &str) -> std::process::Output {
    let script = format!("ulimit -f {blocks}; exec \"$TCHSEQ\" --threads {} {args}", test_threads());
    Command::new("bash")
        .args(["-c", &script])
        .env("TCHSEQ", env!("CARGO_BIN_EXE_tchseq"))
        .env_remove("LD_LIBRARY_PATH")
        .stdin(std::fs::File::open(input).unwrap())
        .output()
        .unwrap()
}

fn one_line_error(out: &std::process::Output, contains: &str) {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(contains), "{err}");
}

#[test]
fn a_full_disk_is_an_error_and_leaves_no_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "A dog runs through the grass.\n".repeat(200)).unwrap();
    let output = dir.path().join("out.jsonl");
    let model = repo(MODEL);
    let args = format!("translate -m {} --format jsonl --output {}", model.display(), output.display());
    let out = with_file_limit(2, &args, input.to_str().unwrap());
    one_line_error(&out, "File too large");
    assert!(!output.exists(), "no final file");
    assert!(!dir.path().join("out.jsonl.partial").exists(), "nothing half-written left behind");

    let csv = dir.path().join("pairs.csv");
    std::fs::write(&csv, "source,target\n".to_string() + &"A dog runs.,Ein Hund rennt.\n".repeat(200)).unwrap();
    let scored = dir.path().join("scored.csv");
    let args = format!("score -q -m {} --input {} --output {} --buffer-size 10", model.display(), csv.display(), scored.display());
    let out = with_file_limit(4, &args, "/dev/null");
    one_line_error(&out, "File too large");
    // score keeps its .partial for --resume, but never as the final file
    assert!(!scored.exists(), "no final file");
}

#[test]
fn an_output_path_that_cannot_be_created_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tchseq"))
        .args(["translate", "-m"])
        .arg(repo(MODEL))
        .arg("--output")
        .arg(not_a_dir.join("out.txt"))
        .arg("A dog.")
        .output()
        .unwrap();
    one_line_error(&out, "Not a directory");
}

#[test]
fn input_cut_off_mid_row_costs_only_that_row() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("cut.csv");
    std::fs::write(&csv, "source,target\nA dog runs.,Ein Hund rennt.\n\"A cat sleeps.,\"Die Katze").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tchseq"))
        .args(["score", "-q", "-m"])
        .arg(repo(MODEL))
        .arg("--input")
        .arg(&csv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows[1].starts_with("A dog runs.,Ein Hund rennt.,-"), "{text}");
    assert!(rows[2].ends_with("\"ragged row: 1 fields, the header has 2\""), "{text}");
}
