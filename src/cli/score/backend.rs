//! The real backend: fairseq checkpoints, their dictionaries and text pipeline.

use anyhow::{Context, Result};
use tch::Kind;

use tchseq::generate::scorer::{collate, SequenceScorer};
use tchseq::generate::workers::run_jobs;
use tchseq::generate::GenerateError;
use tchseq::model::TransformerModel;
use tchseq::text::dictionary::Dictionary;
use tchseq::hub::{ModelBundle, Weights};
use tchseq::text::pipeline::TextPipeline;

use super::{Backend, Encoded, Scored};
use crate::cli::args::{GlobalArgs, ScoreArgs};
use crate::cli::common;

pub struct ModelBackend {
    models: Vec<TransformerModel>,
    batch_scorer: BatchScorer,
    src_dict: Dictionary,
    tgt_dict: Dictionary,
    max_source_positions: usize,
    max_target_positions: usize,
    inter_threads: usize,
    /// Tokenizer + BPE for (source, target) unless `--tokenized`; each side's text is
    /// tokenized with its own language.
    pipelines: Option<(TextPipeline, TextPipeline)>,
}

impl ModelBackend {
    pub fn load(global: &GlobalArgs, a: &ScoreArgs) -> Result<Self> {
        let device = common::resolve_device(global.device)?;
        // fairseq builds the model in fp32 and load_state_dict casts fp16/bf16 weights
        let weights = Weights::Load { device, kind: Kind::Float, replay_init: false };
        let mut bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights)?;
        let (left_pad_source, left_pad_target) = (bundle.config.left_pad_source, bundle.config.left_pad_target);
        // fairseq: utils.resolve_max_positions over the task and every model (the minimum)
        let max_source_positions = bundle.models.iter().map(|m| m.max_source_positions()).min().unwrap_or(0);
        let max_target_positions = bundle.models.iter().map(|m| m.max_decoder_positions()).min().unwrap_or(0);
        let pipelines = if a.tokenized {
            None
        } else {
            let target_lang = bundle.pipeline_options.target_lang.clone();
            Some((bundle.pipeline().map_err(common::hub_error)?, bundle.side_pipeline(&target_lang).map_err(common::hub_error)?))
        };
        common::print_warnings(&bundle.report);
        let ModelBundle { models, src_dict, tgt_dict, .. } = bundle;
        let scorer = SequenceScorer::new(tgt_dict.pad(), tgt_dict.eos());
        let batch_scorer =
            BatchScorer { scorer, pad: src_dict.pad(), eos: src_dict.eos(), left_pad_source, left_pad_target };
        Ok(Self {
            pipelines,
            models,
            batch_scorer,
            src_dict,
            tgt_dict,
            max_source_positions,
            max_target_positions,
            inter_threads: global.inter_threads,
        })
    }
}

/// What scoring a batch needs besides the models (kept apart from them so that worker
/// threads can share it).
#[derive(Clone, Copy)]
struct BatchScorer {
    scorer: SequenceScorer,
    pad: i64,
    eos: i64,
    left_pad_source: bool,
    left_pad_target: bool,
}

impl BatchScorer {
    fn score(&self, models: &[TransformerModel], batch: &[&Encoded]) -> Result<Vec<Scored>> {
        let pairs: Vec<(&[i64], &[i64])> =
            batch.iter().map(|e| (e.source.as_slice(), e.target.as_slice())).collect();
        let sample = collate(&pairs, self.pad, self.eos, self.left_pad_source, self.left_pad_target)?;
        let hypos = self.scorer.generate(models, &sample)?;
        let mut out: Vec<Option<Scored>> = vec![None; batch.len()];
        for (hypo, &k) in hypos.into_iter().zip(&sample.order) {
            out[k] = Some(Scored {
                logprob: hypo.sum,
                avg_logprob: hypo.score,
                positional_scores: hypo.positional_scores,
            });
        }
        out.into_iter().map(|s| s.context("the scorer lost a sentence of the batch")).collect()
    }
}

fn check_len(ids: &[i64], side: &str, max: usize, what: &str) -> std::result::Result<(), String> {
    if ids.len() <= 1 {
        return Err(format!("empty '{side}' after tokenization"));
    }
    if ids.len() > max {
        return Err(format!(
            "'{side}' has {} tokens (with EOS), more than the model's {what} {max}",
            ids.len()
        ));
    }
    Ok(())
}

impl Backend for ModelBackend {
    fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String> {
        let (source_ids, target_ids) = match &self.pipelines {
            Some((src, tgt)) => (
                self.src_dict.encode_line(&src.encode(source), true),
                self.tgt_dict.encode_line(&tgt.encode(target), true),
            ),
            None => (self.src_dict.encode_line(source, true), self.tgt_dict.encode_line(target, true)),
        };
        check_len(&source_ids, "source", self.max_source_positions, "max_source_positions")?;
        check_len(&target_ids, "target", self.max_target_positions, "max_target_positions")?;
        Ok(Encoded { source: source_ids, target: target_ids })
    }

    fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>> {
        self.batch_scorer.score(&self.models, batch)
    }

    fn score_batches(&mut self, batches: &[Vec<&Encoded>]) -> Vec<Result<Vec<Scored>>> {
        let jobs: Vec<&[&Encoded]> = batches.iter().map(Vec::as_slice).collect();
        let scorer = self.batch_scorer;
        // a failing batch is a result here, not an error that stops the other workers
        let run = run_jobs(&self.models, jobs, self.inter_threads, |models, batch| {
            Ok::<_, GenerateError>(scorer.score(models, batch))
        });
        match run {
            Ok(results) => results,
            Err(e) => batches.iter().map(|_| Err(anyhow::anyhow!("{e}"))).collect(),
        }
    }

    fn target_symbol(&self, id: i64) -> String {
        self.tgt_dict.symbol(id).to_string()
    }
}
