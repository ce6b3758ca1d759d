//! One bad input line never costs the other lines: `translate` (every format), `encode`, `decode`
//! and `score` on inputs that mix good lines with invalid UTF-8, NUL bytes, a lone CR, a 1 MB
//! line and an empty line. Every input line keeps its place (and id) in the output, a good line
//! gives what the same good lines give when run alone on this machine, a bad line carries its
//! error, and the run ends with exit status 2 and one summary `error:` line.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{fixture, repo, tchseq};

struct Run {
    stdout: Vec<u8>,
    stderr: String,
    code: Option<i32>,
}

impl Run {
    fn text(&self) -> String {
        String::from_utf8(self.stdout.clone()).expect("the output is UTF-8")
    }

    /// Output lines split at `\n` only (a `\r` inside a line stays).
    fn lines(&self) -> Vec<String> {
        let text = self.text();
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        assert_eq!(lines.pop().as_deref(), Some(""), "the output ends with a newline");
        lines
    }
}

fn run(cmd: &mut assert_cmd::Command) -> Run {
    let out = cmd.output().unwrap();
    Run { stdout: out.stdout, stderr: String::from_utf8_lossy(&out.stderr).into_owned(), code: out.status.code() }
}

/// Exit status 2, and stderr ends with the one summary `error:` line, which contains `summary`.
fn assert_failed(r: &Run, summary: &str) {
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let last = r.stderr.lines().last().unwrap_or("");
    assert!(last.starts_with("error: ") && last.contains(summary), "want {summary:?} last: {}", r.stderr);
    let summaries = r.stderr.lines().filter(|l| l.starts_with("error:") && !l.starts_with("error: line ")).count();
    assert_eq!(summaries, 1, "{}", r.stderr);
}

/// One record of an input as the command must see it: a line to translate (or encode, decode),
/// or a bad line and a piece of its error.
#[derive(Clone, Debug)]
enum Rec {
    Good(String),
    Bad(&'static str),
}

fn good(recs: &[Rec]) -> Vec<String> {
    recs.iter().filter_map(|r| if let Rec::Good(s) = r { Some(s.clone()) } else { None }).collect()
}

fn joined(lines: &[String]) -> Vec<u8> {
    lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect()
}

const NOT_UTF8: &str = "not valid UTF-8";
const TOO_LONG: &str = "tokens long";

fn fixture_model() -> PathBuf {
    repo("tests/fixtures/models/postnorm")
}

fn bundled_model() -> PathBuf {
    repo("weights/multi30k.en-de")
}

/// Lines of the fixtures' source language mixed with bad lines, and the records a reader of
/// `--input FILE` (universal newlines: the lone CR ends a line) or of stdin (it does not) sees.
fn fixture_mix(stdin: bool) -> (Vec<u8>, Vec<Rec>) {
    let src = fs::read_to_string(fixture("models/inputs.src")).unwrap();
    let g: Vec<&str> = src.lines().take(5).collect();
    let long = "i ".repeat(500_000);
    let mut bytes = Vec::new();
    for part in [
        g[0].as_bytes(),
        b"\n\xff\xfe h\n",
        g[1].as_bytes(),
        b"\n\x00 h y\n",
        g[3].as_bytes(),
        b"\rh y\n",
        long.as_bytes(),
        b"\n\n",
        g[2].as_bytes(),
        b"\r\nt \xc3\n",
        g[4].as_bytes(),
    ] {
        bytes.extend_from_slice(part);
    }
    let mut recs = vec![Rec::Good(g[0].into()), Rec::Bad(NOT_UTF8), Rec::Good(g[1].into()), Rec::Good("\0 h y".into())];
    if stdin {
        recs.push(Rec::Good(format!("{}\rh y", g[3])));
    } else {
        recs.extend([Rec::Good(g[3].into()), Rec::Good("h y".into())]);
    }
    recs.extend([Rec::Bad(TOO_LONG), Rec::Good(String::new()), Rec::Good(g[2].into()), Rec::Bad(NOT_UTF8), Rec::Good(g[4].into())]);
    (bytes, recs)
}

fn translate_fixture(format: &str, input: Option<&Path>, stdin: &[u8]) -> Run {
    let mut cmd = tchseq();
    cmd.args(["--device", "cpu", "translate", "-m"])
        .arg(fixture_model())
        .args(["-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "--beam", "5", "--format", format]);
    match input {
        Some(p) => cmd.arg("--input").arg(p),
        None => cmd.write_stdin(stdin),
    };
    run(&mut cmd)
}

const TRANSLATE_SUMMARY: &str = "3 input line(s) were not translated: 2 not valid UTF-8, 1 longer than max_source_positions";

/// `--format jsonl`: one object per record with its id; a good one equals the good-lines-only run's.
fn check_jsonl(mixed: &Run, alone: &Run, recs: &[Rec]) {
    assert_failed(mixed, TRANSLATE_SUMMARY);
    let parse = |r: &Run| -> Vec<serde_json::Value> { r.lines().iter().map(|l| serde_json::from_str(l).unwrap()).collect() };
    let (got, mut want) = (parse(mixed), parse(alone).into_iter());
    assert_eq!(got.len(), recs.len(), "one object per input line");
    for (i, (v, rec)) in got.iter().zip(recs).enumerate() {
        assert_eq!(v["id"], i, "{v}");
        match rec {
            Rec::Good(_) => {
                let mut w = want.next().unwrap();
                w["id"] = i.into();
                assert_eq!(*v, w, "line {i}");
            }
            Rec::Bad(what) => {
                assert!(v["error"].as_str().unwrap().contains(what), "line {i}: {v}");
                assert!(v.get("hypotheses").is_none());
                if *what == NOT_UTF8 {
                    assert!(v["source"].is_null(), "{v}");
                }
            }
        }
    }
    assert!(want.next().is_none());
}

/// fairseq-interactive lines by id, W- (timing) lines left out, each with its `X-<id>` tag cut
/// to `X`; ids in output order.
fn fairseq_records(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out: Vec<(usize, Vec<String>)> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with("W-")) {
        let (tag, rest) = line.split_once('\t').unwrap_or((line, ""));
        let (kind, id) = tag.split_once('-').unwrap();
        let id: usize = id.parse().unwrap();
        let line = format!("{kind}\t{rest}");
        match out.last_mut() {
            Some((last, lines)) if *last == id => lines.push(line),
            _ => out.push((id, vec![line])),
        }
    }
    out
}

fn check_fairseq(mixed: &Run, alone: &Run, recs: &[Rec]) {
    assert_failed(mixed, TRANSLATE_SUMMARY);
    let got = fairseq_records(&mixed.text());
    let mut want = fairseq_records(&alone.text()).into_iter();
    assert_eq!(got.iter().map(|(id, _)| *id).collect::<Vec<_>>(), (0..recs.len()).collect::<Vec<_>>(), "every id, in order");
    for ((i, lines), rec) in got.iter().zip(recs) {
        match rec {
            Rec::Good(_) => {
                assert!(lines[0].starts_with("S\t"), "{lines:?}");
                assert_eq!(*lines, want.next().unwrap().1, "line {i}");
            }
            Rec::Bad(what) => {
                assert_eq!(lines.len(), 1, "{lines:?}");
                assert!(lines[0].starts_with("E\t") && lines[0].contains(what), "line {i}: {lines:?}");
            }
        }
    }
    assert!(want.next().is_none());
}

fn check_text(mixed: &Run, alone: &Run, recs: &[Rec]) {
    assert_failed(mixed, TRANSLATE_SUMMARY);
    let (got, mut want) = (mixed.lines(), alone.lines().into_iter());
    assert_eq!(got.len(), recs.len(), "one line per input line");
    for (i, (line, rec)) in got.iter().zip(recs).enumerate() {
        match rec {
            Rec::Good(_) => assert_eq!(*line, want.next().unwrap(), "line {i}"),
            Rec::Bad(what) => {
                assert_eq!(line, "", "line {i}");
                let msg = mixed.stderr.lines().find(|l| l.starts_with(&format!("error: line {}: ", i + 1))).unwrap_or("");
                assert!(msg.contains(what), "line {}: {}", i + 1, mixed.stderr);
            }
        }
    }
    assert!(want.next().is_none());
}

#[test]
fn translate_from_a_file_keeps_every_line_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, recs) = fixture_mix(false);
    let (mixed, alone) = (dir.path().join("mixed.txt"), dir.path().join("good.txt"));
    fs::write(&mixed, &bytes).unwrap();
    fs::write(&alone, joined(&good(&recs))).unwrap();
    assert_eq!(recs.len(), 11, "the lone CR ends a line in a file, as in fairseq-interactive --input");
    for format in ["jsonl", "fairseq", "text"] {
        let want = translate_fixture(format, Some(&alone), b"");
        assert_eq!(want.code, Some(0), "{format}: {}", want.stderr);
        let got = translate_fixture(format, Some(&mixed), b"");
        match format {
            "jsonl" => check_jsonl(&got, &want, &recs),
            "fairseq" => check_fairseq(&got, &want, &recs),
            _ => check_text(&got, &want, &recs),
        }
    }
}

#[test]
fn translate_from_stdin_keeps_every_line() {
    let (bytes, recs) = fixture_mix(true);
    assert_eq!(recs.len(), 10, "on stdin a lone CR stays inside its line, as in fairseq-interactive");
    let alone = joined(&good(&recs));
    let want = translate_fixture("jsonl", None, &alone);
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    let got = translate_fixture("jsonl", None, &bytes);
    check_jsonl(&got, &want, &recs);
    let cr: serde_json::Value = serde_json::from_str(&got.lines()[4]).unwrap();
    assert_eq!(cr["source_tokens"], serde_json::json!(["a", "p", "e", "s", "h", "y"]), "the CR is whitespace");
    let nul: serde_json::Value = serde_json::from_str(&got.lines()[3]).unwrap();
    assert_eq!(nul["source_tokens"], serde_json::json!(["<unk>", "h", "y"]), "a NUL is a character like any other");

    let text = translate_fixture("text", None, &bytes);
    check_text(&text, &translate_fixture("text", None, &alone), &recs);
}

/// Raw English through Moses and BPE: the same guarantees with the bundled model.
#[test]
fn translate_raw_text_with_the_bundled_model_keeps_every_line() {
    let en = fs::read_to_string(fixture("bundled/input.en")).unwrap();
    let g: Vec<&str> = en.lines().take(3).collect();
    let long = "A dog runs . ".repeat(80_000);
    let mut bytes = Vec::new();
    for part in [
        g[0].as_bytes(),
        b"\nA dog \xe2\x82 runs.\n",
        b"A dog\x00 runs.\n",
        b"A man\rrides a bike.\n",
        long.as_bytes(),
        b"\n\n",
        g[1].as_bytes(),
        b"\n\xc0\n",
        g[2].as_bytes(),
        b"\n",
    ] {
        bytes.extend_from_slice(part);
    }
    let recs = vec![
        Rec::Good(g[0].into()),
        Rec::Bad(NOT_UTF8),
        Rec::Good("A dog\0 runs.".into()),
        Rec::Good("A man".into()),
        Rec::Good("rides a bike.".into()),
        Rec::Bad(TOO_LONG),
        Rec::Good(String::new()),
        Rec::Good(g[1].into()),
        Rec::Bad(NOT_UTF8),
        Rec::Good(g[2].into()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (mixed, alone) = (dir.path().join("mixed.en"), dir.path().join("good.en"));
    fs::write(&mixed, &bytes).unwrap();
    fs::write(&alone, joined(&good(&recs))).unwrap();
    let translate = |input: &Path| {
        let mut cmd = tchseq();
        cmd.args(["--device", "cpu", "translate", "-m"]).arg(bundled_model());
        run(cmd.args(["--format", "jsonl", "--input"]).arg(input))
    };
    let want = translate(&alone);
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    check_jsonl(&translate(&mixed), &want, &recs);
}

/// `encode`/`decode` read stdin: a bad line gets an empty output line and `error: line N`.
fn check_stream(mixed: &Run, alone: &Run, recs: &[Rec], summary: &str) {
    assert_failed(mixed, summary);
    let (got, mut want) = (mixed.lines(), alone.lines().into_iter());
    assert_eq!(got.len(), recs.len(), "one output line per input line");
    for (i, (line, rec)) in got.iter().zip(recs).enumerate() {
        match rec {
            Rec::Good(_) => assert_eq!(*line, want.next().unwrap(), "line {}", i + 1),
            Rec::Bad(what) => {
                assert_eq!(line, "", "line {}", i + 1);
                let msg = mixed.stderr.lines().find(|l| l.starts_with(&format!("error: line {}: ", i + 1))).unwrap_or("");
                assert!(msg.contains(what), "line {}: {}", i + 1, mixed.stderr);
            }
        }
    }
    assert!(want.next().is_none());
    let per_line = mixed.stderr.lines().filter(|l| l.starts_with("error: line ")).count();
    assert_eq!(per_line, recs.iter().filter(|r| matches!(r, Rec::Bad(_))).count(), "{}", mixed.stderr);
}

/// Raw or subword lines with bad ones among them, as bytes and as the records stdin gives.
fn stream_mix(g: &[&str], long_word: &str) -> (Vec<u8>, Vec<Rec>) {
    let long = format!("{long_word} ").repeat(1_000_000 / (long_word.len() + 1));
    let mut bytes = Vec::new();
    for part in [
        g[0].as_bytes(),
        b"\n\xff\xfe\n",
        format!("{}\x00 {}\n", g[1], g[1]).as_bytes(),
        format!("{}\r{}\n", g[0], g[1]).as_bytes(),
        long.as_bytes(),
        b"\n\n",
        g[2].as_bytes(),
        b"\r\nx \xed\xa0\x80 y\n",
        g[1].as_bytes(),
    ] {
        bytes.extend_from_slice(part);
    }
    let recs = vec![
        Rec::Good(g[0].into()),
        Rec::Bad(NOT_UTF8),
        Rec::Good(format!("{}\0 {}", g[1], g[1])),
        Rec::Good(format!("{}\r{}", g[0], g[1])),
        Rec::Good(long),
        Rec::Good(String::new()),
        Rec::Good(g[2].into()),
        Rec::Bad(NOT_UTF8),
        Rec::Good(g[1].into()),
    ];
    (bytes, recs)
}

#[test]
fn encode_keeps_every_line() {
    let en = fs::read_to_string(fixture("bundled/input.en")).unwrap();
    let g: Vec<&str> = en.lines().take(3).collect();
    let (bytes, recs) = stream_mix(&g, "dog");
    let encode = |input: Vec<u8>| run(tchseq().arg("encode").arg("-m").arg(bundled_model()).write_stdin(input));
    let want = encode(joined(&good(&recs)));
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    let got = encode(bytes);
    check_stream(&got, &want, &recs, "2 input line(s) were not encoded: not valid UTF-8");
    assert!(got.lines()[4].len() > 500_000, "the 1 MB line is encoded");
}

#[test]
fn decode_keeps_every_line() {
    let g = ["Ein Hund läuft .", "Zwei Männer spielen Fu@@ ßball .", "Eine Frau &apos;s Buch ."];
    let (bytes, recs) = stream_mix(&g, "Hund");
    let decode = |input: Vec<u8>| run(tchseq().arg("decode").arg("-m").arg(bundled_model()).write_stdin(input));
    let want = decode(joined(&good(&recs)));
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    check_stream(&decode(bytes), &want, &recs, "2 input line(s) were not decoded: not valid UTF-8");

    // with --ids, a line that holds something else than ids fails alone too
    let decode_ids = |input: &[u8]| {
        let mut cmd = tchseq();
        run(cmd.args(["decode", "--ids", "-s", "src", "-t", "tgt", "-m"]).arg(fixture_model()).write_stdin(input))
    };
    let want = decode_ids(b"4 5 2\n\n6 2\n");
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    let ok = || Rec::Good(String::new());
    let recs = [ok(), Rec::Bad("\"x\" is not a dictionary id"), Rec::Bad(NOT_UTF8), ok(), ok()];
    let got = decode_ids(b"4 5 2\n4 x 2\n\xff 2\n\n6 2\n");
    check_stream(&got, &want, &recs, "2 input line(s) were not decoded: 1 not dictionary ids, 1 not valid UTF-8");
}

/// `decode --ids`: an id outside the dictionary (past its end, or negative) is not an id of it,
/// so its line is an error line as other bad lines are, not `<unk>` with exit 0.
#[test]
fn decode_ids_outside_the_dictionary_are_bad_lines() {
    let decode_ids = |input: &[u8]| {
        let mut cmd = tchseq();
        run(cmd.args(["decode", "--ids", "-s", "src", "-t", "tgt", "-m"]).arg(fixture_model()).write_stdin(input))
    };
    // the fixture's target dictionary has 48 symbols: ids 0 to 47
    let want = decode_ids(b"4 5 2\n47 2\n6 2\n");
    assert_eq!(want.code, Some(0), "{}", want.stderr);
    let ok = || Rec::Good(String::new());
    let past = "48 is not a dictionary id (the dictionary has 48 symbols, ids 0 to 47)";
    let recs = [ok(), Rec::Bad(past), ok(), Rec::Bad("-1 is not a dictionary id"), Rec::Bad("99999999999999999999"), ok()];
    let got = decode_ids(b"4 5 2\n4 48 2\n47 2\n-1 2\n99999999999999999999\n6 2\n");
    check_stream(&got, &want, &recs, "3 input line(s) were not decoded: not dictionary ids");
    assert!(!got.text().contains("<unk>"), "{}", got.text());
}

/// `score`: every record keeps its place with the reason in `error`, a scored row equals the
/// good-rows-only run's, and the exit status (2) tells that some rows failed.
#[test]
fn score_keeps_every_row() {
    let src = fs::read_to_string(fixture("models/inputs.src")).unwrap();
    let tgt = fs::read_to_string(fixture("models/inputs.tgt")).unwrap();
    let (s, t): (Vec<&str>, Vec<&str>) = (src.lines().take(4).collect(), tgt.lines().take(4).collect());
    let long = "i ".repeat(500_000);
    let rows: Vec<(Vec<u8>, Option<&str>)> = vec![
        (format!("0,{},{}\n", s[0], t[0]).into_bytes(), None),
        ([&b"1,\xff\xfe h,"[..], t[0].as_bytes(), b"\n"].concat(), Some("invalid UTF-8 in 'source'")),
        (format!("2,{},\x00 {}\n", s[1], t[1]).into_bytes(), None),
        (format!("3,\"{}\r{}\",{}\n", s[2], s[0], t[2]).into_bytes(), None),
        (format!("4,{long},{}\n", t[0]).into_bytes(), Some("more than the model's max_source_positions")),
        (b"\n".to_vec(), None),
        (format!("5,{},\n", s[2]).into_bytes(), Some("empty 'target'")),
        ([format!("6,{},{} ", s[3], t[3]).as_bytes(), b"\xc3\n"].concat(), Some("invalid UTF-8 in 'target'")),
        (format!("7,{},{}\n", s[3], t[3]).into_bytes(), None),
        (format!("8,{}\r9,{}\n", s[0], t[0]).into_bytes(), Some("ragged row")),
    ];
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, rows: &[&(Vec<u8>, Option<&str>)]| -> PathBuf {
        let path = dir.path().join(name);
        let mut data = b"id,source,target\n".to_vec();
        for (bytes, _) in rows {
            data.extend_from_slice(bytes);
        }
        fs::write(&path, data).unwrap();
        path
    };
    let mixed = write("mixed.csv", &rows.iter().collect::<Vec<_>>());
    let alone = write("good.csv", &rows.iter().filter(|(b, e)| e.is_none() && b != b"\n").collect::<Vec<_>>());
    // ids of the output rows, and the expected error (None: scored); the blank line is no row
    // and the unquoted CR ends a record, as in Python's csv module
    let want_rows: Vec<(&str, Option<&str>)> = vec![
        ("0", None),
        ("1", Some("invalid UTF-8 in 'source'")),
        ("2", None),
        ("3", None),
        ("4", Some("more than the model's max_source_positions")),
        ("5", Some("empty 'target'")),
        ("6", Some("invalid UTF-8 in 'target'")),
        ("7", None),
        ("8", Some("ragged row: 2 fields")),
        ("9", Some("ragged row: 2 fields")),
    ];
    for format in ["csv", "jsonl"] {
        let score = |input: &Path| {
            run(tchseq()
                .args(["--device", "cpu", "score", "-s", "src", "-t", "tgt", "--tokenized", "--format", format])
                .args(["--batch-size", "1", "--buffer-size", "3", "-m"])
                .arg(fixture_model())
                .arg("--input")
                .arg(input))
        };
        let parse = |r: &Run| -> Vec<BTreeMap<String, String>> {
            match format {
                "csv" => {
                    let mut rd = csv::ReaderBuilder::new().flexible(true).from_reader(&r.stdout[..]);
                    let header: Vec<String> = rd.headers().unwrap().iter().map(str::to_string).collect();
                    rd.byte_records()
                        .map(|rec| {
                            let rec = csv::StringRecord::from_byte_record_lossy(rec.unwrap());
                            assert_eq!(rec.len(), header.len());
                            header.iter().cloned().zip(rec.iter().map(str::to_string)).collect()
                        })
                        .collect()
                }
                _ => String::from_utf8(r.stdout.clone())
                    .unwrap()
                    .lines()
                    .map(|l| {
                        let v: BTreeMap<String, serde_json::Value> = serde_json::from_str(l).unwrap();
                        v.into_iter().map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string))).collect()
                    })
                    .collect(),
            }
        };
        let want = score(&alone);
        assert_eq!(want.code, Some(0), "{}", want.stderr);
        let got = score(&mixed);
        assert_eq!(got.code, Some(2), "{format}: {}", got.stderr);
        assert!(got.stderr.contains("scored 10 rows (6 errors)"), "{}", got.stderr);
        assert!(got.stderr.trim_end().ends_with("error: 6 of 10 rows could not be scored (see the `error` column)"), "{}", got.stderr);
        let (got, mut want) = (parse(&got), parse(&want).into_iter());
        assert_eq!(got.len(), want_rows.len(), "{format}: one output row per record");
        for (row, (id, err)) in got.iter().zip(&want_rows) {
            assert_eq!(row["id"], *id, "{format}");
            match err {
                None => {
                    let w = want.next().unwrap();
                    assert_eq!(row["error"], w["error"], "{format} row {id}");
                    for col in ["source", "target", "logprob", "tokens", "avg_logprob", "ppl"] {
                        assert_eq!(row[col], w[col], "{format} row {id} {col}");
                    }
                }
                Some(e) => {
                    assert!(row["error"].contains(e), "{format} row {id}: {row:?}");
                    assert!(row["logprob"].is_empty() || row["logprob"] == "null", "{format} row {id}");
                }
            }
        }
        assert!(want.next().is_none());
    }
}
