//! Multilingual models and the BART family (`tests/fixtures/multilingual`, trained by fairseq
//! with reference/family_goldens.sh): `translate -m DIR -s SRC -t TGT` against
//! fairseq-interactive given every task flag, `score` against `fairseq-generate
//! --score-reference`, `verify` against fairseq's activations, and the errors and listings the
//! CLI adds.

use std::collections::BTreeMap;
use std::fs;

use serde_json::Value;

use crate::util::fairseq_out::{compare_settled, parse_fairseq, Rule, Tally};
use crate::util::tolerance::SENTENCE_SCORE;
use crate::util::{fixture, repo, tchseq};

const MODELS: [&str; 4] = ["m2m", "mbart50", "bart", "mbart-ft"];

/// `(golden file, its entry)` of every golden in the manifest.
pub(crate) fn goldens() -> Vec<(String, Value)> {
    let m = crate::util::json("tests/fixtures/multilingual/manifest.json");
    let goldens = &m["goldens"];
    let mut out: Vec<(String, Value)> = match goldens {
        Value::Object(map) => map.iter().map(|(k, v)| (v["golden"].as_str().unwrap_or(k).to_string(), v.clone())).collect(),
        Value::Array(list) => list.iter().map(|v| (v["golden"].as_str().unwrap().to_string(), v.clone())).collect(),
        other => panic!("manifest goldens: {other}"),
    };
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The golden's path from the repository root (the manifest may name it from there or from
/// `tests/fixtures/multilingual`).
pub(crate) fn golden_path(name: &str) -> std::path::PathBuf {
    if name.starts_with("tests/") {
        repo(name)
    } else {
        fixture(&format!("multilingual/{name}"))
    }
}

/// A fairseq command line's model dir, checkpoint, languages and the options tchseq shares with
/// it (everything but the task, BPE and data flags, which tchseq reads from the checkpoint).
pub(crate) struct Run {
    pub dir: String,
    pub path: String,
    pub src: String,
    pub tgt: String,
    pub opts: Vec<String>,
}

pub(crate) fn parse_argv(argv: &[String]) -> Run {
    let with_value = [
        "--task", "--lang-pairs", "--lang-dict", "--langs", "--fixed-dictionary", "--encoder-langtok", "--lang-tok-style", "--bpe",
        "--sentencepiece-model", "--gen-subset", "--remove-bpe", "--post-process",
    ];
    let (mut path, mut src, mut tgt, mut opts) = (String::new(), String::new(), String::new(), Vec::new());
    let mut i = 2;
    while i < argv.len() {
        let a = argv[i].as_str();
        match a {
            "--path" => path = argv[i + 1].clone(),
            "-s" | "--source-lang" => src = argv[i + 1].clone(),
            "-t" | "--target-lang" => tgt = argv[i + 1].clone(),
            _ if with_value.contains(&a) => {}
            "--cpu" | "--decoder-langtok" | "--score-reference" | "--quiet" => {
                i += 1;
                continue;
            }
            _ => {
                opts.push(argv[i].clone());
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let dir = std::path::Path::new(&path).parent().unwrap().to_string_lossy().into_owned();
    Run { dir, path, src, tgt, opts }
}

pub(crate) fn argv_of(entry: &Value) -> Vec<String> {
    entry["argv"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

/// fairseq-interactive's output for each model, pair and option set: the same hypotheses in the
/// same order, scores within the cross-CPU tolerance, with nothing but the model directory and
/// the pair given.
#[test]
fn translate_matches_fairseq_interactive_with_the_task_read_from_the_checkpoint() {
    let (mut runs, mut tally) = (0, Tally::default());
    for (name, entry) in goldens() {
        let argv = argv_of(&entry);
        if argv[0] != "fairseq-interactive" || entry["exit_code"].as_i64().unwrap_or(0) != 0 {
            continue;
        }
        let r = parse_argv(&argv);
        let input = entry["input"].as_str().unwrap();
        let out = tchseq()
            .args(["translate", "--format", "fairseq", "-m"])
            .arg(repo(&r.dir))
            .arg("--path")
            .arg(repo(&r.path))
            .args(["-s", &r.src, "-t", &r.tgt, "--input"])
            .arg(repo(input))
            .args(&r.opts)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let want = parse_fairseq(&fs::read_to_string(golden_path(&name)).unwrap());
        let got = parse_fairseq(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(want.len(), 60, "{name}: the golden holds 60 sentences");
        let model: Vec<String> = vec!["-m".into(), repo(&r.dir).display().to_string(), "--path".into(), repo(&r.path).display().to_string(), "-s".into(), r.src.clone(), "-t".into(), r.tgt.clone()];
        let c = compare_settled(&want, &got, &model, &Rule::of(&r.opts));
        c.assert_ok(&name);
        tally.add(&c);
        eprintln!("{name}: {} of {} lines bit-identical", c.identical_lines, c.total_lines);
        runs += 1;
    }
    assert_eq!(runs, 10, "interactive goldens");
    tally.assert_within_cap("multilingual translate");
}

/// `score` on the raw test pairs, against `fairseq-generate --score-reference` on the same pairs
/// binarized: every sentence score within the sentence-score tolerance (`SENTENCE_SCORE`, base
/// 2) and the same token count (the symbols fairseq shows plus those it hides).
#[test]
fn score_matches_fairseq_score_reference_with_language_tokens() {
    let mut runs = 0;
    for (name, entry) in goldens() {
        let argv = argv_of(&entry);
        if argv[0] != "fairseq-generate" || !argv.iter().any(|a| a == "--score-reference") {
            continue;
        }
        let r = parse_argv(&argv);
        let bs = r.opts.iter().position(|o| o == "--batch-size").map_or("8".to_string(), |i| r.opts[i + 1].clone());
        let src = fs::read_to_string(fixture(&format!("multilingual/input.{}", &r.src[..2]))).unwrap();
        let tgt = fs::read_to_string(fixture(&format!("multilingual/input.{}", &r.tgt[..2]))).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let csv_path = dir.path().join("pairs.csv");
        crate::util::write_pairs_csv(&csv_path, src.lines().zip(tgt.lines()));
        let out = tchseq()
            .args(["score", "-q", "-m"])
            .arg(repo(&r.dir))
            .args(["-s", &r.src, "-t", &r.tgt, "--batch-size", &bs, "--input"])
            .arg(&csv_path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let golden = fs::read_to_string(golden_path(&name)).unwrap();
        let want: BTreeMap<usize, (f64, usize)> = golden
            .lines()
            .filter_map(|l| l.strip_prefix("H-"))
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].parse().unwrap(), (f[1].parse().unwrap(), f[2].split(' ').count()))
            })
            .collect();
        assert_eq!(want.len(), 60, "{name}");
        let mut rdr = csv::Reader::from_reader(out.stdout.as_slice());
        let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 60, "{name}");
        let mut worst = 0f64;
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(&row[6], "", "{name} row {i}");
            let (score, symbols) = want[&i];
            let avg: f64 = row[4].parse().unwrap();
            let diff = (avg / std::f64::consts::LN_2 - score).abs();
            SENTENCE_SCORE.assert(avg / std::f64::consts::LN_2, score, &format!("{name} row {i} (base 2)"));
            // fairseq's H- line shows every target symbol but EOS (and a generator EOS of its own)
            // EOS, and for translation_from_pretrained_bart (mbart-ft) the target's language token,
            // which it appends as its generator's EOS
            let hidden = if name.contains("/mbart-ft/") { 2 } else { 1 };
            let tokens: usize = row[3].parse().unwrap();
            assert_eq!(tokens, symbols + hidden, "{name} row {i}: {tokens} tokens, fairseq shows {symbols}");
            worst = worst.max(diff);
        }
        eprintln!("{name}: 60 rows, max |diff| {worst:.1e} (base 2)");
        runs += 1;
    }
    assert_eq!(runs, 4, "one score-reference golden per model");
}

/// fairseq's activations (encoder states, decoder states, attention, logits, log-probs) of a
/// batch whose tokens carry the language tokens as each task adds them.
#[test]
fn verify_matches_fairseq_activations() {
    for model in MODELS {
        let dir = fixture(&format!("multilingual/{model}"));
        let langs: &[&str] = match model {
            "m2m" => &["-s", "en", "-t", "de"],
            "mbart50" => &["-s", "en_XX", "-t", "de_DE"],
            _ => &[],
        };
        let out = tchseq().args(["verify", "--json", "-m"]).arg(&dir).args(langs).arg("--reference").arg(dir.join("verify.pt")).output().unwrap();
        assert!(out.status.success(), "{model}: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let tensors = report["tensors"].as_array().unwrap();
        // tokens, encoder_out and encoder states, decoder states, attn, logits, lprobs
        assert_eq!(tensors.len(), 12, "{model}: {report}");
        assert!(tensors.iter().all(|t| t["status"] == "ok"), "{model}: {report}");
        assert_eq!((report["failed"].as_u64(), report["skipped"].as_u64()), (Some(0), Some(0)), "{model}: {report}");
    }
}

/// The languages a model has, listed; one it lacks, or none given, is a one-line error.
#[test]
fn languages_are_listed_and_checked() {
    let m2m = fixture("multilingual/m2m");
    let out = tchseq().args(["inspect", "--json", "-m"]).arg(&m2m).args(["-s", "fr", "-t", "de"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = if v.is_array() { v[0].clone() } else { v };
    let langs = &v["languages"];
    assert_eq!(langs["langs"], serde_json::json!(["fr", "en", "de"]), "lang_list.txt order");
    assert_eq!(langs["tokens"], serde_json::json!([["__fr__", 3968], ["__en__", 3969], ["__de__", 3970]]));
    assert_eq!(langs["lang_pairs"].as_array().unwrap().len(), 6);
    let out = tchseq().args(["inspect", "--json", "-m"]).arg(fixture("multilingual/mbart50")).args(["-s", "en_XX", "-t", "fr_XX"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let v = if v.is_array() { v[0].clone() } else { v };
    assert_eq!(v["languages"]["tokens"], serde_json::json!([["[en_XX]", 3968], ["[de_DE]", 3969], ["[fr_XX]", 3970], ["<mask>", 3971]]));

    for (args, want) in [
        (&["-s", "en", "-t", "cs"][..], "language `cs` is not one of the model's languages (fr, en, de)"),
        (&[][..], "a multilingual model (language pairs en-de,de-en,en-fr,fr-en,de-fr,fr-de): give the source and target languages"),
    ] {
        let out = tchseq().args(["translate", "-m"]).arg(&m2m).args(args).arg("A dog runs.").output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(want), "{stderr}");
    }
    // fairseq's flags override the checkpoint's: mbart-style tokens do not exist in this model
    let out = tchseq().args(["translate", "-m"]).arg(&m2m).args(["-s", "en", "-t", "de", "--lang-tok-style", "mbart", "A dog runs."]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("embed_tokens") || stderr.contains("symbols"), "{stderr}");
}

/// `inspect` is how one learns a multilingual model's pairs: it needs no `-s/-t`, says that no
/// pair was chosen (JSON: null languages), and lists the pairs (JSON: the list).
#[test]
fn inspect_needs_no_languages() {
    for (model, pairs) in [("multilingual/m2m", "language pairs en-de, de-en, en-fr, fr-en, de-fr, fr-de"), ("multilingual/mbart50", "language pairs")] {
        let out = tchseq().args(["inspect", "-m"]).arg(fixture(model)).output().unwrap();
        let text = crate::util::stdout_ok(&out);
        assert!(text.contains("languages      any pair below (-s SRC -t TGT choose;"), "{model}: {text}");
        assert!(text.lines().any(|l| l.starts_with(pairs)), "{model}: {text}");
        let out = tchseq().args(["inspect", "--json", "-m"]).arg(fixture(model)).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{model}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!((&v["source_lang"], &v["target_lang"]), (&Value::Null, &Value::Null), "{model}: {v}");
        assert!(v["languages"]["lang_pairs"].as_array().unwrap().len() >= 2, "{model}: {v}");
    }
    // with -s/-t, the pair is the one given
    let out = tchseq().args(["inspect", "-m"]).arg(fixture("multilingual/m2m")).args(["-s", "fr", "-t", "de"]).output().unwrap();
    assert!(crate::util::stdout_ok(&out).contains("languages      fr -> de\n"));
}

/// A CSV whose rows name their own languages: each row scores as it does alone in its pair, and
/// a row in a language the model lacks gets its own error.
#[test]
fn score_takes_the_pair_of_each_row() {
    let m2m = fixture("multilingual/m2m");
    let en: Vec<String> = fs::read_to_string(fixture("multilingual/input.en")).unwrap().lines().take(6).map(String::from).collect();
    let de: Vec<String> = fs::read_to_string(fixture("multilingual/input.de")).unwrap().lines().take(6).map(String::from).collect();
    let fr: Vec<String> = fs::read_to_string(fixture("multilingual/input.fr")).unwrap().lines().take(6).map(String::from).collect();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, rows: &[(&str, &str, &str, &str)]| {
        let path = dir.path().join(name);
        let mut w = csv::Writer::from_path(&path).unwrap();
        w.write_record(["source", "target", "sl", "tl"]).unwrap();
        for r in rows {
            w.write_record([r.0, r.1, r.2, r.3]).unwrap();
        }
        w.flush().unwrap();
        path
    };
    let mut mixed = Vec::new();
    for i in 0..6 {
        mixed.push(if i % 2 == 0 { (en[i].as_str(), de[i].as_str(), "en", "de") } else { (fr[i].as_str(), en[i].as_str(), "fr", "en") });
    }
    mixed.push((en[0].as_str(), de[0].as_str(), "en", "cs"));
    let score = |path: &std::path::Path, pair: &[&str], columns: bool| -> Vec<csv::StringRecord> {
        let mut cmd = tchseq();
        cmd.args(["score", "-q", "--batch-size", "1", "-m"]).arg(&m2m).args(pair).arg("--input").arg(path);
        if columns {
            cmd.args(["--source-lang-column", "sl", "--target-lang-column", "tl"]);
        }
        let out = cmd.output().unwrap();
        csv::Reader::from_reader(out.stdout.as_slice()).records().map(Result::unwrap).collect()
    };
    let rows = score(&write("mixed.csv", &mixed), &["-s", "en", "-t", "de"], true);
    assert_eq!(rows.len(), 7);
    let en_de = score(&write("en_de.csv", &mixed[..6]), &["-s", "en", "-t", "de"], false);
    let fr_en = score(&write("fr_en.csv", &mixed[..6]), &["-s", "fr", "-t", "en"], false);
    for i in 0..6 {
        let alone = if i % 2 == 0 { &en_de[i] } else { &fr_en[i] };
        assert_eq!(&rows[i][8], "", "row {i}");
        assert_eq!((&rows[i][4], &rows[i][6]), (&alone[4], &alone[6]), "row {i} scores as its own pair does");
    }
    assert!(rows[6][8].contains("language `cs` is not one of the model's languages"), "{:?}", rows[6]);
    // a bilingual model has no languages to choose from
    let bundled = tchseq()
        .args(["score", "-q", "-m"])
        .arg(repo("weights/multi30k.en-de"))
        .args(["--source-lang-column", "sl", "--target-lang-column", "tl", "--input"])
        .arg(write("bilingual.csv", &mixed[..1]))
        .output()
        .unwrap();
    let rows: Vec<csv::StringRecord> = csv::Reader::from_reader(bundled.stdout.as_slice()).records().map(Result::unwrap).collect();
    assert!(rows[0][8].contains("not multilingual"), "{:?}", rows[0]);
}

/// `attention` translates with the task's language tokens, as `translate` does.
#[test]
fn attention_translates_as_translate_does() {
    for (model, langs) in [("mbart-ft", &[][..]), ("m2m", &["-s", "en", "-t", "fr"][..])] {
        let dir = fixture(&format!("multilingual/{model}"));
        let sentence = "Two dogs are playing in the snow.";
        let tmp = tempfile::tempdir().unwrap();
        let out = tchseq().args(["attention", "-m"]).arg(&dir).args(langs).arg(sentence).arg("--output").arg(tmp.path().join("a.svg")).output().unwrap();
        assert!(out.status.success(), "{model}: {}", String::from_utf8_lossy(&out.stderr));
        let tokens = String::from_utf8(out.stdout).unwrap().lines().next().unwrap().to_string();
        let out = tchseq().args(["translate", "--batch-size", "1", "--format", "fairseq", "-m"]).arg(&dir).args(langs).arg(sentence).output().unwrap();
        let got = parse_fairseq(&String::from_utf8(out.stdout).unwrap());
        assert_eq!(tokens, got[&0].hyps[0].h_str, "{model}");
    }
}

/// Errors that name what the user gave: a language the model lacks says so without telling to
/// pass `-s`/`-t` (they were passed, or given in `serve`'s `@SRC-TGT`); two unnamed pairs point
/// to `--model NAME=DIR@SRC-TGT`, since `serve` takes no `-s`/`-t`. (`serve` on a multilingual
/// model without a pair serves every pair: `serve.rs`.)
#[test]
fn language_errors_name_what_was_given_and_how_each_door_takes_a_pair() {
    let dir = fixture("multilingual/m2m");
    let out = tchseq().args(["translate", "-m"]).arg(&dir).args(["-s", "en", "-t", "cs", "A dog."]).output().unwrap();
    let line = crate::util::one_line_error(&out, "language `cs` is not one of the model's languages");
    assert!(!line.contains("pass -s"), "{line}");
    let pair = |p: &str| format!("{}@{p}", dir.display());
    let out = tchseq().args(["serve", "--port", "0", "-m", &pair("en-cs")]).output().unwrap();
    let line = crate::util::one_line_error(&out, "language `cs` is not one of the model's languages");
    assert!(!line.contains("-s SRC") && !line.contains("pass -s"), "{line}");
    let out = tchseq().args(["serve", "--port", "0", "-m", &pair("en-fr"), "-m", &pair("fr-en")]).output().unwrap();
    crate::util::one_line_error(&out, "NAME=DIR@SRC-TGT");
}
