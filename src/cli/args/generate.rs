//! `tchseq generate`'s flags: fairseq-generate's, with the model, pipeline and search flags
//! `translate` shares.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tchseq::config::ComputeType;

use super::{fairseq, BatchArgs, DtypeArg, ModelArgs, PipelineArgs, SearchArgs};

/// fairseq's `--scoring`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScoringArg {
    /// BLEU over token ids, as fairseq's C libbleu counts it.
    Bleu,
    /// sacreBLEU on the detokenized text (--sacrebleu-tokenizer first).
    Sacrebleu,
    /// sacreBLEU's chrF on the detokenized text.
    Chrf,
    /// Word error rate on the detokenized text (--wer-tokenizer first).
    Wer,
}

/// The sacreBLEU tokenizers the sacrebleu and wer scorers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvalTokenizerArg {
    None,
    #[value(name = "13a")]
    T13a,
    Intl,
    Char,
    Zh,
}

#[derive(Debug, Args)]
#[command(after_long_help = "Output (stdout, or DIR/generate-SUBSET.txt with --results-path), in fairseq's batch order: \
per sentence S- (source), T- (reference), then per hypothesis H- (score in base 2, tokens), D- (detokenized), P- \
(positional scores in base 2) and with --print-alignment A-; then `Generate SUBSET with beam=N: SCORE`. Timings go to \
stderr.")]
pub struct GenerateArgs {
    /// The data-bin directory fairseq-preprocess wrote (dict.*.txt and the binarized splits).
    #[arg(value_name = "DATA")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub search: SearchArgs,
    /// The split to translate (`test`, `valid`, `train`, …).
    #[arg(long = "gen-subset", default_value = "test", value_name = "SPLIT")]
    pub gen_subset: String,
    /// The format of the split's files (default: found from the files).
    #[arg(long = "dataset-impl", value_name = "FORMAT", value_parser = ["raw", "lazy", "cached", "mmap"])]
    pub dataset_impl: Option<String>,
    /// Write the output to DIR/generate-SUBSET.txt instead of stdout.
    #[arg(long = "results-path", value_name = "DIR")]
    pub results_path: Option<PathBuf>,
    /// Hypotheses printed per sentence.
    #[arg(long, default_value_t = 1)]
    pub nbest: usize,
    /// Sample instead of beam search (requires --nbest equal to --beam).
    #[arg(long)]
    pub sampling: bool,
    /// Sample from the k most likely tokens only.
    #[arg(long = "sampling-topk", default_value_t = -1)]
    pub sampling_topk: i64,
    /// Sample from the smallest set of tokens whose probability mass exceeds p.
    #[arg(long = "sampling-topp", default_value_t = -1.0)]
    pub sampling_topp: f64,
    /// Divide the logits by this before the softmax.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Seed of libtorch's generator and of the split's shuffling (every split but `test`).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub batching: BatchArgs,
    /// Batch sizes are made multiples of this where the length limits allow.
    #[arg(long = "required-batch-size-multiple", default_value_t = 8, value_name = "N")]
    pub required_batch_size_multiple: usize,
    /// Leave out pairs longer than the max positions instead of stopping at the first.
    #[arg(long = "skip-invalid-size-inputs-valid-test")]
    pub skip_invalid_size_inputs_valid_test: bool,
    /// The most source tokens a pair may have (also bounded by the model's).
    #[arg(long = "max-source-positions", default_value_t = 1024, value_name = "N")]
    pub max_source_positions: usize,
    /// The most target tokens a pair may have (also bounded by the model's).
    #[arg(long = "max-target-positions", default_value_t = 1024, value_name = "N")]
    pub max_target_positions: usize,
    /// Split the batch list into N shards (fairseq's --distributed-world-size).
    #[arg(long = "num-shards", value_name = "N", default_value_t = 1)]
    pub num_shards: usize,
    /// Which shard to compute, 0 to N-1 (fairseq's --distributed-rank).
    #[arg(long = "shard-id", value_name = "I", default_value_t = 0)]
    pub shard_id: usize,
    /// The score printed last.
    #[arg(long, value_enum, default_value_t = ScoringArg::Bleu)]
    pub scoring: ScoringArg,
    /// The tokenizer of the sacrebleu scorer.
    #[arg(long = "sacrebleu-tokenizer", value_enum, default_value_t = EvalTokenizerArg::T13a)]
    pub sacrebleu_tokenizer: EvalTokenizerArg,
    /// Lowercase before the sacrebleu scorer.
    #[arg(long = "sacrebleu-lowercase")]
    pub sacrebleu_lowercase: bool,
    /// Score characters with the sacrebleu scorer.
    #[arg(long = "sacrebleu-char-level")]
    pub sacrebleu_char_level: bool,
    /// The tokenizer of the wer scorer.
    #[arg(long = "wer-tokenizer", value_enum, default_value_t = EvalTokenizerArg::None)]
    pub wer_tokenizer: EvalTokenizerArg,
    /// Lowercase before the wer scorer.
    #[arg(long = "wer-lowercase")]
    pub wer_lowercase: bool,
    /// Remove punctuation (tokens of Unicode punctuation only) before the wer scorer.
    #[arg(long = "wer-remove-punct")]
    pub wer_remove_punct: bool,
    /// Score characters with the wer scorer.
    #[arg(long = "wer-char-level")]
    pub wer_char_level: bool,
    /// Score the references instead of generating (fairseq's SequenceScorer): H- and P- show
    /// each reference with its average log-probability (base 2).
    #[arg(long = "score-reference")]
    pub score_reference: bool,
    /// Print alignments (A- lines): `hard`, source-target word pairs, or `soft`, each target
    /// token's attention over the source tokens.
    #[arg(long = "print-alignment", value_name = "hard|soft", num_args = 0..=1, require_equals = true,
        default_missing_value = "hard", value_parser = ["hard", "soft"])]
    pub print_alignment: Option<String>,
    /// Replace each <unk> of a hypothesis by the source word it is aligned with, or by that
    /// word's entry in the alignment dictionary FILE (`SOURCE TARGET` per line). The source words
    /// and the S-/T- lines come from the split's raw text (--dataset-impl raw).
    #[arg(long = "replace-unk", value_name = "FILE", num_args = 0..=1)]
    pub replace_unk: Option<Option<PathBuf>>,
    /// fairseq's --post-process (alias --remove-bpe): subword marks removed from S-, T- and H-
    /// lines, and the scorer given words.
    #[arg(long = "post-process", visible_alias = "remove-bpe", value_name = "SYMBOL", num_args = 0..=1,
        require_equals = true, default_missing_value = "subword_nmt",
        value_parser = clap::builder::PossibleValuesParser::new(fairseq::POST_PROCESS.to_vec()))]
    pub post_process: Option<String>,
    /// The model's dtype with `--compute-type exact` (fairseq's --fp16 is `fp16`).
    #[arg(long, value_enum, default_value_t = DtypeArg::Fp32)]
    pub dtype: DtypeArg,
    /// Print only the closing score line (fairseq's --quiet); no progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// CTranslate2's compute type: how the model computes (`exact` is fairseq's own arithmetic).
    #[arg(long = "compute-type", value_parser = super::compute_type::parser(), default_value_t = ComputeType::Exact)]
    pub compute_type: ComputeType,
}
