//! tchseq's port of sacreBLEU 2.5.1's corpus metrics (src/metrics/) against the goldens of
//! reference/sacrebleu_goldens.py: the exact stdout of the `sacrebleu` CLI for every case and
//! option set, and its tokenizers' output line by line. Only the version field may differ.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tchseq::metrics::tokenizers::tokenize_intl;
use tchseq::metrics::{
    sacrebleu_report_files, MetricKind, SacrebleuOptions, Smooth, TokenizerKind, MetricError,
};

const VERSION: &str = "X.Y.Z";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sacrebleu")
}

fn load(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("run reference/sacrebleu_goldens.py");
    serde_json::from_str(&text).expect("valid JSON")
}

/// The golden's stdout with sacreBLEU's version replaced by ours.
fn normalize_version(s: &str) -> String {
    s.replace("version:2.5.1", &format!("version:{VERSION}"))
        .replace("\"version\": \"2.5.1\"", &format!("\"version\": \"{VERSION}\""))
        .replace("v:2.5.1", &format!("v:{VERSION}"))
}

fn options(o: &Value) -> SacrebleuOptions {
    let mut opts = SacrebleuOptions { version: VERSION.to_string(), ..Default::default() };
    opts.metrics = o["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| MetricKind::parse(m.as_str().unwrap()).unwrap())
        .collect();
    let flag = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    opts.json = o.get("format").and_then(Value::as_str).unwrap_or("json") == "json";
    opts.score_only = flag("score_only");
    opts.short = flag("short");
    if let Some(w) = o.get("width").and_then(Value::as_u64) {
        opts.width = w as usize;
    }
    opts.bleu.lowercase = flag("lowercase");
    if let Some(t) = o.get("tokenize").and_then(Value::as_str) {
        opts.bleu.tokenize = TokenizerKind::parse(t).unwrap();
    }
    if let Some(s) = o.get("smooth_method").and_then(Value::as_str) {
        opts.bleu.smooth_method = Smooth::parse(s).unwrap();
    }
    opts.bleu.smooth_value = o.get("smooth_value").and_then(Value::as_f64);
    if let Some(w) = o.get("chrf_word_order").and_then(Value::as_u64) {
        opts.chrf.word_order = w as usize;
    }
    opts.chrf.whitespace = flag("chrf_whitespace");
    opts.chrf.lowercase = flag("chrf_lowercase");
    opts.chrf.eps_smoothing = flag("chrf_eps_smoothing");
    opts.ter.case_sensitive = flag("ter_case_sensitive");
    opts
}

#[test]
fn sacrebleu_cli_goldens() {
    let goldens = load("goldens.json");
    let goldens = goldens.as_array().unwrap();
    assert!(goldens.len() >= 700, "only {} goldens", goldens.len());
    let mut failures = Vec::new();
    for g in goldens {
        let case = g["case"].as_str().unwrap();
        let dir = fixtures().join("cases").join(case);
        let refs: Vec<PathBuf> = (0..g["nrefs"].as_u64().unwrap()).map(|k| dir.join(format!("ref{k}.txt"))).collect();
        let refs: Vec<&Path> = refs.iter().map(PathBuf::as_path).collect();
        let got = sacrebleu_report_files(&dir.join("hyp.txt"), &refs, &options(&g["opts"])).unwrap();
        let want = normalize_version(g["stdout"].as_str().unwrap());
        if got != want {
            failures.push(format!("{case} / {}:\n--- sacrebleu\n{want}--- tchseq\n{got}", g["option_set"]));
        }
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), goldens.len(), failures.join("\n"));
}

#[test]
fn sacrebleu_tokenizer_goldens() {
    let goldens = load("tokenize.json");
    let mut n = 0;
    for (name, pairs) in goldens.as_object().unwrap() {
        let tok = TokenizerKind::parse(name).unwrap();
        for pair in pairs.as_array().unwrap() {
            let (line, want) = (pair[0].as_str().unwrap(), pair[1].as_str().unwrap());
            assert_eq!(tok.tokenize(line), want, "tokenizer {name} on {line:?}");
            n += 1;
        }
    }
    assert!(n > 100);
}

#[test]
fn sacrebleu_unavailable_tokenizers_are_typed_errors() {
    for name in ["ja-mecab", "ko-mecab", "spm", "flores101", "flores200"] {
        let err = TokenizerKind::parse(name).unwrap_err();
        assert!(matches!(err, MetricError::TokenizerUnavailable(_)), "{name}: {err}");
        assert!(err.to_string().contains("not available in tchseq"));
    }
    assert!(matches!(TokenizerKind::parse("13b"), Err(MetricError::UnknownTokenizer(_))));
}

#[test]
fn sacrebleu_length_mismatch_is_an_error() {
    let dir = fixtures().join("cases");
    let err = sacrebleu_report_files(
        &dir.join("three_refs/hyp.txt"),
        &[dir.join("empty_lines/ref0.txt").as_path()],
        &SacrebleuOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, MetricError::LengthMismatch { hyps: 3, refs: 5 }), "{err}");
}

/// The proposed (not yet wired) `tchseq sacrebleu` command, compiled here as it stands.
#[allow(dead_code)]
#[path = "../../src/cli/sacrebleu.rs"]
mod proposed_cli;

#[derive(clap::Parser)]
struct ProposedCli {
    #[command(flatten)]
    args: proposed_cli::SacrebleuArgs,
}

#[test]
fn sacrebleu_proposed_cli_matches_goldens() {
    use clap::Parser;
    let goldens = load("goldens.json");
    let wanted = [("three_refs", "all_text"), ("cjk", "bleu_zh"), ("urls_numbers", "all_json"), ("sb_readme_multiref", "bleu_floor_sv")];
    let mut checked = 0;
    for g in goldens.as_array().unwrap() {
        let key = (g["case"].as_str().unwrap(), g["option_set"].as_str().unwrap());
        if !wanted.contains(&key) {
            continue;
        }
        // sacrebleu's argv, with its two-letter short options spelled as our long aliases
        let argv: Vec<String> = g["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .filter(|a| a != "--no-color" && a != "-q")
            .map(|a| match a.as_str() {
                "-tok" | "-lc" | "-sv" | "-sh" => format!("-{a}"),
                _ => a,
            })
            .collect();
        let mut argv: Vec<String> = argv
            .into_iter()
            .map(|a| if a.starts_with("tests/") { format!("{}/{a}", env!("CARGO_MANIFEST_DIR")) } else { a })
            .collect();
        argv.extend(["--sacrebleu-version".to_string(), VERSION.to_string()]);
        let cli = ProposedCli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        let mut out = Vec::new();
        proposed_cli::run_to(&cli.args, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), normalize_version(g["stdout"].as_str().unwrap()), "{argv:?}");
        checked += 1;
    }
    assert_eq!(checked, wanted.len());
}

/// Parses sacrebleu's argv (two-letter options spelled as our long aliases) as `tchseq sacrebleu`.
fn parse_cli(argv: Vec<String>) -> proposed_cli::SacrebleuArgs {
    use clap::Parser;
    let argv: Vec<String> = argv
        .into_iter()
        .map(|a| match a.as_str() {
            "-tok" | "-lc" | "-sv" | "-sh" | "-ci" | "-cin" | "-pbs" | "-pbsn" | "-par" | "-parn" => format!("-{a}"),
            _ => a,
        })
        .collect();
    ProposedCli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}")).args
}

/// `--confidence` and `--paired-bs` against reference/sacrebleu_resampling_goldens.py: the exact
/// stdout of the `sacrebleu` CLI, or an error where sacreBLEU itself fails.
#[test]
fn sacrebleu_resampling_goldens() {
    let goldens = load("resampling.json");
    let goldens = goldens.as_array().unwrap();
    assert!(goldens.len() >= 40, "only {} goldens", goldens.len());
    assert_eq!(std::env::current_dir().unwrap(), Path::new(env!("CARGO_MANIFEST_DIR")));
    let mut failures = Vec::new();
    for g in goldens {
        let name = g["name"].as_str().unwrap();
        // relative paths, as sacreBLEU was given them (they name the systems); tests run in the root
        let dir = match g["case"].as_str().unwrap() {
            large @ "multi30k_200_3refs" => format!("tests/fixtures/sacrebleu/resampling/{large}"),
            case => format!("tests/fixtures/sacrebleu/cases/{case}"),
        };
        let mut argv = vec!["sacrebleu".to_string()];
        argv.extend((0..g["nrefs"].as_u64().unwrap()).map(|k| format!("{dir}/ref{k}.txt")));
        argv.push("-i".into());
        argv.extend(g["systems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap().to_string()));
        argv.extend(g["argv"].as_array().unwrap()[1..].iter().map(|a| a.as_str().unwrap().to_string()));
        argv.extend(["--sacrebleu-version".to_string(), VERSION.to_string()]);
        let args = parse_cli(argv);
        let mut opts = args.options().unwrap();
        opts.seed = g["seed"].as_str().map(str::to_string);
        let mut out = Vec::new();
        let got = proposed_cli::run_with(&args, &opts, &mut out);
        let got_text = String::from_utf8(out).unwrap();
        if g["rc"].as_i64().unwrap() != 0 {
            match got {
                Err(e) if format!("{e:#}").contains("sacreBLEU 2.5.1 fails here") => {}
                other => failures.push(format!("{name}: sacreBLEU fails ({}), tchseq: {other:?}", g["error"])),
            }
            continue;
        }
        if let Err(e) = got {
            failures.push(format!("{name}: {e:#}"));
            continue;
        }
        let want = normalize_version(g["stdout"].as_str().unwrap());
        if got_text != want {
            failures.push(format!("{name}:\n--- sacrebleu\n{want}--- tchseq\n{got_text}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), goldens.len(), failures.join("\n"));
}

/// The intl tokenizer's `\p{P}`, `\p{S}`, `\p{N}` hold the same code points here as in Python's
/// `regex` module (probed through the tokenizer itself).
#[test]
fn sacrebleu_intl_unicode_classes() {
    let classes = load("unicode_classes.json");
    let mut diffs = Vec::new();
    for cls in ["P", "S", "N"] {
        // the class seen through the tokenizer: a symbol is split off even between digits, a
        // punctuation only off a letter, a number is all that stays glued after a punctuation
        let is_s = |c: char| tokenize_intl(&format!("1{c}1")) == format!("1 {c} 1");
        let probe = |c: char| -> bool {
            match cls {
                "S" => is_s(c),
                "P" => !is_s(c) && tokenize_intl(&format!("a{c}")) == format!("a {c}"),
                _ => tokenize_intl(&format!(".{c}")) == format!(".{c}"),
            }
        };
        let mut python = vec![false; 0x110000];
        for r in classes[cls].as_array().unwrap() {
            for cp in r[0].as_u64().unwrap()..=r[1].as_u64().unwrap() {
                python[cp as usize] = true;
            }
        }
        // differing code points, as ranges (first, last, in Python's class)
        let mut ranges: Vec<(usize, usize, bool)> = Vec::new();
        for (cp, &want) in python.iter().enumerate() {
            if let Some(c) = char::from_u32(cp as u32) {
                if probe(c) != want {
                    match ranges.last_mut() {
                        Some(r) if r.1 + 1 == cp && r.2 == want => r.1 = cp,
                        _ => ranges.push((cp, cp, want)),
                    }
                }
            }
        }
        diffs.extend(ranges.iter().map(|(a, b, w)| format!("{cls} U+{a:04X}..U+{b:04X} python={w}")));
    }
    assert!(diffs.is_empty(), "{} differences: {}", diffs.len(), diffs.join("\n"));
}

/// Runs `tchseq sacrebleu` on sacrebleu's argv with `SACREBLEU_SEED` set to `seed`.
fn run_cli(argv: &[&str], seed: Option<&str>) -> anyhow::Result<String> {
    let args = parse_cli(argv.iter().map(|a| a.to_string()).collect());
    let mut opts = args.options()?;
    opts.seed = seed.map(str::to_string);
    let mut out = Vec::new();
    proposed_cli::run_with(&args, &opts, &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

/// Bad input to --confidence / --paired-bs: a one-line error, never a panic.
#[test]
fn sacrebleu_resampling_errors() {
    let c = "tests/fixtures/sacrebleu/cases";
    let (r, h) = (format!("{c}/three_refs/ref0.txt"), format!("{c}/three_refs/hyp.txt"));
    let other = format!("{c}/empty_lines/hyp.txt");
    let err = |argv: &[&str], seed: Option<&str>| -> String {
        let e = run_cli(argv, seed).expect_err("an error");
        let msg = format!("{e:#}");
        assert!(!msg.contains('\n'), "{msg}");
        msg
    };
    let one = err(&["sacrebleu", &r, "-i", &h, "--paired-bs"], None);
    assert!(one.contains("Paired tests require multiple input systems"), "{one}");
    // the baseline given again is skipped, leaving one system
    let again = err(&["sacrebleu", &r, "-i", &h, &h, "--paired-bs"], None);
    assert!(again.contains("Paired tests require multiple input systems"), "{again}");
    let two = err(&["sacrebleu", &r, "-i", &h, &h, "--confidence"], None);
    assert!(two.contains("Use paired tests"), "{two}");
    let lengths = err(&["sacrebleu", &r, "-i", &h, &other, "--paired-bs"], None);
    assert!(lengths.contains("different lengths"), "{lengths}");
    for seed in ["None", "none"] {
        let e = err(&["sacrebleu", &r, "-i", &h, "--confidence"], Some(seed));
        assert!(e.contains("cannot be reproduced"), "{e}");
    }
    for seed in ["-3", "abc", "1__2", ""] {
        let e = err(&["sacrebleu", &r, "-i", &h, "--confidence"], Some(seed));
        assert!(e.contains("SACREBLEU_SEED"), "{seed:?}: {e}");
    }
    let same_length = format!("{c}/three_refs/ref1.txt");
    let zero = err(&["sacrebleu", &r, "-i", &h, &same_length, "--paired-bs"], Some("0"));
    assert!(zero.contains("SACREBLEU_SEED=0"), "{zero}");
    let ar = err(&["sacrebleu", &r, "-i", &h, &same_length, "--paired-ar"], Some("0"));
    assert!(ar.contains("SACREBLEU_SEED=0"), "{ar}");
    let refs3 = [r.clone(), format!("{c}/three_refs/ref1.txt"), format!("{c}/three_refs/ref2.txt")];
    let ar_ter = err(&["sacrebleu", &refs3[0], &refs3[1], &refs3[2], "-i", &h, &refs3[0], "--paired-ar", "-m", "ter"], None);
    assert!(ar_ter.contains("three or more references"), "{ar_ter}");
    // sacreBLEU resamples only when --confidence-n is above 1: the plain report otherwise
    let plain = run_cli(&["sacrebleu", &r, "-i", &h, "-f", "text"], None).unwrap();
    for n in ["0", "1", "-5"] {
        assert_eq!(run_cli(&["sacrebleu", &r, "-i", &h, "-f", "text", "--confidence", "--confidence-n", n], None).unwrap(), plain);
    }
    // SACREBLEU_SEED=0 is a seed like any other for --confidence
    assert!(run_cli(&["sacrebleu", &r, "-i", &h, "--confidence"], Some("0")).unwrap().contains("\"seed\": \"0\""));
}
