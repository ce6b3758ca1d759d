//! Nothing a user sends kills a run or a server: any line lengths against any batching limits,
//! a panic injected into one batch (`TCHSEQ_TEST_PANIC_ON`) or into a server's model worker
//! (`TCHSEQ_TEST_STOP_WORKER_ON`), an interrupted run, a resume with other settings.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::serve::{http, Server};
use crate::util::tolerance::BATCH_COMPOSITION;
use crate::util::{fixture, one_line_error, repo, tchseq, test_threads, write_pairs_csv};

const MODEL: &str = "weights/multi30k.en-de";
/// Words of the bundled model's vocabulary (one BPE symbol each), for sentences of any length.
const WORDS: [&str; 12] = ["a", "man", "in", "blue", "shirt", "rides", "bike", "the", "dog", "runs", "on", "grass"];

/// A small deterministic generator (xorshift), so every run draws the same cases.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    /// A sentence of `words` words (no `dog`: that word is the fault tests' trigger).
    fn sentence(&mut self, words: usize) -> String {
        (0..words).map(|_| WORDS[self.below(WORDS.len())]).filter(|w| *w != "dog").chain(["cat"]).collect::<Vec<_>>().join(" ")
    }
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// 40 runs of `translate` and 20 of `score`, each with its own line lengths, `--max-tokens`,
/// `--batch-size`, `--buffer-size` and beam: every line gets exactly one record, translated or
/// scored unless it is longer than the model's 1024 positions, no run panics, and every
/// hypothesis and score is what the same line computes alone (one line a batch), its score within
/// what batch composition moves.
#[test]
fn any_line_lengths_against_any_batching_limits_give_one_record_per_line() {
    let mut draw = Draw(0x62);
    let dir = tempfile::tempdir().unwrap();
    let mut over_budget = 0;
    for case in 0..60 {
        let n = 1 + draw.below(12);
        let mut lens: Vec<usize> = (0..n).map(|_| 1 + draw.below(25)).collect();
        // now and then one over the model's max_source_positions, which only it pays for
        let too_long = draw.below(4) == 0;
        if too_long {
            let at = draw.below(n);
            lens[at] = 1300;
        }
        let lines: Vec<String> = lens.iter().map(|&l| draw.sentence(l)).collect();
        let max_tokens = 2 + draw.below(40);
        let mut args: Vec<String> = vec!["--max-tokens".into(), max_tokens.to_string()];
        let buffer = 1 + draw.below(8);
        if draw.below(2) == 0 {
            args.extend(["--batch-size".into(), (1 + draw.below(buffer)).to_string()]);
        }
        over_budget += lens.iter().filter(|&&l| l + 1 > max_tokens).count();
        let what = format!("case {case}: lengths {lens:?} {args:?}");
        // translate: every line one JSONL record with its id; score: every row one record
        let (command, input, failed): (Vec<String>, _, fn(&Value) -> bool) = if case < 40 {
            let beam = [1, 2, 5][draw.below(3)].to_string();
            let input = dir.path().join("in.txt");
            std::fs::write(&input, lines.join("\n") + "\n").unwrap();
            let command = ["translate", "--format", "jsonl", "--beam", &beam, "--max-len-b", "20"];
            (command.map(str::to_string).to_vec(), input, |r| r.get("error").is_some())
        } else {
            let csv = dir.path().join("pairs.csv");
            let targets: Vec<String> = lens.iter().map(|&l| draw.sentence(l.min(30))).collect();
            write_pairs_csv(&csv, lines.iter().map(String::as_str).zip(targets.iter().map(String::as_str)));
            let command = ["score", "-q", "--format", "jsonl"];
            (command.map(str::to_string).to_vec(), csv, |r| !r["error"].as_str().unwrap_or("").is_empty())
        };
        let run = |limits: &[String]| {
            let out = tchseq().args(&command).args(limits).arg("-m").arg(repo(MODEL)).arg("--input").arg(&input).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert_eq!(out.status.code(), Some(if too_long { 2 } else { 0 }), "{what} {limits:?}: {err}");
            let records = jsonl(&String::from_utf8_lossy(&out.stdout));
            assert_eq!(records.len(), n, "{what} {limits:?}: {err}");
            records
        };
        let mut limits = vec!["--buffer-size".to_string(), buffer.to_string()];
        limits.extend(args.iter().cloned());
        let records = run(&limits);
        // each line alone: the same hypotheses, the scores within what batch composition moves
        let alone = run(&["--buffer-size", "1", "--batch-size", "1"].map(String::from));
        for (k, ((r, a), &l)) in records.iter().zip(&alone).zip(&lens).enumerate() {
            if case < 40 {
                assert_eq!(r["id"], k, "{what}: {r}");
            }
            assert_eq!(failed(r), l == 1300, "{what}: {r}");
            assert_eq!(failed(a), l == 1300, "{what}, alone: {a}");
            if l == 1300 {
                continue;
            }
            let scores: Vec<(f64, f64)> = if case < 40 {
                let (hr, ha) = (r["hypotheses"].as_array().unwrap(), a["hypotheses"].as_array().unwrap());
                assert_eq!(hr.iter().map(|h| &h["text"]).collect::<Vec<_>>(), ha.iter().map(|h| &h["text"]).collect::<Vec<_>>(), "{what}: line {k}");
                hr.iter().zip(ha).map(|(x, y)| (x["score"].as_f64().unwrap(), y["score"].as_f64().unwrap())).collect()
            } else {
                vec![(r["avg_logprob"].as_f64().unwrap(), a["avg_logprob"].as_f64().unwrap())]
            };
            for (batched, single) in scores {
                BATCH_COMPOSITION.assert(batched, single, &format!("{what}: line {k}, batched against alone"));
            }
        }
    }
    assert!(over_budget > 60, "the cases put too few lines over --max-tokens: {over_budget}");
}

/// A panic in one batch fails that batch's lines, each with its own record; the run goes on.
#[test]
#[cfg_attr(not(feature = "test-faults"), ignore = "injects faults: needs --features test-faults (make test)")]
fn a_panic_in_one_batch_costs_only_its_lines() {
    let lines = ["A man rides a bike.", "The dog runs on the grass.", "Two women sit on a bench.", "A girl in blue plays."];
    let out = tchseq()
        .env("TCHSEQ_TEST_PANIC_ON", "dog")
        .args(["translate", "--format", "jsonl", "--batch-size", "1", "-m"])
        .arg(repo(MODEL))
        .args(lines)
        .output()
        .unwrap();
    let records = jsonl(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(records.len(), 4);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["id"], i, "{r}");
        if i == 1 {
            let error = r["error"].as_str().unwrap();
            assert!(error.contains("internal error") && error.contains("TCHSEQ_TEST_PANIC_ON"), "{r}");
        } else {
            assert!(r["hypotheses"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{r}");
        }
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
    assert!(err.contains("1 input line(s) were not translated: in a batch that failed"), "{err}");

    // score: the row's batch fails alone, then its rows are tried one by one
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pairs.csv");
    let targets = ["Ein Mann fährt Fahrrad.", "Der Hund rennt.", "Zwei Frauen sitzen.", "Ein Mädchen spielt."];
    write_pairs_csv(&csv, lines.into_iter().zip(targets));
    let out = tchseq()
        .env("TCHSEQ_TEST_PANIC_ON", "dog")
        .args(["score", "-q", "--format", "jsonl", "-m"])
        .arg(repo(MODEL))
        .arg("--input")
        .arg(&csv)
        .output()
        .unwrap();
    let records = jsonl(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(records.len(), 4);
    for (i, r) in records.iter().enumerate() {
        let error = r["error"].as_str().unwrap_or("");
        assert_eq!(error.contains("internal error"), i == 1, "{r}");
        assert_eq!(r["logprob"].is_number(), i != 1, "{r}");
    }
    assert_eq!(out.status.code(), Some(2));
}

/// A panic in the server's work for one request answers that request 500 and nothing else:
/// the next requests are served and `/health` stays 200.
#[test]
#[cfg_attr(not(feature = "test-faults"), ignore = "injects faults: needs --features test-faults (make test)")]
fn a_panic_in_the_server_costs_only_its_request() {
    let s = Server::start_with_env(&["--deterministic"], &[("TCHSEQ_TEST_PANIC_ON", "dog")]);
    s.post("/v1/translate", &json!({ "text": ["The dog runs."] })).assert_error(500, "internal error");
    s.post("/v1/score", &json!({ "pairs": [{ "source": "The dog runs.", "target": "Der Hund rennt." }] })).assert_error(500, "internal error");
    let ok = s.post("/v1/translate", &json!({ "text": ["A man rides a bike."] }));
    assert_eq!(ok.status, 200, "{}", String::from_utf8_lossy(&ok.body));
    assert!(ok.json()["translations"][0]["hypotheses"][0]["text"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(s.get("/health").status, 200);
    assert_eq!(s.get("/metrics").status, 200);
    let (status, _) = s.terminate();
    assert!(status.success(), "{status:?}");
}

/// A model worker that is really gone: its request fails, `/health` no longer says ok, and the
/// process exits non-zero by itself, for a supervisor to restart it.
#[test]
#[cfg_attr(not(feature = "test-faults"), ignore = "injects faults: needs --features test-faults (make test)")]
fn a_server_whose_worker_is_gone_says_so_and_exits_non_zero() {
    let s = Server::start_with_env(&["--deterministic"], &[("TCHSEQ_TEST_STOP_WORKER_ON", "dog")]);
    let reply = s.post("/v1/translate", &json!({ "text": ["The dog runs."] }));
    assert!(reply.status == 503 || reply.status == 500, "{reply:?}");
    // the server keeps answering for a few seconds before it goes: /health says what is wrong
    s.get("/health").assert_error(503, "the model worker of multi30k.en-de stopped");
    let (status, stderr) = s.wait_exit();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("model worker of multi30k.en-de stopped"), "{stderr}");
}

/// An interrupted `score --output` run: a file-size limit cuts it after its first chunks, as a
/// crash would, and leaves `<output>.partial` with its progress file.
fn interrupted_score(dir: &Path, model: &Path) -> (std::path::PathBuf, Vec<String>) {
    let csv = dir.join("pairs.csv");
    let rows: Vec<[String; 4]> =
        (0..200).map(|i| [format!("A man rides a bike {i}."), "Ein Mann fährt Fahrrad.".to_string(), "en".to_string(), "de".to_string()]).collect();
    crate::util::write_csv(&csv, &["source", "target", "sl", "tl"], &rows);
    let out = dir.join("scored.csv");
    let base: Vec<String> = ["score", "-q", "-m", &model.to_string_lossy(), "--input", &csv.to_string_lossy(), "--output", &out.to_string_lossy()]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let script = format!("ulimit -f 4; exec \"$TCHSEQ\" --threads {} \"$@\" --buffer-size 10", test_threads());
    let run = Command::new("bash").args(["-c", &script, "tchseq"]).args(&base).env("TCHSEQ", env!("CARGO_BIN_EXE_tchseq")).output().unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(dir.join("scored.csv.partial.progress").exists());
    (dir.join("scored.csv.partial"), base)
}

/// `--resume` with any setting that changes a row is refused, naming the setting, and the
/// partial output stays byte for byte as it was; with the same settings it finishes the run.
#[test]
fn score_resume_refuses_every_changed_setting_and_leaves_the_partial_output() {
    let dir = tempfile::tempdir().unwrap();
    let (partial, base) = interrupted_score(dir.path(), &repo(MODEL));
    let before = std::fs::read(&partial).unwrap();
    let progress: Value = serde_json::from_slice(&std::fs::read(dir.path().join("scored.csv.partial.progress")).unwrap()).unwrap();
    assert_eq!(progress["format"], "tchseq-score-progress/1");
    let copy = dir.path().join("model-copy");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(repo(MODEL)).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let copy = copy.to_string_lossy().to_string();
    let other_threads = (test_threads() + 1).to_string();
    let model_dir = repo(MODEL).to_string_lossy().to_string();
    let bpe_codes = repo(MODEL).join("bpecodes").to_string_lossy().to_string();
    let dict = repo(MODEL).join("dict.en.txt").to_string_lossy().to_string();
    // the same rows under another name
    let csv_copy = dir.path().join("pairs-copy.csv");
    std::fs::copy(dir.path().join("pairs.csv"), &csv_copy).unwrap();
    let csv_copy = csv_copy.to_string_lossy().to_string();
    let changes: &[(&[&str], &str)] = &[
        (&["--compute-type", "int8"], "--compute-type"),
        (&["--per-token"], "--per-token"),
        (&["--buffer-size", "20"], "--buffer-size"),
        (&["--max-tokens", "100"], "--max-tokens"),
        (&["--batch-size", "4"], "--batch-size"),
        (&["--source-column", "target"], "--source-column"),
        (&["--target-column", "source"], "--target-column"),
        (&["--format", "jsonl"], "--format"),
        (&["--delimiter", ";"], "--delimiter"),
        (&["--source-lang-column", "sl"], "--source-lang-column"),
        (&["--target-lang-column", "tl"], "--target-lang-column"),
        (&["--target-lang", "de"], "--target-lang"),
        (&["--tokenizer", "space"], "--tokenizer"),
        (&["--bpe-codes", &bpe_codes], "--bpe-codes"),
        (&["--sentencepiece-model", &bpe_codes], "--sentencepiece-model"),
        (&["--moses-no-dash-splits"], "--moses-no-dash-splits"),
        (&["--task", "translation"], "--task"),
        (&["--lang-pairs", "en-de"], "--lang-pairs"),
        (&["--langs", "en,de"], "--langs"),
        (&["--lang-dict", &dict], "--lang-dict"),
        (&["--lang-tok-style", "multilingual"], "--lang-tok-style"),
        (&["--encoder-langtok", "src"], "--encoder-langtok"),
        (&["--decoder-langtok"], "--decoder-langtok"),
        (&["--fixed-dictionary", &dict], "--fixed-dictionary"),
        (&["--tokenized"], "--tokenized"),
        (&["--reproducible"], "--reproducible"),
        (&["--threads", &other_threads], "--threads"),
        (&["--device", "auto"], "--device"),
        (&["--bpe", "none"], "--bpe"),
        (&["--moses-no-escape"], "--moses-no-escape"),
        (&["-m", &copy], "--model"),
        (&["--source-lang", "en"], "--source-lang"),
        (&["--data", &model_dir], "--data"),
        (&["--input", &csv_copy], "--input"),
        (&["--path", "model.pt"], "--path"),
    ];
    let mut named = BTreeSet::new();
    for (extra, setting) in changes {
        let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
        args.push("--resume");
        if let Some(i) = args.iter().position(|a| *a == extra[0]) {
            args[i + 1] = extra[1];
        } else {
            args.extend(*extra);
        }
        let out = resume(&args);
        let line = one_line_error(&out, &format!("--resume: {setting} "));
        assert!(line.contains("is left as it was"), "{line}");
        assert_eq!(std::fs::read(&partial).unwrap(), before, "{setting}: the partial output changed");
        named.insert(*setting);
    }
    assert_eq!(named.len(), changes.len());
    // every setting the run recorded is among them (the model's files are changed below)
    let recorded: BTreeSet<&str> = progress["settings"].as_object().expect("the progress file's settings").keys().map(String::as_str).collect();
    let untested: Vec<&&str> = recorded.iter().filter(|k| !named.contains(*k) && **k != "the model's files").collect();
    assert!(untested.is_empty() && recorded.len() == changes.len() + 1, "settings no change tries: {untested:?} of {recorded:?}");

    // the same settings finish the run
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.push("--resume");
    let out = resume(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scored = std::fs::read_to_string(dir.path().join("scored.csv")).unwrap();
    assert_eq!(scored.lines().count(), 201);

    // a checkpoint written again since the interrupted run (same path, new file) is refused
    let again = tempfile::tempdir().unwrap();
    let (partial, base) = interrupted_score(again.path(), Path::new(&copy));
    let before = std::fs::read(&partial).unwrap();
    let checkpoint = Path::new(&copy).join("model.pt");
    let bytes = std::fs::read(&checkpoint).unwrap();
    std::fs::write(&checkpoint, bytes).unwrap();
    // a later time whatever the file system's mtime resolution
    let later = std::fs::metadata(&checkpoint).unwrap().modified().unwrap() + Duration::from_secs(5);
    std::fs::File::options().write(true).open(&checkpoint).unwrap().set_modified(later).unwrap();
    let mut args: Vec<&str> = base.iter().map(String::as_str).collect();
    args.push("--resume");
    let line = one_line_error(&resume(&args), "--resume: the model's files changed");
    assert!(line.contains("is left as it was"), "{line}");
    assert_eq!(std::fs::read(&partial).unwrap(), before);
}

/// `tchseq ARGS`, with the interrupted run's `--buffer-size 10` and `--threads N` unless ARGS
/// give their own.
fn resume(args: &[&str]) -> std::process::Output {
    let threads = test_threads().to_string();
    let mut all: Vec<&str> = args.to_vec();
    for (flag, value) in [("--buffer-size", "10"), ("--threads", threads.as_str())] {
        if !args.contains(&flag) {
            all.extend([flag, value]);
        }
    }
    Command::new(env!("CARGO_BIN_EXE_tchseq")).args(&all).env_remove("LD_LIBRARY_PATH").output().unwrap()
}

/// Polls until `path` holds at least `bytes` bytes (a minute at most).
fn wait_for_bytes(path: &Path, bytes: u64) {
    let start = Instant::now();
    while std::fs::metadata(path).map_or(0, |m| m.len()) < bytes {
        assert!(start.elapsed() < Duration::from_secs(60), "{} did not grow", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `translate --output` with its default batching (a 2,048-line buffer sorted by length):
/// `run(extra)` is the command.
fn interruptible_translate(dir: &Path) -> impl Fn(&Path, &[&str]) -> Command {
    let input = dir.join("in.txt");
    // 600 lines of varied lengths: batches finish in length order, not in input order
    std::fs::write(&input, std::fs::read_to_string(fixture("bundled/input.en")).unwrap().repeat(15)).unwrap();
    move |output: &Path, extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tchseq"));
        cmd.args(["--threads", &test_threads().to_string(), "translate", "--format", "jsonl", "-m"])
            .arg(repo(MODEL))
            .arg("--input")
            .arg(&input)
            .arg("--output")
            .arg(output)
            .args(extra)
            .env_remove("LD_LIBRARY_PATH")
            .stderr(Stdio::piped());
        cmd
    }
}

/// A signal after the partial file shows its first finished lines (an event, not a wait): the
/// partial file keeps them, is a prefix of the whole output, and `--resume` completes it to the
/// uninterrupted run's output byte for byte. SIGINT and SIGTERM also say on one line how many
/// lines it holds; a kill leaves the same files without a word.
#[test]
fn an_interrupted_translate_keeps_its_finished_batches_and_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = interruptible_translate(dir.path());
    let whole_path = dir.path().join("whole.jsonl");
    let whole = run(&whole_path, &[]).output().unwrap();
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    let whole = std::fs::read(&whole_path).unwrap();
    assert_eq!(whole.iter().filter(|&&b| b == b'\n').count(), 600);
    for (signal, code) in [(libc::SIGINT, Some(130)), (libc::SIGTERM, Some(143)), (libc::SIGKILL, None)] {
        let output = dir.path().join(format!("out{signal}.jsonl"));
        let partial = dir.path().join(format!("out{signal}.jsonl.partial"));
        let child = run(&output, &[]).spawn().unwrap();
        wait_for_bytes(&partial, 1);
        // SAFETY: signalling our own child process
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), code, "signal {signal}: {err}");
        let held = std::fs::read(&partial).unwrap();
        assert!(!held.is_empty() && whole.starts_with(&held), "signal {signal}: the partial file is not a prefix of the output");
        assert!(!output.exists());
        if code.is_some() {
            let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            assert_eq!(lines.len(), 1, "{err}");
            let n: usize = lines[0]
                .strip_prefix(&format!("interrupted: {} holds the output of the first ", partial.display()))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{err}"));
            assert!(n >= 1 && lines[0].ends_with("input lines; run the same command with --resume to go on"), "{err}");
            assert_eq!(held.iter().filter(|&&b| b == b'\n').count(), n, "{err}");
            assert!(held.ends_with(b"\n"));
        }
        // a changed setting is refused by name, and leaves the partial file as it was
        let changed = run(&output, &["--resume", "--beam", "4"]).output().unwrap();
        let changed_err = String::from_utf8_lossy(&changed.stderr);
        assert_eq!(changed.status.code(), Some(2));
        assert!(changed_err.contains("--resume: --beam was `5` in the interrupted run and is `4` now"), "{changed_err}");
        assert!(whole.starts_with(&std::fs::read(&partial).unwrap()));
        let resumed = run(&output, &["--resume"]).output().unwrap();
        assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
        assert_eq!(std::fs::read(&output).unwrap(), whole, "signal {signal}: the resumed output");
        assert!(!partial.exists() && !dir.path().join(format!("out{signal}.jsonl.partial.progress")).exists());
    }
    // nothing to resume, and sampling, which cannot resume, say so
    let err = String::from_utf8_lossy(&run(&dir.path().join("none.jsonl"), &["--resume"]).output().unwrap().stderr).to_string();
    assert!(err.contains("no interrupted run to go on with"), "{err}");
    let err = String::from_utf8_lossy(&run(&dir.path().join("s.jsonl"), &["--resume", "--sampling", "--nbest", "5"]).output().unwrap().stderr).to_string();
    assert!(err.contains("--resume cannot continue --sampling"), "{err}");
}

/// SIGTERM in `score --output`: one line saying how many rows are complete and that --resume
/// goes on; the resumed run's output is the uninterrupted run's.
#[test]
fn sigterm_in_score_says_how_to_resume_and_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pairs.csv");
    let pair = ("A man in a blue shirt rides a bike on the grass.", "Ein Mann in einem blauen Hemd fährt Fahrrad.");
    write_pairs_csv(&csv, std::iter::repeat_n(pair, 6000));
    let run = |output: &Path, extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tchseq"));
        cmd.args(["--threads", &test_threads().to_string(), "score", "-q", "--buffer-size", "50", "-m"])
            .arg(repo(MODEL))
            .arg("--input")
            .arg(&csv)
            .arg("--output")
            .arg(output)
            .args(extra)
            .env_remove("LD_LIBRARY_PATH")
            .stderr(Stdio::piped());
        cmd
    };
    let output = dir.path().join("scored.csv");
    let child = run(&output, &[]).spawn().unwrap();
    wait_for_bytes(&dir.path().join("scored.csv.partial.progress"), 1);
    // SAFETY: signalling our own child process
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("rows, complete; run the same command with --resume to go on"), "{err}");
    let resumed = run(&output, &["--resume"]).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let whole = dir.path().join("whole.csv");
    assert!(run(&whole, &[]).output().unwrap().status.success());
    assert_eq!(std::fs::read(&output).unwrap(), std::fs::read(&whole).unwrap());
}

/// On a terminal, `translate --output` shows its progress and ends with a summary line; `-q`
/// shows neither. (`script` gives the run a terminal.)
#[test]
fn translate_to_a_file_on_a_terminal_shows_progress_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "A man rides a bike.\nTwo dogs play.\nA girl sits.\n").unwrap();
    let run = |extra: &str| {
        let command = format!(
            "'{}' --threads {} translate -m '{}' --input '{}' --output '{}' {extra}",
            env!("CARGO_BIN_EXE_tchseq"),
            test_threads(),
            repo(MODEL).display(),
            input.display(),
            dir.path().join("out.txt").display()
        );
        let out = Command::new("script").args(["-qec", &command, "/dev/null"]).env_remove("LD_LIBRARY_PATH").output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let shown = run("");
    assert!(shown.contains("translated 3 lines (0 not translated)"), "{shown}");
    assert!(shown.contains("lines/s"), "{shown}");
    let quiet = run("-q");
    assert!(!quiet.contains("translated 3 lines"), "{quiet}");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.txt")).unwrap().lines().count(), 3);
}

/// float16 on a CPU without AVX512_FP16 is slow, and says so; with it, nothing is said.
#[test]
fn float16_on_a_cpu_without_avx512_fp16_warns() {
    let out = tchseq().args(["translate", "--compute-type", "float16", "-m"]).arg(repo(MODEL)).arg("A man rides a bike.").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let fp16 = tchseq::kernels::isa::cpu_has("avx512fp16");
    assert_eq!(err.contains("float16 on this CPU (no AVX512_FP16) runs several times slower than float32"), !fp16, "{err}");
}

/// Each error carries its own hint and no other: the `--model`/`--path` hint only when no model
/// was given, the language flags only when languages are missing.
#[test]
fn an_error_s_hint_belongs_to_that_error_only() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["dict.en.txt", "dict.de.txt", "bpecodes"] {
        std::fs::copy(repo(MODEL).join(f), dir.path().join(f)).unwrap();
    }
    let no_checkpoint = tchseq().args(["translate", "-m"]).arg(dir.path()).arg("A dog.").output().unwrap();
    let line = one_line_error(&no_checkpoint, "no model.pt, checkpoint_best.pt or checkpoint_last.pt");
    assert!(!line.contains("(use --model"), "{line}");
    let no_model = tchseq().args(["translate", "A dog."]).output().unwrap();
    one_line_error(&no_model, "no model given: a model directory, a checkpoint file or a list of checkpoints (use --model DIR|FILE or --path A.pt[:B.pt])");
    let bf16 = tchseq().args(["translate", "--compute-type", "bfloat16", "-m"]).arg(repo(MODEL)).arg("A dog.").output().unwrap();
    let has_bf16 = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default().split_whitespace().any(|f| f == "avx512_bf16");
    if has_bf16 {
        assert!(bf16.status.success(), "{bf16:?}");
    } else {
        let line = one_line_error(&bf16, "compute type bfloat16 on the CPU needs AVX512_BF16");
        assert!(!line.contains("--model") && !line.contains("--path"), "{line}");
    }
    // the same refusal, forced on any CPU by hiding the feature
    let hidden = tchseq()
        .env("TCHSEQ_CPU_FEATURES_OFF", "avx512bf16")
        .args(["translate", "--compute-type", "bfloat16", "-m"])
        .arg(repo(MODEL))
        .arg("A dog.")
        .output()
        .unwrap();
    let line = one_line_error(&hidden, "compute type bfloat16 on the CPU needs AVX512_BF16");
    assert!(!line.contains("--model") && !line.contains("--path"), "{line}");
}

#[test]
fn a_full_queue_is_refused_with_retry_after_and_a_slow_request_times_out() {
    // the first request waits ten minutes for company, holding the one queue place until the
    // server shuts down, which computes it at once
    let s = Server::start(&["--queue-size", "1", "--max-wait-ms", "600000", "--request-timeout", "600"]);
    let port = s.port;
    let first = std::thread::spawn(move || http(port, "POST", "/v1/translate", &[], Some(br#"{"text": "A dog runs."}"#)));
    s.wait_queued(1);
    let busy = s.post("/v1/translate", &json!({ "text": "A cat sleeps." }));
    busy.assert_error(503, "queue is full");
    assert_eq!(busy.header("retry-after"), Some("1"));
    let (status, stderr) = s.terminate();
    assert!(status.success(), "{stderr}");
    assert_eq!(first.join().unwrap().status, 200);

    // a request that waits ten minutes for company cannot finish within its half second
    let s = Server::start(&["--max-wait-ms", "600000", "--request-timeout", "0.5"]);
    s.post("/v1/translate", &json!({ "text": "A dog runs." })).assert_error(408, "took too long");
    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(metrics.contains("status=\"408\"} 1"), "{metrics}");
}

/// The largest beam and output length a request may ask for are taken, one more is a 400 that
/// names the limits.
#[test]
fn the_beam_and_length_limits_hold_at_their_boundary() {
    let s = Server::start(&["--deterministic"]);
    let ask = |options: Value| s.post("/v1/translate", &json!({ "text": ["A dog."], "options": options }));
    for ok in [json!({ "beam": 64, "max_len_b": 3 }), json!({ "beam": 1, "max_len_b": 1024 }), json!({ "beam": 1, "min_len": 1024, "max_len_b": 1024 })] {
        let r = ask(ok.clone());
        assert_eq!(r.status, 200, "{ok}: {}", String::from_utf8_lossy(&r.body));
    }
    for over in [json!({ "beam": 65 }), json!({ "max_len_b": 1025 }), json!({ "min_len": 1025, "max_len_b": 1024 })] {
        ask(over.clone()).assert_error(400, "this server allows beam up to 64 and max_len_b, min_len up to 1024");
    }
}
