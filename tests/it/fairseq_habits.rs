//! fairseq-interactive's command lines given to `tchseq translate` as they are: fairseq's own
//! flags, its no-ops, negative numbers and `--remove-bpe`, against fairseq 0.12.2's output for
//! the same command line (tests/fixtures/bundled, made by reference/bundled_goldens.sh).

use std::fs;

use crate::util::fairseq_out::{bundled_model_args, compare_settled, parse_fairseq, Rule};
use crate::util::{fixture, repo, run_ok, tchseq};

/// reference/bundled_goldens.sh's FAIRSEQ_ARGV.
const FAIRSEQ_ARGV: &[&str] = &[
    "--lenpen", "0.6", "--unkpen", "-0.5", "--log-format", "simple", "--no-progress-bar",
    "--skip-invalid-size-inputs-valid-test", "--dataset-impl", "raw", "--num-workers", "0", "--bf16",
    "--max-sentences", "16", "--buffer-size", "1024", "--print-alignment", "hard", "--nbest", "2",
];

/// fairseq-interactive's own arguments after the data directory, as the golden's run had them.
fn fairseq_model_argv() -> Vec<String> {
    let m = repo("weights/multi30k.en-de").display().to_string();
    ["--path", &format!("{m}/model.pt"), "--cpu", "-s", "en", "-t", "de", "--tokenizer", "moses", "--bpe", "subword_nmt"]
        .iter()
        .map(|s| s.to_string())
        .chain(["--bpe-codes".to_string(), format!("{m}/bpecodes"), "--beam".to_string(), "5".to_string()])
        .collect()
}

#[test]
fn a_fairseq_interactive_command_line_runs_unchanged_and_prints_what_fairseq_printed() {
    let got = run_ok(
        tchseq()
            .args(["translate", "-m"])
            .arg(repo("weights/multi30k.en-de"))
            .args(fairseq_model_argv())
            .args(FAIRSEQ_ARGV)
            .args(["--format", "fairseq", "--input"])
            .arg(fixture("bundled/input.en")),
    );
    let golden = fs::read_to_string(fixture("bundled/interactive_fairseq_argv.txt")).unwrap();
    let want = parse_fairseq(&golden);
    assert_eq!(want.values().map(|e| e.hyps.len()).sum::<usize>(), 80, "40 sentences, 2 hypotheses each");
    let c = compare_settled(&want, &parse_fairseq(&got), &bundled_model_args(), &Rule::of(FAIRSEQ_ARGV));
    c.assert_ok("interactive_fairseq_argv");
    // the alignment lines too, and nothing else differs but the timings
    let without_timings = |s: &str| s.lines().filter(|l| !l.starts_with("W-")).map(str::to_string).collect::<Vec<_>>();
    let (want_lines, got_lines) = (without_timings(&golden), without_timings(&got));
    assert_eq!(want_lines.len(), got_lines.len());
    let a_lines = want_lines.iter().filter(|l| l.starts_with("A-")).count();
    assert_eq!(a_lines, 80);
    if c.differing.is_empty() && c.near_ties == 0 {
        let differing: Vec<_> = want_lines.iter().zip(&got_lines).filter(|(w, g)| w.starts_with("A-") && w != g).collect();
        assert!(differing.is_empty(), "alignments differ: {differing:?}");
    }
}

/// fairseq's `post_process(s, "subword_nmt")`.
fn remove_bpe(s: &str) -> String {
    format!("{s} ").replace("@@ ", "").trim_end().to_string()
}

/// What --remove-bpe does to fairseq-interactive's lines: S- and H- lose their subword marks,
/// the rest is unchanged (timings aside).
fn post_processed(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("W-"))
        .map(|l| match l.split_once('\t') {
            Some((tag, rest)) if tag.starts_with("S-") => format!("{tag}\t{}", remove_bpe(rest)),
            Some((tag, rest)) if tag.starts_with("H-") => {
                let (score, tokens) = rest.split_once('\t').unwrap();
                format!("{tag}\t{score}\t{}", remove_bpe(tokens))
            }
            _ => l.to_string(),
        })
        .collect()
}

/// `--remove-bpe` as fairseq-interactive prints it. fairseq's own two runs show what it does
/// (S- and H- post-processed, nothing else changed); tchseq's two runs do the same, and its
/// plain run equals fairseq's (near-ties settled), so the post-processed runs are equal too.
#[test]
fn remove_bpe_prints_the_source_and_hypotheses_without_subword_marks_as_fairseq_does() {
    let plain_golden = fs::read_to_string(fixture("bundled/interactive_batch16.txt")).unwrap();
    let golden = fs::read_to_string(fixture("bundled/interactive_batch16_remove_bpe.txt")).unwrap();
    assert!(plain_golden.contains("@@ ") && !golden.contains("@@ "), "the goldens show subword marks removed");
    assert_eq!(post_processed(&plain_golden), post_processed(&golden), "fairseq's --remove-bpe changes S- and H- only");

    let run = |extra: &[&str]| {
        run_ok(
            tchseq()
                .args(["translate", "-m"])
                .arg(repo("weights/multi30k.en-de"))
                .args(["--format", "fairseq", "--beam", "5", "--batch-size", "16", "--buffer-size", "1024", "--input"])
                .arg(fixture("bundled/input.en"))
                .args(extra),
        )
    };
    let plain = run(&[]);
    let c = compare_settled(&parse_fairseq(&plain_golden), &parse_fairseq(&plain), &bundled_model_args(), &Rule::beam(1.0));
    c.assert_ok("interactive_batch16");
    for flag in [&["--remove-bpe"][..], &["--post-process"], &["--remove-bpe", "subword_nmt"], &["--post-process=@@ "]] {
        let got = run(flag);
        assert!(!got.contains("@@ "), "{flag:?}");
        assert_eq!(post_processed(&plain), post_processed(&got), "{flag:?}");
        let h_lines = |s: &str| s.lines().filter(|l| l.starts_with("H-")).count();
        assert_eq!(h_lines(&got), 40, "{flag:?}: `subword_nmt` was taken as the flag's value, not as a sentence");
    }
    // text output is detokenized either way
    let text = |extra: &[&str]| {
        run_ok(tchseq().args(["translate", "-m"]).arg(repo("weights/multi30k.en-de")).args(["--input"]).arg(fixture("bundled/input.en")).args(extra))
    };
    assert_eq!(text(&[]), text(&["--remove-bpe"]));
}

/// fairseq-interactive's `--input -` (its default) is stdin.
#[test]
fn input_dash_is_stdin() {
    let model = repo("weights/multi30k.en-de");
    let piped = run_ok(tchseq().args(["translate", "-m"]).arg(&model).args(["--input", "-"]).write_stdin("Two dogs play .\n"));
    let plain = run_ok(tchseq().args(["translate", "-m"]).arg(&model).write_stdin("Two dogs play .\n"));
    assert_eq!(piped, plain);
    assert_eq!(piped.lines().count(), 1);
}

/// A caller that writes in input order (`on_batch`) gets the batch of the buffer's first
/// sentence first, so the first finished batch can always be written; the translations are
/// those of a call without it. Sampling keeps fairseq's batch order, which its draws follow.
#[test]
fn the_batch_of_the_first_sentence_is_told_first() {
    use std::sync::Mutex;
    use tchseq::hub::{Batching, LoadOptions, ModelBundle, ModelSpec, TextMode, TranslateOptions, TranslateRequest, Translation, Translator};
    let spec = ModelSpec { model: Some(repo("weights/multi30k.en-de")), ..Default::default() };
    let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    let translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw).unwrap();
    // the longest sentence first: sorted by length, its batch would run last
    let lines: Vec<String> = std::iter::once("A man in a blue shirt and a woman in a red dress are walking along the beach at sunset .".to_string())
        .chain(fs::read_to_string(fixture("bundled/input.en")).unwrap().lines().map(str::to_string))
        .collect();
    let tokens: Vec<Vec<i64>> = lines.iter().map(|l| translator.encode(l)).collect();
    let texts = |ts: &[Translation]| -> Vec<String> {
        ts.iter()
            .map(|t| match t {
                Translation::Done { hypos, .. } => translator.hypothesis_text(&hypos[0]).unwrap().text,
                t => panic!("{:?}", t.error()),
            })
            .collect()
    };
    for (sampling, first_told_holds_sentence_0) in [(false, true), (true, false)] {
        let options = TranslateOptions { sampling, nbest: if sampling { 5 } else { 1 }, ..Default::default() };
        let (generator, batching) = translator.search(&options, Batching::new(None, Some(4), 1).unwrap()).unwrap();
        let told: Mutex<Vec<Vec<usize>>> = Mutex::new(Vec::new());
        let on_batch = |done: &[(usize, Translation)]| told.lock().unwrap().push(done.iter().map(|(i, _)| *i).collect());
        tch::manual_seed(1);
        let request = TranslateRequest { on_batch: Some(&on_batch), ..Default::default() };
        let streamed = translator.translate_tokens(&generator, tokens.clone(), &batching, &request).unwrap();
        tch::manual_seed(1);
        let plain = translator.translate_tokens(&generator, tokens.clone(), &batching, &TranslateRequest::default()).unwrap();
        assert_eq!(texts(&streamed), texts(&plain), "sampling {sampling}");
        let told = told.into_inner().unwrap();
        assert_eq!(told.iter().map(Vec::len).sum::<usize>(), lines.len());
        assert_eq!(told[0].contains(&0), first_told_holds_sentence_0, "sampling {sampling}: {told:?}");
    }
}
