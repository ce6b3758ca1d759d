//! CTranslate2's own float16 and int16 storage (`ct2-fairseq-converter --quantization`, made by
//! `bash reference/ct2_convert.sh storage`): what tchseq reads is what CTranslate2 stored
//! (`tests/fixtures/ct2/storage.json`, dequantized in Python by `reference/ct2_storage.py`), and
//! within the storage's bounds of the fairseq weights the files were converted from.

use std::path::PathBuf;

use serde_json::Value as Json;
use tch::{Kind, Tensor};

use super::model_bin::DataType;
use super::*;
use crate::checkpoint::{load_checkpoint, upgrade};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn goldens(name: &str) -> Json {
    let text = std::fs::read_to_string(root().join("tests/fixtures/ct2/storage.json")).unwrap();
    let all: Json = serde_json::from_str(&text).unwrap();
    all["models"][name].clone()
}

fn derived(key: &str) -> bool {
    key.ends_with(".version") || key.ends_with(".embed_positions._float_tensor") || upgrade::is_derived_copy(key)
}

/// A stored variable as read: its values as stored and dequantized, from the fairseq weights it
/// became (rows of a fused variable put back together), else from the position tables.
fn stored_variable(m: &Ct2Model, var: &str) -> Option<(Option<Tensor>, Tensor, Option<f64>)> {
    if let Some(side) = var.strip_suffix("/position_encodings/encodings") {
        let table = m.position_encodings.get(&format!("{side}.embed_positions"))?;
        return Some((None, table.shallow_clone(), None));
    }
    let mut parts: Vec<&NameMap> = m.name_map.iter().filter(|n| n.stored_as == var).collect();
    parts.sort_by_key(|n| n.rows.map_or(0, |r| r.0));
    parts.dedup_by_key(|n| n.rows);
    if parts.is_empty() {
        return None;
    }
    let dequantized = Tensor::cat(&parts.iter().map(|n| m.state_dict[&n.fairseq].shallow_clone()).collect::<Vec<_>>(), 0);
    let q = m.quantized.get(&parts[0].fairseq)?;
    let stored = Tensor::cat(&parts.iter().map(|n| m.quantized[&n.fairseq].values.shallow_clone()).collect::<Vec<_>>(), 0);
    let scale = q.scale.as_ref().map(|s| s.double_value(&[]));
    Some((Some(stored), dequantized, scale))
}

/// Every non-float32 variable of `name`'s model.bin, read by tchseq, against CTranslate2's goldens.
fn check_goldens(name: &str, m: &Ct2Model) -> usize {
    let g = goldens(name);
    assert_eq!((m.spec.as_str(), m.revision as u64), (g["spec"].as_str().unwrap(), g["revision"].as_u64().unwrap()), "{name}");
    let mut checked = 0;
    for (var, want) in g["variables"].as_object().unwrap() {
        let (stored, dequantized, scale) = stored_variable(m, var).unwrap_or_else(|| panic!("{name}: {var} not read"));
        let shape: Vec<i64> = want["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
        assert_eq!(dequantized.size(), shape, "{name} {var}");
        assert_eq!(dequantized.kind(), Kind::Float, "{name} {var}");
        if let Some(stored) = stored {
            let stored_sum = stored.to_kind(Kind::Double).sum(Kind::Double).double_value(&[]);
            let want_sum = want["stored_sum"].as_f64().unwrap();
            assert!((stored_sum - want_sum).abs() <= 1e-9 * want_sum.abs().max(1.0), "{name} {var}: stored sum {stored_sum} vs {want_sum}");
            let dtype = match want["dtype"].as_str().unwrap() {
                "int16" => DataType::Int16,
                _ => DataType::Float16,
            };
            assert_eq!(m.quantized.values().find(|q| q.ct2_name == *var).map(|q| q.dtype), Some(dtype), "{name} {var}");
        }
        if let Some(want_scale) = want.get("scale").and_then(Json::as_f64) {
            assert_eq!(scale.map(|s| s as f32), Some(want_scale as f32), "{name} {var}");
        }
        let flat = dequantized.flatten(0, -1);
        for (i, v) in want["head"].as_array().unwrap().iter().enumerate() {
            assert_eq!(flat.double_value(&[i as i64]) as f32, v.as_f64().unwrap() as f32, "{name} {var}[{i}]");
        }
        let sum = flat.to_kind(Kind::Double).sum(Kind::Double).double_value(&[]);
        let (want_sum, abs_sum) = (want["sum"].as_f64().unwrap(), want["abs_sum"].as_f64().unwrap());
        assert!((sum - want_sum).abs() <= 1e-6 * abs_sum + 1e-9, "{name} {var}: sum {sum} vs {want_sum}");
        checked += 1;
    }
    checked
}

/// Each fairseq weight is within the storage's bound of the one it was converted from (float16:
/// exactly fairseq's weight rounded to float16); returns how many were stored quantized.
fn check_against_fairseq(name: &str, m: &Ct2Model, model_pt: &str, keep: impl Fn(&str) -> bool) -> usize {
    let ckpt = load_checkpoint(&root().join(model_pt)).unwrap();
    // learned positions are read as the stored table, which drops fairseq's first
    // `padding_idx + 1` rows
    let learned = |k: &str| k.ends_with(".embed_positions.weight");
    for (k, table) in ckpt.state_dict.iter().filter(|(k, _)| keep(k) && learned(k)) {
        let stored = &m.position_encodings[k.trim_end_matches(".weight")];
        let rows = stored.size()[0];
        assert_eq!(table.size()[0] - rows, 2, "{name} {k}");
        assert!(stored.equal(&table.narrow(0, 2, rows).to_kind(Kind::Half).to_kind(Kind::Float)), "{name} {k}");
    }
    let want: Vec<&String> = ckpt.state_dict.keys().filter(|k| keep(k) && !derived(k) && !learned(k)).collect();
    assert_eq!(m.state_dict.keys().collect::<Vec<_>>(), want, "{name}");
    for (k, t) in &m.state_dict {
        let want = &ckpt.state_dict[k];
        let Some(q) = m.quantized.get(k) else {
            assert!(t.dim() == 1 && t.equal(want), "{name} {k}: not quantized, not fairseq's");
            continue;
        };
        let err = (t - want).abs();
        assert!(bool::try_from(err.le_tensor(&q.max_abs_error().unwrap()).all()).unwrap(), "{name} {k}");
        if q.dtype == DataType::Float16 {
            assert!(t.equal(&want.to_kind(Kind::Half).to_kind(Kind::Float)), "{name} {k}");
        }
    }
    m.quantized.len()
}

#[test]
fn ctranslate2_int16_and_float16_files_read_as_ctranslate2_stored_them() {
    for (name, dtype) in [("postnorm-untied-2018-int16", DataType::Int16), ("postnorm-untied-2018-float16", DataType::Float16)] {
        let m = load(&root().join("tests/fixtures/ct2").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(m.unmapped.is_empty(), "{name}: {:?}", m.unmapped);
        assert!(m.quantized.values().all(|q| q.dtype == dtype), "{name}");
        let checked = check_goldens(name, &m);
        let quantized = check_against_fairseq(name, &m, "tests/fixtures/models/postnorm-untied-2018/model.pt", |_| true);
        assert!(checked >= 20 && quantized >= 20, "{name}: {checked} goldens, {quantized} quantized");
        for module in ["encoder.embed_positions", "decoder.embed_positions"] {
            let d = m.sinusoidal_max_abs_diff(module).unwrap().unwrap();
            assert!(d <= SINUSOIDAL_TOLERANCE, "{name} {module}: {d} past the table's rounding");
        }
        let args = m.fairseq_args().unwrap();
        assert_eq!((&args["encoder_learned_pos"], &args["decoder_learned_pos"]), (&Json::Bool(false), &Json::Bool(false)), "{name}");
    }
}

#[test]
fn ctranslate2_s_decoder_only_file_of_a_language_model_maps_its_decoder() {
    let name = "lm-gpt-float16";
    let m = load(&root().join("tests/fixtures/ct2").join(name)).unwrap();
    assert!(m.flags.encoder.is_none() && !m.flags.with_encoder_attention);
    assert!(m.unmapped.is_empty(), "{:?}", m.unmapped);
    assert!(check_goldens(name, &m) >= 20);
    assert!(check_against_fairseq(name, &m, "tests/fixtures/lm/lm-gpt/model.pt", |k| k.starts_with("decoder.")) >= 20);
    assert!(matches!(m.fairseq_args(), Err(Ct2Error::Unsupported { .. })));
}
