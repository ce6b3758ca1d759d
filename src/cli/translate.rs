//! `tchseq translate`: fairseq-interactive, without Python.
//!
//! Lines are read `--buffer-size` at a time, encoded, ordered and batched as fairseq-interactive
//! does (`generate::batching`), decoded with `SequenceGenerator`, and printed in input order.

use std::fs::File;
use std::io::{self, BufReader, Write};

use anyhow::{bail, Context, Result};
use tch::{Device, Tensor};

use super::args::{ConstraintsArg, GlobalArgs, InputFormat, TranslateArgs, TranslateFormat};
use super::common;
use super::lines::{lines, BadLine, Failures, Newlines};
use super::output::{python_fixed4, python_float_repr};
use super::partial::PartialFile;
use super::shard::{self, Shard};
use super::Outcome;
use tchseq::generate::{Hypothesis, SequenceGenerator};
use tchseq::hub::{AttentionMatrix, Batching, HypothesisText, TargetGuide, TextMode, TranslateOptions, Translation, Translator, Weights};
use tchseq::text::pipeline::PipelineError;
use tchseq::text::dictionary::is_py_space;

/// What happened to one input line.
pub(super) enum LineResult {
    Translated(Translation),
    Unreadable(BadLine),
}

struct Session {
    translator: Translator,
    generator: SequenceGenerator,
    batching: Batching,
    nbest: usize,
    format: TranslateFormat,
    print_alignment: bool,
    /// `--prefix-size`: the first tokens of a line's reference target (`tgt`) are forced.
    prefix_size: usize,
}

pub fn run(global: &GlobalArgs, a: &TranslateArgs) -> Result<Outcome> {
    refuse_what_text_cannot_show(a)?;
    if tchseq::hub::language_model_checkpoint(&common::model_spec(&a.model)).is_some() {
        return super::translate_lm::run(global, a);
    }
    validate(a)?;
    let shard = Shard::from_args(&a.shard)?;
    if shard.is_some() {
        if a.format == TranslateFormat::Text {
            bail!("--num-shards needs --format jsonl or fairseq (text output has no line ids to merge by)");
        }
        if a.sampling {
            bail!("--num-shards cannot be combined with --sampling (its random draws run through every buffer)");
        }
    }
    let device = common::resolve_device(global.device)?;
    let kind = common::weight_kind(a.compute_type, a.dtype)?;
    // fairseq-interactive: utils.set_torch_seed(cfg.common.seed) before the models are built
    let seed = i64::try_from(a.seed).context("--seed is too large")?;
    tch::manual_seed(seed);
    if device.is_cuda() {
        tch::Cuda::manual_seed_all(a.seed);
    }

    let weights = Weights::Load { device, kind, replay_init: a.sampling };
    let bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights)?;
    let mut translator = Translator::new(bundle, device, TextMode::Raw).map_err(common::hub_error)?;
    translator.set_compute_type(a.compute_type.name()).map_err(common::hub_error)?;
    common::print_warnings(&translator.report);
    let max_source_positions = translator.max_source_positions;

    let generator = translator.generator(common::generator_config(&options(a))?)?;

    // fairseq's random draws (sampling) happen in batch order
    let inter_threads = if a.sampling { 1 } else { global.inter_threads };
    let (max_tokens, batch_size, buffer_size) = batching_flags(a, reads_a_terminal(a));
    let batching = common::batching(max_tokens, batch_size, inter_threads)?;
    let buffer_size = resolve_buffer_size(buffer_size, &batching)?;
    let ctx = Session {
        translator,
        generator,
        batching,
        nbest: a.nbest,
        format: a.format,
        print_alignment: a.print_alignment,
        prefix_size: a.search.prefix_size,
    };

    // a file is written complete or not at all; stdout as it goes
    let mut file = PartialFile::for_output(a.output.as_deref())?;
    let stdout = io::stdout();
    let mut out: Box<dyn Write + '_> = match file.as_mut() {
        Some(f) => Box::new(f),
        None => Box::new(stdout.lock()),
    };
    let mut failures = Failures::default();
    let mut buffer_index = 0usize;
    let too_long = format!("longer than max_source_positions={max_source_positions} tokens (EOS included)");
    let mut next_id = 0usize;
    // Unreadable lines wait at their place but take no room: the buffers of readable lines, and
    // so their batches, are those of the same input without the unreadable lines.
    let mut buffer: Vec<Result<Sentence, BadLine>> = Vec::with_capacity(buffer_size);
    let mut readable = 0usize;
    let mut flush = |buffer: &mut Vec<Result<Sentence, BadLine>>, out: &mut Box<dyn Write + '_>, next_id: &mut usize| -> Result<()> {
        if buffer.is_empty() {
            return Ok(());
        }
        buffer_index += 1;
        if !shard::takes(shard, buffer_index - 1) {
            *next_id += buffer.len();
            buffer.clear();
            return Ok(());
        }
        let mut guides: Vec<TargetGuide> = Vec::new();
        for entry in buffer.iter_mut() {
            let Ok(s) = entry else { continue };
            match guide(&ctx.translator, s, ctx.prefix_size) {
                Ok(g) => {
                    s.constraint_ids.clone_from(&g.constraints);
                    guides.push(g);
                }
                Err(bad) => *entry = Err(bad),
            }
        }
        if guides.iter().all(|g| g == &TargetGuide::default()) {
            guides.clear();
        }
        let tokens: Vec<Vec<i64>> = buffer.iter().filter_map(|l| l.as_ref().ok()).map(|s| ctx.translator.encode(&s.src)).collect();
        // (an empty buffer must not reach translate_buffer: it draws from the generator)
        let t = &ctx.translator;
        let translated = t.translate_tokens_guided(&ctx.generator, tokens, &guides, &ctx.batching, ctx.print_alignment)?;
        let mut translated = translated.into_iter().map(LineResult::Translated);
        let n = buffer.len();
        for (i, entry) in buffer.drain(..).enumerate() {
            let (line, result) = match entry {
                Ok(sentence) => {
                    let result = translated.next().context("internal error: a line was not translated")?;
                    (Some(sentence), result)
                }
                Err(bad) => (None, LineResult::Unreadable(bad)),
            };
            match &result {
                LineResult::Translated(Translation::TooLong { .. }) => failures.add(&too_long),
                LineResult::Unreadable(bad) => failures.add(bad.kind),
                LineResult::Translated(Translation::Done { .. }) => {}
            }
            write_result(&ctx.output(), out, *next_id + i, line.as_ref(), &result)?;
        }
        out.flush()?;
        *next_id += n;
        Ok(())
    };
    if !a.sentences.is_empty() {
        for s in &a.sentences {
            buffer.push(sentence(s, InputFormat::Text, a.constraints.is_some()));
            if buffer.len() >= buffer_size {
                flush(&mut buffer, &mut out, &mut next_id)?;
            }
        }
    } else {
        let (reader, newlines) = input_reader(a)?;
        for line in lines(reader, newlines) {
            match line.context("reading input")? {
                Ok(line) => match sentence(&line, a.input_format, a.constraints.is_some()) {
                    Ok(s) => {
                        buffer.push(Ok(s));
                        readable += 1;
                    }
                    Err(bad) => buffer.push(Err(bad)),
                },
                Err(bad) => buffer.push(Err(bad)),
            }
            // an unreadable line with no readable line before it is written at once
            if readable >= buffer_size || readable == 0 {
                flush(&mut buffer, &mut out, &mut next_id)?;
                readable = 0;
            }
        }
    }
    flush(&mut buffer, &mut out, &mut next_id)?;
    drop(out);
    if let Some(f) = file {
        f.commit()?;
    }
    failures.finish("translated")?;
    Ok(Outcome::Ok)
}

/// Text output is one line per input line: the best hypothesis' text, nothing else.
fn refuse_what_text_cannot_show(a: &TranslateArgs) -> Result<()> {
    if a.format != TranslateFormat::Text {
        return Ok(());
    }
    let asked: Vec<String> = [(a.nbest > 1).then(|| format!("--nbest {}", a.nbest)), a.print_alignment.then_some("--print-alignment".to_string())]
        .into_iter()
        .flatten()
        .collect();
    if !asked.is_empty() {
        let verb = if asked.len() > 1 { "need" } else { "needs" };
        bail!("{} {verb} --format jsonl or --format fairseq (text output shows the best hypothesis only)", asked.join(" and "));
    }
    Ok(())
}

fn validate(a: &TranslateArgs) -> Result<()> {
    // the search options are checked by the library (once, for every door)
    common::refuse_unsupported(&a.search)?;
    common::generator_config(&options(a))?;
    common::batching(a.max_tokens, a.batch_size, 1)?;
    if !a.sentences.is_empty() && a.input.is_some() {
        bail!("give sentences as arguments or --input, not both");
    }
    Ok(())
}

/// The flags as the library's translation options.
pub(super) fn options(a: &TranslateArgs) -> TranslateOptions {
    TranslateOptions {
        nbest: a.nbest,
        sampling: a.sampling,
        sampling_topk: a.sampling_topk,
        sampling_topp: a.sampling_topp,
        temperature: a.temperature,
        seed: a.seed,
        alignment: a.print_alignment,
        compute_type: Some(a.compute_type.name().to_string()),
        constraints: a.constraints.map(|c| match c {
            ConstraintsArg::Ordered => "ordered".to_string(),
            ConstraintsArg::Unordered => "unordered".to_string(),
        }),
        ..common::translate_options(&a.search)
    }
}

/// One input sentence, the target text its hypotheses must begin with, and the constraints
/// they must hold (as text, then as target token ids).
pub(super) struct Sentence {
    pub src: String,
    pub prefix: Option<String>,
    /// The reference target (JSONL `tgt`), which `--prefix-size` takes its prefix from.
    pub tgt: Option<String>,
    pub constraints: Vec<String>,
    pub constraint_ids: Vec<Vec<i64>>,
}

/// An input line as `--input-format` reads it; with `--constraints`, a text line's fields
/// after the first tab are its constraints (fairseq-interactive's `line.split("\t")`).
pub(super) fn sentence(line: &str, format: InputFormat, constrained: bool) -> Result<Sentence, BadLine> {
    if format == InputFormat::Text {
        let line = py_strip(line);
        let mut fields = line.split('\t');
        let src = fields.next().unwrap_or_default().to_string();
        let constraints = if constrained { fields.map(str::to_string).collect() } else { Vec::new() };
        let src = if constrained { src } else { line.to_string() };
        return Ok(Sentence { src, prefix: None, tgt: None, constraints, constraint_ids: Vec::new() });
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Record {
        src: String,
        prefix: Option<String>,
        tgt: Option<String>,
        constraints: Option<Vec<String>>,
    }
    const EXPECTED: &str =
        "not a JSON object with a string `src` (and optional `prefix` and `tgt` strings and a `constraints` list)";
    let record: Record = serde_json::from_str(line).map_err(|e| BadLine { kind: EXPECTED, reason: format!("{EXPECTED}: {e}") })?;
    let prefix = record.prefix.map(|p| py_strip(&p).to_string()).filter(|p| !p.is_empty());
    let constraints = record.constraints.unwrap_or_default();
    if !constraints.is_empty() && !constrained {
        let reason = "the line has `constraints` but --constraints is not given".to_string();
        return Err(BadLine { kind: "constraints without --constraints", reason });
    }
    Ok(Sentence { src: py_strip(&record.src).to_string(), prefix, tgt: record.tgt, constraints, constraint_ids: Vec::new() })
}

/// The sentence's prefix and constraints as target token ids; a prefix holding </s> (fairseq's
/// prefix search cannot take one) or a constraint that is empty or holds a special symbol is
/// this line's error. With `--prefix-size N` and a reference target, the prefix is the
/// reference's first N tokens, as fairseq-generate takes them.
fn guide(t: &Translator, s: &Sentence, prefix_size: usize) -> Result<TargetGuide, BadLine> {
    let d = &t.tgt_dict;
    let prefix = match (&s.prefix, &s.tgt) {
        (Some(_), Some(_)) if prefix_size > 0 => {
            let reason = "give `prefix` or `tgt` with --prefix-size, not both".to_string();
            return Err(BadLine { kind: "both `prefix` and `tgt`", reason });
        }
        (None, Some(tgt)) if prefix_size > 0 => {
            let mut ids = t.encode_target_prefix(tgt);
            if ids.len() < prefix_size {
                let reason = format!("the reference `tgt` has {} tokens, fewer than --prefix-size {prefix_size}", ids.len());
                return Err(BadLine { kind: "a reference shorter than --prefix-size", reason });
            }
            ids.truncate(prefix_size);
            ids
        }
        (p, _) => p.as_deref().map_or_else(Vec::new, |p| t.encode_target_prefix(p)),
    };
    if prefix.contains(&d.eos()) {
        let reason = "the prefix holds the end-of-sentence symbol </s>".to_string();
        return Err(BadLine { kind: "a prefix with </s>", reason });
    }
    let mut constraints = Vec::with_capacity(s.constraints.len());
    for (i, text) in s.constraints.iter().enumerate() {
        let ids = t.encode_constraint(text);
        if ids.is_empty() {
            let reason = format!("constraint {} is empty", i + 1);
            return Err(BadLine { kind: "an empty constraint", reason });
        }
        if ids.iter().any(|&id| id == d.bos() || id == d.eos() || id == d.pad()) {
            let reason = format!("constraint {} holds one of the symbols <s>, </s>, <pad>", i + 1);
            return Err(BadLine { kind: "a constraint with a special symbol", reason });
        }
        constraints.push(ids);
    }
    Ok(TargetGuide { prefix, constraints })
}

/// `--input FILE` (universal newlines, as Python opens a file) or stdin (`\n` only).
pub(super) fn input_reader(a: &TranslateArgs) -> Result<(Box<dyn io::BufRead>, Newlines)> {
    Ok(match &a.input {
        Some(p) => (
            Box::new(BufReader::new(File::open(p).with_context(|| format!("opening {}", p.display()))?)),
            Newlines::Universal,
        ),
        None => (Box::new(io::stdin().lock()), Newlines::Lf),
    })
}

/// `--max-tokens` and `--buffer-size` when no batching flag is given and the input is not typed
/// at a terminal: a token budget over a large buffer, sorted by length as fairseq sorts a buffer.
pub const FILE_MAX_TOKENS: usize = Batching::LIST_MAX_TOKENS;
pub const FILE_BUFFER_SIZE: usize = 2048;

/// Lines come from a person at a terminal (then each is answered before the next is read).
pub(super) fn reads_a_terminal(a: &TranslateArgs) -> bool {
    use std::io::IsTerminal;
    a.sentences.is_empty() && a.input.is_none() && io::stdin().is_terminal()
}

/// `(max_tokens, batch_size, buffer_size)`: fairseq's flags as given; with none of them,
/// fairseq-interactive's one line at a time at a terminal, else the file default above.
pub(super) fn batching_flags(a: &TranslateArgs, terminal: bool) -> (Option<usize>, Option<usize>, usize) {
    let given = a.max_tokens.is_some() || a.batch_size.is_some() || a.buffer_size != 0;
    if given || terminal {
        (a.max_tokens, a.batch_size, a.buffer_size)
    } else {
        (Some(FILE_MAX_TOKENS), None, FILE_BUFFER_SIZE)
    }
}

/// fairseq-interactive: `--buffer-size` < 1 means 1, and `--batch-size` may not exceed it. When
/// `--buffer-size` is not given, it defaults to the batch size here (fairseq refuses instead).
pub(super) fn resolve_buffer_size(buffer_size: usize, batching: &Batching) -> Result<usize> {
    let buffer_size = if buffer_size == 0 { batching.batch_size.unwrap_or(1) } else { buffer_size };
    if let Some(b) = batching.batch_size.filter(|&b| b > buffer_size) {
        bail!("--batch-size ({b}) cannot be larger than --buffer-size ({buffer_size})");
    }
    Ok(buffer_size)
}

/// The tokenizer + BPE of the checkpoint config and model directory, with the command line's
/// overrides; source text is tokenized in the source language, hypotheses detokenized in the
/// target language.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// `hypo["score"] / math.log(2)` and the positional scores likewise, as libtorch computes them.
fn base2(values: &[f32], device: Device) -> Result<Vec<f32>> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    let t = Tensor::from_slice(values).f_to_device(device)?.f_div_scalar(std::f64::consts::LN_2)?;
    Ok(Vec::<f32>::try_from(t.f_to_device(Device::Cpu)?)?)
}

/// A line that was not translated: an `E-` line, a JSON object with an `error`, or an empty
/// line (and the error on stderr). `line` is `None` when the line could not be read.
fn write_error(ctx: &Output, out: &mut Box<dyn Write + '_>, id: usize, line: Option<&Sentence>, msg: &str) -> Result<()> {
    let line = line.map(|s| s.src.as_str());
    match ctx.format {
        TranslateFormat::Fairseq => writeln!(out, "E-{id}\t{msg}")?,
        TranslateFormat::Jsonl => {
            let v = serde_json::json!({ "id": id, "source": line, "error": msg });
            writeln!(out, "{v}")?;
        }
        TranslateFormat::Text => {
            writeln!(out)?;
            eprintln!("error: line {}: {msg}", id + 1);
        }
    }
    Ok(())
}

/// What the printing needs from a model: its strings.
pub(super) trait Strings {
    fn source_string(&self, src_tokens: &[i64]) -> String;
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError>;
    fn target_string(&self, tokens: &[i64]) -> String;
    fn attention_matrix(&self, h: &Hypothesis, src_tokens: &[i64]) -> Option<AttentionMatrix>;
    fn device(&self) -> Device;
}

impl Strings for Translator {
    fn source_string(&self, src_tokens: &[i64]) -> String {
        Translator::source_string(self, src_tokens)
    }
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        Translator::hypothesis_text(self, h)
    }
    fn target_string(&self, tokens: &[i64]) -> String {
        Translator::target_string(self, tokens)
    }
    fn attention_matrix(&self, h: &Hypothesis, src_tokens: &[i64]) -> Option<AttentionMatrix> {
        Translator::attention_matrix(self, h, src_tokens)
    }
    fn device(&self) -> Device {
        self.device
    }
}

/// How results are printed.
pub(super) struct Output<'a> {
    pub strings: &'a dyn Strings,
    pub format: TranslateFormat,
    pub nbest: usize,
    pub print_alignment: bool,
}

impl Session {
    fn output(&self) -> Output<'_> {
        Output { strings: &self.translator, format: self.format, nbest: self.nbest, print_alignment: self.print_alignment }
    }
}

pub(super) fn write_result(ctx: &Output, out: &mut Box<dyn Write + '_>, id: usize, sentence: Option<&Sentence>, result: &LineResult) -> Result<()> {
    let line = sentence;
    let (src_tokens, hypos, seconds) = match result {
        LineResult::Unreadable(bad) => return write_error(ctx, out, id, line, &format!("{}; not translated", bad.reason)),
        LineResult::Translated(t @ Translation::TooLong { .. }) => {
            return write_error(ctx, out, id, line, &t.error().unwrap_or_default())
        }
        LineResult::Translated(Translation::Done { src_tokens, hypos, seconds }) => (src_tokens, hypos, seconds),
    };
    let t = ctx.strings;
    let src_str = t.source_string(src_tokens);
    let top = &hypos[..hypos.len().min(ctx.nbest)];
    match ctx.format {
        TranslateFormat::Fairseq => {
            writeln!(out, "S-{id}\t{src_str}")?;
            writeln!(out, "W-{id}\t{seconds:.3}\tseconds")?;
            for c in sentence.map_or(&[][..], |s| s.constraint_ids.as_slice()) {
                writeln!(out, "C-{id}\t{}", t.target_string(c))?;
            }
            for h in top {
                let text = t.hypothesis_text(h)?;
                let score = python_float_repr(f64::from(base2(&[h.score], t.device())?[0]));
                writeln!(out, "H-{id}\t{score}\t{}", text.tokens)?;
                writeln!(out, "D-{id}\t{score}\t{}", text.text)?;
                let pos: Vec<String> =
                    base2(&h.positional_scores, t.device())?.into_iter().map(|p| python_fixed4(f64::from(p))).collect();
                writeln!(out, "P-{id}\t{}", pos.join(" "))?;
                if ctx.print_alignment {
                    let a: Vec<String> = h.alignment.iter().flatten().map(|(s, t)| format!("{s}-{t}")).collect();
                    writeln!(out, "A-{id}\t{}", a.join(" "))?;
                }
            }
        }
        TranslateFormat::Jsonl => {
            let mut hyps: Vec<serde_json::Value> = Vec::with_capacity(top.len());
            for h in top {
                let text = t.hypothesis_text(h)?;
                let toks: Vec<&str> = text.tokens.split(' ').filter(|s| !s.is_empty()).collect();
                let mut v = serde_json::json!({
                    "text": text.text,
                    "tokens": toks,
                    "score": h.score,
                    "positional_scores": h.positional_scores,
                });
                if ctx.print_alignment {
                    v["alignment"] = serde_json::json!(h.alignment.clone().unwrap_or_default());
                    if let Some(attn) = t.attention_matrix(h, src_tokens) {
                        v["attention"] = serde_json::to_value(attn)?;
                    }
                }
                hyps.push(v);
            }
            let src_toks: Vec<&str> = src_str.split(' ').filter(|s| !s.is_empty()).collect();
            let mut v = serde_json::json!({
                "id": id,
                "source": line.map(|s| s.src.as_str()),
                "source_tokens": src_toks,
                "hypotheses": hyps,
            });
            if let Some(ids) = sentence.map(|s| &s.constraint_ids).filter(|c| !c.is_empty()) {
                v["constraints"] = ids.iter().map(|c| t.target_string(c)).collect();
            }
            writeln!(out, "{v}")?;
        }
        TranslateFormat::Text => {
            let best = match top.first() {
                Some(h) => t.hypothesis_text(h)?.text,
                None => String::new(),
            };
            writeln!(out, "{best}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn flags(argv: &[&str], terminal: bool) -> (Option<usize>, Option<usize>, usize) {
        let cli = Cli::try_parse_from([&["tchseq", "translate", "-m", "x"], argv].concat()).unwrap();
        let Command::Translate(a) = cli.command else { panic!("not translate") };
        batching_flags(&a, terminal)
    }

    #[test]
    fn files_and_pipes_are_batched_unless_a_batching_flag_is_given() {
        assert_eq!(flags(&[], false), (Some(FILE_MAX_TOKENS), None, FILE_BUFFER_SIZE));
        assert_eq!(flags(&[], true), (None, None, 0), "a terminal is answered line by line");
        assert_eq!(flags(&["--batch-size", "1"], false), (None, Some(1), 0));
        assert_eq!(flags(&["--buffer-size", "8"], false), (None, None, 8));
        assert_eq!(flags(&["--max-tokens", "100"], false), (Some(100), None, 0));
    }
}
