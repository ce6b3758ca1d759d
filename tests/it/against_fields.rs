//! `verify --against` and the fields of a conversion's own files: every field
//! `reference/hf_plants.py` and `reference/ct2_plants.py` proved to change what transformers or
//! CTranslate2 computes (`tests/fixtures/{hf,ct2}/plants.json`), planted alone into a copy of a
//! faithful fixture, fails naming it; a field tchseq does not know is an error naming it and
//! its file.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{fixture, one_line_error, tchseq};

const M2M: [&str; 4] = ["-s", "en", "-t", "de"];

/// The fairseq model a fixture was converted from, with its language flags.
fn source_model(conversion: &str) -> (PathBuf, &'static [&'static str]) {
    match conversion {
        "m2m" | "m2m-float32" => (fixture("multilingual/m2m"), &M2M),
        "fsmt-postnorm" | "postnorm-float32" => (fixture("models/postnorm"), &[]),
        other => panic!("a plant in a fixture no test knows: {other}"),
    }
}

/// The golden's plants, each checked to be proven: its runtime raised, or some output moved.
fn proven(golden: &str, diff: &str, changed: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(&fs::read_to_string(fixture(golden)).unwrap()).unwrap();
    let plants = doc["plants"].as_array().unwrap().clone();
    for p in &plants {
        let raised = p["error"].as_str().is_some_and(|e| !e.is_empty());
        let moved = p[diff].as_f64().is_some_and(|d| d > 0.0) || p[diff].is_string() || p[changed].as_u64().is_some_and(|n| n > 0) || p["logits_shape"].is_array();
        assert!(raised || moved, "{golden}: a plant that changes nothing: {p}");
    }
    for p in doc["not_plants"].as_array().unwrap() {
        let why = p["why"].as_str().unwrap_or_default();
        assert!(!why.is_empty() && !why.starts_with("(no reason"), "{golden}: a candidate left out without a reason: {p}");
    }
    plants
}

fn copy_dir(from: &Path, to: &Path) {
    for f in fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
}

/// `file`'s JSON object with `field` set to `value`.
fn plant_json(path: &Path, field: &str, value: &Value) {
    let mut doc: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    doc.as_object_mut().unwrap().insert(field.to_string(), value.clone());
    fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}

/// `model.bin` with the scalar `field` set to `value` in its own dtype (the bytes rewritten in
/// place).
fn plant_flag(path: &Path, field: &str, value: f64) {
    use tchseq::checkpoint::ctranslate2::{model_bin, DataType};
    let mut bytes = fs::read(path).unwrap();
    let (offset, new) = {
        let bin = model_bin::parse(&bytes).unwrap();
        let v = bin.variables.get(field).unwrap_or_else(|| panic!("{}: no {field}", path.display()));
        let new: Vec<u8> = match v.dtype {
            DataType::Int8 => vec![value as i8 as u8],
            DataType::Int16 => (value as i16).to_le_bytes().to_vec(),
            DataType::Int32 => (value as i32).to_le_bytes().to_vec(),
            DataType::Float32 => (value as f32).to_le_bytes().to_vec(),
            other => panic!("{field} is {other:?}"),
        };
        assert_eq!(new.len(), v.data.len(), "{field}");
        (v.data.as_ptr() as usize - bytes.as_ptr() as usize, new)
    };
    bytes[offset..offset + new.len()].copy_from_slice(&new);
    fs::write(path, bytes).unwrap();
}

/// `verify --json` of a planted copy: its exit code, and whether its output names `field` (a
/// config row of `file`, or the error).
fn fails_naming(model: &Path, langs: &[&str], conversion: &Path, file: &str, field: &str) -> (Option<i32>, bool, String) {
    let input = conversion.join("input.txt");
    let source = if langs.is_empty() { "models/inputs.src" } else { "multilingual/input.en" };
    let lines: Vec<String> = fs::read_to_string(fixture(source)).unwrap().lines().take(4).map(String::from).collect();
    fs::write(&input, lines.join("\n")).unwrap();
    let out = tchseq().args(["verify", "--json", "-m"]).arg(model).args(langs).arg("--against").arg(conversion).arg("--input").arg(&input).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
    let named = match serde_json::from_str::<Value>(&stdout) {
        Ok(report) => report["config"].as_array().unwrap().iter().any(|c| c["field"] == field && c["file"] == file),
        Err(_) => stderr.contains(field),
    };
    (out.status.code(), named, format!("{stdout}{stderr}"))
}

#[test]
fn each_field_transformers_reads_fails_verify_against_when_planted() {
    let plants = proven("hf/plants.json", "max_abs_logit_diff", "generate_changed");
    assert!(plants.len() >= 50, "{} plants", plants.len());
    for p in &plants {
        let (name, file, field) = (p["fixture"].as_str().unwrap(), p["file"].as_str().unwrap(), p["field"].as_str().unwrap());
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixture(&format!("hf/{name}")), dir.path());
        if let Some(removed) = p["removed"].as_str() {
            fs::remove_file(dir.path().join(removed)).unwrap();
        }
        plant_json(&dir.path().join(file), field, &p["value"]);
        let (model, langs) = source_model(name);
        let (code, named, out) = fails_naming(&model, langs, dir.path(), file, field);
        assert!(code.is_some_and(|c| c != 0) && named, "{name} {file} {field}={}: exit {code:?}, not named: {out}", p["value"]);
    }
}

#[test]
fn each_field_ctranslate2_reads_fails_verify_against_when_planted() {
    let plants = proven("ct2/plants.json", "max_abs_log_prob_diff", "translate_changed");
    assert!(plants.len() >= 15, "{} plants", plants.len());
    for p in &plants {
        let (name, file, field) = (p["fixture"].as_str().unwrap(), p["file"].as_str().unwrap(), p["field"].as_str().unwrap());
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixture(&format!("ct2/{name}")), dir.path());
        match file {
            "config.json" => plant_json(&dir.path().join(file), field, &p["value"]),
            "model.bin" => plant_flag(&dir.path().join(file), field, p["value"].as_f64().unwrap()),
            other => panic!("a plant in {other}"),
        }
        let (model, langs) = source_model(name);
        let (code, named, out) = fails_naming(&model, langs, dir.path(), file, field);
        assert!(code.is_some_and(|c| c != 0) && named, "{name} {file} {field}={}: exit {code:?}, not named: {out}", p["value"]);
    }
}

/// A field neither compared nor known to be inert stops `verify --against` in one line that
/// names it and its file.
#[test]
fn an_unknown_field_is_an_error_naming_it_and_its_file() {
    let cases = [
        ("hf/m2m", "config.json", "normalize_before", "M2M100Config"),
        ("hf/fsmt-postnorm", "generation_config.json", "length_penality", "GenerationConfig"),
        ("ct2/m2m-float32", "config.json", "add_target_eos", "TransformerConfig"),
    ];
    for (name, file, field, class) in cases {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixture(name), dir.path());
        plant_json(&dir.path().join(file), field, &Value::Bool(false));
        let (model, langs) = source_model(name.split('/').nth(1).unwrap());
        let out = tchseq().args(["verify", "-m"]).arg(&model).args(langs).arg("--against").arg(dir.path()).output().unwrap();
        let err = one_line_error(&out, &format!("field {field:?}"));
        assert!(err.contains(&dir.path().join(file).display().to_string()) && err.contains(class), "{err}");
    }
}
