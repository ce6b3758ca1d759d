//! What `--resume` holds a run to: every setting that changes an output record, flag by flag,
//! kept beside the partial output and compared before it is touched (`score` and `translate`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::cli::args::{GlobalArgs, ModelArgs, PipelineArgs};

/// Setting (its flag, or what it names) → its value in the run. A BTreeMap so that the
/// progress file lists them in one order.
pub type Settings = BTreeMap<String, String>;

/// The settings every command that loads a model shares: where the model is, how text is
/// encoded, and what moves the low bits of a score (device, threads, kernels).
pub fn model_settings(global: &GlobalArgs, model: &ModelArgs, pipeline: &PipelineArgs) -> Settings {
    let mut s = Settings::new();
    let mut put = |k: &str, v: String| {
        s.insert(k.to_string(), v);
    };
    put("--model", opt(model.model.as_ref().map(|p| p.display())));
    put("--path", opt(model.path.as_ref()));
    put("--data", opt(model.data.as_ref().map(|p| p.display())));
    put("--source-lang", opt(model.source_lang.as_ref()));
    put("--target-lang", opt(model.target_lang.as_ref()));
    let t = &model.task;
    put("--task", opt(t.task.as_ref()));
    put("--lang-pairs", opt(t.lang_pairs.as_ref()));
    put("--langs", opt(t.langs.as_ref()));
    put("--lang-dict", opt(t.lang_dict.as_ref()));
    put("--lang-tok-style", opt(t.lang_tok_style.as_ref()));
    put("--encoder-langtok", opt(t.encoder_langtok.as_ref()));
    put("--decoder-langtok", t.decoder_langtok.to_string());
    put("--fixed-dictionary", opt(t.fixed_dictionary.as_ref()));
    let p = pipeline;
    put("--tokenizer", opt(p.tokenizer.map(clap_name)));
    put("--bpe", opt(p.bpe.map(clap_name)));
    put("--bpe-codes", opt(p.bpe_codes.as_ref().map(|f| f.display())));
    put("--sentencepiece-model", opt(p.sentencepiece_model.as_ref().map(|f| f.display())));
    put("--moses-no-dash-splits", p.moses_no_dash_splits.to_string());
    put("--moses-no-escape", p.moses_no_escape.to_string());
    put("the model's files", model_files(model, pipeline));
    put("--device", clap_name(global.device));
    // libtorch's kernel choice and thread count move the low bits of a score
    put("--threads", opt(global.threads));
    put("--reproducible", (global.reproducible || tchseq::libtorch::reproducible_requested()).to_string());
    s
}

/// Refuses a resume whose settings differ from the interrupted run's, naming the first that does.
pub fn check(before: &Settings, now: &Settings, partial: &Path) -> Result<()> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(now.keys()).collect();
    for k in keys {
        let (was, is) = (before.get(k), now.get(k));
        if was == is {
            continue;
        }
        let shown = |v: Option<&String>| v.map_or_else(|| "unset".to_string(), |v| format!("`{v}`"));
        let change = if was.is_some_and(|v| v.len() > 80) || is.is_some_and(|v| v.len() > 80) {
            "changed".to_string()
        } else {
            format!("was {} in the interrupted run and is {} now", shown(was), shown(is))
        };
        bail!(
            "--resume: {k} {change}; rerun with the interrupted run's settings, or without --resume to start over ({} is left as it was)",
            partial.display()
        );
    }
    Ok(())
}

pub fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "(none)".to_string(), |v| v.to_string())
}

pub fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string()
}

pub fn clap_name<T: ValueEnum>(v: T) -> String {
    v.to_possible_value().map_or_else(String::new, |p| p.get_name().to_string())
}

/// Every file the model flags name, and the files of the directories they name (one level):
/// path, size and modification time. A replaced checkpoint, dictionary or BPE file shows here.
pub fn model_files(model: &ModelArgs, pipeline: &PipelineArgs) -> String {
    let mut paths: Vec<std::path::PathBuf> = Vec::new();
    paths.extend(model.model.clone());
    paths.extend(model.data.clone());
    paths.extend(model.path.iter().flat_map(|p| p.split(':')).map(std::path::PathBuf::from));
    paths.extend(pipeline.bpe_codes.clone());
    paths.extend(pipeline.sentencepiece_model.clone());
    let mut files: Vec<String> = Vec::new();
    for p in paths {
        match std::fs::read_dir(&p) {
            Ok(dir) => {
                let mut inner: Vec<std::path::PathBuf> = dir.flatten().map(|e| e.path()).filter(|f| f.is_file()).collect();
                inner.sort();
                files.extend(inner.iter().map(|f| stamp(f)));
            }
            Err(_) => files.push(stamp(&p)),
        }
    }
    files.join("; ")
}

fn stamp(f: &Path) -> String {
    let meta = std::fs::metadata(f);
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    let modified = meta
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {size} {modified}", canonical(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_setting_is_named_with_both_values() {
        let before: Settings = [("--compute-type".to_string(), "exact".to_string()), ("--per-token".into(), "false".into())].into();
        let mut now = before.clone();
        check(&before, &now, Path::new("out.csv.partial")).unwrap();
        now.insert("--compute-type".into(), "int8".into());
        let err = check(&before, &now, Path::new("out.csv.partial")).unwrap_err().to_string();
        assert!(err.starts_with("--resume: --compute-type was `exact` in the interrupted run and is `int8` now;"), "{err}");
        assert!(err.contains("out.csv.partial is left as it was"), "{err}");
        now.remove("--compute-type");
        let err = check(&before, &now, Path::new("p")).unwrap_err().to_string();
        assert!(err.contains("--compute-type was `exact` in the interrupted run and is unset now"), "{err}");
    }
}
