//! `tchseq.LanguageModel`: a `transformer_lm` through `hub::LanguageModel`, as `tchseq score
//! --lm` (fairseq-eval-lm) scores text and `tchseq translate` continues prompts with one.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use tchseq::hub::{Batching, LanguageModel as HubLanguageModel, LoadOptions, ModelSpec};

use super::{options, parse_device, run_locked, to_results, value_error, ScoringResult, TranslationResult};

/// A fairseq `transformer_lm`, loaded once: scores text as fairseq-eval-lm does and continues
/// prompts as fairseq-interactive `--task language_modeling` does.
#[pyclass(module = "tchseq", frozen)]
pub struct LanguageModel {
    inner: Mutex<HubLanguageModel>,
    threads: i32,
}

impl LanguageModel {
    fn run<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&HubLanguageModel) -> Result<R, String> + Send) -> PyResult<R> {
        run_locked(py, &self.inner, self.threads, f)
    }
}

#[pymethods]
impl LanguageModel {
    /// Loads a language model directory (model.pt and dict.txt, and its BPE files if any).
    #[new]
    #[pyo3(signature = (model_dir, device = "cpu", threads = 0))]
    fn new(py: Python<'_>, model_dir: std::path::PathBuf, device: &str, threads: i32) -> PyResult<Self> {
        if threads < 0 {
            return Err(value_error("threads must be at least 0 (0: libtorch's default)"));
        }
        let device = parse_device(device)?;
        let spec = ModelSpec { model: Some(model_dir), ..Default::default() };
        let lm = py
            .detach(|| HubLanguageModel::load(&spec, &LoadOptions::fp32(device)))
            .map_err(value_error)?;
        Ok(LanguageModel { inner: Mutex::new(lm), threads })
    }

    /// Each text scored as one sample (`tchseq score --lm --sample-break-mode eos`,
    /// fairseq-eval-lm's numbers): its tokens, EOS included, and their natural-log
    /// probabilities. A text longer than the model's positions raises ValueError.
    #[pyo3(signature = (texts, batch_size = HubLanguageModel::SCORE_BATCH_SIZE))]
    fn score_batch(&self, py: Python<'_>, texts: &Bound<'_, PyAny>, batch_size: usize) -> PyResult<Vec<ScoringResult>> {
        let texts = super::texts(texts, "texts")?;
        self.run(py, move |lm| {
            let refs: Vec<&str> = texts.iter().map(|t| t.trim()).collect();
            let scored = lm.score_texts(&refs, batch_size).map_err(|e| e.to_string())?;
            scored
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let s = s.map_err(|e| format!("text {i}: {e}"))?;
                    let (logprob, avg_logprob) = (s.logprob(), s.avg_logprob());
                    let tokens = s.tokens.iter().map(|&id| lm.dict.symbol(id).to_string()).collect();
                    Ok(ScoringResult { tokens, log_probs: s.scores, logprob, avg_logprob })
                })
                .collect()
        })
    }

    /// Continues each prompt (`tchseq translate` with a language model): a `TranslationResult`
    /// each, whose texts begin with the prompt. Keywords as `Translator.translate_batch` takes
    /// them (beam_size, num_hypotheses, max_len_b, sampling, seed, batch_size, ...). Sampling
    /// draws from libtorch's generator seeded with `seed`; the CLI's draws also replay fairseq's
    /// model initialisation first, so they differ.
    #[pyo3(signature = (prompts, **options))]
    fn generate(&self, py: Python<'_>, prompts: &Bound<'_, PyAny>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<TranslationResult>> {
        let prompts = super::texts(prompts, "prompts")?;
        let (opts, batch_size, max_tokens) = self::options(options)?;
        if opts.alignment || opts.attention || opts.constraints.is_some() {
            return Err(value_error("return_alignment, return_attention and constraints need a translation model"));
        }
        let batching = Batching::for_list(max_tokens, batch_size, 1).map_err(value_error)?;
        self.run(py, move |lm| {
            let generator = lm.generator(opts.generator_config()).map_err(|e| e.to_string())?;
            if opts.sampling {
                tch::manual_seed(i64::try_from(opts.seed).map_err(|_| format!("seed {} is too large", opts.seed))?);
            }
            let encoded: Vec<Vec<i64>> = prompts.iter().map(|p| lm.encode_prompt(p.trim())).collect();
            let done = lm.complete(&generator, &encoded, &batching).map_err(|e| e.to_string())?;
            to_results(done, &opts, |_, h| lm.hypothesis_text(h))
        })
    }
}
