//! Translation options as the doors take them (server JSON, Python keyword arguments): fairseq's
//! generation settings with fairseq's defaults, checked once here and turned into a
//! `GeneratorConfig`.

use serde::Deserialize;

use crate::generate::{ConstraintOrder, GeneratorConfig, NgramMode, SearchStrategy};
use crate::config::ComputeType;

/// One request's generation settings, named as fairseq's flags (`--beam` → `beam`); missing
/// fields take fairseq's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TranslateOptions {
    /// fairseq's `--beam`: hypotheses kept per step.
    pub beam: usize,
    /// fairseq's `--nbest`: hypotheses returned per sentence (at most `beam`).
    pub nbest: usize,
    /// fairseq's `--lenpen`: scores are divided by `length ** lenpen`.
    pub lenpen: f64,
    /// fairseq's `--unkpen`: subtracted from `<unk>`'s log-probability.
    pub unkpen: f64,
    /// fairseq's `--max-len-a`: the maximum length is `max_len_a * src_len + max_len_b`.
    pub max_len_a: f64,
    /// fairseq's `--max-len-b`.
    pub max_len_b: usize,
    /// fairseq's `--min-len`: EOS is blocked before this many tokens.
    pub min_len: usize,
    /// fairseq's `--unnormalized`: scores are not divided by the length.
    pub unnormalized: bool,
    /// fairseq's `--no-repeat-ngram-size` (0: off), blocked as `ngram_blocking` says: by default
    /// as fairseq 0.12.2 on the CPU, which changes no output (see `NgramMode`).
    pub no_repeat_ngram_size: usize,
    /// Which of fairseq 0.12.2's n-gram blockers: `fairseq-cpu` (the default: its Python code,
    /// which bans nothing a hypothesis is affected by) or `fairseq-cuda` (its CUDA kernel: no
    /// n-gram twice in a hypothesis, the BOS counted).
    pub ngram_blocking: NgramMode,
    /// Accepted for older callers: asks for `ngram_blocking` `fairseq-cpu`, the default (it
    /// contradicts `fairseq-cuda`).
    pub fairseq_compat_ngram: bool,
    /// fairseq's `--sampling`: `Sampling` search instead of beam search.
    pub sampling: bool,
    /// fairseq's `--sampling-topk`: sample among the k most likely tokens (-1: all).
    pub sampling_topk: i64,
    /// fairseq's `--sampling-topp`: sample among the most likely tokens whose probabilities sum to p (-1: off).
    pub sampling_topp: f64,
    /// fairseq's `--temperature`: logits are divided by it.
    pub temperature: f64,
    /// `DiverseBeamSearch`: the beam split into this many groups (fairseq: when > 0).
    pub diverse_beam_groups: i64,
    /// fairseq's `--diverse-beam-strength`: the penalty on tokens earlier groups chose.
    pub diverse_beam_strength: f64,
    /// `DiverseSiblingsSearch` with this rate (fairseq: when > -1).
    pub diversity_rate: f64,
    /// `LengthConstrainedBeamSearch`: hypotheses as long as their source.
    pub match_source_len: bool,
    /// `LexicallyConstrainedBeamSearch`: `ordered` or `unordered` (fairseq's `--constraints`);
    /// each sentence's hypotheses then contain its constraints (the CLI's tab-separated fields,
    /// a request's `constraints`, Python's `constraints=`).
    pub constraints: Option<String>,
    /// Seed of libtorch's generator for this request (sampling).
    pub seed: u64,
    /// Per-token log-probabilities in the reply.
    pub token_scores: bool,
    /// Hard alignments (`src-tgt` word pairs) in the reply.
    pub alignment: bool,
    /// The soft alignment matrix in the reply.
    pub attention: bool,
    /// CTranslate2's `compute_type`: `exact` (fairseq's fp32 arithmetic), `float32`, `int8`,
    /// `float16` or `bfloat16`. When given, it must be the one the model was loaded with; by
    /// default it is.
    pub compute_type: Option<ComputeType>,
}

impl Default for TranslateOptions {
    /// fairseq-interactive's defaults, one hypothesis per sentence.
    fn default() -> Self {
        TranslateOptions {
            beam: 5,
            nbest: 1,
            lenpen: 1.0,
            unkpen: 0.0,
            max_len_a: 0.0,
            max_len_b: 200,
            min_len: 1,
            unnormalized: false,
            no_repeat_ngram_size: 0,
            ngram_blocking: NgramMode::FairseqCpu,
            fairseq_compat_ngram: false,
            sampling: false,
            sampling_topk: -1,
            sampling_topp: -1.0,
            temperature: 1.0,
            diverse_beam_groups: -1,
            diverse_beam_strength: 0.5,
            diversity_rate: -1.0,
            match_source_len: false,
            constraints: None,
            seed: 1,
            token_scores: false,
            alignment: false,
            attention: false,
            compute_type: None,
        }
    }
}

impl TranslateOptions {
    /// Why these options cannot be used.
    pub fn check(&self) -> Result<(), OptionError> {
        use OptionName::*;
        let beam = self.beam;
        if beam == 0 {
            return Err(OptionError::AtLeastOne(Beam));
        }
        if self.nbest == 0 || self.nbest > beam {
            return Err(OptionError::NbestOverBeam { beam });
        }
        if self.sampling && self.nbest != beam {
            return Err(OptionError::SamplingNbest);
        }
        if !self.sampling && (self.sampling_topk > 0 || self.sampling_topp > 0.0) {
            return Err(OptionError::NeedsSampling);
        }
        let searches = [self.sampling, self.diverse_beam_groups > 0, self.match_source_len, self.diversity_rate > 0.0];
        if searches.iter().filter(|&&on| on).count() > 1 {
            return Err(OptionError::ExclusiveSearches);
        }
        if self.fairseq_compat_ngram && self.ngram_blocking != NgramMode::FairseqCpu {
            return Err(OptionError::CompatNgramContradicted);
        }
        if let Some(name) = &self.constraints {
            ConstraintOrder::from_name(name).ok_or_else(|| OptionError::ConstraintOrder(name.clone()))?;
            if self.sampling || self.diverse_beam_groups > 0 || self.match_source_len || self.diversity_rate > -1.0 {
                return Err(OptionError::ConstraintsWithSearch);
            }
        }
        if self.diverse_beam_groups > 0 && beam as i64 % self.diverse_beam_groups != 0 {
            return Err(OptionError::BeamNotDivisible { beam, groups: self.diverse_beam_groups });
        }
        if !self.diverse_beam_strength.is_finite() || !self.diversity_rate.is_finite() {
            return Err(OptionError::NotFinite(&[DiverseBeamStrength, DiversityRate]));
        }
        if !self.temperature.is_finite() || self.temperature <= 0.0 {
            return Err(OptionError::Temperature);
        }
        if self.sampling_topp > 1.0 {
            return Err(OptionError::ToppOverOne);
        }
        if !self.lenpen.is_finite() || !self.unkpen.is_finite() || !self.max_len_a.is_finite() {
            return Err(OptionError::NotFinite(&[Lenpen, Unkpen, MaxLenA]));
        }
        if i64::try_from(self.max_len_b).is_err() || i64::try_from(self.min_len).is_err() {
            return Err(OptionError::TooLarge(&[MaxLenB, MinLen]));
        }
        if i64::try_from(self.seed).is_err() {
            return Err(OptionError::TooLarge(&[Seed]));
        }
        Ok(())
    }

    /// Whether a model that runs in `runs` serves these options' `compute_type`.
    pub fn check_compute_type(&self, runs: ComputeType) -> Result<(), OptionError> {
        match self.compute_type {
            Some(asked) if asked != runs => Err(OptionError::ComputeTypeNotLoaded { asked, runs }),
            _ => Ok(()),
        }
    }

    /// The generator settings and the search these options pick.
    pub fn generator_config(&self) -> GeneratorConfig {
        GeneratorConfig {
            beam_size: self.beam,
            max_len_a: self.max_len_a,
            max_len_b: self.max_len_b as i64,
            min_len: self.min_len as i64,
            normalize_scores: !self.unnormalized,
            len_penalty: self.lenpen,
            unk_penalty: self.unkpen,
            temperature: self.temperature,
            no_repeat_ngram_size: self.no_repeat_ngram_size,
            ngram_mode: if self.fairseq_compat_ngram { NgramMode::FairseqCpu } else { self.ngram_blocking },
            search: self.search(),
            need_attn: self.alignment || self.attention,
        }
    }

    /// The `Search` fairseq's `build_generator` picks, in its order.
    fn search(&self) -> SearchStrategy {
        if self.sampling {
            SearchStrategy::Sampling { topk: self.sampling_topk, topp: self.sampling_topp }
        } else if self.diverse_beam_groups > 0 {
            SearchStrategy::DiverseBeam { groups: self.diverse_beam_groups, strength: self.diverse_beam_strength }
        } else if self.match_source_len {
            SearchStrategy::MatchSourceLen
        } else if self.diversity_rate > -1.0 {
            SearchStrategy::DiverseSiblings { rate: self.diversity_rate }
        } else if let Some(order) = self.constraints.as_deref().and_then(ConstraintOrder::from_name) {
            SearchStrategy::LexicallyConstrained(order)
        } else {
            SearchStrategy::Beam
        }
    }

    /// Requests whose sentences may share a batch: the same search, whatever they want back.
    pub fn same_search(&self, other: &Self) -> bool {
        let strip = |o: &Self| TranslateOptions { nbest: 1, token_scores: false, alignment: false, attention: false, ..o.clone() };
        strip(self) == strip(other) && (self.alignment || self.attention) == (other.alignment || other.attention)
    }
}

/// A generation or batching option, by fairseq's name for it: `sampling_topk` is the server's and
/// Python's key, `--sampling-topk` the CLI's flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionName {
    /// `beam` (fairseq's `--beam`)
    Beam,
    /// `nbest` (fairseq's `--nbest`)
    Nbest,
    /// `lenpen` (fairseq's `--lenpen`)
    Lenpen,
    /// `unkpen` (fairseq's `--unkpen`)
    Unkpen,
    /// `max_len_a` (fairseq's `--max-len-a`)
    MaxLenA,
    /// `max_len_b` (fairseq's `--max-len-b`)
    MaxLenB,
    /// `min_len` (fairseq's `--min-len`)
    MinLen,
    /// `sampling` (fairseq's `--sampling`)
    Sampling,
    /// `sampling_topk` (fairseq's `--sampling-topk`)
    SamplingTopk,
    /// `sampling_topp` (fairseq's `--sampling-topp`)
    SamplingTopp,
    /// `temperature` (fairseq's `--temperature`)
    Temperature,
    /// `seed` (fairseq's `--seed`)
    Seed,
    /// `diverse_beam_groups` (fairseq's `--diverse-beam-groups`)
    DiverseBeamGroups,
    /// `diverse_beam_strength` (fairseq's `--diverse-beam-strength`)
    DiverseBeamStrength,
    /// `diversity_rate` (fairseq's `--diversity-rate`)
    DiversityRate,
    /// `match_source_len` (fairseq's `--match-source-len`)
    MatchSourceLen,
    /// `constraints` (fairseq's `--constraints`)
    Constraints,
    /// `ngram_blocking` (tchseq's `--ngram-blocking`)
    NgramBlocking,
    /// `fairseq_compat_ngram` (tchseq's `--fairseq-compat-ngram`)
    FairseqCompatNgram,
    /// `compute_type` (fairseq's `--compute-type`)
    ComputeType,
    /// `max_tokens` (fairseq's `--max-tokens`)
    MaxTokens,
    /// `batch_size` (fairseq's `--batch-size`)
    BatchSize,
    /// `inter_threads` (fairseq's `--inter-threads`)
    InterThreads,
}

impl OptionName {
    /// The name as a request's field and a Python keyword spell it.
    pub fn key(self) -> &'static str {
        match self {
            Self::Beam => "beam",
            Self::Nbest => "nbest",
            Self::Lenpen => "lenpen",
            Self::Unkpen => "unkpen",
            Self::MaxLenA => "max_len_a",
            Self::MaxLenB => "max_len_b",
            Self::MinLen => "min_len",
            Self::Sampling => "sampling",
            Self::SamplingTopk => "sampling_topk",
            Self::SamplingTopp => "sampling_topp",
            Self::Temperature => "temperature",
            Self::Seed => "seed",
            Self::DiverseBeamGroups => "diverse_beam_groups",
            Self::DiverseBeamStrength => "diverse_beam_strength",
            Self::DiversityRate => "diversity_rate",
            Self::MatchSourceLen => "match_source_len",
            Self::Constraints => "constraints",
            Self::NgramBlocking => "ngram_blocking",
            Self::FairseqCompatNgram => "fairseq_compat_ngram",
            Self::ComputeType => "compute_type",
            Self::MaxTokens => "max_tokens",
            Self::BatchSize => "batch_size",
            Self::InterThreads => "inter_threads",
        }
    }

    /// The name as fairseq's command line spells it (`--sampling-topk`).
    pub fn flag(self) -> String {
        format!("--{}", self.key().replace('_', "-"))
    }
}

/// Why generation or batching options cannot be used. [`OptionError::describe`] words it with
/// the caller's names for the options; `Display` uses [`OptionName::key`].
#[derive(Debug, Clone, PartialEq)]
pub enum OptionError {
    /// The option must be at least 1.
    AtLeastOne(OptionName),
    /// `nbest` is 0 or over `beam`.
    NbestOverBeam {
        /// The beam size.
        beam: usize,
    },
    /// `sampling` with `nbest` other than `beam`.
    SamplingNbest,
    /// `sampling_topk`/`sampling_topp` without `sampling`.
    NeedsSampling,
    /// More than one of the searches that exclude each other.
    ExclusiveSearches,
    /// `constraints` neither `ordered` nor `unordered`.
    ConstraintOrder(String),
    /// `constraints` with a search that does not support them.
    ConstraintsWithSearch,
    /// `beam` not divisible by `diverse_beam_groups`.
    BeamNotDivisible {
        /// The beam size.
        beam: usize,
        /// The groups asked for.
        groups: i64,
    },
    /// The options must be finite numbers.
    NotFinite(&'static [OptionName]),
    /// `temperature` not a finite number over 0.
    Temperature,
    /// `sampling_topp` over 1.
    ToppOverOne,
    /// The options are too large for libtorch's integers.
    TooLarge(&'static [OptionName]),
    /// `fairseq_compat_ngram` with an `ngram_blocking` other than `fairseq-cpu`.
    CompatNgramContradicted,
    /// `compute_type` other than the one the model was loaded in.
    ComputeTypeNotLoaded {
        /// The compute type asked for.
        asked: ComputeType,
        /// The one the model runs in.
        runs: ComputeType,
    },
}

impl OptionError {
    /// The message, with each option called `name(option)`.
    pub fn describe(&self, name: impl Fn(OptionName) -> String) -> String {
        use OptionName::*;
        let list = |names: &[OptionName], last: &str| {
            let named: Vec<String> = names.iter().map(|&n| name(n)).collect();
            match named.split_last() {
                Some((tail, [])) => tail.clone(),
                Some((tail, head)) => format!("{} {last} {tail}", head.join(", ")),
                None => String::new(),
            }
        };
        match self {
            Self::AtLeastOne(n) => format!("{} must be at least 1", name(*n)),
            Self::NbestOverBeam { beam } => format!("{} must be between 1 and {} ({beam})", name(Nbest), name(Beam)),
            Self::SamplingNbest => format!("{} requires {} to be equal to {}", name(Sampling), name(Nbest), name(Beam)),
            Self::NeedsSampling => format!("{}/{} require {}", name(SamplingTopk), name(SamplingTopp), name(Sampling)),
            Self::ExclusiveSearches => {
                format!("{} are mutually exclusive", list(&[Sampling, DiverseBeamGroups, MatchSourceLen, DiversityRate], "and"))
            }
            Self::ConstraintOrder(value) => format!("{} must be \"ordered\" or \"unordered\", not {value:?}", name(Constraints)),
            Self::ConstraintsWithSearch => format!(
                "{} cannot be combined with {} (their searches do not support them)",
                name(Constraints),
                list(&[Sampling, DiverseBeamGroups, MatchSourceLen, DiversityRate], "or")
            ),
            Self::BeamNotDivisible { beam, groups } => {
                format!("{} ({beam}) must be divisible by {} ({groups})", name(Beam), name(DiverseBeamGroups))
            }
            Self::NotFinite(names) => {
                format!("{} must be finite numbers", list(names, "and"))
            }
            Self::Temperature => format!("{} must be a finite number greater than 0", name(Temperature)),
            Self::ToppOverOne => format!("{} must be at most 1", name(SamplingTopp)),
            Self::TooLarge(names) if names.len() == 1 => format!("{} is too large", list(names, "and")),
            Self::TooLarge(names) => format!("{} are too large", list(names, "and")),
            Self::CompatNgramContradicted => format!(
                "{} asks for fairseq 0.12.2's CPU n-gram blocking, which {} \"fairseq-cuda\" contradicts",
                name(FairseqCompatNgram),
                name(NgramBlocking)
            ),
            Self::ComputeTypeNotLoaded { asked, runs } => {
                format!("{} {:?}: this model runs in {:?}", name(OptionName::ComputeType), asked.name(), runs.name())
            }
        }
    }
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe(|n| n.key().to_string()))
    }
}

impl std::error::Error for OptionError {}

#[cfg(test)]
mod tests {
    use super::{ComputeType, OptionError, OptionName, TranslateOptions};

    #[test]
    fn a_temperature_must_be_a_finite_number_above_zero() {
        for temperature in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let o = TranslateOptions { temperature, ..TranslateOptions::default() };
            assert_eq!(o.check(), Err(OptionError::Temperature), "{temperature}");
        }
        assert_eq!(TranslateOptions { temperature: 0.5, ..TranslateOptions::default() }.check(), Ok(()));
    }

    /// `no_repeat_ngram_size` runs fairseq 0.12.2's CPU blocking unless `ngram_blocking` asks for
    /// its CUDA kernel's; `fairseq_compat_ngram`, kept for older callers, asks for the default and
    /// contradicts the kernel.
    #[test]
    fn ngram_blocking_defaults_to_fairseq_s_cpu_code_and_the_old_switch_still_parses() {
        use crate::generate::NgramMode;
        let parse = |json: &str| serde_json::from_str::<TranslateOptions>(json).unwrap();
        let default = parse(r#"{"no_repeat_ngram_size": 1}"#);
        assert_eq!(default.check(), Ok(()));
        assert_eq!(default.generator_config().ngram_mode, NgramMode::FairseqCpu);
        let compat = parse(r#"{"no_repeat_ngram_size": 2, "fairseq_compat_ngram": true}"#);
        assert_eq!(compat.check(), Ok(()));
        assert_eq!(compat.generator_config().ngram_mode, NgramMode::FairseqCpu);
        let cuda = parse(r#"{"no_repeat_ngram_size": 3, "ngram_blocking": "fairseq-cuda"}"#);
        assert_eq!(cuda.generator_config().ngram_mode, NgramMode::FairseqCuda);
        let both = TranslateOptions { fairseq_compat_ngram: true, ..cuda };
        assert_eq!(both.check(), Err(OptionError::CompatNgramContradicted));
        assert_eq!(
            OptionError::CompatNgramContradicted.describe(OptionName::flag),
            "--fairseq-compat-ngram asks for fairseq 0.12.2's CPU n-gram blocking, which --ngram-blocking \"fairseq-cuda\" contradicts"
        );
        assert!(serde_json::from_str::<TranslateOptions>(r#"{"ngram_blocking": "intended"}"#).is_err());
    }

    /// A request names the options by their keys, the CLI by its flags: the same message.
    #[test]
    fn an_option_error_names_the_options_as_the_caller_does() {
        let cases = [
            (OptionError::NbestOverBeam { beam: 2 }, "nbest must be between 1 and beam (2)", "--nbest must be between 1 and --beam (2)"),
            (OptionError::NeedsSampling, "sampling_topk/sampling_topp require sampling", "--sampling-topk/--sampling-topp require --sampling"),
            (
                OptionError::ExclusiveSearches,
                "sampling, diverse_beam_groups, match_source_len and diversity_rate are mutually exclusive",
                "--sampling, --diverse-beam-groups, --match-source-len and --diversity-rate are mutually exclusive",
            ),
            (OptionError::TooLarge(&[OptionName::Seed]), "seed is too large", "--seed is too large"),
            (OptionError::AtLeastOne(OptionName::MaxTokens), "max_tokens must be at least 1", "--max-tokens must be at least 1"),
            (
                OptionError::ComputeTypeNotLoaded { asked: ComputeType::Exact, runs: ComputeType::Int8 },
                "compute_type \"exact\": this model runs in \"int8\"",
                "--compute-type \"exact\": this model runs in \"int8\"",
            ),
        ];
        for (e, key, flag) in cases {
            assert_eq!(e.to_string(), key);
            assert_eq!(e.describe(OptionName::flag), flag);
        }
    }

    /// The server's and Python's strings become the enum at the boundary, aliases included.
    #[test]
    fn a_compute_type_is_parsed_once_from_its_name_or_an_alias() {
        let parsed: TranslateOptions = serde_json::from_str(r#"{"compute_type": "int8_float32"}"#).unwrap();
        assert_eq!(parsed.compute_type, Some(ComputeType::Int8));
        for name in ComputeType::NAMES {
            assert_eq!(name.parse::<ComputeType>().unwrap().name(), name);
        }
        let err = serde_json::from_str::<TranslateOptions>(r#"{"compute_type": "int4"}"#).unwrap_err().to_string();
        assert!(err.starts_with("unknown compute type \"int4\" (available: \"exact\""), "{err}");
    }
}
