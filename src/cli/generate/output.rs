//! fairseq-generate's lines for one sentence (`S-`, `T-`, `H-`, `D-`, `P-`, `A-`) and what its
//! scorer is given, as `fairseq_cli/generate.py` computes them.

use std::io::Write;

use anyhow::Result;
use tchseq::generate::{base2, Hypothesis};
use tchseq::metrics::fairseq_scorers::GenerateScorer;
use tchseq::text::dictionary::{is_py_space, Dictionary};
use tchseq::text::pipeline::TextPipeline;

use crate::cli::output::{python_fixed4, python_float_repr};

/// What every sentence's lines are made with.
pub struct Lines<'a> {
    pub src_dict: &'a Dictionary,
    pub tgt_dict: &'a Dictionary,
    /// `decode_fn`: the command line's BPE, then its tokenizer, undone.
    pub decode: &'a TextPipeline,
    /// `--post-process`.
    pub post_process: Option<&'a str>,
    /// The generator's EOS (`get_symbols_to_strip_from_output`).
    pub eos: i64,
    pub nbest: usize,
    pub quiet: bool,
    pub print_alignment: bool,
    pub device: tch::Device,
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
        hypos: &[Hypothesis],
    ) -> Result<()> {
        let pad = self.tgt_dict.pad();
        let src_tokens: Vec<i64> = src_tokens.iter().copied().filter(|&t| t != pad).collect();
        let src_str = self.decode_fn(&self.src_dict.string(&src_tokens, self.post_process, false, &[]))?;
        let target_str = match target {
            Some(t) => Some(self.decode_fn(&self.tgt_dict.string(t, self.post_process, true, &[self.eos]))?),
            None => None,
        };
        if !self.quiet {
            writeln!(out, "S-{id}\t{src_str}")?;
            if let Some(t) = &target_str {
                writeln!(out, "T-{id}\t{t}")?;
            }
        }
        for (j, h) in hypos.iter().take(self.nbest).enumerate() {
            let hypo_str = self.tgt_dict.string(&h.tokens, self.post_process, false, &[self.eos]);
            let detok_hypo_str = self.decode_fn(&hypo_str)?;
            if !self.quiet {
                let score = python_float_repr(f64::from(base2(h.score, self.device)));
                writeln!(out, "H-{id}\t{score}\t{hypo_str}")?;
                writeln!(out, "D-{id}\t{score}\t{detok_hypo_str}")?;
                let pos: Vec<String> = h.positional_scores.iter().map(|&p| python_fixed4(f64::from(base2(p, self.device)))).collect();
                writeln!(out, "P-{id}\t{}", pos.join(" "))?;
                if self.print_alignment {
                    let a: Vec<String> = h.alignment.iter().flatten().map(|(s, t)| format!("{s}-{t}")).collect();
                    writeln!(out, "A-{id}\t{}", a.join(" "))?;
                }
            }
            let (Some(target), Some(target_str), 0) = (target, &target_str, j) else { continue };
            let (target_ids, hypo_ids) = match self.post_process {
                // converted back to tokens without BPE
                Some(_) if !scoring.scorer.takes_strings() => (scoring.encode_adding(target_str), scoring.encode_adding(&detok_hypo_str)),
                _ => {
                    let strip = |t: &[i64]| -> Vec<i32> { t.iter().filter(|&&x| x != pad).map(|&x| x as i32).collect() };
                    (strip(target), h.tokens.iter().map(|&x| x as i32).collect())
                }
            };
            scoring.scorer.add((&target_ids, target_str), (&hypo_ids, &detok_hypo_str));
        }
        Ok(())
    }
}
