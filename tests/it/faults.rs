//! Faults on purpose: a file-size limit hit mid-write, an output path that cannot be created or
//! may not be written, input cut off mid-row, kill -9 mid-run, a reader that closes the pipe.
//! Each is a one-line error (or one error row) and exit 2, and no final output file is ever
//! incomplete; a closed pipe ends the run quietly.

use std::process::Command;

use crate::util::{one_line_error, repo, test_threads};

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

/// kill -9 at 20 points of a `score` run: the k-th kill lands at the event "the run's own
/// checkpoint (`.partial.progress`) records k / 20 of the rows" (no timer: the kill follows the
/// event, while the run writes its next chunks), and always mid-run, since five chunks are still
/// to come. Every run finished with `--resume` equals the clean run byte for byte.
#[test]
fn score_killed_at_twenty_points_resumes_to_the_clean_run() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(crate::util::fixture("bundled/score_reference/test.bpe.en")).unwrap();
    let tgt = std::fs::read_to_string(crate::util::fixture("bundled/score_reference/test.bpe.de")).unwrap();
    let csv = dir.path().join("pairs.csv");
    crate::util::write_pairs_csv(&csv, (0..12).flat_map(|_| src.lines().zip(tgt.lines())));
    let score = |output: &std::path::Path, resume: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tchseq"));
        cmd.env_remove("LD_LIBRARY_PATH").args(["--threads", "1", "score", "-q", "--tokenized", "--per-token", "-m"]);
        cmd.arg(repo(MODEL)).args(["--buffer-size", "16", "--batch-size", "8", "--input"]).arg(&csv).arg("--output").arg(output);
        if resume {
            cmd.arg("--resume");
        }
        cmd
    };
    let clean_path = dir.path().join("clean.csv");
    assert!(score(&clean_path, false).status().unwrap().success());
    let clean = std::fs::read(&clean_path).unwrap();
    let rows = clean.iter().filter(|&&b| b == b'\n').count() - 1;
    assert_eq!(rows, 1200, "a header and 1,200 rows");
    let rows_done = |progress: &std::path::Path| -> Option<u64> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(progress).ok()?).ok()?;
        v["summary"]["rows"].as_u64()
    };

    let mut interrupted = 0;
    for k in 0..20u64 {
        // the kill lands at the progress event "`target` rows are complete", spread over the run;
        // the last five checkpoints (of 16 rows, --buffer-size) are left for the run to reach,
        // so that it is still running when the kill comes
        let target = 16 * (k * (rows as u64 / 16 - 5) / 20);
        let output = dir.path().join(format!("run{k}.csv"));
        let progress = dir.path().join(format!("run{k}.csv.partial.progress"));
        let mut child = score(&output, false).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        while child.try_wait().unwrap().is_none() && rows_done(&progress).is_none_or(|r| r < target) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(!output.exists() && progress.exists(), "run {k}: the run finished before its kill at {target} rows");
        interrupted += 1;
        let resumed = score(&output, true).output().unwrap();
        assert!(resumed.status.success(), "run {k}: {}", String::from_utf8_lossy(&resumed.stderr));
        assert_eq!(std::fs::read(&output).unwrap(), clean, "run {k}, killed at {target} rows");
        assert!(!dir.path().join(format!("run{k}.csv.partial")).exists(), "run {k}: the partial file is gone");
    }
    assert_eq!(interrupted, 20, "kills that landed mid-run");
    eprintln!("score: {interrupted} of 20 kill -9s landed mid-run; every --resume equals the clean run");
}

/// A reader that goes away (`tchseq ... | head -1`): translate and score stop quietly with
/// exit 0, as a Unix filter does, never with a panic or an error about the pipe.
#[test]
fn output_to_a_closed_pipe_stops_quietly() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("in.txt");
    // far more than a pipe buffer holds, so that writes meet the closed pipe
    std::fs::write(&text, "A dog runs through the grass.\nTwo men sit on a bench.\n".repeat(4000)).unwrap();
    let csv = dir.path().join("pairs.csv");
    std::fs::write(&csv, "source,target\n".to_string() + &"A dog runs.,Ein Hund rennt.\n".repeat(8000)).unwrap();
    let model = repo(MODEL);
    let runs: [Vec<std::ffi::OsString>; 2] = [
        ["translate", "--format", "jsonl", "--batch-size", "64", "--buffer-size", "1024", "--input"]
            .iter()
            .map(Into::into)
            .chain([text.clone().into_os_string()])
            .collect(),
        ["score", "-q", "--per-token", "--input"].iter().map(Into::into).chain([csv.clone().into_os_string()]).collect(),
    ];
    for args in runs {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tchseq"))
            .env_remove("LD_LIBRARY_PATH")
            .args(["--threads", &test_threads().to_string()])
            .args(&args[..1])
            .arg("-m")
            .arg(&model)
            .args(&args[1..])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?}: no first line");
        // the reader is dropped here: the pipe is closed with most of the output unwritten
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("error"), "{args:?}: {err}");
    }
}

/// An output directory the user may not write to: one line naming the file, exit 2, nothing
/// left behind. Root passes every permission bit through CAP_DAC_OVERRIDE, so as root the binary
/// runs with that capability (and CAP_DAC_READ_SEARCH) dropped from its bounding set
/// (`setpriv --bounding-set`): still uid 0, so it reaches the checkout and libtorch wherever
/// they are (also under a 0700 directory), but the 0555 directory, owned by root, denies it.
#[test]
fn a_read_only_output_directory_is_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let csv = dir.path().join("pairs.csv");
    std::fs::write(&csv, "source,target\nA dog runs.,Ein Hund rennt.\n").unwrap();
    let read_only = dir.path().join("ro");
    std::fs::create_dir(&read_only).unwrap();
    std::fs::set_permissions(&read_only, std::fs::Permissions::from_mode(0o555)).unwrap();
    let as_root = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap();
    let model = repo(MODEL);
    for (command, extra) in [("translate", vec!["A dog.".to_string()]), ("score", vec!["--input".into(), csv.display().to_string()])] {
        let output = read_only.join(format!("{command}.out"));
        let mut cmd = if as_root {
            let mut c = Command::new("setpriv");
            c.args(["--bounding-set=-dac_override,-dac_read_search"]).arg(env!("CARGO_BIN_EXE_tchseq"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_tchseq"))
        };
        let out = cmd
            .env_remove("LD_LIBRARY_PATH")
            .args([command, "-m"])
            .arg(&model)
            .arg("--output")
            .arg(&output)
            .args(&extra)
            .output()
            .unwrap();
        one_line_error(&out, "Permission denied");
        assert!(String::from_utf8_lossy(&out.stderr).contains(&*read_only.to_string_lossy()), "{out:?}");
        assert_eq!(std::fs::read_dir(&read_only).unwrap().count(), 0, "{command}: nothing written");
    }
}

/// `--output` where a rename would destroy something: a FIFO is written in place (a reader waiting
/// on it gets the output, and it stays a FIFO), a symlink is followed (it stays a link and its
/// target gets the output), and `-` is stdout (no file named `-`). Translate and score alike;
/// `score --resume` into a FIFO is a one-line error.
#[test]
fn output_to_a_fifo_a_symlink_or_dash_keeps_what_is_there() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pairs.csv");
    crate::util::write_pairs_csv(&csv, [("A dog runs.", "Ein Hund rennt.")]);
    let run = |command: &str, output: &std::path::Path| -> std::process::Output {
        let mut cmd = crate::util::tchseq();
        cmd.current_dir(dir.path()).args([command, "-m"]).arg(repo(MODEL)).arg("--output").arg(output);
        match command {
            "translate" => cmd.arg("A dog runs."),
            _ => cmd.args(["-q", "--input"]).arg(&csv),
        };
        cmd.output().unwrap()
    };
    for command in ["translate", "score"] {
        let fifo = dir.path().join(format!("{command}.fifo"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        let out = run(command, &fifo);
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        let got = reader.join().unwrap();
        assert!(got.contains("Hund"), "{command}: the reader got {got:?}");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "{command}: the FIFO was replaced");

        let target = dir.path().join(format!("{command}.target"));
        std::fs::write(&target, "old").unwrap();
        let link = dir.path().join(format!("{command}.link"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let out = run(command, &link);
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "{command}: the link was replaced");
        assert!(std::fs::read_to_string(&target).unwrap().contains("Hund"), "{command}: the target was not written");

        let out = run(command, std::path::Path::new("-"));
        assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("Hund"), "{command}: stdout {out:?}");
        assert!(!dir.path().join("-").exists(), "{command}: a file named -");
    }
    let names: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".partial")), "{names:?}");

    let fifo = dir.path().join("score.fifo");
    let out = crate::util::tchseq().args(["score", "-q", "--resume", "-m"]).arg(repo(MODEL)).arg("--input").arg(&csv).arg("--output").arg(&fifo).output().unwrap();
    one_line_error(&out, "is not a regular file");
}
