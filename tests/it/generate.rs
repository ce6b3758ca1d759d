//! `tchseq generate` against fairseq-generate 0.12.2: every command line of
//! tests/fixtures/generate/runs.json (reference/generate_goldens.sh) given to tchseq unchanged,
//! its output held to what fairseq printed. Sources, references, the batch order and the
//! closing score line are compared exactly; hypotheses as the parity contract reads them
//! (util::fairseq_out: the same tokens, scores within the tolerances, near-ties proven). The
//! byte-for-byte check beside fairseq runs in `make parity`.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::util::fairseq_out::{bundled_model_args, compare, fixture_model_args, parse_fairseq, settle_near_ties, Rule};
use crate::util::tolerance::SOFT_ALIGNMENT;
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

/// A run's command line without the options that only change how its hypotheses are written
/// (post-processing, scorer, alignment lines): two runs with the same search have the same one.
fn search_of(argv: &[String]) -> Vec<&str> {
    const WITH_VALUE: [&str; 8] =
        ["--post-process", "--scoring", "--sacrebleu-tokenizer", "--wer-tokenizer", "--tokenizer", "--bpe", "--bpe-codes", "--sentencepiece-model"];
    const ALONE: [&str; 6] = ["--sacrebleu-lowercase", "--wer-lowercase", "--wer-remove-punct", "--print-alignment", "--quiet", "--remove-bpe"];
    let mut kept = Vec::new();
    let mut args = argv.iter().map(String::as_str).peekable();
    while let Some(a) = args.next() {
        if WITH_VALUE.contains(&a) {
            args.next();
        } else if ALONE.contains(&a) {
            // --remove-bpe takes an optional value
            if a == "--remove-bpe" && args.peek().is_some_and(|v| !v.starts_with('-')) {
                args.next();
            }
        } else {
            kept.push(a);
        }
    }
    kept
}

/// The model part of a force-decoding command line for a run, and how its printed sources are
/// made plain text again (a multilingual task prints its source language token on `S-` lines).
fn force_decoding(argv: &[String]) -> (Vec<String>, bool) {
    let value = |flag: &str| argv.iter().position(|a| a == flag).map(|i| argv[i + 1].clone());
    let path = value("--path").unwrap();
    let dir = Path::new(&path).parent().unwrap();
    if argv[0].contains("/multilingual/") {
        let (s, t) = (value("-s").unwrap(), value("-t").unwrap());
        let model = ["-m", &repo(&dir.display().to_string()).display().to_string(), "--path", &repo(&path).display().to_string(), "-s", &s, "-t", &t];
        (model.iter().map(|a| a.to_string()).collect(), true)
    } else if argv[0].contains("/models/") {
        (fixture_model_args(dir), false)
    } else {
        (bundled_model_args(), false)
    }
}

fn is_language_token(t: &str) -> bool {
    let m2m = t.len() > 4 && t.starts_with("__") && t.ends_with("__");
    let mbart = t.len() > 2 && t.starts_with('[') && t.ends_with(']');
    m2m || mbart
}

#[test]
fn every_fairseq_generate_command_line_prints_what_fairseq_printed() {
    let mut runs = runs();
    assert!(runs.len() >= 41, "runs.json lists {} runs", runs.len());
    for family in ["m2m_", "mbart50_", "mbart-ft_", "bart_", "models_"] {
        assert!(runs.iter().any(|r| r.name.starts_with(family)), "no {family} run in runs.json");
    }
    // the subword runs first: the near-ties they prove are skipped in the runs of the same
    // search that print words instead of subwords
    runs.sort_by_key(|r| prints_words(&r.argv));
    let mut near_ties: Vec<(Vec<String>, BTreeSet<usize>)> = Vec::new();
    let mut compared = 0;
    for run in &runs {
        let results = tempfile::tempdir().unwrap();
        let got = ours(run, results.path());
        let want = fs::read_to_string(fixture(&format!("generate/goldens/{}.txt", run.name))).unwrap();
        assert_eq!(exact_lines(&got), exact_lines(&want), "{}: sources, references or their order differ", run.name);
        let quiet = run.argv.iter().any(|a| a == "--quiet");
        let search: Vec<String> = search_of(&run.argv).into_iter().map(String::from).collect();
        let (w, g) = (parse_fairseq(&want), parse_fairseq(&got));
        let c = if quiet {
            assert!(w.is_empty() && g.is_empty(), "{}: --quiet printed sentences", run.name);
            None
        } else if prints_words(&run.argv) {
            // --score-reference searches nothing: its hypotheses are the references
            let none = BTreeSet::new();
            let ids = match near_ties.iter().find(|(s, _)| *s == search) {
                Some((_, ids)) => ids,
                None if run.argv.iter().any(|a| a == "--score-reference") => &none,
                None => panic!("{}: no run of the same search in subwords proves its near-ties", run.name),
            };
            let skip = |m: &std::collections::BTreeMap<usize, _>| -> std::collections::BTreeMap<usize, crate::util::fairseq_out::Entry> {
                m.iter().filter(|(id, _)| !ids.contains(id)).map(|(k, v): (&usize, &crate::util::fairseq_out::Entry)| (*k, v.clone())).collect()
            };
            Some(compare(&skip(&w), &skip(&g)))
        } else {
            let (model, language_tokens) = force_decoding(&run.argv);
            let mut c = compare(&w, &g);
            if language_tokens {
                for d in &mut c.differing {
                    d.src = d.src.split(' ').filter(|t| !is_language_token(t)).collect::<Vec<_>>().join(" ");
                }
            }
            settle_near_ties(&mut c, &model, &Rule::of(&run.argv));
            if !near_ties.iter().any(|(s, _)| *s == search) {
                near_ties.push((search.clone(), c.near_tie_ids.iter().copied().collect()));
            }
            Some(c)
        };
        if let Some(c) = &c {
            c.assert_ok(&run.name);
            compared += c.hyps;
            if run.argv.iter().any(|a| a == "soft") {
                soft_alignments_agree(&run.name, &want, &got, &c.near_tie_ids);
            }
        }
        // the score follows from the hypotheses' tokens alone
        let proven = near_ties.iter().find(|(s, _)| *s == search).map_or(0, |(_, ids)| ids.len());
        let same_tokens = c.as_ref().is_none_or(|c| c.near_ties == 0) && (proven == 0 || !prints_words(&run.argv));
        match (closing_line(&want), closing_line(&got)) {
            (Some(w), Some(g)) if same_tokens => assert_eq!(g, w, "{}: the closing line differs", run.name),
            (Some(_), Some(g)) => assert!(g.starts_with("Generate "), "{}", run.name),
            (w, g) => panic!("{}: closing line {w:?} expected, {g:?} printed", run.name),
        }
    }
    assert!(compared > 1400, "{compared} hypotheses compared");
}

/// The soft `A-` lines of the sentences whose hypotheses are the same: the same shape (a row of
/// source probabilities per target token), each probability within [`SOFT_ALIGNMENT`].
fn soft_alignments_agree(name: &str, want: &str, got: &str, near_ties: &[usize]) {
    let rows = |text: &str| -> std::collections::BTreeMap<usize, Vec<Vec<f64>>> {
        text.lines()
            .filter_map(|l| l.strip_prefix("A-")?.split_once('\t'))
            .map(|(id, a)| {
                let rows = a.split(' ').map(|r| r.split(',').map(|p| p.parse().unwrap()).collect()).collect();
                (id.parse().unwrap(), rows)
            })
            .collect()
    };
    let (want, got) = (rows(want), rows(got));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>(), "{name}: A- lines");
    let mut checked = 0;
    for (id, w) in want.iter().filter(|(id, _)| !near_ties.contains(id)) {
        let g = &got[id];
        assert_eq!(w.iter().map(Vec::len).collect::<Vec<_>>(), g.iter().map(Vec::len).collect::<Vec<_>>(), "{name}: A-{id}'s shape");
        for (p, q) in w.iter().flatten().zip(g.iter().flatten()) {
            assert!(SOFT_ALIGNMENT.holds((p - q).abs()), "{name}: A-{id}: {q} printed, fairseq's {p} ({})", SOFT_ALIGNMENT.name);
            checked += 1;
        }
    }
    assert!(checked > 1000, "{name}: {checked} probabilities compared");
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
        // the source words of --replace-unk are the raw text's
        (&[data, "--path", model, "-s", "en", "-t", "de", "--replace-unk"], "--dataset-impl raw"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--gen-subset", "rawunk", "--replace-unk", "/nonexistent-align.txt"], "nonexistent-align.txt"),
        (&[data, "--path", model, "-s", "en", "-t", "de", "--gen-subset", "rawunk", "--replace-unk", "tests/fixtures/multilingual/m2m/lang_list.txt"], "SOURCE TARGET"),
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

/// `--replace-unk` where hypotheses hold `<unk>` (fairseq-generate 0.12.2 stops there with an
/// IndexError, so no golden exists): each becomes the source word it is aligned with, taken from
/// the raw line, and nothing else changes.
#[test]
fn replace_unk_puts_the_aligned_source_word_in_place_of_each_unknown_word() {
    // per id: the S- text, the H- score and text, the A- pairs
    type Lines = std::collections::BTreeMap<String, (String, String, String, Vec<(usize, usize)>)>;
    let run = |extra: &[&str]| -> Lines {
        let out = tchseq()
            .current_dir(repo(""))
            .args(["--threads", "1", "generate", "tests/fixtures/generate/bundled", "--path", "weights/multi30k.en-de/model.pt"])
            .args(["-s", "en", "-t", "de", "--gen-subset", "rawunk", "--dataset-impl", "raw", "--batch-size", "16"])
            // a bonus for <unk> makes the model write it
            .args(["--unkpen", "-15", "--print-alignment"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut lines = Lines::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let Some((tag, rest)) = line.split_once('\t') else { continue };
            let Some((kind, id)) = tag.split_once('-') else { continue };
            let e = lines.entry(id.to_string()).or_default();
            match kind {
                "S" => e.0 = rest.to_string(),
                "H" => (e.1, e.2) = rest.split_once('\t').map(|(a, b)| (a.to_string(), b.to_string())).unwrap(),
                "A" => e.3 = rest.split(' ').map(|a| a.split_once('-').unwrap()).map(|(s, t)| (s.parse().unwrap(), t.parse().unwrap())).collect(),
                _ => {}
            }
        }
        lines
    };
    let (plain, replaced) = (run(&[]), run(&["--replace-unk"]));
    assert_eq!(plain.len(), 40);
    let mut unknown = 0;
    for (id, (_, score, hyp, pairs)) in &plain {
        let (source, r_score, r_hyp, r_pairs) = &replaced[id];
        assert_eq!((score, pairs), (r_score, r_pairs), "{id}: the search changed");
        let words: Vec<&str> = source.split(' ').chain(["<eos>"]).collect();
        let want: Vec<String> = hyp
            .split(' ')
            .enumerate()
            .map(|(t, w)| match pairs.iter().find(|&&(_, at)| at == t) {
                Some(&(s, _)) if w == "<unk>" => words[s].to_string(),
                _ => w.to_string(),
            })
            .collect();
        unknown += hyp.split(' ').filter(|w| *w == "<unk>").count();
        assert_eq!(*r_hyp, want.join(" "), "{id}");
    }
    assert!(unknown > 100, "only {unknown} <unk> written: the test needs the model to write them");
    // the made-up source words are printed as the raw text has them, and replace <unk>s
    assert!(plain.values().all(|e| !e.0.contains("Flimsdorf")));
    assert!(replaced.values().any(|e| e.0.contains("Flimsdorf")));
    assert!(replaced.values().any(|e| e.2.contains("Flimsdorf")));
}
