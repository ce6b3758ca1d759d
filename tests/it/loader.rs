//! The loader against fairseq 0.12.2's own `model.state_dict()` (the fixtures' weights.pt):
//! names, order, shapes, dtypes and values, for every fixture and wild checkpoint the
//! manifests list; config spot checks; model-directory resolution.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tchseq::checkpoint::{self, dtype_name, load_checkpoint, load_tensor_dict};
use tchseq::hub::{HubError, ModelFiles, ModelSpec};

/// `ModelFiles::resolve` of a model directory/file, checkpoint list, data directory and languages.
fn resolve(model: Option<&Path>, path: Option<&str>, data: Option<&Path>, src: Option<&str>, tgt: Option<&str>) -> Result<ModelFiles, HubError> {
    let spec = ModelSpec {
        model: model.map(Path::to_path_buf),
        path: path.map(str::to_string),
        data: data.map(Path::to_path_buf),
        source_lang: src.map(str::to_string),
        target_lang: tgt.map(str::to_string),
        ..Default::default()
    };
    ModelFiles::resolve(&spec, |p| Ok(checkpoint::read_summary(p)?))
}

use crate::util::{repo, tchseq};

use crate::util::json as manifest;

/// One checkpoint to check: where it is and what fairseq said about it.
struct Case {
    name: String,
    dir: PathBuf,
    checkpoint: PathBuf,
    weights: PathBuf,
    source_lang: String,
    target_lang: String,
    entry: Value,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let models = manifest("tests/fixtures/models/manifest.json");
    for e in models["fixtures"].as_array().unwrap() {
        let dir = repo(e["dir"].as_str().unwrap());
        out.push(Case {
            name: e["name"].as_str().unwrap().to_string(),
            checkpoint: dir.join(e["checkpoint"].as_str().unwrap()),
            weights: dir.join(e["goldens"]["weights"].as_str().unwrap()),
            dir,
            source_lang: e["source_lang"].as_str().unwrap().to_string(),
            target_lang: e["target_lang"].as_str().unwrap().to_string(),
            entry: e.clone(),
        });
    }
    let wild = manifest("tests/fixtures/wild/manifest.json");
    for e in wild["models"].as_array().unwrap() {
        let dir = repo(e["dir"].as_str().unwrap());
        let golden = dir.join(e["goldens"]["dir"].as_str().unwrap_or("."));
        out.push(Case {
            name: e["name"].as_str().unwrap().to_string(),
            checkpoint: dir.join(e["checkpoint"].as_str().unwrap()),
            weights: golden.join(e["goldens"]["weights"].as_str().unwrap()),
            dir,
            source_lang: e["source_lang"].as_str().unwrap().to_string(),
            target_lang: e["target_lang"].as_str().unwrap().to_string(),
            entry: e.clone(),
        });
    }
    assert!(out.len() >= 4, "manifests list only {} checkpoints", out.len());
    out
}

fn inspect_json(args: &[&str]) -> Value {
    let out = tchseq().arg("inspect").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "inspect {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("inspect {args:?}: not one JSON object: {e}"))
}

/// Each text-pipeline file is named by its kind: subword-nmt's `bpecodes` as `bpe_codes` (not
/// also as `sentencepiece_model`), a sentencepiece model as `sentencepiece_model`.
#[test]
fn inspect_names_each_pipeline_file_by_its_kind() {
    let bundled = inspect_json(&["-m", crate::util::repo("weights/multi30k.en-de").to_str().unwrap()]);
    assert!(bundled["bpe_codes"].as_str().is_some_and(|p| p.ends_with("/bpecodes")), "{}", bundled["bpe_codes"]);
    assert_eq!(bundled["sentencepiece_model"], Value::Null);
    let m2m = crate::util::fixture("multilingual/m2m");
    let m2m = inspect_json(&["-m", m2m.to_str().unwrap(), "-s", "en", "-t", "de"]);
    assert_eq!(m2m["bpe_codes"], Value::Null);
    assert!(m2m["sentencepiece_model"].as_str().is_some_and(|p| p.ends_with("/sentencepiece.bpe.model")), "{}", m2m["sentencepiece_model"]);
}

#[test]
fn inspect_lists_exactly_fairseqs_state_dict_for_every_fixture() {
    for case in cases() {
        // The model directory alone: checkpoint, dictionaries and languages are found the way
        // `--model DIR` finds them (the knn-seq checkpoints store no languages).
        let j = inspect_json(&["--model", case.dir.to_str().unwrap()]);
        let weights = load_tensor_dict(&case.weights).unwrap();
        let tensors = j["tensors"].as_array().unwrap();
        let names: Vec<&str> = tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
        let expected: Vec<&str> = weights.keys().map(String::as_str).collect();
        assert_eq!(names, expected, "{}: tensor names/order differ from fairseq's state_dict", case.name);
        let stored_fp16 = case.entry["dtype"].as_str() == Some("float16");
        for t in tensors {
            let name = t["name"].as_str().unwrap();
            let w = &weights[name];
            let shape: Vec<i64> = t["shape"].as_array().unwrap().iter().map(|d| d.as_i64().unwrap()).collect();
            assert_eq!(shape, w.size(), "{}: {name} shape", case.name);
            // fairseq loads an fp16 checkpoint into an fp32 model; we keep the stored dtype.
            let want = if stored_fp16 && !name.ends_with("_float_tensor") { "float16".to_string() } else { dtype_name(w.kind()) };
            assert_eq!(t["dtype"].as_str().unwrap(), want, "{}: {name} dtype", case.name);
        }
        let params: i64 = weights.values().map(|t| t.numel() as i64).sum();
        assert_eq!(j["parameters"].as_i64().unwrap(), params, "{}", case.name);
        assert_eq!(j["source_lang"], Value::from(case.source_lang.as_str()), "{}", case.name);
        assert_eq!(j["target_lang"], Value::from(case.target_lang.as_str()), "{}", case.name);
        for key in ["format", "config_source"] {
            if let Some(v) = case.entry.get(key) {
                assert_eq!(&j[key], v, "{}: {key}", case.name);
            }
        }
        let src_rows = weights["encoder.embed_tokens.weight"].size()[0];
        assert_eq!(j["dictionaries"]["source"]["size"].as_i64().unwrap(), src_rows, "{}", case.name);
    }
}

#[test]
fn tensor_values_equal_fairseqs_state_dict() {
    let mut compared = 0;
    for case in cases() {
        let ckpt = load_checkpoint(&case.checkpoint).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let weights = load_tensor_dict(&case.weights).unwrap();
        assert_eq!(ckpt.state_dict.len(), weights.len(), "{}", case.name);
        for (name, w) in &weights {
            // `_float_tensor` is `torch.FloatTensor(1)`: uninitialised memory in fairseq.
            if name.ends_with("_float_tensor") {
                continue;
            }
            let ours = ckpt.state_dict[name].to_kind(w.kind());
            assert!(ours.equal(w), "{}: {name} values differ from fairseq's", case.name);
            compared += 1;
        }
    }
    assert!(compared > 300, "only {compared} tensors compared");
}

#[test]
fn config_matches_what_fairseq_used() {
    let mut fixtures = 0;
    // the fixtures' manifest records fairseq's config; the wild checkpoints' does not
    for case in cases().into_iter().filter(|c| c.dir.starts_with(repo("tests/fixtures/models"))) {
        let facts = case.entry["model"].as_object().unwrap_or_else(|| panic!("{}: the manifest records no model config", case.name));
        fixtures += 1;
        let ckpt = load_checkpoint(&case.checkpoint).unwrap();
        let ours = serde_json::to_value(&ckpt.config).unwrap();
        let mut checked = 0;
        for (key, want) in facts {
            if want.is_null() {
                continue;
            }
            assert_eq!(&ours[key], want, "{}: config {key}", case.name);
            checked += 1;
        }
        assert!(checked >= 10, "{}: only {checked} config facts", case.name);
    }
    assert_eq!(fixtures, 6);
}

#[test]
fn tied_embeddings_share_one_storage() {
    let mut tied = 0;
    for case in cases() {
        let ckpt = load_checkpoint(&case.checkpoint).unwrap();
        let sd = &ckpt.state_dict;
        if ckpt.config.share_decoder_input_output_embed {
            let a = &sd["decoder.embed_tokens.weight"];
            let b = &sd["decoder.output_projection.weight"];
            assert!(a.equal(b), "{}", case.name);
            tied += 1;
        }
    }
    assert!(tied >= 1, "no fixture has tied embeddings");
}

#[test]
fn human_inspect_shows_summary_and_tensor_table() {
    let case = &cases()[0];
    let out = tchseq().args(["inspect", "--model", case.dir.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().any(|l| l.starts_with("arch") && l.contains("transformer")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("decoder.output_projection.weight") && l.contains("float")), "{text}");
}

fn wild(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no wild checkpoint {name}"))
}

#[test]
fn model_dir_layouts() {
    // checkpoints/ beside data-bin/, best preferred over last, languages inferred.
    let knn = wild("knnseq-toy-en-ja");
    let f = resolve(Some(&knn.dir), None, None, None, None).unwrap();
    assert_eq!(f.checkpoints, vec![knn.dir.join("checkpoints/checkpoint_best.pt")]);
    assert_eq!((f.source_lang.as_str(), f.target_lang.as_str()), ("en", "ja"));
    assert_eq!(f.src_dict, knn.dir.join("data-bin/dict.en.txt"));
    // --model pointing at the checkpoints/ folder finds ../data-bin.
    let f2 = resolve(Some(&knn.dir.join("checkpoints")), None, None, None, None).unwrap();
    assert_eq!(f2.tgt_dict, knn.dir.join("data-bin/dict.ja.txt"));
    // -s/-t win over inference; --path lists an ensemble.
    let last = knn.dir.join("checkpoints/checkpoint_last.pt");
    let best = knn.dir.join("checkpoints/checkpoint_best.pt");
    let list = format!("{}:{}", best.display(), last.display());
    let f3 = resolve(None, Some(&list), Some(&knn.dir.join("data-bin")), Some("ja"), Some("en")).unwrap();
    assert_eq!(f3.checkpoints.len(), 2);
    assert_eq!(f3.src_dict, knn.dir.join("data-bin/dict.ja.txt"));
    // v0: the dictionaries differ in size, the embeddings decide the direction.
    let v0 = wild("knnseq-toy-en-ja-v0");
    let f4 = resolve(Some(&v0.checkpoint), None, Some(&v0.dir.join("data-bin")), None, None).unwrap();
    assert_eq!((f4.source_lang.as_str(), f4.target_lang.as_str()), ("en", "ja"));
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("{} -> {}: {e}", from.display(), to.display()));
}

#[test]
fn undecidable_languages_ask_for_s_and_t() {
    let knn = wild("knnseq-toy-en-ja");
    let tmp = tempfile::tempdir().unwrap();
    copy(&knn.checkpoint, &tmp.path().join("model.pt"));
    for l in ["en", "ja"] {
        copy(&knn.dir.join(format!("data-bin/dict.{l}.txt")), &tmp.path().join(format!("dict.{l}.txt")));
    }
    let e = resolve(Some(tmp.path()), None, None, None, None).unwrap_err().to_string();
    assert!(e.contains("give the source and target languages"), "{e}");
    // the command line names its flags
    let out = crate::util::tchseq().args(["inspect", "-m"]).arg(tmp.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && stderr.contains("-s SRC -t TGT"), "{stderr}");
    let ok = resolve(Some(tmp.path()), None, None, Some("en"), Some("ja")).unwrap();
    assert_eq!(ok.checkpoints, vec![tmp.path().join("model.pt")]);
    // The dictionary check of `inspect` catches a swapped direction only when sizes differ;
    // here they agree, so the summary is what we can check.
    let s = checkpoint::read_summary(&ok.checkpoints[0]).unwrap();
    assert_eq!(s.src_embed_rows, Some(128));
}

#[test]
fn safetensors_and_torch_dicts_load_as_tensor_maps() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("t.safetensors");
    let header = r#"{"__metadata__":{"a":"b"},"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"y":{"dtype":"I64","shape":[1],"data_offsets":[16,24]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    for v in [1.0f32, 2.0, 3.0, 4.0] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes.extend_from_slice(&7i64.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let m = load_tensor_dict(&path).unwrap();
    assert_eq!(m.keys().collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(Vec::<f32>::try_from(m["x"].flatten(0, -1)).unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m["y"].int64_value(&[0]), 7);
}

/// A multilingual directory laid out as fairseq's downloads are: the fixed dictionary as
/// M2M-100 names it (`model_dict.128k.txt`), the sentencepiece model under the name the
/// checkpoint stores (`spm.model`), and a target language's own model beside it.
#[test]
fn multilingual_dirs_find_the_files_their_checkpoint_names() {
    let tmp = tempfile::tempdir().unwrap();
    let src = crate::util::fixture("multilingual/m2m");
    for (from, to) in [("model.pt", "model.pt"), ("model_dict.txt", "model_dict.128k.txt"), ("lang_list.txt", "lang_list.txt"), ("sentencepiece.bpe.model", "spm.model")] {
        copy(&src.join(from), &tmp.path().join(to));
    }
    let files = resolve(Some(tmp.path()), None, None, Some("en"), Some("de")).unwrap();
    assert_eq!(files.src_dict, tmp.path().join("model_dict.128k.txt"));
    assert_eq!(files.tgt_dict, files.src_dict);
    assert_eq!(files.lang_dict.as_deref(), Some(tmp.path().join("lang_list.txt").as_path()));
    assert_eq!(files.sentencepiece_model.as_deref(), Some(tmp.path().join("spm.model").as_path()));
    assert_eq!(files.target_sentencepiece_model, files.sentencepiece_model);
    copy(&src.join("sentencepiece.bpe.model"), &tmp.path().join("sentencepiece.de.model"));
    let files = resolve(Some(tmp.path()), None, None, Some("en"), Some("de")).unwrap();
    assert_eq!(files.sentencepiece_model.as_deref(), Some(tmp.path().join("spm.model").as_path()));
    assert_eq!(files.target_sentencepiece_model.as_deref(), Some(tmp.path().join("sentencepiece.de.model").as_path()));
    // without the --lang-dict file the languages are unknown: say which file is missing
    std::fs::remove_file(tmp.path().join("lang_list.txt")).unwrap();
    let e = resolve(Some(tmp.path()), None, None, Some("en"), Some("de")).unwrap_err().to_string();
    assert!(e.contains("lang_list.txt") && e.contains("not in the model directory"), "{e}");
}

/// A loaded model reads nothing from its checkpoint file: the weights that loading read where
/// the file is mapped (`checkpoint/file_storage.rs`) are packed or copied once it is done. The
/// file is then rewritten with zeros, and truncated: a tensor still over it would translate
/// otherwise, or fault.
#[test]
fn a_loaded_model_no_longer_reads_its_checkpoint_file() {
    use tchseq::hub::{Batching, LoadOptions, ModelBundle, TextMode, TranslateOptions, Translation, Translator};
    let lines = ["A man in an orange hat starring at something.", "Two dogs play in the snow."];
    for compute_type in ["exact", "float32", "int8"] {
        let dir = tempfile::tempdir().unwrap();
        for f in ["model.pt", "dict.en.txt", "dict.de.txt", "bpecodes"] {
            std::fs::copy(repo("weights/multi30k.en-de").join(f), dir.path().join(f)).unwrap();
        }
        let spec = ModelSpec { model: Some(dir.path().to_path_buf()), ..Default::default() };
        let bundle = ModelBundle::load(&spec, &LoadOptions::computing(tch::Device::Cpu, compute_type.parse().unwrap())).unwrap();
        let translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw).unwrap();
        let translate = || -> Vec<(String, f32)> {
            let (generator, batching) = translator.search(&TranslateOptions::default(), Batching::new(None, Some(8), 1).unwrap()).unwrap();
            let done = translator.translate(&generator, &lines, &batching, false).unwrap();
            done.into_iter()
                .flat_map(|t| match t {
                    Translation::Done { hypos, .. } => hypos,
                    t => panic!("not translated: {:?}", t.error()),
                })
                .map(|h| (translator.target_string(&h.tokens), h.score))
                .collect()
        };
        let before = translate();
        let model = dir.path().join("model.pt");
        let len = std::fs::metadata(&model).unwrap().len();
        std::fs::write(&model, vec![0u8; len as usize]).unwrap();
        assert_eq!(translate(), before, "{compute_type}: the file zeroed");
        std::fs::File::create(&model).unwrap();
        assert_eq!(translate(), before, "{compute_type}: the file truncated");
        assert!(before.len() >= lines.len(), "{before:?}");
        eprintln!("{compute_type}: {} hypotheses unchanged with the file zeroed and truncated", before.len());
    }
}
