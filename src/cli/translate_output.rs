//! How `tchseq translate` prints what it made of each line (text, fairseq-interactive's lines or
//! JSONL), for a translation model and a language model alike.

use std::io::Write;

use anyhow::{bail, Context, Result};
use tch::Device;

use super::args::{TranslateArgs, TranslateFormat};
use super::lines::{BadLine, Failures};
use super::output::{python_fixed4, python_float_repr};
use super::translate_input::Sentence;
use tchseq::generate::{base2, Hypothesis};
use tchseq::hub::{AttentionMatrix, HypothesisText, Translation, Translator};
use tchseq::text::dictionary::post_process;
use tchseq::text::pipeline::PipelineError;

/// What happened to one input line.
pub enum LineResult {
    Translated(Translation),
    Unreadable(BadLine),
}

/// Prints a finished buffer in input order, numbered from `first_id`, and empties it: each read
/// line takes the next of `done` (one per read line, in order), and each line that is too long
/// or unreadable is counted in `failures` (`too_long` names the limit). Returns how many lines
/// the buffer held.
pub fn write_buffer(
    ctx: &Output,
    out: &mut dyn Write,
    failures: &mut Failures,
    too_long: &str,
    first_id: usize,
    buffer: &mut Vec<Result<Sentence, BadLine>>,
    done: Vec<Translation>,
) -> Result<usize> {
    let n = buffer.len();
    let mut writer = InOrder::new(buffer, first_id);
    let done: Vec<(usize, Translation)> = done.into_iter().enumerate().collect();
    writer.add(ctx, out, failures, too_long, &done)?;
    writer.finish()?;
    Ok(n)
}

/// A buffer's lines, written in input order as their results come (batches finish in length
/// order, and with --inter-threads in any order): a line goes out once every line before it
/// has, so what is written is always a prefix of the whole output.
pub struct InOrder {
    entries: Vec<Option<Result<Sentence, BadLine>>>,
    /// The buffer position of each read line (the `i` of a result `(i, _)`).
    positions: Vec<usize>,
    results: Vec<Option<Translation>>,
    /// The first buffer position not written yet.
    next: usize,
    first_id: usize,
}

impl InOrder {
    /// Takes the buffer's lines (the buffer is left empty); its first line has id `first_id`.
    pub fn new(buffer: &mut Vec<Result<Sentence, BadLine>>, first_id: usize) -> Self {
        let entries: Vec<_> = buffer.drain(..).map(Some).collect();
        let positions = entries.iter().enumerate().filter(|(_, e)| matches!(e, Some(Ok(_)))).map(|(p, _)| p).collect();
        let results = (0..entries.len()).map(|_| None).collect();
        InOrder { entries, positions, results, next: 0, first_id }
    }

    /// Records the results `(i, translation)` of read lines `i`, then writes every line that
    /// is now next in order, and flushes. Returns how many lines it wrote.
    pub fn add(
        &mut self,
        ctx: &Output,
        out: &mut dyn Write,
        failures: &mut Failures,
        too_long: &str,
        done: &[(usize, Translation)],
    ) -> Result<usize> {
        for (i, t) in done {
            let p = *self.positions.get(*i).context("internal error: a result for a line that was not read")?;
            self.results[p] = Some(t.clone());
        }
        let start = self.next;
        while let Some(entry) = self.entries.get_mut(self.next) {
            let (line, result) = match entry.take() {
                Some(Ok(sentence)) => match self.results[self.next].take() {
                    Some(t) => (Some(sentence), LineResult::Translated(t)),
                    None => {
                        *entry = Some(Ok(sentence));
                        break;
                    }
                },
                Some(Err(bad)) => (None, LineResult::Unreadable(bad)),
                None => bail!("internal error: a line was written twice"),
            };
            match &result {
                LineResult::Translated(Translation::TooLong { .. }) => failures.add(too_long),
                LineResult::Translated(Translation::Failed { .. }) => failures.add("in a batch that failed (an internal error)"),
                LineResult::Unreadable(bad) => failures.add(bad.kind),
                LineResult::Translated(Translation::Done { .. }) => {}
            }
            write_result(ctx, out, self.first_id + self.next, line.as_ref(), &result)?;
            self.next += 1;
        }
        out.flush()?;
        Ok(self.next - start)
    }

    /// The first `n` lines were written before (by an interrupted run): they are translated
    /// again, so that the batches are those of one run, but not written.
    pub fn skip(&mut self, n: usize) {
        let n = n.min(self.entries.len());
        for entry in &mut self.entries[..n] {
            *entry = None;
        }
        self.next = self.next.max(n);
    }

    /// Lines written so far.
    pub fn written(&self) -> usize {
        self.next
    }

    /// The id of the buffer's first line.
    pub fn first_id(&self) -> usize {
        self.first_id
    }

    /// Every line was written.
    pub fn finish(self) -> Result<()> {
        if self.next < self.entries.len() {
            bail!("internal error: line {} has no result", self.first_id + self.next + 1);
        }
        Ok(())
    }
}

/// Text output is one line per input line: the best hypothesis' text, nothing else.
pub fn refuse_what_text_cannot_show(a: &TranslateArgs) -> Result<()> {
    if a.format != TranslateFormat::Text {
        return Ok(());
    }
    let asked: Vec<String> = [(a.nbest > 1).then(|| format!("--nbest {}", a.nbest)), a.print_alignment.is_some().then(|| "--print-alignment".to_string())]
        .into_iter()
        .flatten()
        .collect();
    if !asked.is_empty() {
        let verb = if asked.len() > 1 { "need" } else { "needs" };
        bail!("{} {verb} --format jsonl or --format fairseq (text output shows the best hypothesis only)", asked.join(" and "));
    }
    Ok(())
}

/// A line that was not translated: an `E-` line, a JSON object with an `error`, or an empty
/// line (and the error on stderr). `line` is `None` when the line could not be read.
fn write_error(ctx: &Output, out: &mut dyn Write, id: usize, line: Option<&Sentence>, msg: &str) -> Result<()> {
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
pub trait Strings {
    fn source_string(&self, src_tokens: &[i64]) -> String;
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError>;
    /// Subword tokens, space-separated → detokenized text (what makes `D-` of `H-`).
    fn decode_subwords(&self, subwords: &str) -> Result<String, PipelineError>;
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
    fn decode_subwords(&self, subwords: &str) -> Result<String, PipelineError> {
        self.pipeline.decode(subwords)
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

/// A model's strings, given to the threads that finish batches (their printing is serialized
/// by the caller's lock).
pub struct SharedStrings<'a, T: Strings>(pub &'a T);

// SAFETY: printing reads the dictionaries, the text pipelines and the device, which nothing
// writes during a run, and only one thread prints at a time (the writer's lock). What keeps
// `Translator` and `LanguageModel` from being `Sync` is the model's tensors, which printing
// never touches.
unsafe impl<T: Strings> Sync for SharedStrings<'_, T> {}

impl<T: Strings> Strings for SharedStrings<'_, T> {
    fn source_string(&self, src_tokens: &[i64]) -> String {
        self.0.source_string(src_tokens)
    }
    fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        self.0.hypothesis_text(h)
    }
    fn decode_subwords(&self, subwords: &str) -> Result<String, PipelineError> {
        self.0.decode_subwords(subwords)
    }
    fn target_string(&self, tokens: &[i64]) -> String {
        self.0.target_string(tokens)
    }
    fn attention_matrix(&self, h: &Hypothesis, src_tokens: &[i64]) -> Option<AttentionMatrix> {
        self.0.attention_matrix(h, src_tokens)
    }
    fn device(&self) -> Device {
        self.0.device()
    }
}

/// How results are printed.
pub struct Output<'a> {
    pub strings: &'a (dyn Strings + Sync),
    pub format: TranslateFormat,
    pub nbest: usize,
    pub print_alignment: bool,
    /// `--post-process`: the symbol fairseq's `post_process` removes from `S-` and `H-` lines.
    pub post_process: Option<&'a str>,
}

fn write_result(ctx: &Output, out: &mut dyn Write, id: usize, sentence: Option<&Sentence>, result: &LineResult) -> Result<()> {
    let line = sentence;
    let (src_tokens, hypos, seconds) = match result {
        LineResult::Unreadable(bad) => return write_error(ctx, out, id, line, &format!("{}; not translated", bad.reason)),
        LineResult::Translated(t @ (Translation::TooLong { .. } | Translation::Failed { .. })) => {
            return write_error(ctx, out, id, line, &t.error().unwrap_or_default())
        }
        LineResult::Translated(Translation::Done { src_tokens, hypos, seconds }) => (src_tokens, hypos, seconds),
    };
    let t = ctx.strings;
    let src_str = t.source_string(src_tokens);
    let top = &hypos[..hypos.len().min(ctx.nbest)];
    match ctx.format {
        TranslateFormat::Fairseq => {
            let post = |s: &str| post_process(s, ctx.post_process);
            writeln!(out, "S-{id}\t{}", post(&src_str))?;
            writeln!(out, "W-{id}\t{seconds:.3}\tseconds")?;
            for c in sentence.map_or(&[][..], |s| s.constraint_ids.as_slice()) {
                writeln!(out, "C-{id}\t{}", t.target_string(c))?;
            }
            for h in top {
                let mut text = t.hypothesis_text(h)?;
                if ctx.post_process.is_some() {
                    // fairseq-interactive: H- is the post-processed string, D- its decode_fn
                    text.tokens = post(&text.tokens);
                    text.text = t.decode_subwords(&text.tokens)?;
                }
                let score = python_float_repr(f64::from(base2(h.score, t.device())));
                writeln!(out, "H-{id}\t{score}\t{}", text.tokens)?;
                writeln!(out, "D-{id}\t{score}\t{}", text.text)?;
                let pos: Vec<String> =
                    h.positional_scores.iter().map(|&p| python_fixed4(f64::from(base2(p, t.device())))).collect();
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

