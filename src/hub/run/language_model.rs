//! A loaded `transformer_lm` at work (fairseq's `language_modeling` task): prompts continued as
//! fairseq-interactive continues them, and fairseq-eval-lm's scoring of [`LmRow`]s
//! (`SequenceScorer` over a decoder without an encoder).

use tch::{Device, Tensor};

use super::translator::{Batching, HypothesisText, Translation};
use crate::hub::{HubError, LanguageModelBundle, LoadOptions, ModelSpec};
use crate::generate::batching::batch_by_size;
use crate::generate::lm_samples::{BreakMode, LmRow, LmSamples, LmSpecials};
use crate::generate::lm_step::LanguageModelStep;
use crate::generate::rng_replay::replay_dataloader_iter;
use crate::generate::workers::catch_panic;
use crate::generate::sequence_generator::Specials;
use crate::generate::{GenerateError, GenerateRequest, GeneratorConfig, Hypothesis, InvalidOption, SequenceGenerator};
use crate::text::pipeline::PipelineError;
use crate::model::{get_normalized_probs, PADDING_IDX};

/// A loaded `transformer_lm`: continues prompts (fairseq-interactive `--task
/// language_modeling`) and scores text (fairseq-eval-lm).
///
/// ```rust
/// use tchseq::hub::{Batching, LanguageModel, LoadOptions, ModelSpec, TranslateOptions, Translation};
///
/// let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lm/lm-postnorm");
/// let spec = ModelSpec { model: Some(model.into()), ..Default::default() };
/// let lm = LanguageModel::load(&spec, &LoadOptions::fp32(tch::Device::Cpu))?;
/// let prompt = lm.encode_prompt("A man in");
/// let generator = lm.generator(TranslateOptions { beam: 1, ..Default::default() }.generator_config())?;
/// let done = lm.complete(&generator, &[prompt.clone()], &Batching::default())?;
/// let Translation::Done { hypos, .. } = &done[0] else { panic!("prompt too long") };
/// // the prompt is forced, then continued
/// assert!(hypos[0].tokens.starts_with(&prompt) && hypos[0].tokens.len() > prompt.len() + 1);
/// assert!(lm.hypothesis_text(&hypos[0])?.text.starts_with("A man in "));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LanguageModel(LanguageModelBundle);

/// The loaded model's parts (checkpoint, config, model, dictionary, pipeline, warnings).
impl std::ops::Deref for LanguageModel {
    type Target = LanguageModelBundle;

    fn deref(&self) -> &LanguageModelBundle {
        &self.0
    }
}

/// Scores of one row: the scored target tokens and their natural-log probabilities.
#[derive(Debug, Clone, PartialEq)]
pub struct LmScored {
    /// The row's sample id ([`LmRow::id`]).
    pub id: usize,
    /// The scored target token ids (the leading BOS dropped with `remove_bos`).
    pub tokens: Vec<i64>,
    /// One log-probability per token of `tokens`.
    pub scores: Vec<f32>,
}

impl LmScored {
    /// The sum of the tokens' log-probabilities.
    pub fn logprob(&self) -> f32 {
        self.scores.iter().sum()
    }

    /// [`Self::logprob`] per token (0 for no tokens).
    pub fn avg_logprob(&self) -> f32 {
        if self.scores.is_empty() { 0.0 } else { self.logprob() / self.scores.len() as f32 }
    }
}

impl LanguageModel {
    /// Samples a batch when scoring, unless told otherwise (fairseq-eval-lm's `--batch-size`
    /// as `tchseq score --lm` defaults it).
    pub const SCORE_BATCH_SIZE: usize = 16;

    /// Loads the language model of `spec` ([`LanguageModelBundle::load`]) and makes it ready to run.
    pub fn load(spec: &ModelSpec, options: &LoadOptions) -> Result<Self, HubError> {
        LanguageModelBundle::load(spec, options).map(Self::new)
    }

    /// The loaded model, ready to run.
    pub fn new(bundle: LanguageModelBundle) -> Self {
        LanguageModel(bundle)
    }

    /// A line of text → token ids ending in EOS, as fairseq-preprocess binarizes it.
    pub fn encode(&self, line: &str) -> Vec<i64> {
        self.dict.encode_line(&self.pipeline.encode(line), true)
    }

    /// A prompt → its token ids, as `build_dataset_for_inference` of fairseq's
    /// `language_modeling` task has them: encoded with EOS, then every EOS at either end
    /// stripped (`StripTokenDataset`).
    pub fn encode_prompt(&self, line: &str) -> Vec<i64> {
        let eos = self.dict.eos();
        let mut ids = self.encode(line);
        while ids.last() == Some(&eos) {
            ids.pop();
        }
        let lead = ids.iter().take_while(|&&t| t == eos).count();
        ids.drain(..lead);
        ids
    }

    /// A generator over this model's dictionary (and its EOS), for [`Self::complete`].
    pub fn generator(&self, cfg: GeneratorConfig) -> Result<SequenceGenerator, GenerateError> {
        let d = &self.dict;
        SequenceGenerator::new(cfg, d.len(), Specials { pad: d.pad(), eos: d.eos(), unk: d.unk() })
    }

    /// The symbol every sample starts with: BOS when the model was trained with
    /// `--add-bos-token`, else EOS.
    pub fn bos_token(&self) -> i64 {
        if self.config.add_bos_token {
            self.dict.bos()
        } else {
            self.dict.eos()
        }
    }

    /// Continues each prompt (token ids from [`Self::encode_prompt`]) as fairseq-interactive
    /// `--task language_modeling` does: batches in input order, the prompt forced as the
    /// hypotheses' prefix after the start symbol. `src_tokens` of a result is the start symbol
    /// and the prompt.
    pub fn complete(&self, generator: &SequenceGenerator, prompts: &[Vec<i64>], batching: &Batching) -> Result<Vec<Translation>, GenerateError> {
        self.complete_observed(generator, prompts, batching, None)
    }

    /// [`Self::complete`] that tells `on_token(prompt, token)` each token a continuation grows
    /// by as it is decoded, when the generator's beam is 1 (greedy or sampling); the prompt
    /// itself and the final EOS are not told.
    pub fn complete_streamed(
        &self,
        generator: &SequenceGenerator,
        prompts: &[Vec<i64>],
        batching: &Batching,
        on_token: &dyn Fn(usize, i64),
    ) -> Result<Vec<Translation>, GenerateError> {
        self.complete_observed(generator, prompts, batching, Some(on_token))
    }

    fn complete_observed(
        &self,
        generator: &SequenceGenerator,
        prompts: &[Vec<i64>],
        batching: &Batching,
        on_token: Option<&dyn Fn(usize, i64)>,
    ) -> Result<Vec<Translation>, GenerateError> {
        let start = self.bos_token();
        let max = self.max_positions();
        let sizes: Vec<usize> = prompts.iter().map(|p| p.len() + 1).collect();
        let mut results: Vec<Option<Translation>> = vec![None; prompts.len()];
        let order = super::translator::within_max((0..prompts.len()).collect(), &sizes, max, &mut results);
        let order_sizes: Vec<usize> = order.iter().map(|&i| sizes[i]).collect();
        if !prompts.is_empty() {
            // fairseq-interactive's per-buffer DataLoader iterator draws from the generator
            replay_dataloader_iter()?;
        }
        for batch in batch_by_size(&order, &order_sizes, batching.max_tokens, batching.batch_size, 1) {
            let began = std::time::Instant::now();
            // a batch that fails (or panics) fails only its own prompts
            match catch_panic(|| self.complete_batch(generator, prompts, &batch, on_token)) {
                Ok(hypos) => {
                    let seconds = began.elapsed().as_secs_f64() / batch.len().max(1) as f64;
                    for (&i, hs) in batch.iter().zip(hypos) {
                        let mut src_tokens = vec![start];
                        src_tokens.extend_from_slice(&prompts[i]);
                        results[i] = Some(Translation::Done { src_tokens, hypos: hs, seconds });
                    }
                }
                // an option that no batch can take is the caller's error, not a batch's
                Err(e @ GenerateError::InvalidOption(_)) => return Err(e),
                Err(e) => {
                    for &i in &batch {
                        results[i] = Some(Translation::Failed { reason: e.to_string() });
                    }
                }
            }
        }
        super::translator::all_done(results, "prompt {i} was neither continued nor rejected")
    }

    /// One batch of prompts (`batch` indexes `prompts`), continued: each row's hypotheses.
    fn complete_batch(
        &self,
        generator: &SequenceGenerator,
        prompts: &[Vec<i64>],
        batch: &[usize],
        on_token: Option<&dyn Fn(usize, i64)>,
    ) -> Result<Vec<Vec<Hypothesis>>, GenerateError> {
        let (start, pad) = (self.bos_token(), self.dict.pad());
        crate::hub::fault::panic_if_asked(&self.dict, batch.iter().map(|&i| prompts[i].as_slice()));
        let width = batch.iter().map(|&i| prompts[i].len()).max().unwrap_or(0);
        let mut src = vec![pad; batch.len() * (width + 1)];
        for (r, &i) in batch.iter().enumerate() {
            src[r * (width + 1)] = start;
            src[r * (width + 1) + 1..r * (width + 1) + 1 + prompts[i].len()].copy_from_slice(&prompts[i]);
        }
        let rows = batch.len() as i64;
        let src_tokens = Tensor::from_slice(&src).f_view([rows, width as i64 + 1])?.f_to_device(self.model.device)?;
        let prefix = src_tokens.f_narrow(1, 1, width as i64)?;
        let mut step = LanguageModelStep::new(&self.model);
        // each row's first tokens are its forced prompt
        let mut told = vec![0usize; batch.len()];
        let mut tell = |row: usize, token: i64| {
            told[row] += 1;
            if let Some(f) = on_token.filter(|_| told[row] > prompts[batch[row]].len()) {
                f(batch[row], token);
            }
        };
        let observer = on_token.map(|_| &mut tell as &mut dyn FnMut(usize, i64));
        generator.generate_with(
            &mut step,
            &src_tokens,
            GenerateRequest { prefix_tokens: Some(&prefix), bos_token: Some(start), on_token: observer, ..Default::default() },
        )
    }

    /// The prompt as fairseq prints it on its `S-` line (without the start symbol).
    pub fn source_string(&self, src_tokens: &[i64]) -> String {
        self.dict.string(src_tokens, None, false, &[])
    }

    /// The subword tokens (`H-`) and detokenized text (`D-`) of a hypothesis.
    pub fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        HypothesisText::new(&self.dict, &self.pipeline, h, &[self.dict.eos()])
    }

    /// The dictionary's BOS and EOS, as fairseq-eval-lm's samples are built with them.
    pub fn specials(&self) -> LmSpecials {
        LmSpecials { bos: self.dict.bos(), eos: self.dict.eos() }
    }

    /// `model.max_positions()`: longer samples are skipped, as fairseq-eval-lm skips them.
    pub fn max_positions(&self) -> usize {
        self.model.max_positions()
    }

    /// Each text scored as one sample, as `tchseq score --lm --sample-break-mode eos` (and
    /// fairseq-eval-lm) scores a file of those lines with `--batch-size batch_size`: the
    /// model's own `add_bos_token` and `tokens_per_sample`. A text longer than the model's
    /// positions is its own error.
    pub fn score_texts(&self, texts: &[&str], batch_size: usize) -> Result<Vec<Result<LmScored, TooLongText>>, GenerateError> {
        if batch_size == 0 {
            return Err(InvalidOption::BatchSize.into());
        }
        let add_bos = self.config.add_bos_token;
        let tokens_per_sample = self.config.tokens_per_sample.and_then(|t| usize::try_from(t).ok()).unwrap_or(1024);
        let mut samples =
            LmSamples::new(BreakMode::Eos, tokens_per_sample, 0, add_bos, self.specials()).map_err(InvalidOption::from)?;
        let rows: Vec<LmRow> = texts.iter().flat_map(|t| samples.push(&self.encode(t))).collect();
        let max = self.max_positions();
        let mut out: Vec<Result<LmScored, TooLongText>> = rows.iter().map(|r| Err(TooLongText { tokens: r.size, max })).collect();
        let fit: Vec<&LmRow> = rows.iter().filter(|r| r.size <= max).collect();
        for chunk in fit.chunks(batch_size) {
            for scored in self.score(chunk, add_bos)? {
                let id = scored.id;
                out[id] = Ok(scored);
            }
        }
        Ok(out)
    }

    /// fairseq's `SequenceScorer` on one batch of rows (right-padded): the log-probability of
    /// every scored target token, the leading BOS's dropped when `remove_bos` (as
    /// fairseq-eval-lm drops it under `--add-bos-token`).
    pub fn score(&self, rows: &[&LmRow], remove_bos: bool) -> Result<Vec<LmScored>, GenerateError> {
        let _guard = tch::no_grad_guard();
        let width = rows.iter().map(|r| r.tokens.len()).max().unwrap_or(0);
        if width == 0 {
            return Ok(rows.iter().map(|r| LmScored { id: r.id, tokens: Vec::new(), scores: Vec::new() }).collect());
        }
        let mut tokens = vec![PADDING_IDX; rows.len() * width];
        let mut target = vec![PADDING_IDX; rows.len() * width];
        for (i, r) in rows.iter().enumerate() {
            tokens[i * width..i * width + r.tokens.len()].copy_from_slice(&r.tokens);
            target[i * width..i * width + r.target.len()].copy_from_slice(&r.target);
        }
        let shape = [rows.len() as i64, width as i64];
        let device = self.model.device;
        let src = Tensor::from_slice(&tokens).f_view(shape)?.f_to_device(device)?;
        let tgt = Tensor::from_slice(&target).f_view(shape)?.f_to_device(device)?;
        let out = self.model.forward(&src, None)?;
        let lprobs = get_normalized_probs(&out.logits, true);
        let gathered = lprobs.f_gather(2, &tgt.f_unsqueeze(-1)?, false)?.f_squeeze_dim(-1)?;
        let gathered = Vec::<f32>::try_from(gathered.f_to_device(Device::Cpu)?.f_contiguous()?.f_view([-1])?)?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let end = r.target.len();
            let mut toks: Vec<i64> = r.target[r.start..end].to_vec();
            let mut scores: Vec<f32> = gathered[i * width + r.start..i * width + end].to_vec();
            if remove_bos {
                if toks.first() != Some(&self.dict.bos()) {
                    return Err(GenerateError::Invariant("a row does not start with BOS".into()));
                }
                toks.remove(0);
                scores.remove(0);
            }
            out.push(LmScored { id: r.id, tokens: toks, scores });
        }
        Ok(out)
    }
}

/// A text longer than the language model's positions; it costs only itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{tokens} tokens, longer than the model's {max} positions")]
pub struct TooLongText {
    /// Its tokens, EOS (and BOS) included.
    pub tokens: usize,
    /// The model's positions.
    pub max: usize,
}
