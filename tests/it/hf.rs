//! Hugging Face directories (`tests/fixtures/hf`, converted from the committed fairseq fixtures
//! by reference/hf_convert.py, each checked there against transformers' own forward): loaded with
//! `-m DIR`, they translate byte for byte as the fairseq checkpoint they came from, and give
//! fairseq's goldens.

use std::fs;
use std::path::Path;

use crate::multilingual::{argv_of, golden_path, goldens, parse_argv};
use crate::util::fairseq_out::{compare_settled, parse_fairseq, Rule, Tally};
use crate::util::{fixture, repo, result_lines, stdout_ok, tchseq};

/// `translate --format fairseq` of `input` with the model `model` and the flags `args`.
fn translate(model: &Path, input: &Path, args: &[String]) -> String {
    let out = tchseq().args(["translate", "--format", "fairseq", "-m"]).arg(model).arg("--input").arg(input).args(args).output().unwrap();
    stdout_ok(&out)
}

/// Every fairseq-interactive golden of the M2M-100 fixture: the converted directory gives what
/// the checkpoint gives, line for line, and so fairseq's hypotheses (a differing score only as a
/// near-tie proven from fairseq's own score, as for the checkpoint itself).
#[test]
fn an_m2m100_directory_translates_as_its_fairseq_checkpoint_and_gives_fairseq_s_goldens() {
    let hf = fixture("hf/m2m");
    let (mut runs, mut tally) = (0, Tally::default());
    for (name, entry) in goldens() {
        let argv = argv_of(&entry);
        if !name.contains("/m2m/") || argv[0] != "fairseq-interactive" || name.contains("_init_") {
            continue;
        }
        let r = parse_argv(&argv);
        let input = repo(entry["input"].as_str().unwrap());
        let mut args = vec!["-s".to_string(), r.src.clone(), "-t".into(), r.tgt.clone()];
        args.extend(r.opts.iter().cloned());
        let ours = translate(&hf, &input, &args);
        let theirs = translate(&repo(&r.dir), &input, &args);
        assert_eq!(result_lines(&ours), result_lines(&theirs), "{name}: the HF directory against its checkpoint");
        let want = parse_fairseq(&fs::read_to_string(golden_path(&name)).unwrap());
        let model = vec!["-m".to_string(), hf.display().to_string(), "-s".into(), r.src.clone(), "-t".into(), r.tgt.clone()];
        let c = compare_settled(&want, &parse_fairseq(&ours), &model, &Rule::of(&r.opts));
        c.assert_ok(&name);
        tally.add(&c);
        runs += 1;
    }
    assert_eq!(runs, 4, "the m2m fixture's interactive goldens");
    tally.assert_within_cap("HF m2m translate");
}

/// The FSMT directory of the post-norm fixture (two vocabulary files, `</w>` word ends, an empty
/// merges.txt for a model trained without BPE): the checkpoint's translations, byte for byte.
#[test]
fn an_fsmt_directory_translates_as_its_fairseq_checkpoint() {
    let input = fixture("models/inputs.src");
    let args: Vec<String> = ["--beam", "5", "--nbest", "2", "--batch-size", "16"].map(String::from).to_vec();
    let ours = translate(&fixture("hf/fsmt-postnorm"), &input, &args);
    let theirs = translate(&fixture("models/postnorm"), &input, &args);
    assert_eq!(result_lines(&ours).len(), result_lines(&theirs).len());
    assert_eq!(result_lines(&ours), result_lines(&theirs));
}

/// What loading reports: the config's source, the vocabulary files as dictionaries, and the
/// language tokens M2M-100's vocabulary holds.
#[test]
fn inspect_names_what_a_hugging_face_directory_holds() {
    let out = tchseq().args(["inspect", "-m"]).arg(fixture("hf/m2m")).args(["-s", "en", "-t", "de"]).output().unwrap();
    let text = stdout_ok(&out);
    for want in ["(config from config.json)", "vocab.json (3971)", "__fr__=3968 __en__=3969 __de__=3970", "pre-norm", "bpe=sentencepiece"] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let out = tchseq().args(["inspect", "-m"]).arg(fixture("hf/fsmt-postnorm")).output().unwrap();
    let text = stdout_ok(&out);
    for want in ["vocab-src.json (48)", "vocab-tgt.json (48)", "languages      src -> tgt", "post-norm"] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// A vocabulary whose ids do not run 0, 1, 2, ... from fairseq's four specials, a config of a
/// model class this reader does not know, and a missing weight are one-line errors.
#[test]
fn a_broken_hugging_face_directory_is_one_error() {
    let src = fixture("hf/fsmt-postnorm");
    let copy = |dir: &Path| {
        for f in fs::read_dir(&src).unwrap() {
            let f = f.unwrap();
            fs::copy(f.path(), dir.join(f.file_name())).unwrap();
        }
    };
    let run = |dir: &Path| tchseq().args(["translate", "-m"]).arg(dir).arg("a b").output().unwrap();

    let dir = tempfile::tempdir().unwrap();
    copy(dir.path());
    let vocab = fs::read_to_string(dir.path().join("vocab-src.json")).unwrap().replace("\"<pad>\": 1", "\"<pad>\": 7");
    fs::write(dir.path().join("vocab-src.json"), vocab).unwrap();
    crate::util::one_line_error(&run(dir.path()), "the ids must run 0, 1, 2, ...");

    let dir = tempfile::tempdir().unwrap();
    copy(dir.path());
    let config = fs::read_to_string(dir.path().join("config.json")).unwrap().replace("\"model_type\": \"fsmt\"", "\"model_type\": \"bart\"");
    fs::write(dir.path().join("config.json"), config).unwrap();
    crate::util::one_line_error(&run(dir.path()), "model_type \"bart\" is not a model tchseq reads");

    let dir = tempfile::tempdir().unwrap();
    copy(dir.path());
    let weights = tchseq::checkpoint::load_tensor_dict(&dir.path().join("model.safetensors")).unwrap();
    let kept: Vec<(String, tch::Tensor)> = weights.into_iter().filter(|(k, _)| k != "model.encoder.layers.0.fc1.bias").collect();
    tch::Tensor::write_safetensors(&kept, dir.path().join("model.safetensors")).unwrap();
    crate::util::one_line_error(&run(dir.path()), "encoder.layers.0.fc1.bias");
}

/// Models transformers built itself, in its own conventions (`random-m2m100`: the language tokens
/// after `vocab.json`; `random-nllb`: NLLB-200's, a sentencepiece model and no `vocab.json`, the
/// language codes at their added-token ids): the sources encode to transformers' own ids, and
/// `verify` holds our activations to transformers' own forward, saved with the batch in its names
/// and layout.
#[test]
fn verify_holds_models_transformers_made_to_transformers_own_forward() {
    for (name, src, tgt) in [("random-m2m100", "en", "de"), ("random-nllb", "eng_Latn", "deu_Latn")] {
        holds_to_transformers_forward(name, src, tgt);
    }
}

fn holds_to_transformers_forward(name: &str, src: &str, tgt: &str) {
    let dir = fixture(&format!("hf/{name}"));
    let theirs = tchseq::checkpoint::load_tensor_dict(&dir.join("reference.safetensors")).unwrap();
    let get = |k: &str| theirs.get(k).unwrap_or_else(|| panic!("{name}: reference.safetensors has no {k}")).shallow_clone();

    // lines 1, 3 and 7 of input.en, each after its language token
    let spec = tchseq::hub::ModelSpec { model: Some(dir.clone()), source_lang: Some(src.into()), target_lang: Some(tgt.into()), ..Default::default() };
    let bundle = tchseq::hub::ModelBundle::load(&spec, &tchseq::hub::LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    let lang = bundle.src_dict.index(&format!("__{src}__"));
    let lines: Vec<String> = fs::read_to_string(fixture("multilingual/input.en")).unwrap().lines().map(String::from).collect();
    let input_ids = get("input_ids");
    for (row, line) in [0usize, 2, 6].iter().enumerate() {
        let out = tchseq().args(["encode", "--ids", "-m"]).arg(&dir).args(["-s", src, "-t", tgt]).write_stdin(lines[*line].clone()).output().unwrap();
        let mut ours: Vec<i64> = vec![lang];
        ours.extend(stdout_ok(&out).split_whitespace().map(|t| t.parse::<i64>().unwrap()));
        let want: Vec<i64> = Vec::<i64>::try_from(input_ids.get(row as i64)).unwrap().into_iter().filter(|&t| t != 1).collect();
        assert_eq!(ours, want, "{name}: line {}", line + 1);
    }

    let time_major = |k: &str| get(k).transpose(0, 1).contiguous();
    // transformers' last hidden state of each side is after the final layer norm, fairseq's is not
    let reference: Vec<(&str, tch::Tensor)> = vec![
        ("src_tokens", input_ids),
        ("src_lengths", get("attention_mask").sum_dim_intlist(1, false, tch::Kind::Int64)),
        ("prev_output_tokens", get("decoder_input_ids")),
        ("encoder_states.0", time_major("encoder_hidden_states.0")),
        ("encoder_states.1", time_major("encoder_hidden_states.1")),
        ("encoder_out", time_major("encoder_last_hidden_state")),
        ("decoder_inner_states.0", time_major("decoder_hidden_states.0")),
        ("decoder_inner_states.1", time_major("decoder_hidden_states.1")),
        ("logits", get("logits")),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reference.safetensors");
    tch::Tensor::write_safetensors(&reference, &file).unwrap();
    let out = tchseq().args(["verify", "--json", "-m"]).arg(&dir).args(["-s", src, "-t", tgt, "--reference"]).arg(&file).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{name}: {report}");
    let rows = report["tensors"].as_array().unwrap();
    for tensor in ["encoder_states.0", "encoder_states.1", "encoder_out", "decoder_inner_states.0", "decoder_inner_states.1", "logits"] {
        let row = rows.iter().find(|r| r["name"] == tensor).unwrap_or_else(|| panic!("{name} {tensor}: {report}"));
        assert_eq!(row["status"], "ok", "{name} {tensor}: {row}");
        eprintln!("{name} {tensor}: max abs diff {}", row["max_abs_diff"]);
    }
}
