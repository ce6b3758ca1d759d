//! `--no-repeat-ngram-size` at sizes 1 to 4 against fairseq 0.12.2's own output
//! (tests/fixtures/ngram, made by reference/ngram_goldens.sh): beam search and sampling on the
//! bundled model and two fixture models, and both language models' continuations. On the CPU
//! fairseq's blocker changes nothing (src/generate/ngram.rs says why), and neither does ours by
//! default; `--ngram-blocking fairseq-cuda` blocks as fairseq's CUDA kernel does.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::util::fairseq_out::{bundled_model_args, compare_settled, fixture_model_args, parse_fairseq, Entry, Rule, Tally};
use crate::util::{json, repo, result_lines, stdout_ok, strings, tchseq};

const MANIFEST: &str = "tests/fixtures/ngram/manifest.json";

fn read(golden: &str) -> String {
    std::fs::read_to_string(repo(golden)).unwrap_or_else(|e| panic!("{golden}: {e}"))
}

/// The size a golden was made with (its name ends in `.ngram<N>.txt`).
fn size_of(golden: &str) -> usize {
    golden.rsplit_once(".ngram").and_then(|(_, n)| n.strip_suffix(".txt")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{golden}"))
}

/// What a recorded `fairseq-interactive` run is for tchseq: its `translate` argv (the model
/// directory, the language pair, the input, the search options as they are, and no n-gram flag
/// but the size), the model arguments the near-tie proof force-decodes with, and the options.
struct Run {
    argv: Vec<String>,
    model: Vec<String>,
    opts: Vec<String>,
    lm: bool,
}

fn run_of(g: &Value) -> Run {
    let argv = strings(&g["argv"]);
    assert_eq!(argv[0], "fairseq-interactive", "{argv:?}");
    let dir = argv[1].clone();
    let (mut pair, mut input, mut opts, mut lm, mut pipeline) = (Vec::new(), None, Vec::new(), false, false);
    let mut i = 2;
    while i < argv.len() {
        match argv[i].as_str() {
            "--task" => {
                lm = argv[i + 1] == "language_modeling";
                i += 2;
            }
            // the model directory and the checkpoint's cfg give these
            "--path" | "--bpe-codes" => i += 2,
            "--tokenizer" | "--bpe" => {
                pipeline = true;
                i += 2;
            }
            "-s" | "-t" => {
                pair.extend([argv[i].clone(), argv[i + 1].clone()]);
                i += 2;
            }
            "--input" => {
                input = Some(argv[i + 1].clone());
                i += 2;
            }
            "--cpu" | "--add-bos-token" => i += 1,
            _ => {
                opts.push(argv[i].clone());
                i += 1;
            }
        }
    }
    let input = input.unwrap_or_else(|| g["input"].as_str().unwrap().to_string());
    let mut tchseq: Vec<String> = vec!["translate".into(), "-m".into(), repo(&dir).display().to_string()];
    tchseq.extend(pair.iter().cloned());
    if !pipeline && !lm {
        // fairseq without --tokenizer/--bpe: none
        tchseq.extend(["--tokenizer", "none", "--bpe", "none"].map(String::from));
    }
    tchseq.extend(["--format".into(), "fairseq".into(), "--input".into(), repo(&input).display().to_string()]);
    tchseq.extend(opts.iter().cloned());
    // fairseq-interactive's default is one line at a time; tchseq batches a file unless told
    if !opts.iter().any(|o| o == "--batch-size" || o == "--buffer-size" || o == "--max-tokens") {
        tchseq.extend(["--batch-size".into(), "1".into()]);
    }
    let model = if lm {
        Vec::new()
    } else if pair.is_empty() {
        bundled_model_args()
    } else {
        fixture_model_args(&repo(&dir))
    };
    Run { argv: tchseq, model, opts, lm }
}

/// fairseq 0.12.2 itself: at every size its output is its output without the flag (`W-`
/// timings aside), and its blocker, counted by reference/ngram_probe.py in the same runs, ran
/// its Python code (not the CUDA extension) on the whole `max_len + 2` buffer and banned nothing.
#[test]
fn fairseq_0_12_2_on_the_cpu_blocks_nothing_at_sizes_1_to_4() {
    let m = json(MANIFEST);
    let goldens = m["goldens"].as_object().unwrap();
    let mut compared = 0;
    for name in goldens.keys().filter(|g| size_of(g) > 0) {
        let plain = name.replace(&format!(".ngram{}.txt", size_of(name)), ".ngram0.txt");
        if !goldens.contains_key(&plain) {
            continue;
        }
        assert_eq!(result_lines(&read(name)), result_lines(&read(&plain)), "{name}: fairseq blocked an n-gram on the CPU");
        compared += 1;
    }
    // 5 models x 2 searches x sizes 1..4
    assert_eq!(compared, 40);
    let probes = m["probe"]["runs"].as_object().unwrap();
    assert_eq!(probes.len(), goldens.keys().filter(|g| size_of(g) > 0).count(), "a probe per golden with a size");
    for (golden, by_size) in probes {
        let p = &by_size[size_of(golden).to_string()];
        assert_eq!(p["use_extension"], false, "{golden}");
        assert!(p["calls"].as_u64().unwrap() > 0, "{golden}");
        assert_eq!(p["bans"], 0, "{golden}");
        assert_eq!(p["finite_lprobs_banned"], 0, "{golden}");
    }
}

/// tchseq's default at sizes 1 to 4 against fairseq's goldens, with no other flag: the same
/// hypotheses in the same order, scores within the cross-CPU tolerance (beam search: a differing
/// hypothesis only as a proven near-tie; sampling and language models: none).
#[test]
fn every_size_translates_as_fairseq_0_12_2_on_the_cpu() {
    let m = json(MANIFEST);
    let (mut failures, mut tally, mut runs) = (Vec::new(), Tally::default(), BTreeMap::<usize, usize>::new());
    for (golden, g) in m["goldens"].as_object().unwrap() {
        let n = size_of(golden);
        if n == 0 {
            continue;
        }
        let run = run_of(g);
        let out = tchseq().args(&run.argv).output().unwrap();
        if !out.status.success() {
            failures.push(format!("{golden}: {}", String::from_utf8_lossy(&out.stderr)));
            continue;
        }
        let want = parse_fairseq(&read(golden));
        let got = parse_fairseq(&String::from_utf8_lossy(&out.stdout));
        let rule = if run.lm { Rule::exact_tokens() } else { Rule::of(&run.opts) };
        let c = compare_settled(&want, &got, &run.model, &rule);
        tally.add(&c);
        eprintln!("{golden}: {} hypotheses, {} of {} lines bit-identical", c.hyps, c.identical_lines, c.total_lines);
        failures.extend(c.failures().into_iter().take(5).map(|p| format!("{golden}: {p}")));
        if run.lm {
            // every continuation begins with its prompt
            for e in got.values() {
                let src = e.src.as_deref().unwrap();
                if !e.hyps.iter().all(|h| h.h_str.starts_with(src)) {
                    failures.push(format!("{golden}: a hypothesis without its prompt {src:?}"));
                }
            }
        }
        *runs.entry(n).or_default() += 1;
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
    tally.assert_within_cap("--no-repeat-ngram-size 1..4");
    // 5 models x 2 searches at every size, and the bug report's sentence at size 1
    assert_eq!(runs, BTreeMap::from([(1, 11), (2, 10), (3, 10), (4, 10)]));
}

/// The bug report: `--no-repeat-ngram-size 1` translated nothing ("step 200 reached max_len
/// 200"); it gives fairseq-interactive's translation, on the command line and in `serve`.
#[test]
fn size_one_translates_the_bug_report_s_sentence_as_fairseq_does() {
    let want = parse_fairseq(&read("tests/fixtures/ngram/bundled/report.ngram1.txt"));
    let best = &want[&0].hyps[0];
    assert_eq!(best.h_str, "Zwei Hunde spielen .");
    let out = tchseq()
        .args(["translate", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--no-repeat-ngram-size", "1", "Two dogs play ."])
        .output()
        .unwrap();
    assert_eq!(stdout_ok(&out), format!("{}\n", best.d_str));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));

    let s = crate::serve::Server::start(&[]);
    for options in [
        json!({ "no_repeat_ngram_size": 1 }),
        json!({ "no_repeat_ngram_size": 1, "ngram_blocking": "fairseq-cpu" }),
        json!({ "no_repeat_ngram_size": 3, "fairseq_compat_ngram": true }),
    ] {
        let r = s.post("/v1/translate", &json!({ "text": ["Two dogs play ."], "options": options }));
        assert_eq!(r.status, 200, "{options}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["translations"][0]["hypotheses"][0]["text"], best.d_str.as_str(), "{options}");
    }
    // the kernel's size 1 is the sentence's error (the model decides what starts a hypothesis)
    let cuda = json!({ "no_repeat_ngram_size": 1, "ngram_blocking": "fairseq-cuda" });
    let r = s.post("/v1/translate", &json!({ "text": ["Two dogs play ."], "options": cuda }));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let error = r.json()["translations"][0]["error"].as_str().map(str::to_string).unwrap_or_default();
    assert!(error.contains("bans the end of sentence"), "{error:?}");
    let both = json!({ "no_repeat_ngram_size": 2, "ngram_blocking": "fairseq-cuda", "fairseq_compat_ngram": true });
    s.post("/v1/translate", &json!({ "text": ["Two dogs play ."], "options": both })).assert_error(400, "contradicts");
}

/// The n-grams of a hypothesis as fairseq's CUDA kernel sees them: BOS (= EOS) first, the final
/// EOS left out (EOS appears nowhere before it, so it never completes a repeat).
fn repeats(h: &str, n: usize) -> bool {
    let toks: Vec<&str> = std::iter::once("</s>").chain(h.split_whitespace()).collect();
    let mut seen = std::collections::HashSet::new();
    toks.windows(n).any(|w| !seen.insert(w.to_vec()))
}

/// `--ngram-blocking fairseq-cuda` is the opt-in for fairseq's CUDA kernel: on the fixture whose
/// plain beam search repeats n-grams, no hypothesis repeats one and the output changes; size 1
/// (which would ban EOS) and the old `--fairseq-compat-ngram` beside it are one-line errors,
/// while `--fairseq-compat-ngram` alone is the default's bytes.
#[test]
fn the_cuda_kernel_s_blocking_is_an_opt_in() {
    let m = json(MANIFEST);
    // fairseq's run without the flag, given the flags below
    let g = &m["goldens"]["tests/fixtures/ngram/postnorm/beam5.ngram0.txt"];
    let run = run_of(g);
    let translate = |extra: &[&str]| tchseq().args(&run.argv).args(extra).output().unwrap();
    let plain: BTreeMap<usize, Entry> = parse_fairseq(&read("tests/fixtures/ngram/postnorm/beam5.ngram0.txt"));
    for n in [2, 3, 4] {
        let size = n.to_string();
        let repeating = plain.values().filter(|e| repeats(&e.hyps[0].h_str, n)).count();
        let blocked = parse_fairseq(&stdout_ok(&translate(&["--no-repeat-ngram-size", &size, "--ngram-blocking", "fairseq-cuda"])));
        assert_eq!(blocked.len(), plain.len());
        for (id, e) in &blocked {
            assert!(!repeats(&e.hyps[0].h_str, n), "n = {n}, id {id}: {:?}", e.hyps[0].h_str);
        }
        if n == 2 {
            assert!(repeating > 0, "fairseq's plain beam search repeats no bigram here: the check proves little");
        }
        let changed = blocked.iter().filter(|(id, e)| e.hyps[0].h_str != plain[*id].hyps[0].h_str).count();
        assert_eq!(changed > 0, repeating > 0, "n = {n}: {changed} changed, {repeating} repeating");
    }
    let default = stdout_ok(&translate(&[]));
    assert_eq!(result_lines(&stdout_ok(&translate(&["--fairseq-compat-ngram"]))), result_lines(&default));
    for (extra, wanted) in [
        (vec!["--no-repeat-ngram-size", "1", "--ngram-blocking", "fairseq-cuda"], "bans the end of sentence"),
        (vec!["--ngram-blocking", "fairseq-cuda", "--fairseq-compat-ngram"], "contradicts"),
        (vec!["--ngram-blocking", "intended"], "invalid value"),
    ] {
        let out = translate(&extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{extra:?}: {stderr}");
        assert!(errors[0].contains(wanted), "{extra:?}: {stderr}");
    }
}
