//! `tchseq generate` against fairseq-generate 0.12.2: every command line of
//! tests/fixtures/generate/runs.json (reference/generate_goldens.sh) given to tchseq unchanged,
//! its output held to what fairseq printed. Sources, references, the batch order and the
//! closing score line are compared exactly; hypotheses as the parity contract reads them
//! (util::fairseq_out: the same tokens, scores within the tolerances, near-ties proven). The
//! byte-for-byte check beside fairseq runs in `make parity`.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::util::fairseq_out::{compare, compare_settled, fixture_model_args, parse_fairseq, bundled_model_args, Rule};
use crate::util::{fixture, json, one_line_error, repo, tchseq};

struct Run {
    name: String,
    argv: Vec<String>,
    results_path: bool,
}

fn runs() -> Vec<Run> {
    let manifest = json("tests/fixtures/generate/runs.json");
    manifest
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Run {
            name: r["name"].as_str().unwrap().to_string(),
            argv: r["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect(),
            results_path: r["results_path"].as_bool().unwrap(),
        })
        .collect()
}

/// tchseq's output for a run's command line (the file --results-path names, or stdout).
fn ours(run: &Run, results: &Path) -> String {
    let argv: Vec<String> = run.argv.iter().map(|a| if a == "RESULTS" { results.display().to_string() } else { a.clone() }).collect();
    let out = tchseq().current_dir(repo("")).arg("generate").args(&argv).output().unwrap();
    assert!(out.status.success(), "{}: {}", run.name, String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Translated "), "{}: no timing line on stderr: {stderr}", run.name);
    if run.results_path {
        assert!(out.stdout.is_empty(), "{}: --results-path also printed to stdout", run.name);
        return fs::read_to_string(results.join("generate-test.txt")).unwrap();
    }
    String::from_utf8(out.stdout).unwrap()
}

/// The lines that carry no floating-point result: S-, T- and the order of the ids.
fn exact_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| l.starts_with("S-") || l.starts_with("T-")).collect()
}

fn closing_line(text: &str) -> Option<&str> {
    text.lines().find(|l| l.starts_with("Generate "))
}

/// Whether a run prints text that is not the subword tokens (post-processed or decoded), which
/// `score --tokenized` cannot force-decode for a near-tie proof.
fn prints_words(argv: &[String]) -> bool {
    argv.iter().any(|a| ["--remove-bpe", "--post-process", "--bpe", "--tokenizer"].contains(&a.as_str()))
}

#[test]
fn every_fairseq_generate_command_line_prints_what_fairseq_printed() {
    let runs = runs();
    assert!(runs.len() >= 30, "runs.json lists {} runs", runs.len());
    // ids whose top hypothesis is a proven near-tie in the plain run on this CPU: the runs of
    // the same search that print words instead of subwords skip them
    let mut near_tie_ids: BTreeSet<usize> = BTreeSet::new();
    let mut compared = 0;
    for run in &runs {
        let results = tempfile::tempdir().unwrap();
        let got = ours(run, results.path());
        let want = fs::read_to_string(fixture(&format!("generate/goldens/{}.txt", run.name))).unwrap();
        assert_eq!(exact_lines(&got), exact_lines(&want), "{}: sources, references or their order differ", run.name);
        let quiet = run.argv.iter().any(|a| a == "--quiet");
        let (w, g) = (parse_fairseq(&want), parse_fairseq(&got));
        let c = if quiet {
            assert!(w.is_empty() && g.is_empty(), "{}: --quiet printed sentences", run.name);
            None
        } else if prints_words(&run.argv) {
            let skip = |m: &std::collections::BTreeMap<usize, _>| -> std::collections::BTreeMap<usize, crate::util::fairseq_out::Entry> {
                m.iter().filter(|(id, _)| !near_tie_ids.contains(id)).map(|(k, v): (&usize, &crate::util::fairseq_out::Entry)| (*k, v.clone())).collect()
            };
            Some(compare(&skip(&w), &skip(&g)))
        } else {
            let model = if run.argv[0].contains("/models/") {
                let path = &run.argv[run.argv.iter().position(|a| a == "--path").unwrap() + 1];
                fixture_model_args(Path::new(path).parent().unwrap())
            } else {
                bundled_model_args()
            };
            let c = compare_settled(&w, &g, &model, &Rule::of(&run.argv));
            if run.name == "default" {
                near_tie_ids.extend(&c.near_tie_ids);
            }
            Some(c)
        };
        if let Some(c) = &c {
            c.assert_ok(&run.name);
            compared += c.hyps;
        }
        // the score follows from the hypotheses' tokens alone
        let same_tokens = c.as_ref().is_none_or(|c| c.near_ties == 0) && (near_tie_ids.is_empty() || !prints_words(&run.argv));
        match (closing_line(&want), closing_line(&got)) {
            (Some(w), Some(g)) if same_tokens => assert_eq!(g, w, "{}: the closing line differs", run.name),
            (Some(_), Some(g)) => assert!(g.starts_with("Generate "), "{}", run.name),
            (w, g) => panic!("{}: closing line {w:?} expected, {g:?} printed", run.name),
        }
    }
    assert!(compared > 900, "{compared} hypotheses compared");
}

#[test]
fn each_scorer_ends_the_output_with_its_own_line() {
    let golden = |name: &str| fs::read_to_string(fixture(&format!("generate/goldens/{name}.txt"))).unwrap();
    let last = |name: &str| closing_line(&golden(name)).unwrap().to_string();
    assert!(last("default").starts_with("Generate test with beam=5: BLEU4 = "), "{}", last("default"));
    assert!(last("moses_bpe_sacrebleu").starts_with("Generate test with beam=5: BLEU = "), "{}", last("moses_bpe_sacrebleu"));
    assert!(last("remove_bpe_chrf").starts_with("Generate test with beam=5: chrF2 = "), "{}", last("remove_bpe_chrf"));
    assert!(last("remove_bpe_wer").starts_with("Generate test with beam=5: WER: "), "{}", last("remove_bpe_wer"));
    // BLEU over BPE tokens and over words are different numbers
    assert_ne!(last("default"), last("remove_bpe"));
    // every format of the same sentences gives the same output
    let body = |name: &str| golden(name).lines().filter(|l| !l.starts_with("Generate ")).map(str::to_string).collect::<Vec<_>>();
    for name in ["cached", "legacy_inferred", "raw"] {
        assert_eq!(body(name), body("lazy"), "{name}");
    }
    assert_eq!(last("raw").replace("Generate raw ", "Generate legacy "), last("lazy"));
}

#[test]
fn a_compute_type_other_than_exact_says_so_on_the_closing_line() {
    let out = tchseq()
        .current_dir(repo(""))
        .args(["generate", "tests/fixtures/generate/bundled", "--path", "weights/multi30k.en-de/model.pt", "-s", "en", "-t", "de"])
        .args(["--compute-type", "int8", "--quiet"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        assert!(text.starts_with("Generate test with beam=5 (compute type int8): BLEU4 = "), "{text}");
    } else {
        // a CPU without the instructions int8 needs says so
        let err = one_line_error(&out, "int8");
        assert!(err.contains("int8"), "{err}");
    }
}

#[test]
fn bad_generate_command_lines_are_one_line_errors() {
    let data = "tests/fixtures/generate/bundled";
    let model = "weights/multi30k.en-de/model.pt";
    let cases: &[(&[&str], &str)] = &[
        (&[data, "-s", "en", "-t", "de"], "--path required"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--gen-subset", "nosuch"], "Dataset not found: nosuch"),
        (&["/nonexistent-dir", "--path", model, "-s", "en", "-t", "de"], "nonexistent-dir"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--max-source-positions", "10"], "--skip-invalid-size-inputs-valid-test"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--sampling", "--nbest", "2"], "--nbest to be equal to --beam"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--num-shards", "2", "--shard-id", "2"], "--shard-id 2"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--constraints"], "holds no constraints"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--truncate-source"], "--truncate-source"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--score-reference", "--print-alignment"], "--score-reference"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--left-pad-source"], "right"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--bpe", "subword_nmt"], "--bpe-codes"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--prefix-size", "500"], "--prefix-size 500"),
        (&[data, "--path", "tests/fixtures/models/postnorm/model.pt", "-s", "en", "-t", "de"], "dictionar"),
    ];
    for (args, needle) in cases {
        let out = tchseq().current_dir(repo("")).arg("generate").args(*args).output().unwrap();
        let err = one_line_error(&out, needle);
        assert!(err.to_lowercase().contains(&needle.to_lowercase()), "{args:?}: {err}");
    }
}

/// Ctrl-C with --results-path: generate-SUBSET.txt is never written, its `.partial` keeps every
/// finished batch (a prefix of the whole output, whole sentences), and one line says so.
#[test]
fn an_interrupted_generate_keeps_its_finished_batches() {
    let dir = tempfile::tempdir().unwrap();
    let run = |results: &Path| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tchseq"));
        cmd.current_dir(repo(""))
            .args(["--threads", "1", "generate", "tests/fixtures/bundled/score_reference/data-bin", "--path"])
            .args(["weights/multi30k.en-de/model.pt", "-s", "en", "-t", "de", "--batch-size", "1", "--results-path"])
            .arg(results)
            .env_remove("LD_LIBRARY_PATH")
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let whole_dir = dir.path().join("whole");
    let whole = run(&whole_dir).output().unwrap();
    assert!(whole.status.success(), "{}", String::from_utf8_lossy(&whole.stderr));
    let whole = fs::read_to_string(whole_dir.join("generate-test.txt")).unwrap();
    assert_eq!(whole.lines().filter(|l| l.starts_with("S-")).count(), 100);
    let results = dir.path().join("cut");
    let partial = results.join("generate-test.txt.partial");
    let child = run(&results).spawn().unwrap();
    let start = std::time::Instant::now();
    // a second batch written means the first one's progress was recorded
    while fs::read_to_string(&partial).map_or(0, |t| t.matches("\nS-").count()) < 1 {
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "{} did not grow", partial.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: signalling our own child process
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(!results.join("generate-test.txt").exists());
    let held = fs::read_to_string(&partial).unwrap();
    assert!(!held.is_empty() && whole.starts_with(&held) && held.ends_with('\n'), "{held}");
    let sentences = held.lines().filter(|l| l.starts_with("S-")).count();
    // every sentence it holds is whole: S-, T-, H-, D-, P-
    assert_eq!(held.lines().count(), 5 * sentences, "{held}");
    let note = err.lines().find(|l| l.starts_with("interrupted: ")).unwrap_or_else(|| panic!("{err}"));
    let want = format!("interrupted: {} holds the output of the first {sentences} sentences in batch order", partial.display());
    assert!(note.starts_with(&want), "{note}");
}
