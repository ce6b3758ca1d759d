//! Translation options as the doors take them (server JSON, Python keyword arguments): fairseq's
//! generation settings with fairseq's defaults, checked once here and turned into a
//! `GeneratorConfig`.

use serde::Deserialize;

use crate::generate::{ConstraintOrder, GeneratorConfig, NgramMode, SearchStrategy};
use crate::model::ComputeType;

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
    /// fairseq's `--no-repeat-ngram-size`: no n-gram of this size twice in a hypothesis (0: off).
    pub no_repeat_ngram_size: usize,
    /// fairseq 0.12.2's CPU n-gram blocking, which blocks nothing (see `NgramMode`).
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
    /// CTranslate2's `compute_type`: `exact` (fairseq's fp32 arithmetic), `float32` or `int8`. When given,
    /// it must be the one the model was loaded with; by default it is.
    pub compute_type: Option<String>,
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
    /// Why these options cannot be used, in their own field names.
    pub fn check(&self) -> Result<(), String> {
        let beam = self.beam;
        if beam == 0 {
            return Err("beam must be at least 1".into());
        }
        if self.nbest == 0 || self.nbest > beam {
            return Err(format!("nbest must be between 1 and beam ({beam})"));
        }
        if self.sampling && self.nbest != beam {
            return Err("sampling requires nbest to be equal to beam".into());
        }
        if !self.sampling && (self.sampling_topk > 0 || self.sampling_topp > 0.0) {
            return Err("sampling_topk/sampling_topp require sampling".into());
        }
        let searches = [self.sampling, self.diverse_beam_groups > 0, self.match_source_len, self.diversity_rate > 0.0];
        if searches.iter().filter(|&&on| on).count() > 1 {
            return Err("sampling, diverse_beam_groups, match_source_len and diversity_rate are mutually exclusive".into());
        }
        if let Some(name) = &self.constraints {
            ConstraintOrder::from_name(name)
                .ok_or_else(|| format!("constraints must be \"ordered\" or \"unordered\", not {name:?}"))?;
            if self.sampling || self.diverse_beam_groups > 0 || self.match_source_len || self.diversity_rate > -1.0 {
                return Err("constraints cannot be combined with sampling, diverse_beam_groups, match_source_len or diversity_rate (their searches do not support them)".into());
            }
        }
        if self.diverse_beam_groups > 0 && beam as i64 % self.diverse_beam_groups != 0 {
            return Err(format!("beam ({beam}) must be divisible by diverse_beam_groups ({})", self.diverse_beam_groups));
        }
        if !self.diverse_beam_strength.is_finite() || !self.diversity_rate.is_finite() {
            return Err("diverse_beam_strength and diversity_rate must be finite numbers".into());
        }
        if !self.temperature.is_finite() || self.temperature <= 0.0 {
            return Err("temperature must be a finite number greater than 0".into());
        }
        if self.sampling_topp > 1.0 {
            return Err("sampling_topp must be at most 1".into());
        }
        if !self.lenpen.is_finite() || !self.unkpen.is_finite() || !self.max_len_a.is_finite() {
            return Err("lenpen, unkpen and max_len_a must be finite numbers".into());
        }
        if i64::try_from(self.max_len_b).is_err() || i64::try_from(self.min_len).is_err() {
            return Err("max_len_b and min_len are too large".into());
        }
        if i64::try_from(self.seed).is_err() {
            return Err("seed is too large".into());
        }
        if let Some(name) = &self.compute_type {
            ComputeType::from_name(name).map_err(|e| e.to_string().replace("compute type", "compute_type"))?;
        }
        Ok(())
    }

    /// Whether a model that runs in `runs` serves these options' `compute_type`.
    pub fn check_compute_type(&self, runs: ComputeType) -> Result<(), String> {
        match self.compute_type.as_deref() {
            Some(name) if ComputeType::from_name(name).ok() != Some(runs) => {
                Err(format!("compute_type {name:?}: this model runs in {:?}", runs.name()))
            }
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
            ngram_mode: if self.fairseq_compat_ngram { NgramMode::FairseqCompat } else { NgramMode::Intended },
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

#[cfg(test)]
mod tests {
    use super::TranslateOptions;

    #[test]
    fn a_temperature_must_be_a_finite_number_above_zero() {
        for temperature in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let o = TranslateOptions { temperature, ..TranslateOptions::default() };
            assert_eq!(o.check(), Err("temperature must be a finite number greater than 0".to_string()), "{temperature}");
        }
        assert_eq!(TranslateOptions { temperature: 0.5, ..TranslateOptions::default() }.check(), Ok(()));
    }
}
