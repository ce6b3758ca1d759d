//! `verify --against`: every faithful conversion of a committed fixture passes (fairseq →
//! Hugging Face, fairseq → CTranslate2 in float32 and int8, the latter to the quantization's own
//! bound), and each classic conversion bug, planted in a faithful conversion, fails naming the
//! tensor, table or config field it touched.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tch::Tensor;

use crate::util::{fixture, tchseq};

/// `verify --json -m MODEL --against CONVERSION --input (4 lines)`: exit code and report.
fn against(model: &Path, langs: &[&str], conversion: &Path) -> (Option<i32>, Value) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    let lines: Vec<String> = match langs.is_empty() {
        true => fs::read_to_string(fixture("models/inputs.src")).unwrap().lines().take(4).map(String::from).collect(),
        false => fs::read_to_string(fixture("multilingual/input.en")).unwrap().lines().take(4).map(String::from).collect(),
    };
    fs::write(&input, lines.join("\n")).unwrap();
    let out = tchseq().args(["verify", "--json", "-m"]).arg(model).args(langs).arg("--against").arg(conversion).arg("--input").arg(&input).output().unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), report)
}

/// The names of what failed: weights (their fairseq names), config fields, activations.
fn failures(report: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for w in report["weights"].as_array().unwrap() {
        if w["status"] == "fail" {
            names.push(w["fairseq"].as_str().unwrap().to_string());
        }
    }
    for c in report["config"].as_array().unwrap() {
        names.push(c["field"].as_str().unwrap().to_string());
    }
    for a in report["activations"].as_array().unwrap() {
        if a["status"] == "fail" {
            names.push(a["name"].as_str().unwrap().to_string());
        }
    }
    if let Some(e) = report["model_error"].as_str() {
        names.push(format!("model: {e}"));
    }
    names
}

const M2M: [&str; 4] = ["-s", "en", "-t", "de"];

#[test]
fn faithful_conversions_pass() {
    let mut checked = 0;
    let cases: Vec<(PathBuf, &[&str], PathBuf)> = vec![
        (fixture("multilingual/m2m"), &M2M, fixture("hf/m2m")),
        (fixture("models/postnorm"), &[], fixture("hf/fsmt-postnorm")),
        (fixture("multilingual/m2m"), &M2M, fixture("ct2/m2m-float32")),
        (fixture("multilingual/m2m"), &M2M, fixture("ct2/m2m-int8")),
        (fixture("models/postnorm"), &[], fixture("ct2/postnorm-float32")),
        (fixture("models/postnorm"), &[], fixture("ct2/postnorm-int8")),
        (fixture("models/untied"), &[], fixture("ct2/untied-float32")),
        (fixture("models/untied"), &[], fixture("ct2/untied-int8")),
        (fixture("models/postnorm-untied-2018"), &[], fixture("ct2/postnorm-untied-2018-float32")),
        (fixture("models/postnorm-untied-2018"), &[], fixture("ct2/postnorm-untied-2018-int8")),
        (fixture("models/postnorm-untied-2018"), &[], fixture("ct2/postnorm-untied-2018-int16")),
        (fixture("models/postnorm-untied-2018"), &[], fixture("ct2/postnorm-untied-2018-float16")),
    ];
    for (model, langs, conversion) in cases {
        let (code, report) = against(&model, langs, &conversion);
        assert_eq!((code, failures(&report)), (Some(0), Vec::<String>::new()), "{}: {report}", conversion.display());
        let quantized = ["int8", "int16", "float16"].iter().any(|q| conversion.to_string_lossy().ends_with(q));
        assert_eq!(report["judged"], !quantized, "{}", conversion.display());
        let weights = report["weights"].as_array().unwrap();
        if quantized {
            // some weight differs, within its own bound
            assert!(weights.iter().any(|w| w["max_abs_diff"].as_f64().unwrap_or(0.0) > 0.0 && w["bound"].as_f64().unwrap() > 0.0));
        } else {
            assert_eq!(report["hypotheses"]["identical"], report["hypotheses"]["sentences"]);
            assert!(weights.iter().all(|w| w["max_abs_diff"].as_f64() == Some(0.0) || w["fairseq"].as_str().unwrap().ends_with("embed_positions")));
        }
        checked += 1;
    }
    assert_eq!(checked, 12);
}

/// A copy of a Hugging Face fixture with its weights edited by `edit` and its config by
/// `config`.
fn planted(name: &str, edit: impl FnOnce(&mut Vec<(String, Tensor)>), config: impl FnOnce(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in fs::read_dir(fixture(&format!("hf/{name}"))).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), dir.path().join(f.file_name())).unwrap();
    }
    let file = dir.path().join("model.safetensors");
    let mut weights: Vec<(String, Tensor)> = tchseq::checkpoint::load_tensor_dict(&file).unwrap().into_iter().collect();
    edit(&mut weights);
    Tensor::write_safetensors(&weights, &file).unwrap();
    let cfg = dir.path().join("config.json");
    fs::write(&cfg, config(fs::read_to_string(&cfg).unwrap())).unwrap();
    dir
}

fn take(weights: &mut Vec<(String, Tensor)>, name: &str) -> Tensor {
    let i = weights.iter().position(|(n, _)| n == name).unwrap_or_else(|| panic!("no {name}"));
    weights.remove(i).1
}

/// Each classic bug fails, and names what it touched.
#[test]
fn each_classic_conversion_bug_fails_naming_what_it_touched() {
    let same = |c: String| c;
    let m2m = fixture("multilingual/m2m");
    let postnorm = fixture("models/postnorm");
    let cases: Vec<(&str, PathBuf, &[&str], tempfile::TempDir, &str)> = vec![
        (
            "a missing final layer norm",
            m2m.clone(),
            &M2M,
            planted("m2m", |w| {
                drop(take(w, "model.encoder.layer_norm.weight"));
                drop(take(w, "model.encoder.layer_norm.bias"));
            }, same),
            "encoder.layer_norm.weight",
        ),
        ("unscaled embeddings", m2m.clone(), &M2M, planted("m2m", |_| {}, |c| c.replace("\"scale_embedding\": true", "\"scale_embedding\": false")), "no_scale_embedding"),
        (
            "positions offset by padding_idx + 1",
            postnorm.clone(),
            &[],
            planted("fsmt-postnorm", |w| {
                let table = take(w, "model.encoder.embed_positions.weight");
                w.push(("model.encoder.embed_positions.weight".into(), table.roll([2], [0])));
            }, same),
            "encoder.embed_positions",
        ),
        (
            "an untied output projection",
            m2m.clone(),
            &M2M,
            planted("m2m", |w| {
                let shared = w.iter().find(|(n, _)| n == "model.shared.weight").unwrap().1.shallow_clone();
                w.push(("lm_head.weight".into(), &shared + 1e-3));
            }, same),
            "decoder.output_projection.weight",
        ),
        ("a dropped bias", m2m.clone(), &M2M, planted("m2m", |w| drop(take(w, "model.decoder.layers.1.fc2.bias")), same), "decoder.layers.1.fc2.bias"),
        (
            "q and k swapped",
            m2m.clone(),
            &M2M,
            planted("m2m", |w| {
                let q = take(w, "model.encoder.layers.0.self_attn.q_proj.weight");
                let k = take(w, "model.encoder.layers.0.self_attn.k_proj.weight");
                w.push(("model.encoder.layers.0.self_attn.q_proj.weight".into(), k));
                w.push(("model.encoder.layers.0.self_attn.k_proj.weight".into(), q));
            }, same),
            "encoder.layers.0.self_attn.q_proj.weight",
        ),
    ];
    // the bugs are those docs/formats.md lists, each by what it fails naming
    let documented = documented_classic_bugs();
    let planted: BTreeSet<&str> = cases.iter().map(|c| c.4).collect();
    assert_eq!(planted, documented.iter().map(String::as_str).collect::<BTreeSet<_>>(), "the planted bugs against docs/formats.md's table");
    assert_eq!(cases.len(), documented.len(), "a bug planted twice or a row documented twice");
    for (bug, model, langs, dir, named) in cases {
        let (code, report) = against(&model, langs, dir.path());
        let failed = failures(&report);
        assert_eq!(code, Some(1), "{bug}: {report}");
        assert!(failed.iter().any(|f| f == named), "{bug}: {named} not among {failed:?}");
        eprintln!("{bug}: fails naming {named} (of {} failures)", failed.len());
    }
}

/// What each row of docs/formats.md's `| bug | fails naming |` table fails naming: the first
/// name in backticks of its second column.
fn documented_classic_bugs() -> Vec<String> {
    let page = fs::read_to_string(crate::util::repo("docs/formats.md")).unwrap();
    let mut lines = page.lines().skip_while(|l| l.trim() != "| bug | fails naming |").skip(2);
    let rows: Vec<String> = lines
        .by_ref()
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let named = row.split('|').nth(2).unwrap_or_else(|| panic!("a row without a second column: {row}"));
            named.split('`').nth(1).unwrap_or_else(|| panic!("a row that names nothing in backticks: {row}")).to_string()
        })
        .collect();
    assert!(!rows.is_empty(), "docs/formats.md has no `| bug | fails naming |` table");
    rows
}

/// A conversion of another architecture stops at the config rows: no weight row (they would
/// all fail by shape or name), and the report says why.
#[test]
fn another_architecture_stops_at_the_config() {
    let (code, report) = against(&fixture("models/postnorm"), &[], &fixture("models/prenorm"));
    assert_eq!(code, Some(1), "{report}");
    let fields: Vec<&str> = report["config"].as_array().unwrap().iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"encoder_ffn_embed_dim") && fields.contains(&"activation_fn"), "{report}");
    assert_eq!(report["weights"], serde_json::json!([]), "{report}");
    assert_eq!(report["activations"], serde_json::json!([]), "{report}");
    assert_eq!(report["failed"].as_u64(), Some(fields.len() as u64), "{report}");
    assert!(report["stopped"].as_str().unwrap().contains("weights, activations and translations not compared"), "{report}");
    let out = tchseq().args(["verify", "-m"]).arg(fixture("models/postnorm")).arg("--against").arg(fixture("models/prenorm")).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("FAIL")).count(), fields.len() + 1, "{text}");
    assert!(text.ends_with(&format!("not compared\nFAIL: {} failed\n", fields.len())), "{text}");
}

/// A CTranslate2 directory given as a model is refused in one line that says what it is for.
#[test]
fn a_ctranslate2_directory_as_a_model_points_at_verify_against() {
    let out = tchseq().args(["translate", "-m"]).arg(fixture("ct2/postnorm-float32")).arg("a b").output().unwrap();
    crate::util::one_line_error(&out, "a CTranslate2 model, which tchseq reads only to compare it with the model it came from (`tchseq verify -m MODEL --against");
}
