//! A split of a data-bin directory as fairseq's translation task loads it
//! (`tasks/translation.py`: `setup_task`, `load_langpair_dataset`; `data_utils.infer_language_pair`).

use std::path::{Path, PathBuf};

use crate::data::dataset::{dataset_exists, infer_dataset_impl, DatasetImpl, IndexedDataset};
use crate::data::error::DataError;
use crate::text::dictionary::Dictionary;

/// How a split is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// `--dataset-impl`; `None` infers it per file (`infer_dataset_impl`).
    pub dataset_impl: Option<DatasetImpl>,
    /// `combine`: also the shards `split1`, `split2`, … (fairseq passes it for training;
    /// `fairseq-generate` loads `--gen-subset` with `combine=False`).
    pub combine: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { dataset_impl: None, combine: true }
    }
}

/// The entry point: `DataBin::open(dir, split, src, tgt)`.
pub struct DataBin;

impl DataBin {
    /// Loads `split` with every shard and the file format inferred.
    pub fn open(dir: &Path, split: &str, src: Option<&str>, tgt: Option<&str>) -> Result<PairDataset, DataError> {
        Self::open_with(dir, split, src, tgt, LoadOptions::default())
    }

    /// `TranslationTask.setup_task` (the language pair and `dict.{lang}.txt`) followed by
    /// `load_langpair_dataset`.
    pub fn open_with(
        dir: &Path,
        split: &str,
        src: Option<&str>,
        tgt: Option<&str>,
        options: LoadOptions,
    ) -> Result<PairDataset, DataError> {
        let (source_lang, target_lang) = match (src, tgt) {
            (Some(s), Some(t)) => (s.to_string(), t.to_string()),
            _ => infer_language_pair(dir)?,
        };
        let load_dict = |lang: &str| {
            let path = dir.join(format!("dict.{lang}.txt"));
            Dictionary::load(&path).map(|d| (d, path.clone())).map_err(|source| DataError::Dictionary { path, source })
        };
        let src = load_dict(&source_lang)?;
        let tgt = load_dict(&target_lang)?;
        Self::open_with_dictionaries(dir, split, (&source_lang, src), (&target_lang, tgt), options)
    }

    /// `load_langpair_dataset` with dictionaries the task found elsewhere (a multilingual task's
    /// `--fixed-dictionary`, with its language tokens): each side is its language, its
    /// dictionary and the file the dictionary came from (named in errors).
    pub fn open_with_dictionaries(
        dir: &Path,
        split: &str,
        (source_lang, (src_dict, src_dict_path)): (&str, (Dictionary, PathBuf)),
        (target_lang, (tgt_dict, tgt_dict_path)): (&str, (Dictionary, PathBuf)),
        options: LoadOptions,
    ) -> Result<PairDataset, DataError> {
        let (source_lang, target_lang) = (source_lang.to_string(), target_lang.to_string());
        let dicts = Dicts { src: &src_dict, src_path: &src_dict_path, tgt: &tgt_dict, tgt_path: &tgt_dict_path };
        let shards = load_langpair_dataset(dir, split, &source_lang, &target_lang, &dicts, options)?;
        let mut cumulative_sizes = Vec::with_capacity(shards.len());
        let mut total = 0usize;
        for shard in &shards {
            total += shard.src.len();
            cumulative_sizes.push(total);
        }
        let has_target = shards.iter().all(|s| s.tgt.is_some());
        let src_sizes = shards.iter().flat_map(|s| s.src.sizes().iter().copied()).collect();
        let tgt_sizes = has_target.then(|| shards.iter().flat_map(|s| s.tgt.iter().flat_map(|t| t.sizes().iter().copied())).collect());
        Ok(PairDataset { source_lang, target_lang, src_dict, tgt_dict, shards, cumulative_sizes, src_sizes, tgt_sizes })
    }
}

struct Dicts<'a> {
    src: &'a Dictionary,
    src_path: &'a Path,
    tgt: &'a Dictionary,
    tgt_path: &'a Path,
}

/// One shard (`test`, `test1`, …): its source and, when present, its target.
#[derive(Debug)]
pub struct Shard {
    pub split: String,
    pub src: IndexedDataset,
    pub tgt: Option<IndexedDataset>,
}

/// `data_utils.infer_language_pair`: the first file named `<split>.<a>-<b>.…` gives `(a, b)`.
/// fairseq takes the directory's listing order; here the names are sorted, so the answer does
/// not depend on the file system.
pub fn infer_language_pair(dir: &Path) -> Result<(String, String), DataError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DataError::Io { path: dir.to_path_buf(), source })?;
    let mut names: Vec<String> = entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    for name in names {
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() >= 3 {
            if let [a, b] = parts[1].split('-').collect::<Vec<_>>()[..] {
                return Ok((a.to_string(), b.to_string()));
            }
        }
    }
    Err(DataError::LanguagePair { dir: dir.to_path_buf() })
}

/// `load_langpair_dataset`'s file search: per shard `{split_k}.{src}-{tgt}.{lang}`, else the
/// other direction's name `{split_k}.{tgt}-{src}.{lang}`; the first missing shard ends the list.
fn load_langpair_dataset(
    dir: &Path,
    split: &str,
    src: &str,
    tgt: &str,
    dicts: &Dicts<'_>,
    options: LoadOptions,
) -> Result<Vec<Shard>, DataError> {
    let split_exists = |split: &str, a: &str, b: &str, lang: &str| {
        dataset_exists(&dir.join(format!("{split}.{a}-{b}.{lang}")), options.dataset_impl)
    };
    let mut shards: Vec<Shard> = Vec::new();
    for k in 0usize.. {
        let split_k = if k > 0 { format!("{split}{k}") } else { split.to_string() };
        let prefix = if split_exists(&split_k, src, tgt, src) {
            format!("{split_k}.{src}-{tgt}.")
        } else if split_exists(&split_k, tgt, src, src) {
            format!("{split_k}.{tgt}-{src}.")
        } else if k > 0 {
            break;
        } else {
            return Err(DataError::NotFound { split: split.to_string(), dir: dir.to_path_buf() });
        };
        let src_prefix = dir.join(format!("{prefix}{src}"));
        let tgt_prefix = dir.join(format!("{prefix}{tgt}"));
        let src_ds = load_indexed_dataset(&src_prefix, dicts.src, dicts.src_path, options.dataset_impl)?
            .ok_or_else(|| DataError::NotFound { split: split_k.clone(), dir: dir.to_path_buf() })?;
        let tgt_ds = load_indexed_dataset(&tgt_prefix, dicts.tgt, dicts.tgt_path, options.dataset_impl)?;
        match &tgt_ds {
            Some(t) if t.len() != src_ds.len() => {
                return Err(DataError::LengthMismatch {
                    src: src_ds.path.clone(),
                    tgt: t.path.clone(),
                    src_len: src_ds.len(),
                    tgt_len: t.len(),
                })
            }
            // `assert len(src_datasets) == len(tgt_datasets) or len(tgt_datasets) == 0`
            None if shards.iter().any(|s| s.tgt.is_some()) => {
                return Err(DataError::MissingTarget { src: src_ds.path.clone(), tgt: tgt_prefix })
            }
            Some(_) if shards.iter().any(|s| s.tgt.is_none()) => {
                let first = &shards[0];
                return Err(DataError::MissingTarget { src: first.src.path.clone(), tgt: tgt_prefix })
            }
            _ => {}
        }
        shards.push(Shard { split: split_k, src: src_ds, tgt: tgt_ds });
        if !options.combine {
            break;
        }
    }
    Ok(shards)
}

/// `data_utils.load_indexed_dataset(path, dictionary, dataset_impl)` for one shard: `None` when
/// the files are not there.
fn load_indexed_dataset(
    prefix: &Path,
    dictionary: &Dictionary,
    dict_path: &Path,
    dataset_impl: Option<DatasetImpl>,
) -> Result<Option<IndexedDataset>, DataError> {
    let dataset_impl = match dataset_impl {
        Some(i) => i,
        // fairseq's `default="cached"` for an unrecognized magic then fails on the magic;
        // the legacy reader gives that error here.
        None => match infer_dataset_impl(prefix)? {
            Some(i) => i,
            None if dataset_exists(prefix, Some(DatasetImpl::Cached)) => DatasetImpl::Cached,
            None => return Ok(None),
        },
    };
    if !dataset_exists(prefix, Some(dataset_impl)) {
        return Ok(None);
    }
    IndexedDataset::open(prefix, dataset_impl, dictionary, dict_path).map(Some)
}

/// A split's source and target sentences, its shards concatenated (`ConcatDataset` with
/// `upsample_primary=1`), as `LanguagePairDataset` holds them.
#[derive(Debug)]
pub struct PairDataset {
    pub source_lang: String,
    pub target_lang: String,
    pub src_dict: Dictionary,
    pub tgt_dict: Dictionary,
    shards: Vec<Shard>,
    cumulative_sizes: Vec<usize>,
    src_sizes: Vec<i64>,
    tgt_sizes: Option<Vec<i64>>,
}

impl PairDataset {
    pub fn len(&self) -> usize {
        self.cumulative_sizes.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn shards(&self) -> &[Shard] {
        &self.shards
    }

    /// `ConcatDataset._get_dataset_and_sample_index`.
    fn locate(&self, i: usize) -> (&Shard, usize) {
        assert!(i < self.len(), "sentence {i} of a dataset of {}", self.len());
        let k = self.cumulative_sizes.partition_point(|&c| c <= i);
        let start = if k == 0 { 0 } else { self.cumulative_sizes[k - 1] };
        (&self.shards[k], i - start)
    }

    /// The source ids of sentence `i` (`i < len()`; every sentence was read and checked when
    /// the dataset was opened).
    pub fn src(&self, i: usize) -> Vec<i64> {
        let (shard, j) = self.locate(i);
        shard.src.try_get(j).unwrap_or_default()
    }

    /// The target ids of sentence `i`, or `None` for a split without targets.
    pub fn tgt(&self, i: usize) -> Option<Vec<i64>> {
        let (shard, j) = self.locate(i);
        self.tgt_sizes.as_ref()?;
        shard.tgt.as_ref().map(|t| t.try_get(j).unwrap_or_default())
    }

    /// The source line of sentence `i` as the raw text format holds it (`get_original_text`);
    /// `None` for the binary formats.
    pub fn src_text(&self, i: usize) -> Option<&str> {
        let (shard, j) = self.locate(i);
        shard.src.original_text(j)
    }

    /// The target line of sentence `i` as the raw text format holds it; `None` for the binary
    /// formats and a split without targets.
    pub fn tgt_text(&self, i: usize) -> Option<&str> {
        let (shard, j) = self.locate(i);
        self.tgt_sizes.as_ref()?;
        shard.tgt.as_ref()?.original_text(j)
    }

    pub fn src_sizes(&self) -> &[i64] {
        &self.src_sizes
    }

    pub fn tgt_sizes(&self) -> Option<&[i64]> {
        self.tgt_sizes.as_deref()
    }
}
