//! `tchseq score`: parity with `fairseq-generate --score-reference`, and the row guarantees
//! (one output row per input row, in input order, bad rows kept with a reason).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::util::tolerance::{POSITIONAL_SCORE, SAME_RUN_F32, SCORED_SENTENCE};
use crate::util::{fixture, repo, tchseq};

const LN2: f64 = std::f64::consts::LN_2;

fn manifest() -> serde_json::Value {
    crate::util::json("tests/fixtures/models/manifest.json")
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

/// The fixtures' test sentences (already tokenized + BPE'd) as (source, target) pairs.
fn fixture_pairs(m: &serde_json::Value) -> Vec<(String, String)> {
    let src = lines(&repo(m["inputs"]["src"].as_str().unwrap()));
    let tgt = lines(&repo(m["inputs"]["tgt"].as_str().unwrap()));
    assert_eq!(src.len(), tgt.len());
    src.into_iter().zip(tgt).collect()
}

fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) {
    crate::util::write_csv(path, header, rows);
}

/// The fixture pairs as `DIR/pairs.csv` with an `id` column (the row number).
fn write_pairs_csv(dir: &Path, pairs: &[(String, String)]) -> std::path::PathBuf {
    let path = dir.join("pairs.csv");
    let rows: Vec<Vec<String>> = pairs.iter().enumerate().map(|(i, (s, t))| vec![i.to_string(), s.clone(), t.clone()]).collect();
    write_csv(&path, &["id", "source", "target"], &rows);
    path
}

/// `H-{id}\t{score}\t...` and `P-{id}\t...` lines of a fairseq-generate run: id -> (base-2
/// score, base-2 positional scores as printed).
fn golden_scores(path: &Path) -> BTreeMap<usize, (f64, Vec<String>)> {
    let mut h: BTreeMap<usize, f64> = BTreeMap::new();
    let mut p: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for line in lines(path) {
        let mut parts = line.split('\t');
        let tag = parts.next().unwrap();
        if let Some(id) = tag.strip_prefix("H-") {
            h.insert(id.parse().unwrap(), parts.next().unwrap().parse().unwrap());
        } else if let Some(id) = tag.strip_prefix("P-") {
            let vals = parts.next().unwrap_or("").split(' ').map(str::to_string).collect();
            p.insert(id.parse().unwrap(), vals);
        }
    }
    assert_eq!(h.len(), p.len());
    h.into_iter().map(|(id, s)| (id, (s, p.remove(&id).unwrap()))).collect()
}

fn read_output(path: &Path) -> Vec<BTreeMap<String, String>> {
    let mut r = csv::ReaderBuilder::new().flexible(true).from_path(path).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    r.byte_records()
        .map(|rec| {
            let rec = csv::StringRecord::from_byte_record_lossy(rec.unwrap());
            assert_eq!(rec.len(), header.len(), "every output row has the header's width");
            header.iter().cloned().zip(rec.iter().map(str::to_string)).collect()
        })
        .collect()
}

struct Scored {
    output: Vec<BTreeMap<String, String>>,
    stderr: String,
}

/// `-m DIR -s SRC -t TGT` for a manifest fixture.
fn model_args(fx: &serde_json::Value) -> Vec<String> {
    vec![
        "-m".into(),
        repo(fx["dir"].as_str().unwrap()).to_string_lossy().into_owned(),
        "-s".into(),
        fx["source_lang"].as_str().unwrap().into(),
        "-t".into(),
        fx["target_lang"].as_str().unwrap().into(),
    ]
}

fn score(model: &[String], csv_path: &Path, extra: &[&str]) -> Scored {
    let out_path = csv_path.with_extension("out.csv");
    let assert = tchseq()
        .args(["--device", "cpu", "score"])
        .args(model)
        .arg("--input")
        .arg(csv_path)
        .arg("--output")
        .arg(&out_path)
        .args(extra)
        .assert();
    let out = assert.get_output();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out_path.exists(), "tchseq score wrote no output: {stderr}");
    let output = read_output(&out_path);
    // exit 0 when every row was scored, else 2 with a count, the output complete all the same
    let failed = output.iter().filter(|r| !r["error"].is_empty()).count();
    if failed == 0 {
        assert!(out.status.success(), "tchseq score failed: {stderr}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let last = stderr.lines().last().unwrap_or("");
        assert!(last.starts_with(&format!("error: {failed} of {} rows could not be scored", output.len())), "{stderr}");
    }
    Scored { output, stderr }
}

#[test]
fn parity_with_fairseq_score_reference() {
    let m = manifest();
    let pairs = fixture_pairs(&m);
    let dir = tempfile::tempdir().unwrap();
    let csv_path = write_pairs_csv(dir.path(), &pairs);

    let mut compared = 0;
    for fx in m["fixtures"].as_array().unwrap() {
        let name = fx["name"].as_str().unwrap();
        let fx_dir = repo(fx["dir"].as_str().unwrap());
        for (run, golden) in fx["goldens"]["score_reference"].as_object().unwrap() {
            let argv: Vec<&str> = golden["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
            let batch_size = argv[argv.iter().position(|a| *a == "--batch-size").unwrap() + 1];
            let expected = golden_scores(&fx_dir.join(golden["file"].as_str().unwrap()));
            assert_eq!(expected.len(), pairs.len(), "{name}/{run}: fairseq scored every pair");
            // the batched runs score their batches side by side: fairseq's output all the same
            let inter = if batch_size == "1" { "1" } else { "3" };
            let scored = score(
                &model_args(fx),
                &csv_path,
                &["--tokenized", "--batch-size", batch_size, "--per-token", "-q", "--inter-threads", inter],
            );
            assert_eq!(scored.output.len(), pairs.len());
            let (mut max_score, mut max_pos, mut bit_exact, mut same_printed, mut printed) = (0f64, 0f64, 0, 0, 0);
            for (i, row) in scored.output.iter().enumerate() {
                assert_eq!(row["id"], i.to_string(), "{name}/{run}: input order");
                assert_eq!(row["error"], "", "{name}/{run} row {i}");
                let (h2, p2) = &expected[&i];
                let avg: f64 = row["avg_logprob"].parse().unwrap();
                let logprob: f64 = row["logprob"].parse().unwrap();
                let tokens: usize = row["tokens"].parse().unwrap();
                assert_eq!(tokens, p2.len(), "{name}/{run} row {i}: token count incl. EOS");
                // fairseq prints score / ln 2 in f32
                max_score = max_score.max((avg - h2 * LN2).abs());
                SCORED_SENTENCE.assert(avg, h2 * LN2, &format!("{name}/{run} row {i} (base e)"));
                SAME_RUN_F32.assert(logprob / tokens as f64, avg, &format!("{name}/{run} row {i}: logprob / tokens"));
                // fairseq's printed score is the f32 `score / math.log(2)`: compare bits too
                let avg32: f32 = row["avg_logprob"].parse().unwrap();
                if f64::from(avg32 / LN2 as f32) == *h2 {
                    bit_exact += 1;
                }
                let ppl: f64 = row["ppl"].parse().unwrap();
                assert!((ppl - (-f64::from(avg32)).exp()).abs() <= 1e-12 * ppl.max(1.0));
                let per_token: Vec<(String, f64)> = serde_json::from_str(&row["token_logprobs"]).unwrap();
                assert_eq!(per_token.len(), tokens);
                assert_eq!(per_token.last().unwrap().0, "</s>");
                for (k, ((_, lp), p)) in per_token.iter().zip(p2).enumerate() {
                    // P- values: '{:.4f}' of the f32 `score / math.log(2)`
                    let ours = f64::from(*lp as f32 / LN2 as f32);
                    let pdiff = (ours - p.parse::<f64>().unwrap()).abs();
                    let printed_diff = (format!("{ours:.4}").parse::<f64>().unwrap() - p.parse::<f64>().unwrap()).abs();
                    assert!(POSITIONAL_SCORE.holds(printed_diff), "{name}/{run} row {i} token {k}: {ours} vs {p}");
                    if format!("{ours:.4}") == *p {
                        same_printed += 1;
                    }
                    printed += 1;
                    max_pos = max_pos.max(pdiff);
                }
                compared += 1;
            }
            eprintln!("score parity {name}/{run}: {} rows, {bit_exact} H scores bit-identical, max |avg_logprob diff| {max_score:.3e} (base e), {same_printed}/{printed} P values identical as printed (max |diff| to the 4-decimal golden {max_pos:.1e})", pairs.len());
        }
    }
    // 6 fixtures x {bs1, b16} x 72 rows
    assert_eq!(compared, 6 * 2 * 72, "rows compared");
}

/// `--compute-type float32` (the host's packed kernels, another summation order): every row's
/// average log-probability within 1e-4 of fairseq-generate --score-reference's golden, on every
/// fixture. `--lm` keeps fairseq's arithmetic only: another compute type is one error.
#[test]
fn float32_scores_within_1e_4_of_fairseq_s_goldens() {
    let m = manifest();
    let pairs = fixture_pairs(&m);
    let dir = tempfile::tempdir().unwrap();
    let csv_path = write_pairs_csv(dir.path(), &pairs);
    let (mut compared, mut max_diff) = (0, 0f64);
    for fx in m["fixtures"].as_array().unwrap() {
        let name = fx["name"].as_str().unwrap();
        let golden = fx["goldens"]["score_reference"].as_object().unwrap().values().next().unwrap();
        let expected = golden_scores(&repo(fx["dir"].as_str().unwrap()).join(golden["file"].as_str().unwrap()));
        let scored = score(&model_args(fx), &csv_path, &["--tokenized", "--batch-size", "16", "-q", "--compute-type", "float32"]);
        assert_eq!(scored.output.len(), pairs.len());
        for (i, row) in scored.output.iter().enumerate() {
            assert_eq!(row["error"], "", "{name} row {i}");
            let avg: f64 = row["avg_logprob"].parse().unwrap();
            let diff = (avg - expected[&i].0 * LN2).abs();
            crate::util::tolerance::FLOAT32_SCORED_SENTENCE.assert(avg, expected[&i].0 * LN2, &format!("{name} row {i}: float32"));
            max_diff = max_diff.max(diff);
            compared += 1;
        }
    }
    eprintln!("score --compute-type float32: {compared} rows, max |avg_logprob diff| {max_diff:.2e} (base e)");
    assert_eq!(compared, 6 * 72, "rows compared");

    let out = tchseq()
        .args(["score", "--lm", "--compute-type", "int8", "-m"])
        .arg(fixture("lm/lm-gpt"))
        .arg("--input")
        .arg(fixture("lm/input.en"))
        .output()
        .unwrap();
    crate::util::one_line_error(&out, "--compute-type int8 is not supported with a language model (it computes exact only)");
}

fn first_fixture(m: &serde_json::Value) -> Vec<String> {
    model_args(&m["fixtures"][0])
}

#[test]
fn order_is_kept_with_shuffled_lengths_and_small_batches() {
    let m = manifest();
    let pairs = fixture_pairs(&m);
    let fx = first_fixture(&m);
    let dir = tempfile::tempdir().unwrap();
    // a fixed shuffle: rows far from fairseq's length order
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by_key(|&i| (i * 37) % pairs.len());
    let rows: Vec<Vec<String>> =
        order.iter().map(|&i| vec![pairs[i].1.clone(), i.to_string(), pairs[i].0.clone()]).collect();
    let csv_path = dir.path().join("shuffled.csv");
    write_csv(&csv_path, &["target", "id", "source"], &rows);
    let alone = score(&fx, &csv_path, &["--tokenized", "--batch-size", "1", "-q"]).output;
    for (bs, buffer) in [("3", "5"), ("2", "1000"), ("7", "3")] {
        let batched = score(&fx, &csv_path, &["--tokenized", "--batch-size", bs, "--buffer-size", buffer, "-q"]).output;
        assert_eq!(batched.len(), rows.len());
        for (k, (a, b)) in alone.iter().zip(&batched).enumerate() {
            assert_eq!(b["id"], order[k].to_string(), "row {k} stays in place");
            assert_eq!(b["target"], a["target"]);
            assert_eq!(a["tokens"], b["tokens"]);
            let (x, y): (f64, f64) = (a["avg_logprob"].parse().unwrap(), b["avg_logprob"].parse().unwrap());
            // batch composition only moves low bits
            crate::util::tolerance::BATCH_COMPOSITION.assert(y, x, &format!("row {k} (batch {bs})"));
        }
    }
    // --max-tokens batching too
    let by_tokens = score(&fx, &csv_path, &["--tokenized", "--max-tokens", "20", "--buffer-size", "11", "-q"]).output;
    for (a, b) in alone.iter().zip(&by_tokens) {
        assert_eq!(a["id"], b["id"]);
        let (x, y): (f64, f64) = (a["avg_logprob"].parse().unwrap(), b["avg_logprob"].parse().unwrap());
        crate::util::tolerance::BATCH_COMPOSITION.assert(y, x, &format!("row {} (--max-tokens 20)", a["id"]));
    }
}

#[test]
fn malformed_rows_keep_their_place_with_a_reason() {
    let m = manifest();
    let pairs = fixture_pairs(&m);
    let fx = first_fixture(&m);
    let dir = tempfile::tempdir().unwrap();
    let (s0, t0) = &pairs[0];
    let (s1, t1) = &pairs[1];
    let long_target = vec![t0.split(' ').next().unwrap(); 10_000].join(" ");
    let mut data: Vec<u8> = b"id,source,target\n".to_vec();
    data.extend(format!("0,{s0},{t0}\n").as_bytes());
    data.extend(format!("1,{s0}\n").as_bytes()); // ragged: a field short
    data.extend(format!("2,{s0},{t0},extra\n").as_bytes()); // ragged: a field too many
    data.extend(format!("3,{s0},\n").as_bytes()); // empty target
    data.extend(b"4,\xff\xfe,x\n"); // invalid UTF-8
    data.extend(format!("5,{s0},{long_target}\n").as_bytes()); // longer than max positions
    data.extend(format!("6,\"{s1}\n{s1}\",\"{t1}\"\n").as_bytes()); // a quoted newline
    data.extend(format!("7,{s1},{t1}\n").as_bytes());
    let csv_path = dir.path().join("bad.csv");
    fs::write(&csv_path, &data).unwrap();

    let scored = score(&fx, &csv_path, &["--tokenized", "--batch-size", "4"]);
    let out = scored.output;
    assert_eq!(out.len(), 8, "one output row per input row");
    for (i, row) in out.iter().enumerate() {
        assert_eq!(row["id"], i.to_string());
    }
    let err = |i: usize| out[i]["error"].as_str();
    assert_eq!(err(0), "");
    assert!(err(1).starts_with("ragged row: 2 fields"), "{}", err(1));
    // a field too many is kept, in the reason: nothing of the input is lost
    assert_eq!(err(2), "ragged row: 4 fields, the header has 3; the fields past the header: [\"extra\"]");
    assert_eq!(err(3), "empty 'target'");
    assert!(err(4).starts_with("invalid UTF-8 in 'source'"), "{}", err(4));
    assert!(err(5).contains("10001 tokens") && err(5).contains("max"), "{}", err(5));
    assert_eq!(err(6), "");
    assert_eq!(out[6]["source"], format!("{s1}\n{s1}"));
    assert_eq!(err(7), "");
    for i in [1, 2, 3, 4, 5] {
        assert_eq!(out[i]["logprob"], "", "row {i} has no score");
    }
    // the quoted newline is just whitespace to the tokenizer
    let (a, b): (f64, f64) = (out[7]["tokens"].parse().unwrap(), out[6]["tokens"].parse().unwrap());
    assert_eq!(a, b);
    assert!(scored.stderr.contains("8 rows (5 errors)"), "summary: {}", scored.stderr);
}

#[test]
fn missing_column_is_a_usage_error_naming_the_columns() {
    let m = manifest();
    let fx = first_fixture(&m);
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("in.csv");
    fs::write(&csv_path, "src,tgt\na,b\n").unwrap();
    let out_path = dir.path().join("out.csv");
    let out = tchseq()
        .arg("score")
        .args(&fx)
        .arg("--input")
        .arg(&csv_path)
        .arg("--output")
        .arg(&out_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains("'src', 'tgt'"), "{stderr}");
    assert!(!out_path.exists());
    assert!(fs::read_dir(dir.path()).unwrap().count() == 1, "no temporary files left");
}

#[test]
fn output_is_renamed_into_place_and_nothing_scored_exits_2() {
    let m = manifest();
    let pairs = fixture_pairs(&m);
    let fx = first_fixture(&m);
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("in.csv");
    let rows: Vec<Vec<String>> = pairs[..5].iter().map(|(s, t)| vec![s.clone(), t.clone()]).collect();
    write_csv(&csv_path, &["source", "target"], &rows);
    let out_dir = dir.path().join("sub");
    fs::create_dir(&out_dir).unwrap();
    let out_path = out_dir.join("scored.jsonl");
    tchseq()
        .args(["score"])
        .args(&fx)
        .arg("--input")
        .arg(&csv_path)
        .arg("--output")
        .arg(&out_path)
        .args(["--tokenized", "--format", "jsonl", "-q"])
        .assert()
        .success();
    let names: Vec<String> =
        fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["scored.jsonl"], "only the final file remains");
    let text = fs::read_to_string(&out_path).unwrap();
    assert_eq!(text.lines().count(), 5);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["avg_logprob"].as_f64().unwrap() < 0.0);
        assert!(v["error"].is_null());
    }

    // every row bad: output still written (with reasons), exit code 2
    fs::write(&csv_path, "source,target\na,\nb,\n").unwrap();
    let out = tchseq()
        .arg("score")
        .args(&fx)
        .arg("--input")
        .arg(&csv_path)
        .args(["--tokenized", "-q"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 of 2 rows could not be scored"));

    // --resume needs --output
    let out = tchseq().arg("score").args(&fx).arg("--input").arg(&csv_path).arg("--resume").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A tab-separated file read with the default comma: the error names its one tab-joined
/// column and suggests `--delimiter '\t'`, which then reads it.
#[test]
fn a_tsv_without_delimiter_suggests_it() {
    let dir = tempfile::tempdir().unwrap();
    let tsv = dir.path().join("pairs.tsv");
    fs::write(&tsv, "source\ttarget\nA dog runs.\tEin Hund rennt.\n").unwrap();
    let run = |extra: &[&str]| tchseq().args(["score", "-q", "-m"]).arg(repo("weights/multi30k.en-de")).arg("--input").arg(&tsv).args(extra).output().unwrap();
    let line = crate::util::one_line_error(&run(&[]), "its columns are: 'source\ttarget'");
    assert!(line.contains("pass --delimiter '\\t'"), "{line}");
    let out = run(&["--delimiter", "\\t"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("source\ttarget\t"), "{out:?}");
}

/// `score`'s summary line against fairseq's own figures for the same pairs: the mean of its
/// sentence scores (`H-`, base 2, per token) and the corpus perplexity of its token scores
/// (each sentence's `H-` times its length, summed, over all tokens), from
/// `fairseq-generate --score-reference` on the bundled model.
#[test]
fn the_summary_line_gives_fairseq_s_mean_and_corpus_perplexity() {
    let golden = golden_scores(&fixture("bundled/score_reference.txt"));
    assert_eq!(golden.len(), 100);
    let (mut sum_avg, mut sum_logprob, mut tokens) = (0.0, 0.0, 0usize);
    for (h, p) in golden.values() {
        sum_avg += h * LN2;
        sum_logprob += h * LN2 * p.len() as f64;
        tokens += p.len();
    }
    let mean = sum_avg / golden.len() as f64;
    let ppl = (-sum_logprob / tokens as f64).exp();

    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pairs.csv");
    let src = lines(&fixture("bundled/score_reference/test.bpe.en"));
    let tgt = lines(&fixture("bundled/score_reference/test.bpe.de"));
    crate::util::write_pairs_csv(&csv, src.iter().map(String::as_str).zip(tgt.iter().map(String::as_str)));
    let out = tchseq()
        .args(["score", "--tokenized", "--batch-size", "1", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .arg("--input")
        .arg(&csv)
        .args(["--output", "/dev/null"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err.lines().find(|l| l.starts_with("scored ")).unwrap_or_else(|| panic!("no summary line: {err}"));
    let figure = |after: &str| -> f64 {
        let rest = line.split_once(after).unwrap_or_else(|| panic!("{line}")).1;
        rest.split(|c: char| c == ',' || c == ' ').find(|w| !w.is_empty()).unwrap().parse().unwrap()
    };
    assert!(line.starts_with("scored 100 rows (0 errors): "), "{line}");
    crate::util::tolerance::SUMMARY_FIGURE.assert(figure("mean avg_logprob "), mean, "mean avg_logprob");
    // in log space: the print rounds by at most 5e-5 / ppl there, and the drift is that of a score
    crate::util::tolerance::SUMMARY_FIGURE.assert(figure("corpus perplexity ").ln(), ppl.ln(), "log of the corpus perplexity");
}

/// `--input -` reads the rows from stdin, as `translate` reads its lines without `--input`:
/// the same output as from the file (`--lm` too); `--resume` cannot read stdin again, and says so.
#[test]
fn input_dash_reads_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pairs.csv");
    crate::util::write_pairs_csv(&csv, [("A dog runs in the park.", "Ein Hund rennt im Park."), ("Two men play soccer.", "Zwei Männer spielen Fußball.")]);
    let bundled = repo("weights/multi30k.en-de");
    let from_file = crate::util::run_ok(tchseq().args(["score", "-q", "-m"]).arg(&bundled).arg("--input").arg(&csv));
    let from_stdin = crate::util::run_ok(tchseq().args(["score", "-q", "-m"]).arg(&bundled).args(["--input", "-"]).write_stdin(fs::read(&csv).unwrap()));
    assert_eq!(from_stdin, from_file);
    assert_eq!(from_stdin.lines().count(), 3, "{from_stdin}");

    let lm = |input: &str, stdin: Vec<u8>| {
        crate::util::run_ok(tchseq().args(["score", "--lm", "--format", "jsonl", "-q", "-m"]).arg(fixture("lm/lm-gpt")).args(["--input", input]).write_stdin(stdin))
    };
    let text = fs::read(fixture("lm/input.en")).unwrap();
    assert_eq!(lm("-", text), lm(fixture("lm/input.en").to_str().unwrap(), Vec::new()));

    let out = tchseq()
        .args(["score", "-m"])
        .arg(&bundled)
        .args(["--input", "-", "--resume", "--output"])
        .arg(dir.path().join("scored.csv"))
        .write_stdin(fs::read(&csv).unwrap())
        .output()
        .unwrap();
    crate::util::one_line_error(&out, "--resume needs --input FILE (rows read from stdin cannot be read again)");
}

/// 2,000 rows (the bundled model's 100 score-reference pairs, 20 times) as `DIR/pairs.csv`: a run
/// with the default batching (`--max-tokens 12000`, one `--buffer-size` chunk) scores them in
/// several batches, seconds of work on one thread.
fn interruptible_input(dir: &Path) -> std::path::PathBuf {
    let src = lines(&fixture("bundled/score_reference/test.bpe.en"));
    let tgt = lines(&fixture("bundled/score_reference/test.bpe.de"));
    let csv = dir.join("pairs.csv");
    crate::util::write_pairs_csv(&csv, (0..20).flat_map(|_| src.iter().map(String::as_str).zip(tgt.iter().map(String::as_str))));
    csv
}

/// `tchseq score` on [`interruptible_input`] with the default batching, into `output`.
fn interruptible_run(csv: &Path, output: &Path, resume: bool) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tchseq"));
    cmd.env_remove("LD_LIBRARY_PATH")
        .args(["--threads", &crate::util::test_threads().to_string(), "score", "-q", "--tokenized", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .arg("--input")
        .arg(csv)
        .arg("--output")
        .arg(output);
    if resume {
        cmd.arg("--resume");
    }
    cmd
}

/// The uninterrupted run's output on [`interruptible_input`] (computed once for the tests here).
fn uninterrupted_output() -> &'static [u8] {
    static CLEAN: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    CLEAN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("clean.csv");
        let out = interruptible_run(&interruptible_input(dir.path()), &output, false).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let clean = fs::read(&output).unwrap();
        assert_eq!(clean.iter().filter(|&&b| b == b'\n').count(), 2001, "a header and 2,000 rows");
        clean
    })
}

/// Starts a run into `DIR/scored.csv`, waits for the event "its progress file records a finished
/// batch" (rows written, no timer), sends `signal`, and checks what is left: the partial output
/// is a prefix of the uninterrupted run's, byte for byte, and `--resume` completes it to exactly
/// that output. Returns the interrupted run's exit status, its stderr, and the rows the partial
/// output held.
fn interrupt_and_resume(signal: libc::c_int) -> (Option<i32>, String, usize) {
    let clean = uninterrupted_output();
    let dir = tempfile::tempdir().unwrap();
    let csv = interruptible_input(dir.path());
    let output = dir.path().join("scored.csv");
    let (partial, progress, pending) =
        (dir.path().join("scored.csv.partial"), dir.path().join("scored.csv.partial.progress"), dir.path().join("scored.csv.partial.pending"));
    let rows_recorded = || -> u64 {
        let Ok(bytes) = fs::read(&progress) else { return 0 };
        serde_json::from_slice::<serde_json::Value>(&bytes).ok().and_then(|v| v["summary"]["rows"].as_u64()).unwrap_or(0)
    };
    let mut child = interruptible_run(&csv, &output, false).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let start = std::time::Instant::now();
    while rows_recorded() == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its first batch was recorded");
        assert!(start.elapsed() < std::time::Duration::from_secs(120), "no batch recorded in two minutes");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: signalling our own child process, which has not been waited for
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!output.exists(), "the run finished before the signal: give it more rows");

    let held = fs::read(&partial).unwrap();
    assert!(clean.starts_with(&held), "the partial output ({} bytes) is a prefix of the uninterrupted run's", held.len());
    let rows = held.iter().filter(|&&b| b == b'\n').count().saturating_sub(1);
    let recorded: serde_json::Value = serde_json::from_slice(&fs::read(&progress).unwrap()).unwrap();
    assert!(recorded["output_bytes"].as_u64().unwrap() <= held.len() as u64, "{recorded}");
    // the rows scored ahead of their turn in the finished batches are kept for --resume
    assert!(fs::metadata(&pending).map_or(0, |m| m.len()) > 0, "no rows kept in {}", pending.display());

    let resumed = interruptible_run(&csv, &output, true).output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(fs::read(&output).unwrap() == clean, "--resume completes to the uninterrupted run's output, byte for byte");
    for gone in [&partial, &progress, &pending] {
        assert!(!gone.exists(), "{} is left", gone.display());
    }
    (out.status.code(), stderr, rows)
}

/// Ctrl-C after the first finished batch keeps rows, with the default `--buffer-size` (one chunk
/// of many batches here): exit 130, a partial output of complete rows that begins the
/// uninterrupted run's output, and `--resume` ends with exactly that output.
#[test]
fn ctrl_c_after_the_first_batch_keeps_rows_and_resume_completes_them() {
    let (code, stderr, rows) = interrupt_and_resume(libc::SIGINT);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(rows >= 1, "at least one complete row is kept: {stderr}");
    assert!(stderr.contains(&format!("holds the first {rows} rows, complete; run the same command with --resume")), "{stderr}");
}

/// The same with SIGTERM: exit 143.
#[test]
fn sigterm_after_the_first_batch_keeps_rows_and_resume_completes_them() {
    let (code, stderr, rows) = interrupt_and_resume(libc::SIGTERM);
    assert_eq!(code, Some(143), "{stderr}");
    assert!(rows >= 1, "at least one complete row is kept: {stderr}");
    assert!(stderr.contains(&format!("holds the first {rows} rows, complete; run the same command with --resume")), "{stderr}");
}

/// kill -9 after the first finished batch: no handler runs, and the partial output (which may end
/// mid-row) still begins the uninterrupted run's output; `--resume` cuts it back to its last
/// checkpoint and ends with exactly the uninterrupted run's output.
#[test]
fn kill_9_after_the_first_batch_resumes_to_the_uninterrupted_output() {
    let (code, stderr, _) = interrupt_and_resume(libc::SIGKILL);
    assert_eq!(code, None, "killed by a signal: {stderr}");
}
