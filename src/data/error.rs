use std::path::PathBuf;

use crate::data::indexed_dataset::IndexError;
use crate::text::dictionary::DictionaryError;

/// Everything that can go wrong reading a data-bin directory; each message is one line and
/// names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: {source}", path.display())]
    Index { path: PathBuf, source: IndexError },
    #[error("{}: {source}", path.display())]
    Dictionary { path: PathBuf, source: DictionaryError },
    #[error("{}: line {line} is not valid UTF-8", path.display())]
    Encoding { path: PathBuf, line: usize },
    #[error("{}: sentence {index}: token id {token} is outside the dictionary {} ({dict_len} symbols)", path.display(), dictionary.display())]
    TokenOutOfDictionary { path: PathBuf, index: usize, token: i64, dictionary: PathBuf, dict_len: usize },
    #[error("Dataset not found: {split} ({})", dir.display())]
    NotFound { split: String, dir: PathBuf },
    #[error("{}: cannot infer the language pair from the file names (no <split>.<src>-<tgt>.*), please provide it explicitly", dir.display())]
    LanguagePair { dir: PathBuf },
    #[error("{}: not a dataset --dataset-impl {dataset_impl} can read ({why})", path.display())]
    Unsupported { path: PathBuf, dataset_impl: String, why: &'static str },
    #[error("{}: {src_len} source sentences but {} has {tgt_len} targets", src.display(), tgt.display())]
    LengthMismatch { src: PathBuf, tgt: PathBuf, src_len: usize, tgt_len: usize },
    #[error("{}: no target dataset {} beside it, while other shards have one", src.display(), tgt.display())]
    MissingTarget { src: PathBuf, tgt: PathBuf },
}
