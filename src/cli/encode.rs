//! `tchseq encode`: raw lines in, the subword lines (or dictionary ids) fairseq feeds the model
//! out. The helpers here are shared with `tchseq decode`.

use std::io::{IsTerminal, Write};

use anyhow::{bail, Context, Result};

use tchseq::checkpoint::read_summary;
use tchseq::text::dictionary::Dictionary;
use tchseq::text::pipeline::TextPipeline;

use super::args::{EncodeArgs, GlobalArgs, ModelArgs, PipelineArgs, Side};
use super::common;
use super::lines::{lines, BadLine, Failures, Newlines};
use super::Outcome;

/// The text pipeline for one side, and that side's dictionary when `--ids` asks for it.
pub(super) struct SideText {
    pub text: TextPipeline,
    pub dict: Option<Dictionary>,
}

/// Options in increasing precedence: defaults, the checkpoint config, the model directory's
/// files (`bpecodes`, `sentencepiece.bpe.model`), the command line.
pub(super) fn build(model: &ModelArgs, pipeline: &PipelineArgs, side: Side, ids: bool) -> Result<SideText> {
    let files = if model.model.is_some() || model.path.is_some() {
        Some(common::model_files(model)?)
    } else {
        None
    };
    let config = match files.as_ref().and_then(|f| f.checkpoints.first()) {
        Some(ckpt) => Some(read_summary(ckpt)?.config),
        None => None,
    };
    let mut opts = common::pipeline_options(model, pipeline, files.as_ref(), config.as_ref());
    // One side's text is tokenized and detokenized with that side's language.
    let lang = match side {
        Side::Source => model.source_lang.clone().unwrap_or(opts.source_lang.clone()),
        Side::Target => model.target_lang.clone().unwrap_or(opts.target_lang.clone()),
    };
    opts.source_lang = lang.clone();
    opts.target_lang = lang;

    let text = common::text_pipeline(&opts)?;
    let dict = if ids {
        let path = match (&files, side) {
            (Some(f), Side::Source) => f.src_dict.clone(),
            (Some(f), Side::Target) => f.tgt_dict.clone(),
            (None, _) => {
                let (Some(dir), Some(lang)) = (&model.data, match side {
                    Side::Source => &model.source_lang,
                    Side::Target => &model.target_lang,
                }) else {
                    bail!("--ids needs a dictionary: give --model, or --data DIR with -s/-t");
                };
                dir.join(format!("dict.{lang}.txt"))
            }
        };
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

pub fn run(_global: &GlobalArgs, a: &EncodeArgs) -> Result<Outcome> {
    let SideText { text, dict } = build(&a.model, &a.pipeline, a.side, a.ids)?;
    stream("encoded", |line| {
        // fairseq-interactive strips every input line before encoding it.
        let encoded = text.encode(tchseq::text::pyutil::py_strip(line));
        Ok(match &dict {
            Some(d) => d.encode_line(&encoded, true).iter().map(i64::to_string).collect::<Vec<_>>().join(" "),
            None => encoded,
        })
    })
}
