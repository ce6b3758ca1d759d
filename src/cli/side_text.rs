//! What `encode` and `decode` share: one side's text pipeline and dictionary, and the
//! line-by-line stream with per-line errors.

use std::io::{IsTerminal, Write};

use anyhow::{bail, Context, Result};

use tchseq::hub::{build_pipeline, Weights};
use tchseq::text::dictionary::Dictionary;
use tchseq::text::pipeline::TextPipeline;

use super::args::{ModelArgs, PipelineArgs, Side};
use super::common;
use super::lines::{lines, BadLine, Failures, Newlines};
use super::Outcome;

/// The text pipeline for one side, and that side's dictionary when `--ids` asks for it.
pub(super) struct SideText {
    pub text: TextPipeline,
    pub dict: Option<Dictionary>,
}

/// Settings in increasing precedence: defaults, the checkpoint config, the model directory's
/// files (`bpecodes`, `sentencepiece.bpe.model`), the command line. One side's text is
/// tokenized and detokenized in that side's language.
pub(super) fn build(model: &ModelArgs, pipeline: &PipelineArgs, side: Side, ids: bool) -> Result<SideText> {
    if model.model.is_some() || model.path.is_some() {
        let mut bundle = common::load_bundle(model, Some(pipeline), Weights::ConfigOnly, tchseq::config::ComputeType::Exact)?;
        let lang = match side {
            Side::Source => bundle.pipeline_options.source_lang.clone(),
            Side::Target => bundle.pipeline_options.target_lang.clone(),
        };
        let text = bundle.side_pipeline(&lang).map_err(common::hub_error)?;
        common::print_warnings(&bundle.report);
        let dict = ids.then_some(match side {
            Side::Source => bundle.src_dict,
            Side::Target => bundle.tgt_dict,
        });
        return Ok(SideText { text, dict });
    }
    let spec = common::model_spec(model);
    let mut opts = common::pipeline_overrides(pipeline).without_model(&spec);
    let lang = match side {
        Side::Source => opts.source_lang.clone(),
        Side::Target => opts.target_lang.clone(),
    };
    opts.source_lang = lang.clone();
    opts.target_lang = lang.clone();
    let (text, warnings) = build_pipeline(&opts).map_err(common::pipeline_error)?;
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let dict = if ids {
        let lang = match side {
            Side::Source => &model.source_lang,
            Side::Target => &model.target_lang,
        };
        let (Some(dir), Some(lang)) = (&model.data, lang) else {
            bail!("--ids needs a dictionary: give --model, or --data DIR with -s/-t");
        };
        let path = dir.join(format!("dict.{lang}.txt"));
        Some(Dictionary::load(&path).with_context(|| format!("loading {}", path.display()))?)
    } else {
        None
    };
    Ok(SideText { text, dict })
}

/// Reads stdin line by line (as fairseq-interactive reads stdin: [`Newlines::Lf`]) and writes one
/// line per input line. A line that `f` cannot take, or that is not UTF-8, gets an empty output
/// line and its error on stderr; the run goes on and fails at the end, saying how many lines were
/// not `done`.
pub(super) fn stream(done: &str, mut f: impl FnMut(&str) -> std::result::Result<String, BadLine>) -> Result<Outcome> {
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut failures = Failures::default();
    for (i, line) in lines(stdin.lock(), Newlines::Lf).enumerate() {
        match line.context("reading stdin")?.and_then(|l| f(&l)) {
            Ok(result) => writeln!(out, "{result}")?,
            Err(bad) => {
                failures.add(bad.kind);
                writeln!(out)?;
                eprintln!("error: line {}: {}", i + 1, bad.reason);
            }
        }
        if interactive {
            out.flush()?;
        }
    }
    out.flush()?;
    failures.finish(done)?;
    Ok(Outcome::Ok)
}

