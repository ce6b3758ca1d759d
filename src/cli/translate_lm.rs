//! `tchseq translate -m LM_DIR`: a language model continues each input line, as
//! fairseq-interactive `--task language_modeling` does (the line is the forced prefix of every
//! hypothesis, which includes it). Read, batched and printed as `translate` does.


use anyhow::{bail, Context, Result};
use tch::Device;

use super::args::{DtypeArg, GlobalArgs, InputFormat, TranslateArgs};
use super::common;
use super::lines::Failures;
use super::partial::OutputSink;
use super::translate_input::{batching_flags, for_each_buffer, options, reads_a_terminal, resolve_buffer_size};
use super::translate_output::{refuse_what_text_cannot_show, write_buffer, Output, SharedStrings, Strings};
use super::Outcome;
use tchseq::generate::Hypothesis;
use tchseq::hub::{AttentionMatrix, HypothesisText, LanguageModel, LoadOptions, Weights};
use tchseq::text::pipeline::PipelineError;

impl Strings for LanguageModel {
    fn source_string(&self, src_tokens: &[i64]) -> String {
        LanguageModel::source_string(self, src_tokens)
    }
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        LanguageModel::hypothesis_text(self, h)
    }
    fn decode_subwords(&self, subwords: &str) -> Result<String, PipelineError> {
        self.pipeline.decode(subwords)
    }
    fn target_string(&self, tokens: &[i64]) -> String {
        self.dict.string(tokens, None, false, &[])
    }
    fn attention_matrix(&self, _h: &Hypothesis, _src_tokens: &[i64]) -> Option<AttentionMatrix> {
        None
    }
    fn device(&self) -> Device {
        self.model.device
    }
}

/// What fairseq-interactive's language modeling does not do here (yet), each a one-line error.
fn refuse(a: &TranslateArgs) -> Result<()> {
    let refused = [
        (a.constraints.is_some(), "--constraints (fairseq's language modeling task refuses them)"),
        (a.print_alignment.is_some(), "--print-alignment (a language model has no source to align to)"),
        (a.shard.num_shards.is_some(), "--num-shards"),
        (a.input_format != InputFormat::Text, "--input-format jsonl"),
        (a.dtype != DtypeArg::Fp32, "--dtype other than fp32"),
        (a.resume, "--resume"),
    ];
    match refused.iter().find(|(on, _)| *on) {
        Some((_, what)) => bail!("{what} is not supported with a language model"),
        None => Ok(()),
    }
}

pub fn run(global: &GlobalArgs, a: &TranslateArgs) -> Result<Outcome> {
    refuse_what_text_cannot_show(a)?;
    refuse(a)?;
    let device = common::resolve_device(global.device)?;
    let seed = i64::try_from(a.seed).context("--seed is too large")?;
    tch::manual_seed(seed);
    let overrides = common::pipeline_overrides(&a.pipeline);
    let load = LoadOptions { weights: Weights::Load { device, kind: tch::Kind::Float, replay_init: a.sampling }, pipeline: overrides, compute_type: a.compute_type };
    let lm = LanguageModel::load(&common::model_spec(&a.model), &load).map_err(common::hub_error)?;
    for w in &lm.warnings {
        eprintln!("warning: {w}");
    }
    let generator = lm.generator(common::generator_config(&options(a))?)?;
    // fairseq-interactive batches a language model's lines in input order, unsorted
    let (max_tokens, batch_size, buffer_size) = batching_flags(a, reads_a_terminal(a));
    let batching = common::batching(max_tokens, batch_size, 1)?;
    let buffer_size = resolve_buffer_size(buffer_size, &batching)?;
    let strings = SharedStrings(&lm);
    let output = Output { strings: &strings, format: a.format, nbest: a.nbest, print_alignment: false, post_process: a.post_process.as_deref() };

    let mut out = OutputSink::open(a.output.as_deref())?;
    let mut failures = Failures::default();
    let too_long = format!("longer than the model's {} positions (with the start symbol)", lm.max_positions());
    let mut next_id = 0usize;
    for_each_buffer(a, false, buffer_size, |buffer| {
        let prompts: Vec<Vec<i64>> = buffer.iter().filter_map(|l| l.as_ref().ok()).map(|s| lm.encode_prompt(&s.src)).collect();
        let done = if prompts.is_empty() { Vec::new() } else { lm.complete(&generator, &prompts, &batching)? };
        next_id += write_buffer(&output, &mut out, &mut failures, &too_long, next_id, buffer, done)?;
        Ok(())
    })?;
    out.commit()?;
    failures.finish("continued")?;
    Ok(Outcome::Ok)
}
