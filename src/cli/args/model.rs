//! Where the model is and how to read it: the model files, fairseq's task flags and the text
//! pipeline overrides, shared by every command that loads a model.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Where the model, its dictionaries and its BPE files are.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Model directory (model.pt or checkpoint_best.pt/checkpoint_last.pt, dict.*.txt, bpecodes)
    /// or a checkpoint file.
    #[arg(short = 'm', long = "model", value_name = "DIR|FILE")]
    pub model: Option<PathBuf>,
    /// Checkpoint file(s), colon-separated for an ensemble (fairseq's --path).
    #[arg(long = "path", value_name = "A.pt[:B.pt]")]
    pub path: Option<String>,
    /// Directory with dict.{src,tgt}.txt and BPE files, if not beside the checkpoint
    /// (fairseq's positional data directory).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Source language (default: from the checkpoint config).
    #[arg(short = 's', long = "source-lang", value_name = "LANG")]
    pub source_lang: Option<String>,
    /// Target language (default: from the checkpoint config).
    #[arg(short = 't', long = "target-lang", value_name = "LANG")]
    pub target_lang: Option<String>,
    #[command(flatten)]
    pub task: TaskArgs,
}

/// fairseq's multilingual task flags; the checkpoint's own settings apply where none is given.
#[derive(Debug, Args, Clone, Default)]
pub struct TaskArgs {
    /// fairseq task (translation, translation_multi_simple_epoch, translation_from_pretrained_bart).
    #[arg(long, value_name = "TASK", hide_short_help = true)]
    pub task: Option<String>,
    /// Language pairs of a multilingual model, comma-separated (en-de,de-en) or a file holding them.
    #[arg(long = "lang-pairs", value_name = "PAIRS", hide_short_help = true)]
    pub lang_pairs: Option<String>,
    /// The model's languages, comma-separated, in token-id order.
    #[arg(long, value_name = "LANGS", hide_short_help = true)]
    pub langs: Option<String>,
    /// A file with the model's languages, one per line, in token-id order.
    #[arg(long = "lang-dict", value_name = "FILE", hide_short_help = true)]
    pub lang_dict: Option<String>,
    /// Language-token style: multilingual (`__en__`) or mbart (`[en_XX]`).
    #[arg(long = "lang-tok-style", value_name = "STYLE", hide_short_help = true)]
    pub lang_tok_style: Option<String>,
    /// Put the src (or tgt) language token before the source.
    #[arg(long = "encoder-langtok", value_name = "SRCTGT", hide_short_help = true)]
    pub encoder_langtok: Option<String>,
    /// Force the target language token as the decoder's first token.
    #[arg(long = "decoder-langtok", hide_short_help = true)]
    pub decoder_langtok: bool,
    /// One dictionary for every language.
    #[arg(long = "fixed-dictionary", value_name = "FILE", hide_short_help = true)]
    pub fixed_dictionary: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenizerArg {
    Moses,
    Space,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BpeArg {
    #[value(name = "subword_nmt")]
    SubwordNmt,
    Fastbpe,
    Sentencepiece,
    None,
}

/// Text pipeline overrides (default: what the checkpoint config and model directory say).
#[derive(Debug, Args, Clone)]
pub struct PipelineArgs {
    /// Tokenizer applied before BPE.
    #[arg(long, value_enum)]
    pub tokenizer: Option<TokenizerArg>,
    /// Subword scheme.
    #[arg(long, value_enum)]
    pub bpe: Option<BpeArg>,
    /// BPE codes file (subword_nmt / fastbpe).
    #[arg(long = "bpe-codes", value_name = "FILE")]
    pub bpe_codes: Option<PathBuf>,
    /// sentencepiece model file.
    #[arg(long = "sentencepiece-model", value_name = "FILE")]
    pub sentencepiece_model: Option<PathBuf>,
    /// Do not split hyphens (fairseq --moses-no-dash-splits).
    #[arg(long = "moses-no-dash-splits")]
    pub moses_no_dash_splits: bool,
    /// Do not escape special characters (fairseq --moses-no-escape).
    #[arg(long = "moses-no-escape")]
    pub moses_no_escape: bool,
}
