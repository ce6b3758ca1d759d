use super::*;
use anyhow::{bail, Result};
use std::fs::{self};
use std::path::Path;

use crate::cli::args::ScoreFormat;
use std::cell::RefCell;
use std::rc::Rc;

/// Scores every token id `t` with `-t / 100`, whatever the batch, so any row mix-up shows.
#[derive(Default)]
struct FakeBackend {
    max_positions: usize,
    batches: Rc<RefCell<Vec<usize>>>,
    /// Panic after this many `score` calls (to simulate an interrupted run).
    panic_after: Option<usize>,
    calls: usize,
    /// What `parallel_batches` says (0: 1).
    parallel: usize,
}

fn ids(text: &str) -> Vec<i64> {
    text.split_whitespace().map(|w| 4 + w.chars().count() as i64).chain([2]).collect()
}

fn expected(target: &str) -> (f32, usize) {
    let t = ids(target);
    let sum: f32 = t.iter().map(|&x| -(x as f32) / 100.0).sum();
    (sum, t.len())
}

impl Backend for FakeBackend {
    fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String> {
        let (source, target) = (ids(source), ids(target));
        if target.len() > self.max_positions {
            return Err(format!("target has {} tokens, more than {}", target.len(), self.max_positions));
        }
        Ok(Encoded { source, target })
    }
    fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>> {
        self.calls += 1;
        if self.panic_after.is_some_and(|n| self.calls > n) {
            panic!("simulated crash");
        }
        self.batches.borrow_mut().push(batch.len());
        if batch.iter().any(|e| e.target.contains(&(4 + 6))) {
            bail!("six-letter words break this batch");
        }
        Ok(batch
            .iter()
            .map(|e| {
                let p: Vec<f32> = e.target.iter().map(|&x| -(x as f32) / 100.0).collect();
                let sum: f32 = p.iter().sum();
                Scored { logprob: sum, avg_logprob: sum / p.len() as f32, positional_scores: p }
            })
            .collect())
    }
    fn parallel_batches(&self) -> usize {
        self.parallel.max(1)
    }
    fn target_symbol(&self, id: i64) -> String {
        format!("w{id}")
    }
}

fn options(dir: &Path, input: &str, output: Option<&str>) -> Options {
    Options {
        input: dir.join(input),
        output: output.map(|o| dir.join(o)),
        source_column: "source".into(),
        target_column: "target".into(),
        source_lang_column: None,
        target_lang_column: None,
        delimiter: b',',
        format: ScoreFormat::Csv,
        per_token: false,
        max_tokens: None,
        batch_size: Some(3),
        buffer_size: 7,
        resume: false,
        shard: None,
        settings: [("test".to_string(), "1".to_string())].into(),
    }
}

fn run_fake(opts: &Options, backend: &mut FakeBackend) -> Result<Summary> {
    let input = Input::open(opts)?;
    score_input(input, opts, backend, false)
}

fn backend() -> FakeBackend {
    FakeBackend { max_positions: 50, ..Default::default() }
}

fn read_output(path: &Path) -> Vec<csv::StringRecord> {
    let mut r = csv::ReaderBuilder::new().flexible(true).has_headers(true).from_path(path).unwrap();
    r.byte_records().map(|x| csv::StringRecord::from_byte_record_lossy(x.unwrap())).collect()
}

/// Sentences of shuffled lengths so that fairseq's length ordering moves every row.
fn shuffled_rows(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let len = (i * 7919) % 23 + 1;
            let src = (0..len).map(|k| "s".repeat(k % 5 + 1)).collect::<Vec<_>>().join(" ");
            let tlen = (i * 104729) % 17 + 1;
            let tgt = (0..tlen).map(|k| "t".repeat((k + i) % 4 + 1)).collect::<Vec<_>>().join(" ");
            (src, tgt)
        })
        .collect()
}

fn write_pairs(path: &Path, rows: &[(String, String)]) {
    write_pairs_with_ids(path, rows, "");
}

fn write_pairs_with_ids(path: &Path, rows: &[(String, String)], id_prefix: &str) {
    let mut w = csv::Writer::from_path(path).unwrap();
    w.write_record(["id", "source", "target"]).unwrap();
    for (i, (s, t)) in rows.iter().enumerate() {
        w.write_record([format!("{id_prefix}{i}").as_str(), s, t]).unwrap();
    }
    w.flush().unwrap();
}

#[test]
fn order_is_kept_whatever_the_batching() {
    let dir = tempfile::tempdir().unwrap();
    let rows = shuffled_rows(101);
    write_pairs(&dir.path().join("in.csv"), &rows);
    for (batch_size, max_tokens, buffer) in [(Some(1), None, 1), (Some(3), None, 7), (None, Some(40), 13), (Some(16), None, 1000)] {
        let mut opts = options(dir.path(), "in.csv", Some("out.csv"));
        opts.batch_size = batch_size;
        opts.max_tokens = max_tokens;
        opts.buffer_size = buffer;
        let mut b = backend();
        let summary = run_fake(&opts, &mut b).unwrap();
        assert_eq!((summary.rows, summary.errors), (101, 0));
        let batches = b.batches.borrow();
        assert!(batches.iter().all(|&n| batch_size.is_none_or(|m| n <= m)), "{batches:?}");
        assert!(batches.len() > 101 / buffer.max(16), "batching happened: {batches:?}");
        let out = read_output(&dir.path().join("out.csv"));
        assert_eq!(out.len(), rows.len());
        for (i, (rec, (src, tgt))) in out.iter().zip(&rows).enumerate() {
            assert_eq!(&rec[0], i.to_string().as_str());
            assert_eq!((&rec[1], &rec[2]), (src.as_str(), tgt.as_str()));
            let (sum, len) = expected(tgt);
            assert_eq!(rec[3].parse::<f32>().unwrap(), sum, "row {i}");
            assert_eq!(rec[4].parse::<usize>().unwrap(), len);
            assert_eq!(rec[5].parse::<f32>().unwrap(), sum / len as f32);
            assert_eq!(&rec[7], "");
        }
    }
}

#[test]
fn bad_rows_keep_their_place_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let long = vec!["x"; 10_000].join(" ");
    let mut data: Vec<u8> = b"id,source,target\n".to_vec();
    data.extend(b"0,a b,c d\n");
    data.extend(b"1,a b\n"); // ragged: too few
    data.extend(b"2,a,b,c\n"); // ragged: too many
    data.extend(b"3,a b,\n"); // empty target
    data.extend(b"4,,c\n"); // empty source
    data.extend(b"5,a \xff b,c\n"); // invalid UTF-8 in source
    data.extend(format!("6,a,{long}\n").as_bytes()); // too long
    data.extend(b"7,\"a\nb\",\"c, d\"\n"); // quoted newline and delimiter
    data.extend(b"8,a,  \n"); // blank target
    data.extend(b"9,a,sixsix\n"); // its batch fails: scored alone, fails alone
    data.extend(b"10,a,ok\n");
    fs::write(dir.path().join("in.csv"), &data).unwrap();
    let mut opts = options(dir.path(), "in.csv", Some("out.csv"));
    opts.batch_size = Some(8);
    let summary = run_fake(&opts, &mut backend()).unwrap();
    assert_eq!((summary.rows, summary.errors, summary.scored), (11, 8, 3));
    let out = read_output(&dir.path().join("out.csv"));
    assert_eq!(out.len(), 11);
    let errors: Vec<&str> = out.iter().map(|r| r.get(7).unwrap()).collect();
    assert_eq!(errors[0], "");
    assert_eq!(errors[1], "ragged row: 2 fields, the header has 3");
    assert_eq!(errors[2], "ragged row: 4 fields, the header has 3; the fields past the header: [\"c\"]");
    assert_eq!(errors[3], "empty 'target'");
    assert_eq!(errors[4], "empty 'source'");
    assert_eq!(errors[5], "invalid UTF-8 in 'source' at byte 2");
    assert_eq!(errors[6], "target has 10001 tokens, more than 50");
    assert_eq!(errors[7], "");
    assert_eq!(errors[8], "empty 'target'");
    assert_eq!(errors[9], "scoring failed: six-letter words break this batch");
    assert_eq!(errors[10], "");
    assert_eq!(&out[7][1], "a\nb");
    assert_eq!(out[7][3].parse::<f32>().unwrap(), expected("c, d").0);
    // every row has the full width; ids kept
    for (i, r) in out.iter().enumerate() {
        assert_eq!(r.len(), 8, "row {i}");
        assert_eq!(&r[0], i.to_string().as_str());
        if !errors[i].is_empty() {
            assert!((3..7).all(|c| r[c].is_empty()), "row {i}: {r:?}");
        }
    }
    // the invalid bytes are copied through untouched
    let raw = fs::read(dir.path().join("out.csv")).unwrap();
    assert!(raw.windows(5).any(|w| w == b"a \xff b"));
}

#[test]
fn missing_column_names_the_columns_and_added_columns_clash() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("in.csv"), "src,target\nx,y\n").unwrap();
    let opts = options(dir.path(), "in.csv", None);
    let err = Input::open(&opts).err().unwrap().to_string();
    assert!(err.contains("--source-column 'source' is not a column"), "{err}");
    assert!(err.contains("'src', 'target'"), "{err}");
    fs::write(dir.path().join("in.csv"), "source,target,ppl\nx,y,1\n").unwrap();
    let err = Input::open(&opts).err().unwrap().to_string();
    assert!(err.contains("already has a column named 'ppl'"), "{err}");
    fs::write(dir.path().join("in.csv"), "").unwrap();
    let err = Input::open(&opts).err().unwrap().to_string();
    assert!(err.contains("no header row"), "{err}");
}

#[test]
fn tsv_jsonl_and_per_token() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("in.tsv"), "target\tsource\nab c\tx\n\tx\n").unwrap();
    let mut opts = options(dir.path(), "in.tsv", Some("out.jsonl"));
    opts.delimiter = parse_delimiter("\\t").unwrap();
    opts.format = ScoreFormat::Jsonl;
    opts.per_token = true;
    run_fake(&opts, &mut backend()).unwrap();
    let text = fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2);
    let keys: Vec<&String> = lines[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["target", "source", "logprob", "tokens", "avg_logprob", "ppl", "error", "token_logprobs"]);
    assert_eq!(lines[0]["tokens"], 3);
    assert_eq!(lines[0]["logprob"].as_f64().unwrap() as f32, expected("ab c").0);
    assert_eq!(lines[0]["token_logprobs"], serde_json::json!([["w6", -0.06], ["w5", -0.05], ["w2", -0.02]]));
    assert!(lines[0]["error"].is_null());
    assert_eq!(lines[1]["error"], "empty 'target'");
    assert!(lines[1]["logprob"].is_null());
    let ppl = lines[0]["ppl"].as_f64().unwrap();
    assert!((ppl - (0.13f64 / 3.0).exp()).abs() < 1e-6);

    opts.format = ScoreFormat::Csv;
    opts.output = Some(dir.path().join("out.tsv"));
    run_fake(&opts, &mut backend()).unwrap();
    let text = fs::read_to_string(dir.path().join("out.tsv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next().unwrap(), "target\tsource\tlogprob\ttokens\tavg_logprob\tppl\terror\ttoken_logprobs");
    let first: Vec<&str> = lines.next().unwrap().split('\t').collect();
    assert_eq!(first[..4], ["ab c", "x", "-0.13", "3"]);
    assert_eq!(first[7], r#""[[""w6"",-0.06],[""w5"",-0.05],[""w2"",-0.02]]""#);
}

#[test]
fn delimiters() {
    assert_eq!(parse_delimiter(",").unwrap(), b',');
    assert_eq!(parse_delimiter("\t").unwrap(), b'\t');
    assert_eq!(parse_delimiter("\\t").unwrap(), b'\t');
    assert_eq!(parse_delimiter(";").unwrap(), b';');
    assert!(parse_delimiter("ab").is_err());
    assert!(parse_delimiter("é").is_err());
    assert!(parse_delimiter("").is_err());
}

#[test]
fn output_appears_only_when_complete_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let rows = shuffled_rows(40);
    write_pairs(&dir.path().join("in.csv"), &rows);
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    opts.buffer_size = 6;
    run_fake(&opts, &mut backend()).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();
    assert!(!dir.path().join("ref.csv.partial").exists());
    assert!(!dir.path().join("ref.csv.partial.progress").exists());

    opts.output = Some(dir.path().join("out.csv"));
    // crash in the middle of the third chunk
    let crashed = std::panic::catch_unwind(|| {
        let mut b = backend();
        b.panic_after = Some(5);
        let _ = run_fake(&opts, &mut b);
    });
    assert!(crashed.is_err());
    assert!(!dir.path().join("out.csv").exists(), "no half-written output");
    assert!(dir.path().join("out.csv.partial").exists());
    let progress: Progress =
        serde_json::from_slice(&fs::read(dir.path().join("out.csv.partial.progress")).unwrap()).unwrap();
    assert!(progress.summary.rows > 0 && progress.summary.rows < 40, "{progress:?}");

    // a resume with other options is refused
    let mut other = opts.clone();
    other.resume = true;
    other.settings.insert("test".into(), "2".into());
    let partial_before = fs::read(dir.path().join("out.csv.partial")).unwrap();
    let err = run_fake(&other, &mut backend()).err().unwrap().to_string();
    assert!(err.contains("--resume: test was `1` in the interrupted run and is `2` now"), "{err}");
    assert_eq!(fs::read(dir.path().join("out.csv.partial")).unwrap(), partial_before, "the partial output is left as it was");

    // rows scored ahead of their turn and kept in the pending file are not this run's either
    let ahead = progress.chunk.as_ref().filter(|c| c.pending_bytes > 0).map_or(0, |c| {
        let pending = fs::read(dir.path().join("out.csv.partial.pending")).unwrap();
        super::pending::decode(&pending[..c.pending_bytes as usize]).unwrap().iter().filter(|(k, _)| *k as u64 >= c.rows_written).count() as u64
    });
    opts.resume = true;
    let summary = run_fake(&opts, &mut backend()).unwrap();
    assert_eq!(summary.rows, 40);
    assert_eq!(summary.rows_this_run, 40 - progress.summary.rows - ahead);
    assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference);
    assert!(!dir.path().join("out.csv.partial").exists());
    assert!(!dir.path().join("out.csv.partial.progress").exists());

    // nothing left to resume
    let err = run_fake(&opts, &mut backend()).err().unwrap().to_string();
    assert!(err.contains("no interrupted run"), "{err}");
}

/// csv strips a UTF-8 BOM from the first bytes read after a seek; a row that starts with one
/// must come back from `--resume` as it was (found by the csv_rows fuzz target).
#[test]
fn resume_keeps_a_byte_order_mark_that_starts_a_row() {
    let dir = tempfile::tempdir().unwrap();
    write_pairs_with_ids(&dir.path().join("in.csv"), &shuffled_rows(20), "\u{feff}");
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    opts.buffer_size = 4;
    run_fake(&opts, &mut backend()).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();
    assert_eq!(read_output(&dir.path().join("ref.csv"))[9][0].as_bytes(), "\u{feff}9".as_bytes());

    opts.output = Some(dir.path().join("out.csv"));
    let crashed = std::panic::catch_unwind(|| {
        let mut b = backend();
        b.panic_after = Some(2);
        let _ = run_fake(&opts, &mut b);
    });
    assert!(crashed.is_err());
    opts.resume = true;
    run_fake(&opts, &mut backend()).unwrap();
    assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference);
}

/// Progress is kept per batch, not per chunk: a crash inside a chunk of many batches leaves the
/// rows written in input order (a prefix of the clean run's output) and the rows scored ahead
/// of their turn in the pending file; `--resume` scores only the batches not finished, and ends
/// with the clean run's bytes.
#[test]
fn a_crash_inside_a_chunk_keeps_every_finished_batch() {
    let dir = tempfile::tempdir().unwrap();
    let rows = shuffled_rows(63);
    write_pairs(&dir.path().join("in.csv"), &rows);
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    // one chunk of 63 rows in 21 batches (7 rounds of 3)
    opts.buffer_size = 1000;
    let mut clean = backend();
    run_fake(&opts, &mut clean).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();
    assert_eq!(clean.batches.borrow().len(), 21);

    // (rounds of 3 batches side by side: progress is kept per round)
    for (parallel, crash_after) in [(1, 1), (1, 7), (1, 20), (3, 3), (3, 8), (3, 20)] {
        opts.output = Some(dir.path().join("out.csv"));
        opts.resume = false;
        let crashed = std::panic::catch_unwind(|| {
            let mut b = backend();
            b.panic_after = Some(crash_after);
            b.parallel = parallel;
            let _ = run_fake(&opts, &mut b);
        });
        assert!(crashed.is_err());
        let progress: Progress =
            serde_json::from_slice(&fs::read(dir.path().join("out.csv.partial.progress")).unwrap()).unwrap();
        let chunk = progress.chunk.clone().expect("a checkpoint inside the chunk");
        // the rounds that finished before the crash
        let kept = crash_after / parallel * parallel;
        // the rounds run by their first row: each one finished writes at least one more row
        assert!(chunk.rows_written >= (kept / parallel) as u64, "{progress:?}");
        assert_eq!(progress.summary.rows, chunk.rows_written);
        let partial = fs::read(dir.path().join("out.csv.partial")).unwrap();
        assert_eq!(partial.len() as u64, progress.output_bytes);
        assert!(reference.starts_with(&partial), "the partial output is a prefix of the clean run's");
        let pending = fs::read(dir.path().join("out.csv.partial.pending")).unwrap();
        let ahead = super::pending::decode(&pending[..chunk.pending_bytes as usize]).unwrap();
        // every finished batch is kept, written or pending: 3 rows a batch
        assert_eq!(chunk.rows_written as usize + ahead.iter().filter(|(k, _)| *k as u64 >= chunk.rows_written).count(), 3 * kept);

        opts.resume = true;
        let mut b = backend();
        b.parallel = parallel;
        let summary = run_fake(&opts, &mut b).unwrap();
        assert_eq!(b.batches.borrow().len(), 21 - kept, "crash after {crash_after}: only the unfinished batches are scored again");
        assert_eq!(summary.rows, 63);
        assert_eq!(summary.rows_this_run, 63 - 3 * kept as u64);
        assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference, "crash after {crash_after}");
        for leftover in ["out.csv.partial", "out.csv.partial.progress", "out.csv.partial.pending"] {
            assert!(!dir.path().join(leftover).exists(), "{leftover} is gone");
        }
    }
}

/// A kill -9 can land after rows went to the pending file and before the checkpoint that counts
/// them: the bytes past the checkpoint's are ignored. A pending file shorter than its checkpoint
/// says is refused, the partial output left as it was.
#[test]
fn resume_reads_the_pending_file_only_as_far_as_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    write_pairs(&dir.path().join("in.csv"), &shuffled_rows(45));
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    opts.buffer_size = 20;
    run_fake(&opts, &mut backend()).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();

    opts.output = Some(dir.path().join("out.csv"));
    let crash = |opts: &Options| {
        let crashed = std::panic::catch_unwind(|| {
            let mut b = backend();
            b.panic_after = Some(9);
            let _ = run_fake(opts, &mut b);
        });
        assert!(crashed.is_err());
    };
    crash(&opts);
    let pending_path = dir.path().join("out.csv.partial.pending");
    let progress: Progress = serde_json::from_slice(&fs::read(dir.path().join("out.csv.partial.progress")).unwrap()).unwrap();
    let chunk = progress.chunk.clone().unwrap();
    assert!(chunk.pending_bytes > 0, "{progress:?}");
    let mut pending = fs::read(&pending_path).unwrap();
    // half a record more, as a kill mid-append leaves it
    pending.extend(&pending[..10].to_vec());
    fs::write(&pending_path, &pending).unwrap();
    let mut resumed = opts.clone();
    resumed.resume = true;
    run_fake(&resumed, &mut backend()).unwrap();
    assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference);

    fs::remove_file(dir.path().join("out.csv")).unwrap();
    crash(&opts);
    let partial_before = fs::read(dir.path().join("out.csv.partial")).unwrap();
    let pending = fs::read(&pending_path).unwrap();
    fs::write(&pending_path, &pending[..pending.len() - 1]).unwrap();
    let err = run_fake(&resumed, &mut backend()).err().unwrap().to_string();
    assert!(err.contains("out.csv.partial.pending is shorter"), "{err}");
    assert_eq!(fs::read(dir.path().join("out.csv.partial")).unwrap(), partial_before);
}

/// A progress file from before per-batch checkpoints (no `chunk`) is a checkpoint between chunks.
#[test]
fn a_progress_file_without_chunk_is_between_chunks() {
    let dir = tempfile::tempdir().unwrap();
    write_pairs(&dir.path().join("in.csv"), &shuffled_rows(30));
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    opts.buffer_size = 6;
    run_fake(&opts, &mut backend()).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();
    // rows 0..12 (two chunks) written as an earlier version would have left them
    let text = String::from_utf8(reference.clone()).unwrap();
    let kept: String = text.split_inclusive('\n').take(13).collect();
    let data = fs::read(dir.path().join("in.csv")).unwrap();
    let mut reader = csv_reader(b',', &data[..]);
    let mut record = csv::ByteRecord::new();
    for _ in 0..12 {
        assert!(reader.read_byte_record(&mut record).unwrap());
    }
    let pos = reader.position();
    let mut summary = Summary::default();
    for line in kept.lines().skip(1) {
        let fields: Vec<&str> = line.split(',').collect();
        let (logprob, tokens, avg): (f32, u64, f32) = (fields[3].parse().unwrap(), fields[4].parse().unwrap(), fields[5].parse().unwrap());
        summary.add(&RowTotals(Some((logprob, avg, tokens))));
    }
    let (input_len, input_modified_ns) = input_stamp(&opts.input).unwrap();
    let progress = serde_json::json!({
        "format": PROGRESS_FORMAT, "settings": opts.settings, "input_len": input_len, "input_modified_ns": input_modified_ns,
        "input_byte": pos.byte(), "input_line": pos.line(), "input_record": pos.record(), "output_bytes": kept.len(), "summary": summary,
    });
    fs::write(dir.path().join("out.csv.partial"), &kept).unwrap();
    fs::write(dir.path().join("out.csv.partial.progress"), progress.to_string()).unwrap();
    opts.output = Some(dir.path().join("out.csv"));
    opts.resume = true;
    let done = run_fake(&opts, &mut backend()).unwrap();
    assert_eq!((done.rows, done.rows_this_run), (30, 18));
    assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference);
}

/// Two crashes inside one chunk, the second in the run that resumed the first (rows starting
/// with a byte order mark, which the resume's seek must keep): the second resume still ends with
/// the clean run's bytes, and each resume scores only the batches not finished.
#[test]
fn a_resumed_run_crashed_again_in_the_same_chunk_resumes_again() {
    let dir = tempfile::tempdir().unwrap();
    write_pairs_with_ids(&dir.path().join("in.csv"), &shuffled_rows(45), "\u{feff}");
    let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
    // chunks of 30 and 15 rows, in batches of 3
    opts.buffer_size = 30;
    run_fake(&opts, &mut backend()).unwrap();
    let reference = fs::read(dir.path().join("ref.csv")).unwrap();

    opts.output = Some(dir.path().join("out.csv"));
    let crash = |opts: &Options, after: usize| {
        let crashed = std::panic::catch_unwind(|| {
            let mut b = backend();
            b.panic_after = Some(after);
            let _ = run_fake(opts, &mut b);
        });
        assert!(crashed.is_err());
        let progress: Progress = serde_json::from_slice(&fs::read(dir.path().join("out.csv.partial.progress")).unwrap()).unwrap();
        assert!(reference.starts_with(&fs::read(dir.path().join("out.csv.partial")).unwrap()));
        progress
    };
    // the first chunk, then the second
    for (first, second) in [(2, 3), (12, 2)] {
        let _ = fs::remove_file(dir.path().join("out.csv"));
        opts.resume = false;
        let one = crash(&opts, first);
        opts.resume = true;
        let two = crash(&opts, second);
        assert_eq!(one.chunk.as_ref().map(|c| c.byte), two.chunk.as_ref().map(|c| c.byte), "the same chunk");
        assert!(two.summary.rows >= one.summary.rows);
        let mut b = backend();
        run_fake(&opts, &mut b).unwrap();
        assert_eq!(b.batches.borrow().len(), 15 - first - second, "({first}, {second})");
        assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference, "({first}, {second})");
    }
}
