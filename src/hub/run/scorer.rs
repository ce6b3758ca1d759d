//! (source, target) pairs in, log-probabilities out: `fairseq-generate --score-reference`
//! (fairseq's `SequenceScorer`) over a loaded model. The `score` command and the server's
//! `/v1/score` both score through [`Translator::score`] (CTranslate2's `score_batch`).

use std::sync::Arc;

use super::scoring::{Encoded, Scored};
use super::translator::Translator;
use crate::hub::{HubError, LanguageTokens};
use crate::generate::batching::batch_by_size;
use crate::generate::scorer::{ordered_indices, ScorerError};
use crate::generate::workers::run_each;
use crate::generate::GenerateError;

/// [`Translator`] named for its scoring role, as CTranslate2 puts `score_batch` on its
/// `Translator` (and Python has `tchseq.Scorer`): (source, target) pairs in,
/// `fairseq-generate --score-reference`'s numbers out.
///
/// ```rust
/// use tchseq::hub::{LoadOptions, ModelBundle, ModelSpec, Scorer, TextMode};
///
/// let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/../weights/multi30k.en-de");
/// let spec = ModelSpec { model: Some(model.into()), ..Default::default() };
/// let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu))?;
/// let scorer = Scorer::new(bundle, tch::Device::Cpu, TextMode::Raw)?;
/// let pairs = [scorer.encode_pair("A dog runs.", "Ein Hund rennt.")?, scorer.encode_pair("A dog runs.", "Eine Katze schläft.")?];
/// let scored = scorer.score_pairs(&pairs, 4096, 1);
/// let (right, wrong) = (scored[0].clone()?, scored[1].clone()?);
/// assert!(right.avg_logprob > wrong.avg_logprob);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type Scorer = Translator;

impl Translator {
    /// The pair's token ids, or why it cannot be scored.
    pub fn encode_pair(&self, source: &str, target: &str) -> Result<Encoded, PairError> {
        self.encode_pair_with(source, target, &self.language_tokens)
    }

    /// [`Translator::encode_pair`] in another language pair of a multilingual model (a row's
    /// own languages); the model's dictionaries hold every language.
    pub fn encode_pair_in(&self, source: &str, target: &str, source_lang: &str, target_lang: &str) -> Result<Encoded, PairError> {
        if !self.languages.is_multilingual() {
            return Err(PairError::NotMultilingual(self.language_pair()));
        }
        let tokens = self
            .languages
            .tokens(source_lang, target_lang, &self.src_dict, &self.tgt_dict)
            .map_err(|e| PairError::Languages(Arc::new(e)))?;
        if tokens.eos != self.language_tokens.eos {
            return Err(PairError::OtherTargetLanguage(self.report.target_lang.clone()));
        }
        self.encode_pair_with(source, target, &tokens)
    }

    /// `src-tgt` of the loaded pair.
    pub fn language_pair(&self) -> String {
        format!("{}-{}", self.report.source_lang, self.report.target_lang)
    }

    fn encode_pair_with(&self, source: &str, target: &str, tokens: &LanguageTokens) -> Result<Encoded, PairError> {
        let source_ids = self.src_dict.encode_line(&self.pipeline.encode(source), true);
        let target_ids = self.tgt_dict.encode_line(&self.target_pipeline.encode(target), true);
        for (ids, side) in [(&source_ids, "source"), (&target_ids, "target")] {
            if ids.len() <= 1 {
                return Err(PairError::Empty(side));
            }
        }
        let (source_ids, target_ids) = tokens.pair(source_ids, target_ids, self.src_dict.bos());
        let limits = &self.scoring;
        for (ids, side, limit, max) in [
            (&source_ids, "source", "max_source_positions", limits.max_source_positions),
            (&target_ids, "target", "max_target_positions", limits.max_target_positions),
        ] {
            if ids.len() > max {
                return Err(PairError::TooLong { side, tokens: ids.len(), limit, max });
            }
        }
        Ok(Encoded { source: source_ids, target: target_ids })
    }

    /// Scores one batch; one result per pair, in the order given.
    pub fn score(&self, batch: &[&Encoded]) -> Result<Vec<Scored>, ScorerError> {
        let mut one = self.score_batches(&[batch.to_vec()], 1);
        one.pop().unwrap_or_else(|| Err(GenerateError::Invariant("the scorer lost the batch".into()).into()))
    }

    /// Scores several batches, `inter_threads` at a time; one result per batch, in order. A
    /// failing batch, one that panics included, fails only itself.
    pub fn score_batches(&self, batches: &[Vec<&Encoded>], inter_threads: usize) -> Vec<Result<Vec<Scored>, ScorerError>> {
        let jobs: Vec<&[&Encoded]> = batches.iter().map(Vec::as_slice).collect();
        let scorer = self.scoring.batch_scorer;
        let src_dict = &self.src_dict;
        run_each(&self.models, jobs, inter_threads, |models, batch| {
            crate::hub::fault::panic_if_asked(src_dict, batch.iter().map(|e| e.source.as_slice()));
            scorer.score(models, batch)
        })
    }
}

impl Translator {
    /// Scores `pairs` in batches of at most `max_tokens`, ordered as fairseq's
    /// `LanguagePairDataset.ordered_indices` orders them, `inter_threads` batches at a time; one result per pair, in order.
    /// A batch that fails fails only its own pairs.
    pub fn score_pairs(&self, pairs: &[Encoded], max_tokens: usize, inter_threads: usize) -> Vec<Result<Scored, PairError>> {
        let src_sizes: Vec<usize> = pairs.iter().map(|p| p.source.len()).collect();
        let tgt_sizes: Vec<usize> = pairs.iter().map(|p| p.target.len()).collect();
        let order = ordered_indices(&src_sizes, &tgt_sizes);
        let sizes: Vec<usize> = order.iter().map(|&i| pairs[i].source.len().max(pairs[i].target.len())).collect();
        let batches = batch_by_size(&order, &sizes, Some(max_tokens), None, 1);
        let refs: Vec<Vec<&Encoded>> = batches.iter().map(|b| b.iter().map(|&i| &pairs[i]).collect()).collect();
        let mut out: Vec<Result<Scored, PairError>> = (0..pairs.len()).map(|_| Err(PairError::NotScored)).collect();
        for (batch, scored) in batches.iter().zip(self.score_batches(&refs, inter_threads)) {
            match scored {
                Ok(scores) => batch.iter().zip(scores).for_each(|(&i, s)| out[i] = Ok(s)),
                Err(e) => {
                    let e = Arc::new(e);
                    batch.iter().for_each(|&i| out[i] = Err(PairError::Batch(Arc::clone(&e))));
                }
            }
        }
        out
    }
}

/// Why a pair cannot be scored; it costs only its own row.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PairError {
    /// A row names languages, and the model is bilingual.
    #[error("the model is not multilingual: it translates {0} only")]
    NotMultilingual(String),
    /// The row's languages are not the model's.
    #[error(transparent)]
    Languages(Arc<HubError>),
    /// The row's target language is not the one loaded (the generator's EOS is the target's).
    #[error("this model's target language is {0}: score other target languages in a run of their own")]
    OtherTargetLanguage(String),
    /// A side is empty once tokenized.
    #[error("empty '{0}' after tokenization")]
    Empty(&'static str),
    /// A side is longer than the model's positions.
    #[error("'{side}' has {tokens} tokens (with EOS), more than the model's {limit} {max}")]
    TooLong {
        /// `source` or `target`.
        side: &'static str,
        /// Its tokens, EOS included.
        tokens: usize,
        /// `max_source_positions` or `max_target_positions`.
        limit: &'static str,
        /// The limit's value.
        max: usize,
    },
    /// The pair's batch failed.
    #[error(transparent)]
    Batch(Arc<ScorerError>),
    /// No batch held the pair.
    #[error("not scored")]
    NotScored,
}
