//! `tchseq encode`: raw lines in, the subword lines fairseq feeds the model out. The helpers here
//! are shared with `tchseq decode`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

use tchseq::text::pipeline::{PipelineOptions, TextPipeline};

use super::args::{BpeArg, EncodeArgs, GlobalArgs, ModelArgs, PipelineArgs, Side, TokenizerArg};
use super::Outcome;

/// Pipeline options from the model directory and the command line. The checkpoint config is
/// not consulted yet (it arrives with the checkpoint loader); until then `--tokenizer`/`--bpe`
/// default to none, and languages to `en`.
fn pipeline_options(model: &ModelArgs, pipeline: &PipelineArgs, side: Side) -> PipelineOptions {
    let source = model.source_lang.clone().unwrap_or_else(|| "en".to_string());
    let target = model.target_lang.clone().unwrap_or_else(|| "en".to_string());
    let lang = match side {
        Side::Source => source,
        Side::Target => target,
    };
    let mut opts = PipelineOptions {
        tokenizer: pipeline.tokenizer.map(|t| {
            match t {
                TokenizerArg::Moses => "moses",
                TokenizerArg::Space => "space",
                TokenizerArg::None => "none",
            }
            .to_string()
        }),
        bpe: pipeline.bpe.map(|b| {
            match b {
                BpeArg::SubwordNmt => "subword_nmt",
                BpeArg::Fastbpe => "fastbpe",
                BpeArg::Sentencepiece => "sentencepiece",
                BpeArg::None => "none",
            }
            .to_string()
        }),
        bpe_codes: pipeline.bpe_codes.clone(),
        sentencepiece_model: pipeline.sentencepiece_model.clone(),
        // One side's text is tokenized and detokenized with that side's language.
        source_lang: lang.clone(),
        target_lang: lang,
        moses_no_dash_splits: pipeline.moses_no_dash_splits,
        moses_no_escape: pipeline.moses_no_escape,
    };
    for dir in [model.data.as_deref(), model_dir(model.model.as_deref())].into_iter().flatten() {
        opts = opts.with_model_dir(dir);
    }
    opts
}

fn model_dir(model: Option<&Path>) -> Option<&Path> {
    let m = model?;
    if m.is_dir() {
        Some(m)
    } else {
        m.parent()
    }
}

pub(super) fn build(model: &ModelArgs, pipeline: &PipelineArgs, side: Side, ids: bool) -> Result<TextPipeline> {
    if ids {
        bail!("--ids needs the fairseq dictionary reader (text::dictionary), which is not in this build yet");
    }
    if let Some(m) = &model.model {
        if !m.exists() {
            bail!("--model {}: no such file or directory", m.display());
        }
    }
    let opts = pipeline_options(model, pipeline, side);
    let text = TextPipeline::new(&opts)?;
    for lang in text.fallback_languages() {
        eprintln!("warning: Moses has no data for language {lang:?}; using sacremoses' generic rules and English non-breaking prefixes");
    }
    Ok(text)
}

/// Reads stdin line by line (UTF-8, `\n` or `\r\n` endings) and writes one line per input line.
pub(super) fn stream(mut f: impl FnMut(&str) -> Result<String>) -> Result<Outcome> {
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut buf = Vec::new();
    let mut lineno = 0usize;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf).context("reading stdin")? == 0 {
            break;
        }
        lineno += 1;
        let line = std::str::from_utf8(&buf).with_context(|| format!("stdin line {lineno} is not valid UTF-8"))?;
        let line = line.strip_suffix('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).unwrap_or(line);
        let result = f(line).with_context(|| format!("stdin line {lineno}"))?;
        writeln!(out, "{result}")?;
        if interactive {
            out.flush()?;
        }
    }
    out.flush()?;
    Ok(Outcome::Ok)
}

pub fn run(_global: &GlobalArgs, a: &EncodeArgs) -> Result<Outcome> {
    let text = build(&a.model, &a.pipeline, a.side, a.ids)?;
    // fairseq-interactive strips every input line before encoding it.
    stream(|line| Ok(text.encode(tchseq::text::pyutil::py_strip(line))))
}

