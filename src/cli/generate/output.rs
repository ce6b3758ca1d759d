//! fairseq-generate's lines for one sentence (`S-`, `T-`, `H-`, `D-`, `P-`, `A-`) and what its
//! scorer is given, as `fairseq_cli/generate.py` computes them.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use tchseq::generate::{base2, Hypothesis};
use tchseq::metrics::fairseq_scorers::GenerateScorer;
use tchseq::text::dictionary::{is_py_space, Dictionary};
use tchseq::text::pipeline::TextPipeline;
use tchseq::text::replace_unk::replace_unk;

use crate::cli::output::{python_fixed4, python_float_repr};

/// What every sentence's lines are made with.
pub struct Lines<'a> {
    pub src_dict: &'a Dictionary,
    pub tgt_dict: &'a Dictionary,
    /// `decode_fn`: the command line's BPE, then its tokenizer, undone.
    pub decode: &'a TextPipeline,
    /// `--post-process`.
    pub post_process: Option<&'a str>,
    /// `get_symbols_to_strip_from_output`: the EOS and any decoder language token.
    pub strip: Vec<i64>,
    pub nbest: usize,
    pub quiet: bool,
    /// `--print-alignment`: which A- lines.
    pub print_alignment: Option<AlignmentLines>,
    /// Whether the task's generator aligns at all.
    pub aligned_task: bool,
    /// `--replace-unk`: the alignment dictionary (empty: copy the source word).
    pub replace_unk: Option<HashMap<String, String>>,
    /// Source tokens before the source's first word (a multilingual task's language token).
    pub source_offset: usize,
    pub device: tch::Device,
}

/// fairseq's `--print-alignment hard|soft`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignmentLines {
    /// `utils.extract_hard_alignment`: `src-tgt` word pairs.
    Hard,
    /// `utils.extract_soft_alignment`: per target token (EOS included), its attention over the
    /// source tokens that are not padding, `{:.6f}` each, comma-separated.
    Soft,
}

/// The raw text of a sentence, which `--replace-unk` prints and takes its words from
/// (`get_original_text`).
pub struct Original<'a> {
    pub source: &'a str,
    pub target: Option<&'a str>,
}

/// The scorer and the target dictionary it grows: fairseq re-encodes post-processed text with
/// `encode_line(add_if_not_exist=True)`, which adds unseen words to the dictionary.
pub struct Scoring {
    pub scorer: GenerateScorer,
    pub dict: Dictionary,
}

impl Scoring {
    fn encode_adding(&mut self, line: &str) -> Vec<i32> {
        let mut ids: Vec<i32> = line.split(is_py_space).filter(|w| !w.is_empty()).map(|w| self.dict.add_symbol(w) as i32).collect();
        ids.push(self.dict.eos() as i32);
        ids
    }
}

impl Lines<'_> {
    fn decode_fn(&self, s: &str) -> Result<String> {
        self.decode.decode(s).map_err(crate::cli::common::pipeline_error)
    }

    /// Writes sentence `id`'s lines and feeds its top hypothesis to the scorer.
    pub fn sentence(
        &self,
        out: &mut dyn Write,
        scoring: &mut Scoring,
        id: usize,
        src_tokens: &[i64],
        target: Option<&[i64]>,
        original: Option<&Original>,
        hypos: &[Hypothesis],
    ) -> Result<()> {
        let pad = self.tgt_dict.pad();
        let src_tokens: Vec<i64> = src_tokens.iter().copied().filter(|&t| t != pad).collect();
        // fairseq prints the raw lines as they are when it replaces unknown words
        let src_str = match original {
            Some(o) => self.decode_fn(o.source)?,
            None => self.decode_fn(&self.src_dict.string(&src_tokens, self.post_process, false, &[]))?,
        };
        let target_str = match (target, original.and_then(|o| o.target)) {
            (Some(_), Some(line)) => Some(self.decode_fn(line)?),
            (Some(t), None) => Some(self.decode_fn(&self.tgt_dict.string(t, self.post_process, true, &self.strip))?),
            (None, _) => None,
        };
        if !self.quiet {
            writeln!(out, "S-{id}\t{src_str}")?;
            if let Some(t) = &target_str {
                writeln!(out, "T-{id}\t{t}")?;
            }
        }
        for (j, h) in hypos.iter().take(self.nbest).enumerate() {
            let hypo_str = match (&self.replace_unk, original) {
                (Some(align_dict), Some(o)) => self.replaced(h, o.source, align_dict),
                _ => self.tgt_dict.string(&h.tokens, self.post_process, false, &self.strip),
            };
            let detok_hypo_str = self.decode_fn(&hypo_str)?;
            if !self.quiet {
                let score = python_float_repr(f64::from(base2(h.score, self.device)));
                writeln!(out, "H-{id}\t{score}\t{hypo_str}")?;
                writeln!(out, "D-{id}\t{score}\t{detok_hypo_str}")?;
                let pos: Vec<String> = h.positional_scores.iter().map(|&p| python_fixed4(f64::from(base2(p, self.device)))).collect();
                writeln!(out, "P-{id}\t{}", pos.join(" "))?;
                match self.print_alignment {
                    Some(AlignmentLines::Hard) => {
                        let a: Vec<String> = h.alignment.iter().flatten().map(|(s, t)| format!("{s}-{t}")).collect();
                        writeln!(out, "A-{id}\t{}", a.join(" "))?;
                    }
                    Some(AlignmentLines::Soft) => writeln!(out, "A-{id}\t{}", self.soft_alignment(h, src_tokens.len()))?,
                    None => {}
                }
            }
            let (Some(target), Some(target_str), 0) = (target, &target_str, j) else { continue };
            let (target_ids, hypo_ids) = match () {
                // converted back to tokens without BPE
                _ if (self.post_process.is_some() || self.replace_unk.is_some()) && !scoring.scorer.takes_strings() => (scoring.encode_adding(target_str), scoring.encode_adding(&detok_hypo_str)),
                () => {
                    let strip = |t: &[i64]| -> Vec<i32> { t.iter().filter(|&&x| x != pad).map(|&x| x as i32).collect() };
                    (strip(target), h.tokens.iter().map(|&x| x as i32).collect())
                }
            };
            scoring.scorer.add((&target_ids, target_str), (&hypo_ids, &detok_hypo_str));
        }
        Ok(())
    }

    /// The hypothesis' text with each `<unk>` replaced by its aligned source word, before
    /// `--post-process`.
    fn replaced(&self, h: &Hypothesis, source_line: &str, align_dict: &HashMap<String, String>) -> String {
        let (positions, mut symbols): (Vec<usize>, Vec<String>) =
            self.tgt_dict.kept_symbols(&h.tokens, false, &self.strip).map(|(t, w)| (t, w.to_string())).unzip();
        let mut src_words: Vec<&str> = vec![""; self.source_offset];
        src_words.extend(source_line.split(is_py_space).filter(|w| !w.is_empty()));
        src_words.push("<eos>");
        // alignments number the hypothesis' tokens: kept symbol k is token positions[k]
        let alignment: Vec<(usize, usize)> = h
            .alignment
            .iter()
            .flatten()
            .filter_map(|&(s, t)| Some((usize::try_from(s).ok()?, positions.iter().position(|&p| i64::try_from(p) == Ok(t))?)))
            .collect();
        replace_unk(&mut symbols, &src_words, &alignment, align_dict, tchseq::text::dictionary::UNK_WORD);
        tchseq::text::dictionary::post_process(&symbols.join(" "), self.post_process)
    }

    /// `extract_soft_alignment` over the attention kept during search: `source_len` is the
    /// sentence's source tokens without padding, the last columns of each (left-padded) row.
    fn soft_alignment(&self, h: &Hypothesis, source_len: usize) -> String {
        let (Some(attn), true) = (&h.attention, self.aligned_task) else { return String::new() };
        let pad = self.tgt_dict.pad();
        let rows = h.tokens.iter().zip(attn).filter(|(&t, _)| t != pad).map(|(_, row)| {
            let from = row.len().saturating_sub(source_len);
            row[from..].iter().map(|&p| format!("{:.6}", f64::from(p))).collect::<Vec<_>>().join(",")
        });
        rows.collect::<Vec<_>>().join(" ")
    }
}
