//! `tchseq verify` against the goldens fairseq 0.12.2 wrote (tests/fixtures/models).

use std::path::{Path, PathBuf};

use serde_json::Value;
use tch::Tensor;

use crate::util::{fixture, repo, tchseq};

/// A fairseq checkpoint with goldens fairseq 0.12.2 wrote for it.
pub struct Fixture {
    pub name: String,
    pub checkpoint: PathBuf,
    pub goldens: PathBuf,
    pub entry: Value,
}

impl Fixture {
    pub fn golden(&self, kind: &str) -> PathBuf {
        match kind {
            "weights" => self.goldens.join(self.entry["goldens"]["weights"].as_str().unwrap()),
            side => self.goldens.join(self.entry["goldens"]["verify"][side].as_str().unwrap()),
        }
    }
}

/// Every fixture of tests/fixtures/models/manifest.json and tests/fixtures/wild/manifest.json.
pub fn fixtures() -> Vec<Fixture> {
    let mut all = Vec::new();
    for (manifest, list) in [("models/manifest.json", "fixtures"), ("wild/manifest.json", "models")] {
        let text = std::fs::read_to_string(fixture(manifest)).expect("manifest");
        let manifest: Value = serde_json::from_str(&text).unwrap();
        let entries = manifest[list].as_array().expect("fixture list");
        assert!(!entries.is_empty());
        for e in entries {
            let dir = repo(e["dir"].as_str().unwrap());
            let goldens = match e["goldens"]["dir"].as_str() {
                Some(sub) => dir.join(sub),
                None => dir.clone(),
            };
            all.push(Fixture {
                name: e["name"].as_str().unwrap().to_string(),
                checkpoint: dir.join(e["checkpoint"].as_str().unwrap()),
                goldens,
                entry: e.clone(),
            });
        }
    }
    all
}

fn verify_json(model: &Path, reference: &Path, threads: Option<usize>) -> (Option<i32>, Value, String) {
    let mut cmd = crate::util::tchseq_bare();
    if let Some(n) = threads {
        cmd.arg("--threads").arg(n.to_string());
    }
    let out = cmd
        .args(["--device", "cpu", "verify", "-m"])
        .arg(model)
        .arg("--reference")
        .arg(reference)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), report, stderr)
}

fn worst_abs_diff(report: &Value) -> f64 {
    report["tensors"].as_array().unwrap().iter().filter_map(|t| t["max_abs_diff"].as_f64()).fold(0.0, f64::max)
}

const ACTIVATIONS: [&str; 7] =
    ["encoder_out", "encoder_padding_mask", "encoder_embedding", "encoder_states.0", "attn", "logits", "lprobs"];

#[test]
fn every_fixture_golden_passes_verify() {
    for f in fixtures() {
        let (name, entry) = (&f.name, &f.entry);
        for side in ["left", "right"] {
            let (code, report, stderr) = verify_json(&f.checkpoint, &f.golden(side), Some(crate::util::test_threads()));
            assert_eq!(code, Some(0), "{name} {side}: {stderr}\n{report}");
            assert_eq!(report["failed"], 0, "{name} {side}: {report}");
            assert_eq!(report["skipped"], 0, "{name} {side}: {report}");
            let names: Vec<&str> =
                report["tensors"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
            for wanted in ACTIVATIONS.iter().chain(&["decoder_inner_states.0"]) {
                assert!(names.contains(wanted), "{name} {side}: {wanted} not compared: {names:?}");
            }
            assert!(report["unused_keys"].as_array().unwrap().is_empty(), "{name}: {report}");
            // goldens.py stores every state time-major, whatever path fairseq took
            for row in report["tensors"].as_array().unwrap() {
                let n = row["name"].as_str().unwrap();
                if n.starts_with("encoder_states.") || n.starts_with("decoder_inner_states.") {
                    assert_eq!(row["layout"], "time_major", "{name} {side}: {row}");
                }
            }
            // `failed == 0`: every element within verify's derived tolerance (docs/commands.md,
            // "Tolerances"). The goldens carry the bits of the CPU
            // that made them, so the logits are computed from fairseq's own last decoder state
            // (compared itself above), not judged by what the layers compound on this CPU.
            for row in report["tensors"].as_array().unwrap().iter().filter(|r| matches!(r["name"].as_str(), Some("logits" | "lprobs"))) {
                let note = row["note"].as_str().unwrap_or_default();
                assert!(note.starts_with("computed from the reference's decoder_inner_states."), "{name} {side}: {row}");
            }
            let diff = worst_abs_diff(&report);
            // the layer implementation fairseq recorded for this batch is the one we ran
            // (recorded for the fixtures fairseq trained here, not for the wild checkpoints)
            match entry["encoder_attention_path"][side].as_str() {
                Some(recorded) => {
                    let ours = match recorded {
                        "fast_bt" => "fast_path_masked",
                        "fast_bt_nested" => "fast_path_nested",
                        _ => "regular",
                    };
                    assert_eq!(report["encoder_path"], ours, "{name} {side}");
                }
                None => assert!(entry["goldens"]["dir"].is_string(), "{name} {side}: the manifest records no encoder_attention_path"),
            }
            eprintln!("{name} {side}: {} tensors, max abs diff {diff:e}, encoder {}", names.len(), report["encoder_path"]);
        }
    }
}

#[test]
fn goldens_pass_with_the_default_thread_count() {
    let f = fixtures().into_iter().next().unwrap();
    let name = &f.name;
    let (code, report, stderr) = verify_json(&f.checkpoint, &f.golden("right"), None);
    assert_eq!(code, Some(0), "{name}: {stderr}\n{report}");
    eprintln!("{name} right, {} threads: max abs diff {:e}", report["threads"], worst_abs_diff(&report));
}

#[test]
fn every_fixture_weights_match_fairseq_state_dict() {
    for f in fixtures() {
        let (name, reference) = (&f.name, f.golden("weights"));
        let expected = tchseq::checkpoint::load_tensor_dict(&reference).unwrap();
        let (code, report, stderr) = verify_json(&f.checkpoint, &reference, Some(crate::util::test_threads()));
        assert_eq!(code, Some(0), "{name}: {stderr}\n{report}");
        let rows = report["tensors"].as_array().unwrap();
        assert_eq!(rows.len(), expected.len(), "{name}: every state-dict entry gets a row");
        for row in rows {
            let n = row["name"].as_str().unwrap();
            match row["status"].as_str().unwrap() {
                "ok" => assert_eq!(row["max_abs_diff"], 0.0, "{name}: {n} is not bit-identical"),
                // fairseq fills this buffer with uninitialised memory and never reads it
                "skip" => assert!(n.ends_with("embed_positions._float_tensor"), "{name}: skipped {n}"),
                other => panic!("{name}: {n} {other}"),
            }
        }
    }
}

fn perturbed_copy(f: &Fixture, edit: impl Fn(&str, &Tensor) -> Option<Tensor>) -> (tempfile::TempDir, PathBuf) {
    let golden = tchseq::checkpoint::load_tensor_dict(&f.golden("left")).unwrap();
    let tensors: Vec<(String, Tensor)> =
        golden.iter().filter_map(|(k, t)| edit(k, t).map(|t| (k.clone(), t))).collect();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(format!("{}.safetensors", f.name));
    Tensor::write_safetensors(&tensors, &path).unwrap();
    (tmp, path)
}

#[test]
fn a_golden_perturbed_by_1e_3_fails_and_names_the_tensor() {
    let f = fixtures().into_iter().next().unwrap();
    let (_tmp, path) = perturbed_copy(&f, |k, t| {
        let t = t.copy();
        if k == "logits" {
            // position (0, 0) is a real target token in every golden (EOS first)
            let _ = t.get(0).get(0).get(3).g_add_scalar_(1e-3);
        }
        Some(t)
    });
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let failing: Vec<&str> = text.lines().filter_map(|l| l.split_once("  FAIL").map(|(row, _)| row)).collect();
    assert_eq!(failing.len(), 1, "{text}");
    assert!(failing[0].starts_with("logits "), "{text}");
    // the columns end max_abs_diff, max_rel_diff, bound
    let diff: f64 = failing[0].split_whitespace().rev().nth(2).unwrap().parse().unwrap();
    assert!((9e-4..1.1e-3).contains(&diff), "{text}");
    let compared = tchseq::checkpoint::load_tensor_dict(&f.golden("left")).unwrap().len() - 3;
    assert_eq!(text.lines().last().unwrap(), format!("{} passed, 1 failed", compared - 1), "{text}");
}

#[test]
fn a_wrong_shaped_reference_tensor_fails_naming_both_shapes() {
    let f = fixtures().into_iter().next().unwrap();
    let (_tmp, path) = perturbed_copy(&f, |k, t| {
        Some(if k == "encoder_out" { t.narrow(2, 0, 4).copy() } else { t.copy() })
    });
    let (code, report, stderr) = verify_json(&f.checkpoint, &path, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}");
    let failed: Vec<&Value> = report["tensors"].as_array().unwrap().iter().filter(|t| t["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["name"], "encoder_out");
    assert_eq!(failed[0]["shape"], serde_json::json!([18, 7, 4]), "{report}");
    assert_eq!(failed[0]["our_shape"], serde_json::json!([18, 7, 32]), "{report}");
    assert_eq!(failed[0]["note"], "shape mismatch: ours [18, 7, 32], reference [18, 7, 4]", "{report}");
}

/// The report line of `name` in verify's text output.
fn text_line(text: &str, name: &str) -> String {
    text.lines().find(|l| l.split_whitespace().next() == Some(name)).unwrap_or_else(|| panic!("no {name} line:\n{text}")).to_string()
}

#[test]
fn a_wrong_shaped_encoder_state_names_ours_in_both_layouts_and_theirs() {
    let f = fixtures().into_iter().next().unwrap();
    let (_tmp, path) = perturbed_copy(&f, |k, t| {
        Some(if k == "encoder_states.1" { t.narrow(1, 0, 5).copy() } else { t.copy() })
    });
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text_line(&text, "encoder_states.1");
    assert!(line.contains("FAIL"), "{text}");
    assert!(
        line.ends_with("(shape mismatch: ours [18, 7, 32] (time-major) or [7, 18, 32] (batch-first), reference [18, 5, 32])"),
        "{text}"
    );
    assert_eq!(text.lines().filter(|l| l.contains("FAIL")).count(), 1, "{text}");
}

/// The fast-path goldens of tests/fixtures/models/manifest.json: (batch name, file, entry).
fn fast_path_goldens() -> Vec<(String, PathBuf, Value)> {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let goldens = f.entry["goldens"]["verify_fastpath"].as_object().expect("postnorm has fast-path goldens");
    assert_eq!(goldens.len(), 3, "left, right and square");
    goldens.iter().map(|(k, v)| (k.clone(), f.goldens.join(v["file"].as_str().unwrap()), v.clone())).collect()
}

#[test]
fn goldens_saved_straight_from_fairseqs_fast_path_pass_and_name_their_layout() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    for (batch, golden, entry) in fast_path_goldens() {
        let (code, report, stderr) = verify_json(&f.checkpoint, &golden, Some(crate::util::test_threads()));
        assert_eq!(code, Some(0), "{batch}: {stderr}\n{report}");
        assert_eq!(report["failed"], 0, "{batch}: {report}");
        let ours = match entry["encoder_path"].as_str().unwrap() {
            "fast_bt" => "fast_path_masked",
            "fast_bt_nested" => "fast_path_nested",
            other => panic!("{batch}: {other} is not a fast path"),
        };
        assert_eq!(report["encoder_path"], ours, "{batch}");
        let rows = report["tensors"].as_array().unwrap();
        let (b, s) = (entry["batch"].as_i64().unwrap(), entry["src_len"].as_i64().unwrap());
        let fairseq_layouts = entry["encoder_states_layout"].as_array().unwrap();
        assert_eq!(fairseq_layouts.len(), 3, "{batch}");
        for (i, fairseq_layout) in fairseq_layouts.iter().enumerate() {
            let name = format!("encoder_states.{i}");
            let row = rows.iter().find(|r| r["name"] == name.as_str()).unwrap_or_else(|| panic!("{batch}: {name} not compared"));
            assert_eq!(row["status"], "ok", "{batch}: {row}");
            let (layout, shape) = match fairseq_layout.as_str().unwrap() {
                "time_major" => ("time_major", [s, b, 32]),
                "batch_first" | "nested" => ("batch_first", [b, s, 32]),
                other => panic!("{batch}: layout {other}"),
            };
            assert_eq!(row["layout"], layout, "{batch}: {row}");
            assert_eq!(row["shape"], serde_json::json!(shape), "{batch}: {row}");
            let note = row["note"].as_str().unwrap_or_default();
            assert_eq!(note.contains("nested tensor"), fairseq_layout == "nested", "{batch}: {row}");
            assert_eq!(note.starts_with(&format!("B = S = {b}: ")), b == s, "{batch}: {row}");
        }
        // fairseq's own fast path returns layer outputs batch-first
        assert_eq!(fairseq_layouts[1], if batch == "right" { "nested" } else { "batch_first" }, "{batch}");
        eprintln!("{batch}: B={b} S={s} {}, max abs diff {:e}", report["encoder_path"], worst_abs_diff(&report));
    }
}

#[test]
fn the_text_report_names_the_layout_it_read() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let (_, golden, _) = fast_path_goldens().into_iter().find(|(b, _, _)| b == "left").unwrap();
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(&golden).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let header: Vec<&str> = text.lines().find(|l| l.starts_with("name ")).unwrap().split_whitespace().collect();
    assert_eq!(header, ["name", "shape", "layout", "max_abs_diff", "max_rel_diff", "bound", "status"], "{text}");
    for (name, layout) in [("encoder_states.0", "time-major"), ("encoder_states.1", "batch-first"), ("encoder_states.2", "batch-first")] {
        let line = text_line(&text, name);
        assert!(line.contains(&format!("  {layout}  ")) && line.ends_with("ok"), "{text}");
    }
}

#[test]
fn when_b_equals_s_a_state_matching_in_neither_layout_fails() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let (_, golden, entry) = fast_path_goldens().into_iter().find(|(b, _, _)| b == "square").unwrap();
    assert_eq!(entry["batch"], entry["src_len"]);
    let tensors = tchseq::checkpoint::load_tensor_dict(&golden).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("square.safetensors");
    let edited: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(k, t)| {
            // saved as fairseq returned them: some are views
            let t = t.contiguous().copy();
            if k == "encoder_states.1" {
                // row 0, position 0 is a real token of the batch-first [B,S,C] golden
                let _ = t.get(0).get(0).get(5).g_add_scalar_(1e-3);
            }
            (k.clone(), t)
        })
        .collect();
    Tensor::write_safetensors(&edited, &path).unwrap();
    let (code, report, stderr) = verify_json(&f.checkpoint, &path, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}");
    let failed: Vec<&Value> = report["tensors"].as_array().unwrap().iter().filter(|t| t["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{report}");
    let row = failed[0];
    assert_eq!(row["name"], "encoder_states.1");
    // the closest layout is reported, with the other's difference
    assert_eq!(row["layout"], "batch_first", "{row}");
    let diff = row["max_abs_diff"].as_f64().unwrap();
    assert!((9e-4..1.1e-3).contains(&diff), "{row}");
    let note = row["note"].as_str().unwrap();
    assert!(note.contains("neither matches") && note.contains("time-major max_abs_diff"), "{row}");
}

#[test]
fn nested_reference_tensors_read_as_fairseq_pads_them() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let (_, golden, _) = fast_path_goldens().into_iter().find(|(b, _, _)| b == "right").unwrap();
    let read = tchseq::checkpoint::read_tensor_dict(&golden).unwrap();
    assert_eq!(read.nested, ["encoder_states.1", "encoder_states.2"]);
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    // goldens.py stored the same batch's states as to_padded_tensor(0.0), transposed
    let padded = tchseq::checkpoint::load_tensor_dict(&f.golden("right")).unwrap();
    for name in &read.nested {
        let ours = &read.tensors[name];
        let theirs = padded[name].transpose(0, 1);
        assert_eq!(ours.size(), theirs.size(), "{name}");
        assert!(ours.allclose(&theirs, 1e-5, 1e-5, false), "{name}");
        // padded positions are exactly 0.0, as to_padded_tensor(0.0) writes them
        let pad = read.tensors["src_tokens"].eq(1).unsqueeze(-1).expand_as(ours);
        assert_eq!(ours.masked_select(&pad).abs().max().double_value(&[]), 0.0, "{name}");
    }
}

#[test]
fn activations_without_their_inputs_are_an_input_error() {
    let f = fixtures().into_iter().next().unwrap();
    let (_tmp, path) = perturbed_copy(&f, |k, t| (k != "prev_output_tokens").then(|| t.copy()));
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(line.contains("prev_output_tokens"), "{err}");
}

/// A reference of another architecture (here prenorm's state dict against postnorm) is named
/// as such, by the facts that differ, and nothing else is compared: not 100 FAIL rows.
#[test]
fn a_reference_of_another_architecture_stops_at_the_config() {
    let (model, reference) = (fixture("models/postnorm"), fixture("models/prenorm/weights.pt"));
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&model).arg("--reference").arg(&reference).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("config encoder_ffn_embed_dim: 64 here, 96 in the reference  FAIL\n"), "{text}");
    assert!(text.contains("config encoder_learned_pos: false here, true in the reference  FAIL\n"), "{text}");
    let fails = text.lines().filter(|l| l.contains("FAIL")).count();
    assert!(text.lines().all(|l| !l.contains("FAIL") || l.starts_with("config ")), "{text}");
    assert!(text.contains(&format!("the reference is of another architecture ({fails} facts differ): no tensor compared\n")), "{text}");
    assert_eq!(text.lines().last(), Some(format!("0 passed, {fails} failed").as_str()), "{text}");
    assert!(fails < 12, "{text}");

    let (code, report, stderr) = verify_json(&model, &reference, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(report["tensors"], serde_json::json!([]), "{report}");
    assert_eq!(report["failed"].as_u64(), Some(report["config"].as_array().unwrap().len() as u64), "{report}");
    let field = |name: &str| report["config"].as_array().unwrap().iter().find(|r| r["field"] == name).cloned();
    assert_eq!(field("decoder_ffn_embed_dim"), Some(serde_json::json!({"field": "decoder_ffn_embed_dim", "model": 64, "reference": 48})), "{report}");

    // input ids the model's dictionary cannot hold are the same kind of mismatch, not a crash
    let f = fixtures().into_iter().next().unwrap();
    let (_tmp, path) = perturbed_copy(&f, |k, t| Some(if k == "src_tokens" { t + 1000 } else { t.copy() }));
    let (code, report, stderr) = verify_json(&f.checkpoint, &path, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}");
    let rows = report["config"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["field"], "source dictionary size", "{report}");
}

/// `verify -m M` with neither --reference nor --against names both.
#[test]
fn verify_without_a_comparison_names_both_kinds() {
    let out = tchseq().args(["verify", "-m"]).arg(fixture("models/postnorm")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("error:"), "{err}");
    assert!(err.contains("--reference") && err.contains("--against"), "{err}");
}

#[test]
fn an_unreadable_reference_is_exit_2() {
    let f = fixtures().into_iter().next().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("bogus.pt");
    std::fs::write(&bogus, b"not a torch file").unwrap();
    let out = tchseq().args(["verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(&bogus).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("error:"));
}

/// The CPU kinds fairseq made pinned references on: tests/fixtures/reproducible/<kind>.
fn reference_cpu_kinds() -> Vec<String> {
    let mut kinds: Vec<String> =
        std::fs::read_dir(fixture("reproducible")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    kinds.sort();
    kinds
}

/// Every verify reference fairseq made under the pinned AVX2 kernels on another CPU kind
/// (tests/fixtures/reproducible/<kind>/manifest.json): (kind, fixture, side, file).
fn other_cpu_references() -> Vec<(String, String, String, PathBuf)> {
    let mut all = Vec::new();
    for kind in reference_cpu_kinds() {
        let manifest = crate::util::json_at(&fixture(&format!("reproducible/{kind}/manifest.json")));
        for (name, files) in manifest["fixtures"].as_object().unwrap() {
            for side in ["left", "right"] {
                let file = files[format!("verify_{side}")]["file"].as_str().unwrap();
                all.push((kind.to_string(), name.clone(), side.to_string(), fixture(&format!("reproducible/{kind}/{file}"))));
            }
        }
    }
    all
}

#[test]
fn references_fairseq_saved_on_other_cpu_kinds_pass_the_derived_tolerance() {
    let kinds = reference_cpu_kinds();
    assert_eq!(kinds, ["amd", "amd-zen3", "intel", "intel-avx2"]);
    let references = other_cpu_references();
    assert_eq!(references.len(), kinds.len() * 6 * 2, "{} CPU kinds x 6 fixtures x 2 sides", kinds.len());
    let mut worst: (f64, String) = (0.0, String::new());
    let mut rescaled: (f64, String) = (0.0, String::new());
    for (kind, name, side, reference) in references {
        let model = fixture(&format!("models/{name}"));
        let (code, report, stderr) = verify_json(&model, &reference, Some(crate::util::test_threads()));
        assert_eq!(code, Some(0), "{kind} {name} {side}: {stderr}\n{report}");
        assert_eq!(report["failed"], 0, "{kind} {name} {side}: {report}");
        assert_eq!(report["tolerance"]["rule"], "derived", "{report}");
        for row in report["tensors"].as_array().unwrap() {
            let (diff, atol) = (row["max_abs_diff"].as_f64().unwrap(), row["bound"]["atol"].as_f64().unwrap());
            if atol > 0.0 && diff / atol > worst.0 {
                worst = (diff / atol, format!("{kind} {name} {side} {}", row["name"]));
            }
            let eps = report["tolerance"]["eps"].as_f64().unwrap();
            if let Some(s) = row["rescale"].as_f64().filter(|s| s.abs() / eps > rescaled.0) {
                rescaled = (s.abs() / eps, format!("{kind} {name} {side} {}", row["name"]));
            }
        }
    }
    eprintln!("largest max_abs_diff / bound: {:.3} ({})", worst.0, worst.1);
    eprintln!("largest rescale: {:.3} eps ({})", rescaled.0, rescaled.1);
}

/// A copy of `f`'s weights golden with `weight` scaled by 1 + `rel`.
fn weights_with_one_scaled(f: &Fixture, weight: &str, rel: f64) -> (tempfile::TempDir, PathBuf) {
    let golden = tchseq::checkpoint::load_tensor_dict(&f.golden("weights")).unwrap();
    assert!(golden.contains_key(weight), "{weight}");
    let tensors: Vec<(String, Tensor)> =
        golden.iter().map(|(k, t)| (k.clone(), if k == weight { t * (1.0 + rel) } else { t.copy() })).collect();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("weights.safetensors");
    Tensor::write_safetensors(&tensors, &path).unwrap();
    (tmp, path)
}

#[test]
fn a_weight_scaled_by_1e_4_relative_fails_naming_it() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let weight = "decoder.layers.0.fc1.weight";
    let (_tmp, path) = weights_with_one_scaled(&f, weight, 1e-4);
    let (code, report, stderr) = verify_json(&f.checkpoint, &path, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}\n{report}");
    let failed: Vec<&Value> = report["tensors"].as_array().unwrap().iter().filter(|t| t["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["name"], weight, "{report}");
    let rel = failed[0]["max_rel_diff"].as_f64().unwrap();
    assert!((0.9e-4..1.1e-4).contains(&rel), "{}", failed[0]);
    // one rounding of float32, not an activation's drift
    let rtol = failed[0]["bound"]["rtol"].as_f64().unwrap();
    assert!((rtol / 2f64.powi(-24) - 1.0).abs() < 1e-9, "{}", failed[0]);
}

#[test]
fn activations_of_a_layer_norm_eps_of_2e_5_fail_from_the_first_layer_norm_on() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let reference = fixture("verify_tolerance/postnorm_ln_eps_2e-5_left.pt");
    let (code, report, stderr) = verify_json(&f.checkpoint, &reference, Some(crate::util::test_threads()));
    assert_eq!(code, Some(1), "{stderr}\n{report}");
    let status = |name: &str| {
        let row = report["tensors"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}: {report}"));
        row["status"].as_str().unwrap().to_string()
    };
    // what comes before any layer norm is fairseq's own
    for name in ["encoder_embedding", "encoder_states.0", "decoder_inner_states.0"] {
        assert_eq!(status(name), "ok", "{name}: {report}");
    }
    // the first layer's output is the first layer norm's: there it fails
    assert_eq!(status("encoder_states.1"), "fail", "{report}");
    let failed: Vec<&str> =
        report["tensors"].as_array().unwrap().iter().filter(|t| t["status"] == "fail").map(|t| t["name"].as_str().unwrap()).collect();
    assert!(failed.iter().all(|n| n.starts_with("encoder_states.") || n.starts_with("decoder_inner_states.") || *n == "encoder_out" || *n == "attn"), "{failed:?}");
}

/// A LayerNorm eps of 1.1e-5 for 1e-5 moves no element beyond its bound, as much as kernel drift
/// does; it rescales every layer norm's output, which drift does not.
#[test]
fn a_layer_norm_eps_changed_by_1e_6_fails_as_a_rescale_from_the_first_layer_norm_on() {
    for (name, file, first_layer_norm) in [
        ("postnorm", "postnorm_ln_eps_1.1e-5_left.pt", "encoder_states.1"),
        ("untied", "untied_ln_eps_1.1e-5_right.pt", "encoder_states.1"),
    ] {
        let model = fixture(&format!("models/{name}"));
        let reference = fixture(&format!("verify_tolerance/{file}"));
        let (code, report, stderr) = verify_json(&model, &reference, Some(crate::util::test_threads()));
        assert_eq!(code, Some(1), "{name}: {stderr}\n{report}");
        let rows = report["tensors"].as_array().unwrap();
        let row = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap_or_else(|| panic!("{n}: {report}"));
        for n in ["encoder_embedding", "encoder_states.0", "decoder_inner_states.0"] {
            assert_eq!(row(n)["status"], "ok", "{name} {n}: {report}");
        }
        let eps = report["tolerance"]["eps"].as_f64().unwrap();
        let first = row(first_layer_norm);
        assert_eq!(first["status"], "fail", "{name}: {first}");
        let (s, se) = (first["rescale"].as_f64().unwrap(), first["rescale_se"].as_f64().unwrap());
        // the reference's larger eps made its outputs smaller: ours are a rescale above 1, far
        // beyond chance
        assert!(s > report["tolerance"]["rescale_eps"].as_f64().unwrap() * eps, "{name}: {first}");
        assert!(s / se > 2.0 * report["tolerance"]["rescale_se"].as_f64().unwrap(), "{name}: {first}");
        assert!(first["note"].as_str().unwrap().starts_with("rescaled: ours = (1 + "), "{first}");
        for r in rows.iter().filter(|r| r["status"] == "fail") {
            // not one element beyond its bound: only the rescale tells
            let (diff, atol) = (r["max_abs_diff"].as_f64().unwrap(), r["bound"]["atol"].as_f64().unwrap());
            assert!(diff <= atol, "{name}: {r}");
            let n = r["name"].as_str().unwrap();
            assert!(n.starts_with("encoder_states.") || n.starts_with("decoder_inner_states.") || n == "encoder_out", "{name}: {r}");
        }
    }
}

#[test]
fn explicit_atol_and_rtol_override_the_derived_bound_and_the_report_says_so() {
    let f = fixtures().into_iter().find(|f| f.name == "postnorm").unwrap();
    let reference = fixture("verify_tolerance/postnorm_ln_eps_2e-5_left.pt");
    let out = tchseq()
        .args(["--device", "cpu", "verify", "-m"])
        .arg(&f.checkpoint)
        .arg("--reference")
        .arg(&reference)
        .args(["--atol", "1e-3", "--rtol", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l == "tolerance: --atol 1e-3 --rtol 0e0"), "{text}");
    assert!(text_line(&text, "encoder_states.1").ends_with("  1.00e-3  ok"), "{text}");

    let (code, report, _) = verify_json(&f.checkpoint, &f.golden("left"), Some(crate::util::test_threads()));
    assert_eq!(code, Some(0));
    let text = serde_json::to_string(&report["tolerance"]).unwrap();
    assert!(text.starts_with(r#"{"rule":"derived","c":"#), "{text}");
    let out = tchseq().args(["--device", "cpu", "verify", "-m"]).arg(&f.checkpoint).arg("--reference").arg(f.golden("left")).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("tolerance: derived: ")), "{text}");
}
