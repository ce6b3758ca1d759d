//! `tchseq translate -m LM_DIR`: a language model continues each input line, as
//! fairseq-interactive `--task language_modeling` does (the line is the forced prefix of every
//! hypothesis, which includes it). Read, batched and printed as `translate` does.

use std::io::{self, Write};

use anyhow::{bail, Context, Result};
use tch::Device;

use super::args::{ComputeTypeArg, DtypeArg, GlobalArgs, InputFormat, TranslateArgs};
use super::common;
use super::lines::{lines, BadLine, Failures};
use super::partial::PartialFile;
use super::translate::{self, write_result, LineResult, Output, Sentence, Strings};
use super::Outcome;
use tchseq::generate::Hypothesis;
use tchseq::hub::{AttentionMatrix, HypothesisText, LanguageModel, Translation};
use tchseq::text::pipeline::PipelineError;

impl Strings for LanguageModel {
    fn source_string(&self, src_tokens: &[i64]) -> String {
        LanguageModel::source_string(self, src_tokens)
    }
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        LanguageModel::hypothesis_text(self, h)
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
        (a.print_alignment, "--print-alignment (a language model has no source to align to)"),
        (a.shard.num_shards.is_some(), "--num-shards"),
        (a.input_format != InputFormat::Text, "--input-format jsonl"),
        (a.compute_type != ComputeTypeArg::Exact, "--compute-type other than exact"),
        (a.dtype != DtypeArg::Fp32, "--dtype other than fp32"),
    ];
    match refused.iter().find(|(on, _)| *on) {
        Some((_, what)) => bail!("{what} is not supported with a language model"),
        None => Ok(()),
    }
}

pub fn run(global: &GlobalArgs, a: &TranslateArgs) -> Result<Outcome> {
    refuse(a)?;
    let device = common::resolve_device(global.device)?;
    let seed = i64::try_from(a.seed).context("--seed is too large")?;
    tch::manual_seed(seed);
    let overrides = common::pipeline_overrides(&a.pipeline);
    let lm = LanguageModel::load(&common::model_spec(&a.model), &overrides, device, tch::Kind::Float, a.sampling).map_err(common::hub_error)?;
    for w in &lm.warnings {
        eprintln!("warning: {w}");
    }
    let generator = lm.generator(common::generator_config(&translate::options(a))?)?;
    // fairseq-interactive batches a language model's lines in input order, unsorted
    let (max_tokens, batch_size, buffer_size) = translate::batching_flags(a, translate::reads_a_terminal(a));
    let batching = common::batching(max_tokens, batch_size, 1)?;
    let buffer_size = translate::resolve_buffer_size(buffer_size, &batching)?;
    let output = Output { strings: &lm, format: a.format, nbest: a.nbest, print_alignment: false };

    let mut file = PartialFile::for_output(a.output.as_deref())?;
    let stdout = io::stdout();
    let mut out: Box<dyn Write + '_> = match file.as_mut() {
        Some(f) => Box::new(f),
        None => Box::new(stdout.lock()),
    };
    let mut failures = Failures::default();
    let too_long = format!("longer than the model's {} positions (with the start symbol)", lm.max_positions());
    let mut next_id = 0usize;
    let mut buffer: Vec<Result<Sentence, BadLine>> = Vec::new();
    let mut flush = |buffer: &mut Vec<Result<Sentence, BadLine>>, out: &mut Box<dyn Write + '_>| -> Result<()> {
        let prompts: Vec<Vec<i64>> = buffer.iter().filter_map(|l| l.as_ref().ok()).map(|s| lm.encode_prompt(&s.src)).collect();
        let mut done = if prompts.is_empty() { Vec::new() } else { lm.complete(&generator, &prompts, &batching)? }.into_iter();
        let n = buffer.len();
        for (i, entry) in buffer.drain(..).enumerate() {
            let (line, result) = match entry {
                Ok(s) => (Some(s), LineResult::Translated(done.next().context("internal error: a line was not continued")?)),
                Err(bad) => (None, LineResult::Unreadable(bad)),
            };
            match &result {
                LineResult::Translated(Translation::TooLong { .. }) => failures.add(&too_long),
                LineResult::Unreadable(bad) => failures.add(bad.kind),
                LineResult::Translated(Translation::Done { .. }) => {}
            }
            write_result(&output, out, next_id + i, line.as_ref(), &result)?;
        }
        out.flush()?;
        next_id += n;
        Ok(())
    };
    let mut readable = 0usize;
    let mut push = |entry: Result<Sentence, BadLine>, buffer: &mut Vec<Result<Sentence, BadLine>>| {
        readable += usize::from(entry.is_ok());
        buffer.push(entry);
        let full = readable >= buffer_size || readable == 0;
        if full {
            readable = 0;
        }
        full
    };
    if !a.sentences.is_empty() {
        for s in &a.sentences {
            if push(translate::sentence(s, InputFormat::Text, false), &mut buffer) {
                flush(&mut buffer, &mut out)?;
            }
        }
    } else {
        let (reader, newlines) = translate::input_reader(a)?;
        for line in lines(reader, newlines) {
            let entry = line.context("reading input")?.and_then(|l| translate::sentence(&l, InputFormat::Text, false));
            if push(entry, &mut buffer) {
                flush(&mut buffer, &mut out)?;
            }
        }
    }
    flush(&mut buffer, &mut out)?;
    drop(out);
    if let Some(f) = file {
        f.commit()?;
    }
    failures.finish("continued")?;
    Ok(Outcome::Ok)
}
