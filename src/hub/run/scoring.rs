//! What scoring a pair needs besides the models: its token ids ([`Encoded`]), its scores
//! ([`Scored`]) and the settings of the batches (fairseq's `SequenceScorer` over a collated
//! batch), apart from the models so that worker threads can share them.

use crate::generate::scorer::{collate, ScorerError, SequenceScorer};
use crate::generate::GenerateError;
use crate::hub::{LanguageTokens, ModelBundle};
use crate::model::TransformerModel;

/// Token ids of one pair, both ending with EOS.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// Source ids, with the task's language tokens.
    pub source: Vec<i64>,
    /// Target ids, with the task's language tokens.
    pub target: Vec<i64>,
}

/// The scores of one pair (natural log), from [`Translator::score`].
///
/// ```rust
/// use tchseq::hub::{LoadOptions, ModelBundle, ModelSpec, TextMode, Translator};
///
/// let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/../weights/multi30k.en-de");
/// let spec = ModelSpec { model: Some(model.into()), ..Default::default() };
/// let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu))?;
/// let translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw)?;
/// let pair = translator.encode_pair("A dog runs.", "Ein Hund rennt.")?;
/// let scored = &translator.score(&[&pair])?[0];
/// assert!(scored.logprob < 0.0 && scored.logprob.is_finite());
/// assert_eq!(scored.positional_scores.len(), pair.target.len());
/// let avg = scored.logprob / pair.target.len() as f32;
/// assert!((scored.avg_logprob - avg).abs() < 1e-5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// Sum of the target tokens' log-probabilities, EOS included.
    pub logprob: f32,
    /// fairseq's `--score-reference` score: `logprob / tokens`.
    pub avg_logprob: f32,
    /// One log-probability per target token, EOS included.
    pub positional_scores: Vec<f32>,
}

/// What scoring a batch needs besides the models (apart from them so that worker threads can
/// share it).
#[derive(Clone, Copy)]
pub(super) struct BatchScorer {
    scorer: SequenceScorer,
    pad: i64,
    eos: i64,
    left_pad_source: bool,
    left_pad_target: bool,
}

impl BatchScorer {
    pub(super) fn score(&self, models: &[TransformerModel], batch: &[&Encoded]) -> Result<Vec<Scored>, ScorerError> {
        let pairs: Vec<(&[i64], &[i64])> = batch.iter().map(|e| (e.source.as_slice(), e.target.as_slice())).collect();
        let sample = collate(&pairs, self.pad, self.eos, self.left_pad_source, self.left_pad_target)?;
        let hypos = self.scorer.generate(models, &sample)?;
        let mut out: Vec<Option<Scored>> = vec![None; batch.len()];
        for (hypo, &k) in hypos.into_iter().zip(&sample.order) {
            out[k] = Some(Scored { logprob: hypo.sum, avg_logprob: hypo.score, positional_scores: hypo.positional_scores });
        }
        out.into_iter().map(|s| s.ok_or_else(|| GenerateError::Invariant("the scorer lost a sentence of the batch".into()).into())).collect()
    }
}

/// Scoring's own limits and settings, set up by [`Translator::new`].
pub(super) struct PairScoring {
    pub(super) batch_scorer: BatchScorer,
    /// fairseq's `utils.resolve_max_positions` over the models (the minimum).
    pub(super) max_source_positions: usize,
    pub(super) max_target_positions: usize,
}

impl PairScoring {
    pub(super) fn new(bundle: &ModelBundle, language_tokens: &LanguageTokens) -> Self {
        let (src_dict, tgt_dict) = (&bundle.src_dict, &bundle.tgt_dict);
        // mBART fine-tuning's dataset moves its `[tgt]` EOS to the front of prev_output_tokens
        let eos = language_tokens.generator_eos(tgt_dict.eos());
        let batch_scorer = BatchScorer {
            scorer: SequenceScorer::new(tgt_dict.pad(), eos),
            pad: src_dict.pad(),
            eos,
            left_pad_source: bundle.config.left_pad_source,
            left_pad_target: bundle.config.left_pad_target,
        };
        PairScoring {
            batch_scorer,
            max_source_positions: bundle.models.iter().map(|m| m.max_source_positions()).min().unwrap_or(0),
            max_target_positions: bundle.models.iter().map(|m| m.max_decoder_positions()).min().unwrap_or(0),
        }
    }
}

