//! Every flag of every command, kept apart from the commands' logic. Flag names and defaults
//! follow fairseq wherever fairseq has one.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

use tchseq::config::ComputeType;

mod compute_type;
pub mod fairseq;
pub mod generate;
mod help;
mod model;
mod parse;
mod search;
mod serve;
pub use help::hide_global_flags_where_meaningless;
pub use model::{BpeArg, ModelArgs, PipelineArgs, TaskArgs, TokenizerArg};
pub use parse::parse_from;
pub use search::SearchArgs;
pub use serve::ServeArgs;

#[derive(Debug, Parser)]
#[command(
    name = "tchseq",
    version,
    about = "Run fairseq Transformer translation models exactly as fairseq does, without Python.",
    long_about = None,
    after_help = "Examples:\n  tchseq translate -m weights/multi30k.en-de \"A dog runs in the park.\"\n  tchseq score -m weights/multi30k.en-de --input pairs.csv --output scored.csv\n  tchseq doctor"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command accepts.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Intra-op threads for libtorch (default: all cores; 1 with --inter-threads above 1).
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    /// Batches computed at the same time, one thread each (CTranslate2's inter_threads): the
    /// batches of a file's buffer (`translate`, `score`) or of a model's gathered requests
    /// (`serve`). Outputs do not change; on a CPU, `--inter-threads <cores>` is the fastest way
    /// through a large input. Sampling keeps one batch at a time.
    #[arg(long = "inter-threads", global = true, value_name = "N", default_value_t = 1)]
    pub inter_threads: usize,
    /// Where to run the model: the CPU unless asked (fairseq's `--cpu` is our default; `auto`
    /// takes a GPU when libtorch sees one).
    #[arg(long, global = true, value_enum, default_value_t = DeviceArg::Cpu)]
    pub device: DeviceArg,
    /// Pin libtorch's CPU kernels (MKL_CBWR=AVX2,STRICT, ATEN_CPU_CAPABILITY=avx2) so that
    /// results are the same at any --threads, and equal to fairseq run under the same variables
    /// on the same machine. Also TCHSEQ_REPRODUCIBLE=1. Batch composition still changes bits, as
    /// in fairseq.
    #[arg(long, global = true)]
    pub reproducible: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    Cpu,
    /// The first GPU libtorch sees; an error when it sees none.
    Cuda,
    /// CUDA when libtorch sees a GPU, else CPU.
    Auto,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Translate raw text with beam search or sampling, exactly as fairseq-interactive does.
    #[command(after_help = "Batching follows fairseq-interactive: --buffer-size lines are read, ordered and batched \
(--batch-size / --max-tokens) the way fairseq orders them, and printed in input order, so scores match fairseq \
bit for bit on the same machine given the same flags. With none of these flags, a terminal is answered line by \
line, as fairseq-interactive does, and a file, a pipe or sentence arguments are batched by --max-tokens 512 over \
2048 lines: pass --batch-size 1 for fairseq-interactive's default batching and bits. A sentence longer than --max-tokens gets a batch of its own (fairseq refuses). \
A line longer than the model's max_source_positions, or one that is not valid UTF-8, is not translated: `text` \
prints an empty line (and `error: line N: ...` on stderr), `fairseq` an E-<id> line, `jsonl` an object with an \
\"error\" field (its \"source\" is null when the line is not UTF-8); the other lines are translated and the \
command exits with status 2 at the end, after one error line counting the lines that failed. fairseq differs on \
purpose here: it stops at a line too long (or skips it silently with --skip-invalid-size-inputs-valid-test) and \
dies with a UnicodeDecodeError at a line that is not UTF-8 (on stdin in the C locale it reads the bad bytes as \
<unk> instead).\n\n\
Lines are split as fairseq-interactive splits them, and ids count them that way: in --input FILE, `\\n`, `\\r\\n` \
and a lone `\\r` each end a line (Python's universal newlines); on stdin only `\\n` (or `\\r\\n`) does, and a lone \
`\\r` stays inside the line as whitespace. A NUL byte is an ordinary character (an unknown token), and an empty \
line is translated (its source is EOS alone).\n\n\
Example:\n  echo 'A man is riding a bike.' | tchseq translate -m weights/multi30k.en-de\n  tchseq translate -m weights/multi30k.en-de --format fairseq --beam 5 \"Two dogs play.\"")]
    Translate(TranslateArgs),
    /// Translate a split of a binarized data-bin and score it, exactly as fairseq-generate does.
    #[command(after_help = "Example:\n  tchseq generate data-bin/wmt --path checkpoints/checkpoint_best.pt --beam 5 --remove-bpe --scoring sacrebleu")]
    Generate(generate::GenerateArgs),
    /// Score (source, target) pairs from a CSV file: per-row log-probabilities.
    #[command(after_help = "Example:\n  tchseq score -m weights/multi30k.en-de --input pairs.csv --output scored.csv")]
    Score(ScoreArgs),
    /// Rebuild the single-process output of `translate` or `score` from its shards' outputs.
    #[command(after_help = "Records are put back in input order by their id (translate's `id`, score's `row` \
column, which --num-shards adds as the last column); the `row` column is dropped again, so the result is byte for \
byte what one process writes. A line or row found in two files, or one found in none, is an error.\n\n\
Example:\n  for i in 0 1 2; do tchseq translate -m weights/multi30k.en-de --format jsonl --num-shards 3 --shard-id $i \
--input in.txt --output part$i.jsonl; done\n  tchseq merge part0.jsonl part1.jsonl part2.jsonl > all.jsonl")]
    Merge(MergeArgs),
    /// Compare weights and activations with tensors saved from PyTorch/fairseq.
    #[command(after_help = "`encoder_states.{i}` may be time-major [S,B,C] or batch-first [B,S,C], dense or nested, as \
fairseq's encoder fast path returns them; the layout is read from the shape (when B == S, from which way the values \
match) and the report's layout column names it.\n\n\
Example:\n  tchseq verify -m tests/fixtures/models/postnorm --reference tests/fixtures/models/postnorm/verify_left.pt")]
    Verify(VerifyArgs),
    /// Serve models over HTTP: our JSON API, LibreTranslate's and OpenNMT-py's, metrics and a web page.
    #[command(after_help = "Sentences of concurrent requests are gathered into one buffer (up to --max-tokens source \
tokens, waiting at most --max-wait-ms for more) and translated as `translate` translates a file; --deterministic \
translates each request on its own, so that a reply never depends on other traffic (batch composition changes the \
last bits of exact scores, as in fairseq). SIGTERM or Ctrl-C stops accepting connections, finishes the requests in \
flight and exits 0.\n\n\
Example:\n  tchseq serve --model weights/multi30k.en-de --port 5000\n  \
curl -s localhost:5000/v1/translate -H 'Content-Type: application/json' -d '{\"text\": [\"A dog runs.\"]}'")]
    Serve(ServeArgs),
    /// Summarise a checkpoint: format, config, dictionaries, tensors.
    #[command(after_help = "Example:\n  tchseq inspect -m weights/multi30k.en-de --json")]
    Inspect(InspectArgs),
    /// Raw text lines in, the subword tokens (or ids) fairseq would feed the model out.
    #[command(after_help = "Reads stdin as fairseq-interactive does: `\\n` (or `\\r\\n`) ends a line, a lone `\\r` \
stays inside it. One output line per input line: a line that is not valid UTF-8 gets an empty output line and \
`error: line N: ...` on stderr, the other lines are encoded, and the command exits with status 2 at the end.\n\n\
Example:\n  echo 'A dog runs.' | tchseq encode -m weights/multi30k.en-de")]
    Encode(EncodeArgs),
    /// Subword token lines (or ids) in, detokenized text out.
    #[command(after_help = "Reads stdin as `encode` does. One output line per input line: a line that is not valid \
UTF-8 (or, with --ids, holds something that is not an id) gets an empty output line and `error: line N: ...` on \
stderr, the other lines are decoded, and the command exits with status 2 at the end.\n\n\
Example:\n  echo 'ein Hund läuft .' | tchseq decode -m weights/multi30k.en-de")]
    Decode(DecodeArgs),
    /// Draw the attention of a translation as a labelled heatmap (SVG or PNG).
    #[command(after_help = "Rows are target tokens (the token each decoder position predicts, final EOS \
included), columns source tokens (EOS included). Layers and heads are numbered from 0, as in the \
state-dict names (decoder.layers.N); the default is fairseq's alignment layer (the last decoder layer) \
averaged over heads, the attention behind --print-alignment.\n\n\
Example:\n  tchseq attention -m weights/multi30k.en-de \"A dog runs in the park.\" --output attn.svg\n  \
tchseq attention -m weights/multi30k.en-de \"A dog runs.\" --kind encoder-self --layer 0 --grid --output enc0.svg")]
    Attention(AttentionArgs),
    /// Plot the model's positional-embedding table (position x dimension) as SVG or PNG.
    #[command(after_help = "Example:\n  tchseq positions -m weights/multi30k.en-de --length 50 --output pe.svg")]
    Positions(PositionsArgs),
    /// sacreBLEU 2.5's corpus BLEU, chrF and TER, printed as `sacrebleu REF... -i HYP` prints them.
    #[command(after_help = "sacrebleu's own arguments: REF... -i HYP, -m bleu chrf ter, -tok 13a|intl|char|none|zh, -lc, \
-f json|text, -w, -b, --chrf-word-order, several references. The signature's version field names the sacreBLEU \
version reproduced (--sacrebleu-version). --confidence (-ci, -cin N), --paired-bs (-i BASELINE SYS..., -pbsn N) \
and --paired-ar (-parn N) resample as sacreBLEU does, seeded by SACREBLEU_SEED (default 12345).\n\n\
Example:\n  tchseq sacrebleu ref.de -i hyp.de -m bleu chrf\n  tchseq sacrebleu ref.de -i base.de new.de -m bleu chrf --paired-bs -f text")]
    Sacrebleu(crate::cli::sacrebleu::SacrebleuArgs),
    /// Average the parameters of checkpoints, as fairseq's scripts/average_checkpoints.py does.
    Average(crate::cli::average::AverageArgs),
    /// Report the libtorch build, CUDA/cuDNN availability and thread settings.
    #[command(after_help = "Example:\n  tchseq doctor")]
    Doctor(DoctorArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// One sentence per line, as fairseq-interactive reads them.
    Text,
    /// One JSON object per line: `{"src": "...", "prefix": "..."}`; the hypotheses begin with
    /// `prefix` (target text, optional).
    Jsonl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TranslateFormat {
    /// One detokenized best hypothesis per input line.
    Text,
    /// Exactly the S-/W-/H-/D-/P- (and A-) lines fairseq-interactive prints (base-2 scores).
    Fairseq,
    /// One JSON object per input line (natural-log scores).
    Jsonl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    Fp32,
    Fp16,
    Bf16,
}


#[derive(Debug, Args)]
pub struct TranslateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub shard: ShardArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Sentences to translate; when none are given, lines are read from --input or stdin.
    #[arg(value_name = "SENTENCE")]
    pub sentences: Vec<String>,
    /// Input file (default: stdin).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Output file (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Output format. Scores are base 2 in `fairseq` (as fairseq-interactive prints them),
    /// natural log in `jsonl`.
    #[arg(long, value_enum, default_value_t = TranslateFormat::Text)]
    pub format: TranslateFormat,
    /// Input format: `text` lines, or `jsonl` objects with a source and an optional target
    /// prefix that the hypotheses must begin with (fairseq's `prefix_tokens`).
    #[arg(long = "input-format", value_enum, default_value_t = InputFormat::Text)]
    pub input_format: InputFormat,
    #[command(flatten)]
    pub search: SearchArgs,
    /// Hypotheses printed per sentence.
    #[arg(long, default_value_t = 1)]
    pub nbest: usize,
    /// Sample instead of beam search (requires --nbest equal to --beam). Draws come from
    /// libtorch's generator in fairseq's order, so samples equal fairseq-interactive's for the
    /// same --seed, models, batching and device.
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
    /// Seed of libtorch's generator (set once at startup, as fairseq does).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub batching: BatchArgs,
    /// Lines read before translating (fairseq-interactive's --buffer-size; default: the batch
    /// size). With no --batch-size, --max-tokens or --buffer-size, a terminal is translated line
    /// by line as fairseq does, and a file, a pipe or sentence arguments with --max-tokens 512
    /// over 2048 lines; give --batch-size 1 for fairseq-interactive's own batching and bits.
    #[arg(long = "buffer-size", default_value_t = 0, hide_default_value = true)]
    pub buffer_size: usize,
    /// Print hard alignments (A- lines; in jsonl `alignment` and the soft `attention` matrix).
    /// fairseq's `--print-alignment hard` is the same; its `soft` A- lines are not printed.
    #[arg(long = "print-alignment", value_name = "hard", num_args = 0..=1, require_equals = true,
        default_missing_value = "hard", value_parser = ["hard"])]
    pub print_alignment: Option<String>,
    /// fairseq's --post-process (alias --remove-bpe): with --format fairseq, the S- and H-
    /// lines are printed with the subword marks removed (and D- decoded from that), as
    /// fairseq-interactive prints them. Text and JSONL output are detokenized anyway.
    #[arg(long = "post-process", visible_alias = "remove-bpe", value_name = "SYMBOL", num_args = 0..=1,
        require_equals = true, default_missing_value = "subword_nmt",
        value_parser = clap::builder::PossibleValuesParser::new(fairseq::POST_PROCESS.to_vec()))]
    pub post_process: Option<String>,
    /// The model's dtype with `--compute-type exact`, as fairseq's --fp16 (`fp16`) and --bf16
    /// (`bf16`) set it: weights and computation in that precision. On a CPU, fp16 runs about
    /// 10x slower than fp32.
    #[arg(long, value_enum, default_value_t = DtypeArg::Fp32)]
    pub dtype: DtypeArg,
    /// No progress bar or summary (shown only with --output on a terminal).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// CTranslate2's compute type: how the model computes (docs/translate.md measures each;
    /// `tchseq doctor` lists what this CPU runs fast).
    #[arg(long = "compute-type", value_parser = compute_type::parser(), default_value_t = ComputeType::Exact)]
    pub compute_type: ComputeType,
    /// Continue an interrupted `--output` run of the same command (any changed setting is
    /// refused, by name): the partial file keeps every line finished before the interruption,
    /// and the rest is appended as one run would have written it. Not with --sampling.
    #[arg(long)]
    pub resume: bool,
    /// Lexically constrained decoding (fairseq's LexicallyConstrainedBeamSearch): an input line
    /// is `source<TAB>constraint<TAB>...` (jsonl: a `constraints` list), and every hypothesis
    /// holds every constraint, in the order given (`ordered`, the default) or in any order.
    #[arg(long, value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "ordered", value_name = "ORDER")]
    pub constraints: Option<ConstraintsArg>,
}

/// fairseq's batching flags, as `translate` and `score` take them.
#[derive(Debug, Clone, Args)]
pub struct BatchArgs {
    /// Sentences (for `score`, pairs) per batch (fairseq's --batch-size).
    #[arg(long = "batch-size", visible_alias = "max-sentences")]
    pub batch_size: Option<usize>,
    /// Tokens per batch (fairseq's --max-tokens): the source's for `translate`, the longer
    /// side of each pair for `score` (12000 there when neither this nor --batch-size is given).
    /// A sentence or pair longer than this gets a batch of its own.
    #[arg(long = "max-tokens")]
    pub max_tokens: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConstraintsArg {
    Ordered,
    Unordered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScoreFormat {
    Csv,
    Jsonl,
}

#[derive(Debug, Args)]
#[command(after_long_help = "Output: every input column, then logprob (sum of the natural-log probabilities of the \
target tokens, EOS included), tokens (target tokens after BPE, EOS included), avg_logprob (logprob / tokens: \
fairseq-generate --score-reference's score, in base e where fairseq prints base 2), ppl (exp(-avg_logprob)) and \
error; --per-token adds token_logprobs. Exactly one output row per input row, in input order; a row that cannot \
be scored (ragged, missing/empty field, invalid UTF-8, longer than the model's max positions) keeps its place \
with empty scores and the reason in `error`. Rows are CSV records: a quoted field may hold line breaks, an \
unquoted `\\r` ends a record and a blank line is no record (as in Python's csv module); a NUL byte is an ordinary \
character.\n\n\
--output is written as <output>.partial (plus <output>.partial.progress) and renamed to <output> when complete. \
After an interruption, --resume continues from the last completed --buffer-size chunk.\n\n\
Exit status: 0 when every row was scored (or the input has no rows); 2 when some rows could not be scored \
(the output is still complete, with the reasons in `error`) and for usage, input or model errors (e.g. a \
missing column).\n\n\
Example:\n  tchseq score -m weights/multi30k.en-de --input pairs.csv --output scored.csv\n  \
tchseq score -m model_dir --tokenized --delimiter '\\t' --input pairs.tsv --format jsonl --per-token")]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub shard: ShardArgs,
    /// CSV file with a header row (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    pub input: PathBuf,
    /// Output file (default: stdout). Written to a temporary file and renamed at the end.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The column (by its header name) holding each row's source text.
    #[arg(long = "source-column", default_value = "source")]
    pub source_column: String,
    /// The column (by its header name) holding each row's target text, the one scored.
    #[arg(long = "target-column", default_value = "target")]
    pub target_column: String,
    /// Column with each row's source language (multilingual models; default: --source-lang).
    #[arg(long = "source-lang-column", value_name = "NAME")]
    pub source_lang_column: Option<String>,
    /// Column with each row's target language (multilingual models; default: --target-lang).
    #[arg(long = "target-lang-column", value_name = "NAME")]
    pub target_lang_column: Option<String>,
    /// Field delimiter (use '\t' for TSV).
    #[arg(long, default_value = ",")]
    pub delimiter: String,
    /// Output format: `csv` (the input's columns, then the scores) or `jsonl` (one JSON object
    /// per row).
    #[arg(long, value_enum, default_value_t = ScoreFormat::Csv)]
    pub format: ScoreFormat,
    /// Add a token_logprobs column: a JSON array of [token, logprob] pairs.
    #[arg(long = "per-token")]
    pub per_token: bool,
    /// Text is raw and still needs tokenization + BPE (default).
    #[arg(long, conflicts_with = "tokenized")]
    pub raw: bool,
    /// Text is already tokenized and BPE'd.
    #[arg(long)]
    pub tokenized: bool,
    #[command(flatten)]
    pub batching: BatchArgs,
    /// Rows read and scored at a time; memory stays bounded by this.
    #[arg(long = "buffer-size", default_value_t = 10000)]
    pub buffer_size: usize,
    /// As translate's: `exact` gives fairseq-generate --score-reference's scores bit for bit;
    /// the others are faster (docs/translate.md measures each; `tchseq doctor` lists what this
    /// CPU runs fast).
    #[arg(long = "compute-type", value_parser = compute_type::parser(), default_value_t = ComputeType::Exact)]
    pub compute_type: ComputeType,
    /// Continue an interrupted run into the same --output, with the same settings (any changed
    /// setting is refused, by name).
    #[arg(long)]
    pub resume: bool,
    /// No progress bar or summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Score a language model (a transformer_lm checkpoint) on a text file, one sentence per
    /// line, as fairseq-eval-lm does: one record per sample with the natural-log probability of
    /// every token (`</s>` included), and eval-lm's `Loss (base 2)` and perplexity on stderr.
    #[arg(long)]
    pub lm: bool,
    /// With --lm: `eos` scores each line alone (its id is the line number); `none` cuts the
    /// running text into blocks of --tokens-per-sample tokens, `complete` packs whole lines
    /// into such blocks (fairseq-eval-lm's default is `none`; ids are block numbers).
    #[arg(long = "sample-break-mode", value_enum, default_value_t = LmBreakMode::Eos)]
    pub sample_break_mode: LmBreakMode,
    /// With --lm: the block size of `none`/`complete` (default: the one the model was trained with).
    #[arg(long = "tokens-per-sample")]
    pub tokens_per_sample: Option<usize>,
    /// With --lm: each block is scored after up to this many tokens of the text before it
    /// (blocks are then --tokens-per-sample minus this long, as in fairseq-eval-lm).
    #[arg(long = "context-window", default_value_t = 0)]
    pub context_window: usize,
    /// With --lm: start every sample with `<s>` (on by itself when the checkpoint was trained so).
    #[arg(long = "add-bos-token")]
    pub add_bos_token: bool,
    /// With --lm: score words, not subword pieces: a piece ending in `@@` is joined to the next
    /// and its log-probability added to the word's (fairseq-eval-lm --remove-bpe '@@ ').
    #[arg(long = "remove-bpe", num_args = 0..=1, default_missing_value = "@@ ", value_name = "SYMBOL")]
    pub remove_bpe: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LmBreakMode {
    None,
    Complete,
    Eos,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("compared_with").args(["reference", "against"]).required(true)))]
pub struct VerifyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Reference tensors (.pt or .safetensors) in the verify reference format.
    #[arg(long, value_name = "FILE", conflicts_with = "against")]
    pub reference: Option<PathBuf>,
    /// A conversion of the model to compare it with, in any format tchseq reads: a fairseq
    /// checkpoint or model directory, a Hugging Face directory, a CTranslate2 directory
    /// (dequantized with its stored scales). Configs, then every weight to its storage's bound,
    /// then (with --input) activations and translations.
    #[arg(long, value_name = "DIR|FILE")]
    pub against: Option<PathBuf>,
    /// With --against: sentences (one per line, raw text) to run both models on.
    #[arg(long, value_name = "FILE", requires = "against")]
    pub input: Option<PathBuf>,
    /// Absolute tolerance: a value passes when |ours - reference| <= atol + rtol * |reference|,
    /// for every tensor. Without --atol/--rtol each tensor's bound is derived from float
    /// rounding at its magnitude and depth (see docs/commands.md, "Tolerances").
    #[arg(long)]
    pub atol: Option<f64>,
    /// Relative tolerance (see --atol; 0 when only --atol is given, and the other way round).
    #[arg(long)]
    pub rtol: Option<f64>,
    /// The model's dtype: fp16 or bf16 for a reference saved from `model.half()` or
    /// `model.to(torch.bfloat16)` (what fairseq's --fp16 computes with).
    #[arg(long, value_enum, default_value_t = DtypeArg::Fp32)]
    pub dtype: DtypeArg,
    /// Print the comparison as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print exactly one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Side {
    Source,
    Target,
}

#[derive(Debug, Args)]
pub struct EncodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Which side's tokenizer, BPE and dictionary encode the text.
    #[arg(long, value_enum, default_value_t = Side::Source)]
    pub side: Side,
    /// Print dictionary ids (EOS appended) instead of subword tokens.
    #[arg(long)]
    pub ids: bool,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Which side's dictionary and BPE decode the tokens.
    #[arg(long, value_enum, default_value_t = Side::Target)]
    pub side: Side,
    /// Input lines are dictionary ids.
    #[arg(long)]
    pub ids: bool,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionKindArg {
    /// Decoder attention over the encoder output (target x source).
    Cross,
    /// Encoder self-attention (source x source).
    EncoderSelf,
    /// Decoder self-attention (target x target input).
    DecoderSelf,
}

#[derive(Debug, Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// The source sentence.
    #[arg(value_name = "SENTENCE")]
    pub sentence: String,
    /// Image file: .svg or .png.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Use this target (subword tokens) instead of translating (teacher forcing).
    #[arg(long, value_name = "TOKENS")]
    pub target: Option<String>,
    /// Layer, from 0 (default: the last layer, fairseq's alignment layer).
    #[arg(long, value_name = "N")]
    pub layer: Option<usize>,
    /// Head number from 0, or `mean` (average over heads, as fairseq's `attn`).
    #[arg(long, value_name = "H|mean", default_value = "mean")]
    pub head: String,
    /// Which attention to draw.
    #[arg(long, value_enum, default_value_t = AttentionKindArg::Cross)]
    pub kind: AttentionKindArg,
    /// Draw every head of the layer (and their mean) side by side.
    #[arg(long)]
    pub grid: bool,
    /// TrueType font for PNG labels (default: DejaVu Sans or Liberation Sans if installed).
    #[arg(long, value_name = "FILE.ttf")]
    pub font: Option<PathBuf>,
    #[command(flatten)]
    pub search: SearchArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PositionsSide {
    Encoder,
    Decoder,
}

#[derive(Debug, Args)]
pub struct PositionsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Number of positions (rows) to plot.
    #[arg(long, default_value_t = 50)]
    pub length: usize,
    /// Image file: .svg or .png.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Which table (they are equal for sinusoidal positions of equal width).
    #[arg(long, value_enum, default_value_t = PositionsSide::Encoder)]
    pub side: PositionsSide,
    /// TrueType font for PNG labels (default: DejaVu Sans or Liberation Sans if installed).
    #[arg(long, value_name = "FILE.ttf")]
    pub font: Option<PathBuf>,
}

#[cfg(test)]
mod tests;


/// fairseq's `--num-shards`/`--shard-id`: this process takes every N-th buffer of the input.
#[derive(Debug, Clone, Copy, Args)]
pub struct ShardArgs {
    /// Split the input into N shards by buffer (`--buffer-size`): buffer k goes to shard k mod N,
    /// so every batch is the one a single run makes. Records keep their ids; `tchseq merge`
    /// rebuilds the single run's output from the shards' outputs.
    #[arg(long = "num-shards", value_name = "N")]
    pub num_shards: Option<usize>,
    /// Which shard this process computes, 0 to N-1.
    #[arg(long = "shard-id", value_name = "I", default_value_t = 0, requires = "num_shards")]
    pub shard_id: usize,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' outputs (translate: --format jsonl or fairseq; score: csv, tsv or jsonl).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The number of input lines or rows; a missing last shard is found only with it.
    #[arg(long, value_name = "N")]
    pub lines: Option<u64>,
}
