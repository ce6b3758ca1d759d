//! The real backend: `hub::Scorer` over a fairseq model.

use anyhow::Result;
use tchseq::hub::{TextMode, Translator, Weights};

use super::{Backend, Encoded, Scored};
use crate::cli::args::{GlobalArgs, ScoreArgs};
use crate::cli::common;

pub struct ModelBackend {
    scorer: Translator,
    inter_threads: usize,
}

impl ModelBackend {
    pub fn load(global: &GlobalArgs, a: &ScoreArgs) -> Result<Self> {
        let device = common::resolve_device(global.device)?;
        // fairseq builds the model in fp32 and load_state_dict casts fp16/bf16 weights
        let weights = Weights::Load { device, kind: tch::Kind::Float, replay_init: false };
        let bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights, a.compute_type)?;
        let text = if a.tokenized { TextMode::Tokenized } else { TextMode::Raw };
        let scorer = Translator::new(bundle, device, text).map_err(common::hub_error)?;
        common::print_warnings(&scorer.report);
        Ok(Self { scorer, inter_threads: global.inter_threads })
    }
}

impl Backend for ModelBackend {
    fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String> {
        self.scorer.encode_pair(source, target).map_err(|e| e.to_string())
    }

    fn encode_in(&self, source: &str, target: &str, langs: (Option<&str>, Option<&str>)) -> std::result::Result<Encoded, String> {
        let report = &self.scorer.report;
        match langs {
            (None, None) => self.scorer.encode_pair(source, target),
            (s, t) => self.scorer.encode_pair_in(source, target, s.unwrap_or(&report.source_lang), t.unwrap_or(&report.target_lang)),
        }
        .map_err(|e| e.to_string())
    }

    fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>> {
        Ok(self.scorer.score(batch)?)
    }

    fn parallel_batches(&self) -> usize {
        self.inter_threads
    }

    fn score_batches(&mut self, batches: &[Vec<&Encoded>]) -> Vec<Result<Vec<Scored>>> {
        self.scorer.score_batches(batches, self.inter_threads).into_iter().map(|r| r.map_err(Into::into)).collect()
    }

    fn target_symbol(&self, id: i64) -> String {
        self.scorer.tgt_dict.symbol(id).to_string()
    }
}
