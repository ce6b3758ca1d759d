//! Loading through the library's one path (`tchseq::hub`): a dictionary that does not fit the
//! checkpoint's embeddings is a one-line error in every command that loads a model.

use std::fs;
use std::path::PathBuf;

use crate::util::{fixture, tchseq};

/// A copy of the postnorm fixture whose target dictionary lost its last symbol.
fn model_with_a_short_dictionary() -> (tempfile::TempDir, PathBuf, usize) {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture("models/untied");
    for f in ["model.pt", "dict.src.txt"] {
        fs::copy(fx.join(f), dir.path().join(f)).unwrap();
    }
    let tgt = fs::read_to_string(fx.join("dict.tgt.txt")).unwrap();
    let lines: Vec<&str> = tgt.lines().collect();
    fs::write(dir.path().join("dict.tgt.txt"), lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    // fairseq's four specials come before the file's symbols
    let symbols = lines.len() - 1 + 4;
    let path = dir.path().to_path_buf();
    (dir, path, symbols)
}

fn assert_one_line_size_error(out: &std::process::Output, symbols: usize) {
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let e = errors[0];
    assert!(e.contains(&format!("the target dictionary has {symbols} symbols")), "{e}");
    assert!(e.contains("decoder.embed_tokens.weight of ") && e.contains(&format!("has {} rows", symbols + 1)), "{e}");
}

#[test]
fn a_dictionary_of_the_wrong_size_is_a_one_line_error_in_translate_score_and_verify() {
    let (_keep, dir, symbols) = model_with_a_short_dictionary();
    let out = tchseq()
        .args(["translate", "-s", "src", "-t", "tgt", "--tokenizer", "none", "--bpe", "none", "-m"])
        .arg(&dir)
        .arg("a b c")
        .output()
        .unwrap();
    assert_one_line_size_error(&out, symbols);

    let csv = dir.join("pairs.csv");
    fs::write(&csv, "source,target\na b,c d\n").unwrap();
    let out = tchseq().args(["score", "-s", "src", "-t", "tgt", "--tokenized", "-m"]).arg(&dir).arg("--input").arg(&csv).output().unwrap();
    assert_one_line_size_error(&out, symbols);

    let out = tchseq()
        .args(["verify", "-s", "src", "-t", "tgt", "-m"])
        .arg(&dir)
        .arg("--reference")
        .arg(fixture("models/untied/verify_left.pt"))
        .output()
        .unwrap();
    assert_one_line_size_error(&out, symbols);

    let out = tchseq().args(["inspect", "-s", "src", "-t", "tgt", "-m"]).arg(&dir).output().unwrap();
    assert_one_line_size_error(&out, symbols);
}

/// The library API: what a server or the Python package sees, in its own terms.
#[test]
fn the_bundle_reports_what_it_loaded() {
    let spec = tchseq::hub::ModelSpec { model: Some(fixture("models/postnorm")), source_lang: Some("src".into()), target_lang: Some("tgt".into()), ..Default::default() };
    let bundle = tchseq::hub::ModelBundle::load(&spec, &tchseq::hub::LoadOptions::fp32(tch::Device::Cpu)).unwrap();
    assert_eq!(bundle.models.len(), 1);
    let r = &bundle.report;
    assert_eq!(r.checkpoints.len(), 1);
    assert!(r.checkpoints[0].parameters > 0 && r.checkpoints[0].tensors > 0);
    assert!(r.checkpoints[0].unused_keys.is_empty(), "{:?}", r.checkpoints[0].unused_keys);
    assert_eq!(r.source_dictionary.size, bundle.src_dict.len());
    assert_eq!((r.source_lang.as_str(), r.target_lang.as_str()), ("src", "tgt"));
    assert!(bundle.max_source_positions() >= 1);

    let (_keep, dir, _) = model_with_a_short_dictionary();
    let spec = tchseq::hub::ModelSpec { model: Some(dir), ..spec };
    let err = tchseq::hub::ModelBundle::load(&spec, &tchseq::hub::LoadOptions::fp32(tch::Device::Cpu)).err().expect("a short dictionary loads");
    assert!(matches!(err, tchseq::hub::HubError::DictionarySize { side: "target", .. }), "{err}");
    assert!(!err.to_string().contains("--"), "library errors name no flags: {err}");
}
