//! `tchseq score`: per-row log-probabilities of (source, target) pairs from a CSV file, computed
//! as `fairseq-generate --score-reference` does (fairseq's SequenceScorer).
//!
//! The CSV/row machinery here does not know about models: it reads rows in chunks of
//! `--buffer-size`, asks a [`Backend`] to encode each row and to score batches built with
//! fairseq's ordering and batching, and writes exactly one output row per input row, in input
//! order, as soon as it and every row before it are scored (progress is kept per batch).

use anyhow::Result;
use std::io::IsTerminal;


use super::args::{GlobalArgs, ScoreArgs};
use super::Outcome;

mod backend;
mod columns;
mod format;
mod lm;
mod options;
mod pending;
mod resume;
mod rows;
mod sink;
mod table;
#[cfg(test)]
mod tests;

use columns::*;
use format::*;
use options::*;
use pending::{Finished, RowTotals};
use rows::*;
use sink::*;
use table::*;

/// fairseq's `--required-batch-size-multiple` default.
const REQUIRED_BATCH_SIZE_MULTIPLE: usize = 8;
/// fairseq-generate's `--max-tokens` when neither it nor `--batch-size` is given.
const DEFAULT_MAX_TOKENS: usize = 12000;
const ADDED_COLUMNS: [&str; 5] = ["logprob", "tokens", "avg_logprob", "ppl", "error"];
const PER_TOKEN_COLUMN: &str = "token_logprobs";
/// The input row (0-based) of an output row, added last with `--num-shards` (`merge` drops it).
pub const ROW_COLUMN: &str = "row";

pub fn run(global: &GlobalArgs, a: &ScoreArgs) -> Result<Outcome> {
    if a.lm {
        return lm::run(global, a);
    }
    let opts = Options::new(global, a)?;
    // a resume with other settings or another input is refused before either is opened
    if opts.resume {
        if let Some(crate::cli::partial::OutputPath::Atomic(path)) = opts.output.as_deref().map(crate::cli::partial::OutputPath::resolve).transpose()? {
            resumable(&opts, &path)?;
        }
    }
    let input = Input::open(&opts)?;
    super::memory::return_large_blocks();
    let mut backend = backend::ModelBackend::load(global, a)?;
    let progress = !a.quiet && std::io::stderr().is_terminal();
    let summary = score_input(input, &opts, &mut backend, progress)?;
    if !a.quiet {
        eprintln!("{}", summary.line());
    }
    if summary.scored < summary.rows {
        anyhow::bail!(
            "{} of {} rows could not be scored (see the `error` column)",
            summary.rows - summary.scored,
            summary.rows
        );
    }
    Ok(Outcome::Ok)
}

pub use tchseq::hub::{Encoded, Scored};

/// The model side of `score`.
pub trait Backend {
    /// Text of the source and target fields to token ids, or why the row cannot be scored.
    fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String>;
    /// [`Backend::encode`] in the row's own languages (None: the model's).
    fn encode_in(&self, source: &str, target: &str, langs: (Option<&str>, Option<&str>)) -> std::result::Result<Encoded, String> {
        match langs {
            (None, None) => self.encode(source, target),
            _ => Err("this backend has no languages to choose from".to_string()),
        }
    }
    /// Scores one batch; one result per item, in the order given.
    fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>>;
    /// How many batches [`Backend::score_batches`] computes side by side.
    fn parallel_batches(&self) -> usize {
        1
    }
    /// Scores several batches, possibly at the same time; one result per batch, in order.
    fn score_batches(&mut self, batches: &[Vec<&Encoded>]) -> Vec<Result<Vec<Scored>>> {
        batches.iter().map(|b| self.score(b)).collect()
    }
    /// The target dictionary's symbol for `id`.
    fn target_symbol(&self, id: i64) -> String;
}
