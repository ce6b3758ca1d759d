//! What `tchseq translate` reads, for a translation model and a language model alike: its
//! lines, read `--buffer-size` readable lines at a time, and its flags as the library's options.

use std::fs::File;
use std::io::{self, BufReader};

use anyhow::{bail, Context, Result};

use super::args::{ConstraintsArg, InputFormat, TranslateArgs};
use super::common;
use super::lines::{lines, BadLine, Newlines};
use tchseq::hub::{Batching, TranslateOptions};
use tchseq::text::dictionary::is_py_space;

/// The flags as the library's translation options.
pub fn options(a: &TranslateArgs) -> TranslateOptions {
    TranslateOptions {
        nbest: a.nbest,
        sampling: a.sampling,
        sampling_topk: a.sampling_topk,
        sampling_topp: a.sampling_topp,
        temperature: a.temperature,
        seed: a.seed,
        alignment: a.print_alignment.is_some(),
        compute_type: Some(a.compute_type),
        constraints: a.constraints.map(|c| match c {
            ConstraintsArg::Ordered => "ordered".to_string(),
            ConstraintsArg::Unordered => "unordered".to_string(),
        }),
        ..common::translate_options(&a.search)
    }
}

/// One input sentence, the target text its hypotheses must begin with, and the constraints
/// they must hold (as text, then as target token ids).
pub struct Sentence {
    pub src: String,
    pub prefix: Option<String>,
    /// The reference target (JSONL `tgt`), which `--prefix-size` takes its prefix from.
    pub tgt: Option<String>,
    pub constraints: Vec<String>,
    pub constraint_ids: Vec<Vec<i64>>,
}

/// An input line as `--input-format` reads it; with `--constraints`, a text line's fields
/// after the first tab are its constraints (fairseq-interactive's `line.split("\t")`).
pub fn sentence(line: &str, format: InputFormat, constrained: bool) -> Result<Sentence, BadLine> {
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

/// `--input FILE` (universal newlines, as Python opens a file) or stdin (`\n` only; also
/// `--input -`, as fairseq-interactive's default).
pub fn input_reader(a: &TranslateArgs) -> Result<(Box<dyn io::BufRead>, Newlines)> {
    Ok(match a.input.as_ref().filter(|p| p.as_os_str() != "-") {
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
pub fn reads_a_terminal(a: &TranslateArgs) -> bool {
    use std::io::IsTerminal;
    a.sentences.is_empty() && a.input.is_none() && io::stdin().is_terminal()
}

/// `(max_tokens, batch_size, buffer_size)`: fairseq's flags as given; with none of them,
/// fairseq-interactive's one line at a time at a terminal, else the file default above.
pub fn batching_flags(a: &TranslateArgs, terminal: bool) -> (Option<usize>, Option<usize>, usize) {
    let given = a.batching.max_tokens.is_some() || a.batching.batch_size.is_some() || a.buffer_size != 0;
    if given || terminal {
        (a.batching.max_tokens, a.batching.batch_size, a.buffer_size)
    } else {
        (Some(FILE_MAX_TOKENS), None, FILE_BUFFER_SIZE)
    }
}

/// fairseq-interactive: `--buffer-size` < 1 means 1, and `--batch-size` may not exceed it. When
/// `--buffer-size` is not given, it defaults to the batch size here (fairseq refuses instead).
pub fn resolve_buffer_size(buffer_size: usize, batching: &Batching) -> Result<usize> {
    let buffer_size = if buffer_size == 0 { batching.batch_size.unwrap_or(1) } else { buffer_size };
    if let Some(b) = batching.batch_size.filter(|&b| b > buffer_size) {
        bail!("--batch-size ({b}) cannot be larger than --buffer-size ({buffer_size})");
    }
    Ok(buffer_size)
}

/// Calls `flush` with the lines in buffers of `buffer_size` readable lines: the sentence
/// arguments, else `--input` or stdin. An unreadable line waits at its place but takes no room,
/// so the buffers of readable lines, and their batches, are those of the input without it; one
/// with no readable line before it goes at once.
pub fn for_each_buffer(
    a: &TranslateArgs,
    constrained: bool,
    buffer_size: usize,
    mut flush: impl FnMut(&mut Vec<Result<Sentence, BadLine>>) -> Result<()>,
) -> Result<()> {
    let mut buffer: Vec<Result<Sentence, BadLine>> = Vec::with_capacity(buffer_size);
    let mut readable = 0usize;
    let mut push = |entry: Result<Sentence, BadLine>, buffer: &mut Vec<Result<Sentence, BadLine>>| -> Result<()> {
        readable += usize::from(entry.is_ok());
        buffer.push(entry);
        if readable >= buffer_size || readable == 0 {
            readable = 0;
            flush(buffer)?;
            buffer.clear();
        }
        Ok(())
    };
    if !a.sentences.is_empty() {
        for s in &a.sentences {
            push(sentence(s, InputFormat::Text, constrained), &mut buffer)?;
        }
    } else {
        let (reader, newlines) = input_reader(a)?;
        for line in lines(reader, newlines) {
            let entry = line.context("reading input")?.and_then(|l| sentence(&l, a.input_format, constrained));
            push(entry, &mut buffer)?;
        }
    }
    if !buffer.is_empty() {
        flush(&mut buffer)?;
    }
    Ok(())
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
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
