//! fairseq's generation flags (`--beam`, `--lenpen`, the searches), shared by `translate` and
//! `attention`.

use clap::Args;
use tchseq::generate::NgramMode;

/// fairseq's search flags with their defaults, shared by `translate` and `attention`.
#[derive(Debug, Args, Clone)]
pub struct SearchArgs {
    /// Beam size (with --sampling: the number of samples).
    #[arg(long, default_value_t = 5)]
    pub beam: usize,
    /// Length penalty: scores are divided by length^lenpen (EOS counted); <1 favors shorter.
    #[arg(long, default_value_t = 1.0)]
    pub lenpen: f64,
    /// Unknown-word penalty, subtracted from the `<unk>` log-probability at every step.
    #[arg(long, default_value_t = 0.0)]
    pub unkpen: f64,
    /// Generate at most max-len-a * src_len + max-len-b tokens (src_len: padded batch width).
    #[arg(long = "max-len-a", default_value_t = 0.0)]
    pub max_len_a: f64,
    /// The constant term of the length limit above.
    #[arg(long = "max-len-b", default_value_t = 200)]
    pub max_len_b: usize,
    /// Minimum number of generated tokens before EOS (EOS not counted).
    #[arg(long = "min-len", default_value_t = 1)]
    pub min_len: usize,
    /// Do not normalize scores by length.
    #[arg(long)]
    pub unnormalized: bool,
    /// Block repeated n-grams of this size as --ngram-blocking says. By default that is
    /// fairseq 0.12.2 on the CPU, where it changes no output, at any size.
    #[arg(long = "no-repeat-ngram-size", default_value_t = 0)]
    pub no_repeat_ngram_size: usize,
    /// Which of fairseq 0.12.2's n-gram blockers --no-repeat-ngram-size runs. fairseq-cpu: its
    /// Python code, which fairseq runs on the CPU and wherever its optional CUDA extension is not
    /// built; it compares against the pad-filled end of the token buffer, so no hypothesis
    /// changes. fairseq-cuda: its CUDA kernel (and fairseq <= 0.10): no n-gram twice in a
    /// hypothesis, the leading BOS counted (size 1 is refused where the BOS is EOS: it would ban
    /// EOS).
    #[arg(long = "ngram-blocking", value_enum, default_value_t = NgramMode::FairseqCpu)]
    pub ngram_blocking: NgramMode,
    /// Accepted for older scripts: asks for --ngram-blocking fairseq-cpu, which is the default
    /// (fairseq 0.12.2 on the CPU); an error beside --ngram-blocking fairseq-cuda.
    #[arg(long = "fairseq-compat-ngram")]
    pub fairseq_compat_ngram: bool,
    /// Diverse beam search: split the beam into this many groups, each penalised for the tokens
    /// the groups before it chose (fairseq's DiverseBeamSearch; the beam must be divisible by it).
    #[arg(long = "diverse-beam-groups", default_value_t = -1, allow_negative_numbers = true)]
    pub diverse_beam_groups: i64,
    /// The penalty per earlier choice of a token, with --diverse-beam-groups.
    #[arg(long = "diverse-beam-strength", default_value_t = 0.5, allow_negative_numbers = true)]
    pub diverse_beam_strength: f64,
    /// Diverse siblings search: the k-th best extension of each hypothesis loses k * rate
    /// (fairseq's DiverseSiblingsSearch, used when the rate is above -1; 0 ranks as plain beam).
    #[arg(long = "diversity-rate", default_value_t = -1.0, allow_negative_numbers = true)]
    pub diversity_rate: f64,
    /// Accepted as fairseq-interactive accepts it: it passes no prefix to the search, so this
    /// changes nothing for plain lines. With --input-format jsonl lines that carry a reference
    /// target (`tgt`), its first N tokens are forced, as fairseq-generate does.
    #[arg(long = "prefix-size", default_value_t = 0)]
    pub prefix_size: usize,
    /// Accepted as fairseq 0.12.2 accepts it: deprecated there (no code reads it), it changes
    /// nothing.
    #[arg(long = "no-early-stop")]
    pub no_early_stop: bool,
    /// fairseq's inference with dropout on; refused (results would be random).
    #[arg(long = "retain-dropout")]
    pub retain_dropout: bool,
    /// Generate hypotheses exactly as long as their source (fairseq's
    /// LengthConstrainedBeamSearch: EOS only after as many tokens as the source has).
    #[arg(long = "match-source-len")]
    pub match_source_len: bool,
}
