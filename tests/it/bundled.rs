//! The bundled model (weights/multi30k.en-de) end to end on raw text, against fairseq 0.12.2's
//! own output for it (tests/fixtures/bundled, made by reference/bundled_goldens.sh).

use std::collections::BTreeMap;
use std::fs;

use crate::util::fairseq_out::{bundled_model_args, compare_settled, parse_fairseq, Rule, Tally};
use crate::util::tolerance::SCORED_SENTENCE;
use crate::util::{fixture, repo, result_lines, run_ok, tchseq, write_pairs_csv};

fn model() -> std::path::PathBuf {
    repo("weights/multi30k.en-de")
}

/// Raw English in, Moses + subword-nmt from the model directory, beam 5: the same sources,
/// hypotheses and detokenized lines as fairseq-interactive, scores within the cross-CPU
/// tolerance (a hypothesis with other tokens must be a proven near-tie); `reproducible.rs`
/// checks the bits.
#[test]
fn raw_text_translation_equals_fairseq_interactive_line_for_line() {
    let mut tally = Tally::default();
    for (golden, batching) in [
        ("bundled/interactive_batch16.txt", ["--batch-size", "16", "--buffer-size", "1024"]),
        ("bundled/interactive_batch1.txt", ["--batch-size", "1", "--buffer-size", "1"]),
    ] {
        let got = run_ok(
            tchseq()
                .args(["--device", "cpu", "translate", "-m"])
                .arg(model())
                .args(["--format", "fairseq", "--beam", "5", "--input"])
                .arg(fixture("bundled/input.en"))
                .args(batching),
        );
        let want = parse_fairseq(&fs::read_to_string(fixture(golden)).unwrap());
        assert_eq!(want.values().map(|e| e.hyps.len()).sum::<usize>(), 40, "{golden}: 40 hypotheses");
        let c = compare_settled(&want, &parse_fairseq(&got), &bundled_model_args(), &Rule::beam(1.0));
        c.assert_ok(golden);
        tally.add(&c);
        assert_eq!(result_lines(&got).len(), result_lines(&fs::read_to_string(fixture(golden)).unwrap()).len());
        eprintln!("{golden}: {} hypotheses, {} near-ties, max |dH| {:.1e}, max |dP| {:.1e}", c.hyps, c.near_ties, c.max_h_diff, c.max_p_diff);
    }
    tally.assert_within_cap("bundled raw text");
}

/// `encode` gives exactly the subword line fairseq fed the model (its S- lines).
#[test]
fn encode_equals_the_source_fairseq_translated() {
    let golden = fs::read_to_string(fixture("bundled/interactive_batch16.txt")).unwrap();
    let want: BTreeMap<usize, String> = golden
        .lines()
        .filter_map(|l| l.strip_prefix("S-"))
        .map(|l| {
            let (id, s) = l.split_once('\t').unwrap();
            (id.parse().unwrap(), s.to_string())
        })
        .collect();
    let input = fs::read(fixture("bundled/input.en")).unwrap();
    let got = run_ok(tchseq().args(["encode", "-m"]).arg(model()).write_stdin(input));
    let got: Vec<&str> = got.lines().collect();
    assert_eq!(got.len(), want.len());
    for (i, line) in got.iter().enumerate() {
        assert_eq!(*line, want[&i], "line {i}");
    }
}

/// `score --tokenized` on fairseq-generate --score-reference's own test split: every sentence
/// score within the cross-CPU tolerance (base e). `reproducible.rs` checks the bits.
#[test]
fn tokenized_scores_equal_fairseq_score_reference() {
    let src = fs::read_to_string(fixture("bundled/score_reference/test.bpe.en")).unwrap();
    let tgt = fs::read_to_string(fixture("bundled/score_reference/test.bpe.de")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("pairs.csv");
    write_pairs_csv(&csv_path, src.lines().zip(tgt.lines()));
    let out = run_ok(
        tchseq()
            .args(["--device", "cpu", "score", "-m"])
            .arg(model())
            .args(["--tokenized", "--batch-size", "1", "-q", "--input"])
            .arg(&csv_path),
    );
    let golden = fs::read_to_string(fixture("bundled/score_reference.txt")).unwrap();
    let want: BTreeMap<usize, f64> = golden
        .lines()
        .filter_map(|l| l.strip_prefix("H-"))
        .map(|l| {
            let mut f = l.split('\t');
            (f.next().unwrap().parse().unwrap(), f.next().unwrap().parse().unwrap())
        })
        .collect();
    let mut r = csv::Reader::from_reader(out.as_bytes());
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 100);
    assert_eq!(want.len(), 100);
    let ln2 = std::f64::consts::LN_2;
    let mut worst = 0f64;
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(&row[6], "", "row {i} error");
        let avg32: f32 = row[4].parse().unwrap();
        SCORED_SENTENCE.assert(f64::from(avg32), want[&i] * ln2, &format!("row {i}"));
        worst = worst.max((f64::from(avg32) - want[&i] * ln2).abs());
    }
    eprintln!("score-reference: 100 rows, max |diff| {worst:.1e} (base e)");
}

/// Raw text through the model directory's pipeline: a real translation scores higher than the
/// same words shuffled, and raw scoring equals scoring the `encode`d text with --tokenized.
#[test]
fn raw_scoring_prefers_the_translation_and_matches_tokenized_scoring() {
    let golden = fs::read_to_string(fixture("bundled/interactive_batch16.txt")).unwrap();
    let sources: Vec<String> = fs::read_to_string(fixture("bundled/input.en")).unwrap().lines().map(str::to_string).collect();
    let mut translations: BTreeMap<usize, String> = BTreeMap::new();
    for l in golden.lines().filter_map(|l| l.strip_prefix("D-")) {
        let mut f = l.splitn(3, '\t');
        translations.insert(f.next().unwrap().parse().unwrap(), f.nth(1).unwrap().to_string());
    }
    let dir = tempfile::tempdir().unwrap();
    let csv_path = dir.path().join("pairs.csv");
    let mut w = csv::Writer::from_path(&csv_path).unwrap();
    w.write_record(["source", "target", "kind"]).unwrap();
    for (i, s) in sources.iter().enumerate() {
        let good = &translations[&i];
        let mut words: Vec<&str> = good.split(' ').collect();
        words.reverse();
        w.write_record([s.as_str(), good.as_str(), "good"]).unwrap();
        w.write_record([s.as_str(), words.join(" ").as_str(), "reversed"]).unwrap();
    }
    w.flush().unwrap();
    let raw = run_ok(tchseq().args(["score", "-q", "-m"]).arg(model()).arg("--input").arg(&csv_path));
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(raw.as_bytes()).records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2 * sources.len());
    let better = rows.chunks(2).filter(|p| p[0][3].parse::<f64>().unwrap() > p[1][3].parse::<f64>().unwrap()).count();
    assert!(better >= sources.len() - 2, "only {better} of {} translations beat their reversal", sources.len());

    // the same pairs, tokenized by `encode` (each side with its own language), scored --tokenized
    let enc = |side: &str, lang: &str, col: usize| -> Vec<String> {
        let text: String = rows.iter().map(|r| format!("{}\n", &r[col])).collect();
        run_ok(tchseq().args(["encode", "--side", side, "-m"]).arg(model()).args(["-s", "en", "-t", lang]).write_stdin(text))
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (src_tok, tgt_tok) = (enc("source", "de", 0), enc("target", "de", 1));
    let tok_path = dir.path().join("tok.csv");
    assert_eq!((src_tok.len(), tgt_tok.len()), (rows.len(), rows.len()));
    write_pairs_csv(&tok_path, src_tok.iter().map(String::as_str).zip(tgt_tok.iter().map(String::as_str)));
    let tok = run_ok(tchseq().args(["score", "-q", "--tokenized", "-m"]).arg(model()).arg("--input").arg(&tok_path));
    let tok_rows: Vec<csv::StringRecord> = csv::Reader::from_reader(tok.as_bytes()).records().map(Result::unwrap).collect();
    assert_eq!(tok_rows.len(), rows.len());
    for (a, b) in rows.iter().zip(&tok_rows) {
        assert_eq!(&a[3], &b[2], "logprob raw vs tokenized for {:?}", &a[1]);
        assert_eq!(&a[4], &b[3], "token count raw vs tokenized");
    }
}
