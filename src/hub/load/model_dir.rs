//! The fairseq-hub model-directory convention (`hub_utils.from_pretrained`): a directory with
//! `model.pt` (or a training run's `checkpoint_best.pt`/`checkpoint_last.pt`), `dict.<lang>.txt`
//! and `bpecodes`/`code` or `sentencepiece.bpe.model`; also the training layout where the
//! checkpoints sit in `checkpoints/` beside `data-bin/`.

use std::path::{Path, PathBuf};

use super::{HubError, Languages, ModelSpec};
use crate::checkpoint::CheckpointSummary;
use crate::config::LanguageTask;

/// The files of a model, found as fairseq's hub and training layouts place them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// One, or several for an ensemble (`--path a.pt:b.pt`).
    pub checkpoints: Vec<PathBuf>,
    /// The source language: given, recorded in the checkpoint, or inferred from the dictionaries.
    pub source_lang: String,
    /// The target language, found as `source_lang` is.
    pub target_lang: String,
    /// The source dictionary file (`dict.<src>.txt`, or the task's own name for it).
    pub src_dict: PathBuf,
    /// The target dictionary file.
    pub tgt_dict: PathBuf,
    /// subword-nmt/fastBPE codes: the file the checkpoint names, else `bpecodes` or `code`.
    pub bpe_codes: Option<PathBuf>,
    /// The source side's sentencepiece model: `sentencepiece.<src>.model`, the file the checkpoint
    /// names, else `sentencepiece.bpe.model`.
    pub sentencepiece_model: Option<PathBuf>,
    /// The target language's own sentencepiece model (`sentencepiece.<tgt>.model`), if any.
    pub target_sentencepiece_model: Option<PathBuf>,
    /// A multilingual model's `--lang-dict` file.
    pub lang_dict: Option<PathBuf>,
}

/// The file name of a path stored by training (`/data/m2m/model_dict.128k.txt` → `model_dict.128k.txt`).
fn base_name(stored: &str) -> String {
    Path::new(stored).file_name().map_or_else(|| stored.to_string(), |n| n.to_string_lossy().into_owned())
}

/// The dictionaries' possible file names, best first: `dict.<lang>.txt`, or what a multilingual
/// task names (`--fixed-dictionary`, which M2M-100's directories call `model_dict*.txt`, else
/// `--source-dict`/`--target-dict`).
fn dict_names(task: &LanguageTask, files: Option<&(String, String)>, dir: &Path, src: &str, tgt: &str) -> Vec<(String, String)> {
    if let Some(files) = files {
        return vec![files.clone()];
    }
    let own = (format!("dict.{src}.txt"), format!("dict.{tgt}.txt"));
    let LanguageTask::Multilingual(m) = task else { return vec![own] };
    let mut names = Vec::new();
    if let Some(fixed) = &m.fixed_dictionary {
        let mut model_dicts: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().filter(|n| n.starts_with("model_dict") && n.ends_with(".txt")).map(str::to_string))
            .collect();
        model_dicts.sort();
        names.extend([base_name(fixed)].into_iter().chain(model_dicts).map(|n| (n.clone(), n)));
    } else if m.source_dict.is_some() || m.target_dict.is_some() {
        names.push((m.source_dict.as_deref().map_or(own.0.clone(), base_name), m.target_dict.as_deref().map_or(own.1.clone(), base_name)));
    }
    names.push(own);
    names
}


const CHECKPOINT_NAMES: [&str; 3] = ["model.pt", "checkpoint_best.pt", "checkpoint_last.pt"];

/// The checkpoint of a model directory: `model.pt`, else `checkpoint_best.pt`, else
/// `checkpoint_last.pt`; in `DIR` and then in `DIR/checkpoints`. A Hugging Face directory's
/// checkpoint is its weights file; one that cannot be read is an error, never "no checkpoint".
pub fn find_checkpoint(dir: &Path) -> Result<Option<PathBuf>, HubError> {
    let fairseq = [dir.to_path_buf(), dir.join("checkpoints")].iter().find_map(|d| CHECKPOINT_NAMES.iter().map(|n| d.join(n)).find(|p| p.is_file()));
    match fairseq {
        Some(found) => Ok(Some(found)),
        None => crate::checkpoint::hf_dir::find(dir).map_err(|e| HubError::Checkpoint(e.into())),
    }
}

/// `dict.<lang>.txt` languages present in `dir`, sorted.
fn dict_langs(dir: &Path) -> Vec<String> {
    let mut langs: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("dict.")).and_then(|n| n.strip_suffix(".txt")).map(str::to_string))
        .filter(|l| !l.is_empty())
        .collect();
    langs.sort();
    langs
}

fn push_unique(v: &mut Vec<PathBuf>, p: PathBuf) {
    if !v.contains(&p) {
        v.push(p);
    }
}

impl ModelFiles {
    /// The files `spec` points at. `summary` reads the first checkpoint (once: the caller keeps
    /// what it parsed); its languages and embedding sizes settle languages the spec leaves open.
    pub fn resolve(spec: &ModelSpec, summary: impl FnOnce(&Path) -> Result<CheckpointSummary, HubError>) -> Result<Self, HubError> {
        let ModelSpec { model, path, data, source_lang, target_lang, any_pair, .. } = spec;
        let (model, path, data) = (model.as_deref(), path.as_deref(), data.as_deref());
        let (source_lang, target_lang) = (source_lang.as_deref(), target_lang.as_deref());
        let model_dir = match model {
            Some(m) if m.is_dir() => Some(m.to_path_buf()),
            Some(m) if m.is_file() => None,
            Some(m) => return Err(HubError::NoSuchModel { path: m.to_path_buf() }),
            None => None,
        };
        let checkpoints: Vec<PathBuf> = match (path, model) {
            (Some(list), _) => list
                .split(':')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let p = PathBuf::from(s);
                    match &model_dir {
                        Some(d) if p.is_relative() && !p.exists() && d.join(&p).exists() => d.join(p),
                        _ => p,
                    }
                })
                .collect(),
            (None, Some(m)) if m.is_file() => vec![m.to_path_buf()],
            (None, Some(m)) => vec![find_checkpoint(m)?.ok_or_else(|| match m.join("model.bin").is_file() {
                true => HubError::CTranslate2Model { dir: m.to_path_buf() },
                false => HubError::NoCheckpoint { dir: m.to_path_buf() },
            })?],
            (None, None) => return Err(HubError::NoModel),
        };
        if checkpoints.is_empty() {
            return Err(HubError::EmptyCheckpointList);
        }
        for c in &checkpoints {
            if !c.is_file() {
                return Err(HubError::NoSuchCheckpoint { path: c.clone() });
            }
        }
        // a bare file name (`-m model.pt`) lies in the current directory
        let ckpt_dir = checkpoints[0].parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();

        // Where dictionaries may be: --data only, else beside the checkpoint, the model
        // directory, and their data-bin folders (training layout).
        let mut dirs = Vec::new();
        match data {
            Some(d) => {
                if !d.is_dir() {
                    return Err(HubError::NotADataDirectory { path: d.to_path_buf() });
                }
                dirs.push(d.to_path_buf());
            }
            None => {
                for base in model_dir.iter().chain(std::iter::once(&ckpt_dir)) {
                    push_unique(&mut dirs, base.clone());
                    push_unique(&mut dirs, base.join("data-bin"));
                    if let Some(parent) = base.parent() {
                        push_unique(&mut dirs, parent.join("data-bin"));
                    }
                }
            }
        }
        let summary = summary(&checkpoints[0])?;
        let cfg = &summary.config;
        let (source_lang, target_lang) = (source_lang.map(str::to_string).or_else(|| cfg.source_lang.clone()), target_lang.map(str::to_string).or_else(|| cfg.target_lang.clone()));
        let (src, tgt) = match (source_lang, target_lang, &cfg.language_task) {
            (Some(s), Some(t), _) => (s, t),
            (s, t, LanguageTask::Multilingual(m)) => match m.lang_pairs.as_slice() {
                [(ps, pt)] if s.as_ref().is_none_or(|s| s == ps) && t.as_ref().is_none_or(|t| t == pt) => (ps.clone(), pt.clone()),
                [(ps, pt), ..] if *any_pair && s.is_none() && t.is_none() => (ps.clone(), pt.clone()),
                pairs => {
                    let pairs: Vec<String> = pairs.iter().map(|(s, t)| format!("{s}-{t}")).collect();
                    return Err(HubError::LanguagesNeeded(format!("a multilingual model (language pairs {}): give the source and target languages", pairs.join(","))));
                }
            },
            (s, t, _) => infer_langs(&dirs, s, t, &summary, model.unwrap_or(&checkpoints[0]))?,
        };
        let find_in = |places: &[PathBuf], names: &[&str]| -> Option<PathBuf> {
            places.iter().flat_map(|d| names.iter().map(move |n| d.join(n))).find(|p| p.is_file())
        };
        let mut everywhere = dirs.clone();
        everywhere.extend(model_dir.iter().cloned());
        everywhere.push(ckpt_dir.clone());
        // the language list first: a language the model lacks is named as such, not as a missing file
        let lang_dict = match &cfg.language_task {
            LanguageTask::Multilingual(m) => m.lang_dict.as_deref().and_then(|stored| find_in(&everywhere, &[base_name(stored).as_str()]).or_else(|| Some(PathBuf::from(stored)).filter(|p| p.is_absolute() && p.is_file()))),
            _ => None,
        };
        let languages = Languages::new(&cfg.language_task, lang_dict.as_deref())?;
        languages.check(&src)?;
        languages.check(&tgt)?;
        let (dict_dir, (src_name, tgt_name)) = dirs
            .iter()
            .flat_map(|d| dict_names(&cfg.language_task, cfg.dictionary_files.as_ref(), d, &src, &tgt).into_iter().map(move |n| (d.clone(), n)))
            .find(|(d, (s, t))| d.join(s).is_file() && d.join(t).is_file())
            .ok_or_else(|| {
                let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                let (s, t) = dict_names(&cfg.language_task, cfg.dictionary_files.as_ref(), &dirs[0], &src, &tgt).remove(0);
                let names = if s == t { s } else { format!("{s} and {t}") };
                HubError::DictionariesNotFound { names, searched: searched.join(", ") }
            })?;
        let mut places = vec![dict_dir.clone()];
        places.extend(model_dir.iter().cloned());
        places.push(ckpt_dir.clone());
        let find = |names: &[&str]| find_in(&places, names);
        // the file the checkpoint names (M2M-100's `spm.128k.model`), else the hub name; a
        // per-language model (`sentencepiece.<lang>.model`) first
        let named = cfg.bpe_file.as_deref().map(base_name);
        // the named file is of the checkpoint's BPE kind (`bpecodes` of subword_nmt is no
        // sentencepiece model); without a kind, a `.model` file is sentencepiece's
        let named_is_spm = |n: &String| match cfg.bpe.as_deref() {
            Some(kind) => kind == "sentencepiece",
            None => n.ends_with(".model"),
        };
        let named_spm = named.clone().filter(named_is_spm);
        let named_codes = named.clone().filter(|n| !named_is_spm(n) && !n.ends_with(".model"));
        let spm = |lang: &str| {
            let own = format!("sentencepiece.{lang}.model");
            find(&[own.as_str()]).or_else(|| find(&[named_spm.as_deref().unwrap_or("sentencepiece.bpe.model"), "sentencepiece.bpe.model"]))
        };
        let bpe_codes = find(&[named_codes.as_deref().unwrap_or("bpecodes"), "bpecodes", "code"]);
        Ok(ModelFiles {
            checkpoints,
            src_dict: dict_dir.join(&src_name),
            tgt_dict: dict_dir.join(&tgt_name),
            bpe_codes,
            sentencepiece_model: spm(&src),
            target_sentencepiece_model: spm(&tgt),
            lang_dict,
            source_lang: src,
            target_lang: tgt,
        })
    }
}

/// Languages the checkpoint does not record (knn-seq stores None): the two `dict.*.txt` of the
/// dictionary directory; which one is the source is read from the names (`src`/`tgt`), the
/// embedding sizes, else from an `{src}-{tgt}` pair in the file or directory names.
fn infer_langs(dirs: &[PathBuf], src: Option<String>, tgt: Option<String>, summary: &CheckpointSummary, model: &Path) -> Result<(String, String), HubError> {
    let ask = |why: String| HubError::LanguagesNeeded(format!("{why}; give the source and target languages"));
    let Some(dir) = dirs.iter().find(|d| !dict_langs(d).is_empty()) else {
        return Err(ask("the checkpoint does not record its languages and no dict.*.txt was found".into()));
    };
    let langs = dict_langs(dir);
    match (src, tgt) {
        (Some(s), None) if langs.len() == 2 && langs.contains(&s) => {
            let t = langs.iter().find(|l| **l != s).cloned().unwrap_or_default();
            return Ok((s, t));
        }
        (None, Some(t)) if langs.len() == 2 && langs.contains(&t) => {
            let s = langs.iter().find(|l| **l != t).cloned().unwrap_or_default();
            return Ok((s, t));
        }
        _ => {}
    }
    if langs.len() != 2 {
        return Err(ask(format!("the checkpoint does not record its languages and {} holds {} dictionaries ({})", dir.display(), langs.len(), langs.join(", "))));
    }
    let (a, b) = (langs[0].clone(), langs[1].clone());
    // The generic names say it themselves.
    for (s, t) in [("src", "tgt"), ("source", "target")] {
        if a == s && b == t || a == t && b == s {
            return Ok((s.to_string(), t.to_string()));
        }
    }
    // Embedding rows = dictionary sizes.
    let size = |l: &str| crate::text::dictionary::Dictionary::load(&dir.join(format!("dict.{l}.txt"))).ok().map(|d| d.len() as i64);
    if let (Some(sr), Some(tr), Some(sa), Some(sb)) = (summary.src_embed_rows, summary.tgt_embed_rows, size(&a), size(&b)) {
        if sa != sb {
            if (sr, tr) == (sa, sb) {
                return Ok((a, b));
            }
            if (sr, tr) == (sb, sa) {
                return Ok((b, a));
            }
        }
    }
    // `{src}-{tgt}` in data file names (fairseq-preprocess writes train.{src}-{tgt}.*) or paths.
    let mut names: Vec<String> = std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect();
    for p in [dir, model] {
        if let Ok(abs) = std::fs::canonicalize(p) {
            names.extend(abs.components().filter_map(|c| c.as_os_str().to_str().map(str::to_string)));
        }
    }
    let has_pair = |x: &str, y: &str| {
        let pat = format!("{x}-{y}");
        names.iter().any(|n| n.split(['.', '_', '/']).any(|part| part == pat || part.ends_with(&format!("-{pat}")) || part.starts_with(&format!("{pat}-"))))
    };
    match (has_pair(&a, &b), has_pair(&b, &a)) {
        (true, false) => Ok((a, b)),
        (false, true) => Ok((b, a)),
        _ => Err(ask(format!("the checkpoint does not record its languages and dict.{a}.txt / dict.{b}.txt do not say which is the source"))),
    }
}
