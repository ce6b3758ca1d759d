//! Token ids as transformers' own tokenizers give them: directories transformers 4.57.6 and 5.25.0
//! saved with `save_pretrained` (`tests/fixtures/hf/tokenizers`, reference/hf_tokenizers.py) — an
//! M2M-100 model with its own three languages pinned as added tokens, NLLB with three languages,
//! FSMT — hold our ids to the ids transformers gave there, transformers 5's NLLB also from its
//! `tokenizer.json` alone; a directory whose tokenizer files give no id map of the weights' row
//! count is one error that names the files and the counts, a `tokenizer.json` tchseq cannot run
//! one that names the file and the field.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{fixture, one_line_error, stdout_ok, tchseq};

/// One directory per transformers release.
fn releases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(fixture("hf/tokenizers")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

fn ids(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect()
}

/// `tchseq encode --ids` of each sentence (the pieces and `</s>`, without the language token).
fn encode(dir: &Path, src: &str, tgt: &str, sentences: &[String]) -> Vec<Vec<i64>> {
    let out = tchseq().args(["encode", "--ids", "-m"]).arg(dir).args(["-s", src, "-t", tgt]).write_stdin(sentences.join("\n") + "\n").output().unwrap();
    stdout_ok(&out).lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect()
}

#[test]
fn token_ids_are_the_ids_transformers_tokenizers_give() {
    let releases = releases();
    let names: Vec<String> = releases.iter().map(|r| r.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["transformers-4.57.6", "transformers-5.25.0"]);
    for release in &releases {
        let goldens: Value = serde_json::from_slice(&fs::read(release.join("goldens.json")).unwrap()).unwrap();
        for m in goldens["models"].as_array().unwrap() {
            let dir = release.join(m["dir"].as_str().unwrap());
            let what = format!("{}/{}", release.file_name().unwrap().to_string_lossy(), m["dir"].as_str().unwrap());
            let (src, tgt) = (m["src_lang"].as_str().unwrap(), m["tgt_lang"].as_str().unwrap());
            let sentences: Vec<String> = m["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
            let ours = encode(&dir, src, tgt, &sentences);
            let input_ids: Vec<Vec<i64>> = m["input_ids"].as_array().unwrap().iter().map(ids).collect();
            assert_eq!(ours.len(), input_ids.len(), "{what}");
            if m["tokenizer_class"] == "FSMTTokenizer" {
                assert_eq!(ours, input_ids, "{what}");
                continue;
            }

            // the language tokens at the ids convert_tokens_to_ids gives, in both dictionaries
            let spec = tchseq::hub::ModelSpec { model: Some(dir.clone()), source_lang: Some(src.into()), target_lang: Some(tgt.into()), ..Default::default() };
            let bundle = tchseq::hub::ModelBundle::load(&spec, &tchseq::hub::LoadOptions::fp32(tch::Device::Cpu)).unwrap();
            let fairseq = |t: &str| if t.starts_with("__") || t.starts_with('<') { t.to_string() } else { format!("__{t}__") };
            let pinned = m["convert_tokens_to_ids"].as_object().unwrap();
            for (token, id) in pinned {
                for dict in [&bundle.src_dict, &bundle.tgt_dict] {
                    assert_eq!(dict.index(&fairseq(token)), id.as_i64().unwrap(), "{what}: {token}");
                }
            }
            assert_eq!(bundle.src_dict.len() as i64, m["rows"].as_i64().unwrap(), "{what}");
            let lang_id = |lang: &str| pinned[&if m["tokenizer_class"] == "M2M100Tokenizer" { format!("__{lang}__") } else { lang.to_string() }].as_i64().unwrap();

            // the sentences' pieces and </s> as transformers' tokenizer(...) gives them
            let labels: Vec<Vec<i64>> = m["labels"].as_array().unwrap().iter().map(ids).collect();
            for ((ours, want), label) in ours.iter().zip(&input_ids).zip(&labels) {
                assert_eq!(&label[1..], &want[1..], "{what}");
                let bytes = |row: &[i64]| row.iter().any(|&t| bundle.src_dict.symbol(t).starts_with("<0x"));
                if what.contains("transformers-5") && m["tokenizer_class"] == "NllbTokenizer" && bytes(ours) {
                    // transformers 5's NllbTokenizer runs a tokenizers BPE built without the
                    // sentencepiece model's byte fallback: <unk> where sentencepiece (and fairseq)
                    // spell a character in bytes
                    let unknown = ours.iter().filter(|&&t| bundle.src_dict.symbol(t).starts_with("<0x")).count();
                    assert!(want.contains(&3) && want.len() - 1 <= ours.len() && ours.len() - (want.len() - 1) < unknown, "{what}: {ours:?} {want:?}");
                    continue;
                }
                assert_eq!(ours.as_slice(), &want[1..], "{what}");
            }
            let (src_id, tgt_id) = (lang_id(src), lang_id(tgt));
            assert_eq!(bundle.tgt_dict.index(&fairseq(tgt)), tgt_id, "{what}: the target language token");
            let forced_bos = m["forced_bos_token_id"].as_i64().unwrap();
            if m["tokenizer_class"] == "NllbTokenizer" {
                // NllbTokenizer puts the pinned ids first, and forces the target's
                assert!(input_ids.iter().all(|r| r[0] == src_id) && labels.iter().all(|r| r[0] == tgt_id), "{what}");
                assert_eq!(forced_bos, tgt_id, "{what}");
            } else {
                // M2M100Tokenizer puts (and forces) the id of its 100-language list instead,
                // whatever the added tokens pin: past this model's rows
                let get_lang_id = &m["get_lang_id"];
                assert!(input_ids.iter().all(|r| r[0] == get_lang_id[src].as_i64().unwrap()), "{what}");
                assert_eq!(forced_bos, get_lang_id[tgt].as_i64().unwrap(), "{what}");
                assert!(forced_bos >= m["rows"].as_i64().unwrap(), "{what}");
            }
        }
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    for f in fs::read_dir(src).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), dst.join(f.file_name())).unwrap();
    }
}

/// The added tokens of `dir` without the language tokens, in every file that holds them.
fn drop_language_pins(dir: &Path) {
    let added = dir.join("added_tokens.json");
    if added.is_file() {
        fs::remove_file(added).unwrap();
    }
    let path = dir.join("tokenizer_config.json");
    let mut config: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    config["added_tokens_decoder"].as_object_mut().unwrap().retain(|_, t| !t["content"].as_str().unwrap().starts_with("__"));
    fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

#[test]
fn tokenizer_files_that_disagree_with_the_weights_are_one_error_naming_them() {
    let run = |dir: &Path| tchseq().args(["translate", "-m"]).arg(dir).args(["-s", "en", "-t", "de", "Hello"]).output().unwrap();
    for release in releases() {
        let src = release.join("m2m100-langs");

        // without its pins the tokenizer's own convention gives 100 language ids past vocab.json
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&src, dir.path());
        drop_language_pins(dir.path());
        let line = one_line_error(&run(dir.path()), "the tokenizer gives ids 0..601");
        for want in ["501 from vocab.json", "0 more pinned by", "100 from language_codes \"m2m100\"", "model.safetensors has 504 embedding rows"] {
            assert!(line.contains(want), "{want}: {line}");
        }

        // two files pinning one language token to two ids
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&src, dir.path());
        let path = dir.path().join("added_tokens.json");
        let text = fs::read_to_string(&path).unwrap().replace("\"__de__\": 503", "\"__de__\": 500");
        fs::write(&path, text).unwrap();
        one_line_error(&run(dir.path()), "the added tokens of added_tokens.json, tokenizer_config.json disagree");

        // a pin far past the table: the counts, not a dictionary of that size
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&src, dir.path());
        for file in ["added_tokens.json", "tokenizer_config.json"] {
            let path = dir.path().join(file);
            let text = fs::read_to_string(&path).unwrap().replace("\"__de__\": 503", "\"__de__\": 9000000000000").replace("\"503\": {", "\"9000000000000\": {");
            fs::write(&path, text).unwrap();
        }
        one_line_error(&run(dir.path()), "the tokenizer gives ids 0..9000000000001");
    }
}

/// transformers 5's NLLB directory as `save_pretrained` leaves it: `tokenizer.json` and no
/// sentencepiece model.
fn nllb_without_sentencepiece() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&releases()[1].join("nllb-langs"), dir.path());
    fs::remove_file(dir.path().join("sentencepiece.bpe.model")).unwrap();
    dir
}

#[test]
fn a_transformers_5_nllb_directory_without_its_sentencepiece_model_reads_tokenizer_json() {
    let goldens: Value = serde_json::from_slice(&fs::read(releases()[1].join("goldens.json")).unwrap()).unwrap();
    let m = goldens["models"].as_array().unwrap().iter().find(|m| m["dir"] == "nllb-langs").unwrap();
    let (src, tgt) = (m["src_lang"].as_str().unwrap(), m["tgt_lang"].as_str().unwrap());
    let sentences: Vec<String> = m["sentences"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
    let dir = nllb_without_sentencepiece();

    // transformers' ids exactly, <unk> where its BPE has no byte fallback
    let ours = encode(dir.path(), src, tgt, &sentences);
    let input_ids: Vec<Vec<i64>> = m["input_ids"].as_array().unwrap().iter().map(ids).collect();
    assert_eq!(ours.len(), input_ids.len());
    for (ours, want) in ours.iter().zip(&input_ids) {
        assert_eq!(ours.as_slice(), &want[1..]);
    }
    assert!(ours.iter().any(|r| r.contains(&3)), "the goldens hold an <unk>");

    let spec = tchseq::hub::ModelSpec { model: Some(dir.path().to_path_buf()), source_lang: Some(src.into()), target_lang: Some(tgt.into()), ..Default::default() };
    let bundle = tchseq::hub::ModelBundle::load(&spec, &tchseq::hub::LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    for (token, id) in m["convert_tokens_to_ids"].as_object().unwrap() {
        let fairseq = if token.starts_with('<') { token.clone() } else { format!("__{token}__") };
        assert_eq!(bundle.src_dict.index(&fairseq), id.as_i64().unwrap(), "{token}");
    }
    assert_eq!(bundle.src_dict.len() as i64, m["rows"].as_i64().unwrap());

    // translation runs and decodes as with the sentencepiece model, whose ids these are
    let translate = |dir: &Path| stdout_ok(&tchseq().args(["translate", "-m"]).arg(dir).args(["-s", src, "-t", tgt, "Hello world."]).output().unwrap());
    let text = translate(dir.path());
    assert!(!text.trim().is_empty());
    assert_eq!(text, translate(&releases()[1].join("nllb-langs")));
}

#[test]
fn a_tokenizer_json_tchseq_cannot_run_is_one_error_naming_it() {
    let run = |dir: &Path| tchseq().args(["translate", "-m"]).arg(dir).args(["-s", "eng_Latn", "-t", "deu_Latn", "Hello"]).output().unwrap();
    let edit = |change: &dyn Fn(&mut Value)| {
        let dir = nllb_without_sentencepiece();
        let path = dir.path().join("tokenizer.json");
        let mut file: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        change(&mut file);
        fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
        dir
    };
    let dir = edit(&|f| f["model"] = serde_json::json!({ "type": "Unigram", "unk_id": 3, "vocab": [["<unk>", 0.0]], "byte_fallback": false }));
    let line = one_line_error(&run(dir.path()), "tokenizer.json: model.type \"Unigram\" is not implemented in tchseq (it reads BPE)");
    assert!(line.contains(&dir.path().display().to_string()), "{line}");
    let dir = edit(&|f| f["model"]["merges"][0] = serde_json::json!(["▁", "no such token"]));
    one_line_error(&run(dir.path()), "tokenizer.json: model.merges: merge 0: \"no such token\" is not in model.vocab");
    let dir = edit(&|f| f["normalizer"] = serde_json::json!({ "type": "NFKC" }));
    one_line_error(&run(dir.path()), "tokenizer.json: normalizer.type \"NFKC\" is not implemented in tchseq");
    let dir = edit(&|f| f["model"]["dropout"] = serde_json::json!(0.1));
    one_line_error(&run(dir.path()), "tokenizer.json: model.dropout 0.1 is not implemented in tchseq");
    let dir = nllb_without_sentencepiece();
    fs::write(dir.path().join("tokenizer.json"), "{").unwrap();
    one_line_error(&run(dir.path()), "tokenizer.json: not what transformers writes there: EOF while parsing");
}
