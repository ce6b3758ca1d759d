//! Raw `score` flags to resolved settings, validated once.

use super::*;
use anyhow::{bail, Result};
use std::path::PathBuf;


use crate::cli::args::{GlobalArgs, ScoreArgs, ScoreFormat};
use crate::cli::shard::Shard;

#[derive(Debug, Clone)]
pub struct Options {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    pub source_column: String,
    pub target_column: String,
    pub source_lang_column: Option<String>,
    pub target_lang_column: Option<String>,
    pub delimiter: u8,
    pub format: ScoreFormat,
    pub per_token: bool,
    pub max_tokens: Option<usize>,
    pub batch_size: Option<usize>,
    pub buffer_size: usize,
    pub resume: bool,
    /// With `--num-shards`: the shard, and a `row` column is added last.
    pub shard: Option<Shard>,
    /// Everything that must be unchanged for `--resume` to continue a run.
    pub settings: super::resume::Settings,
}

impl Options {
    pub fn new(global: &GlobalArgs, a: &ScoreArgs) -> Result<Self> {
        let delimiter = parse_delimiter(&a.delimiter)?;
        if a.buffer_size == 0 {
            bail!("--buffer-size must be at least 1");
        }
        crate::cli::common::batching(a.batching.max_tokens, a.batching.batch_size, 1)?;
        let shard = Shard::from_args(&a.shard)?;
        if shard.is_some() && a.resume {
            bail!("--resume cannot be combined with --num-shards (rerun the shard instead)");
        }
        if a.resume && a.output.is_none() {
            bail!("--resume needs --output (a run to stdout cannot be resumed)");
        }
        if a.resume && super::table::is_stdin(&a.input) {
            bail!("--resume needs --input FILE (rows read from stdin cannot be read again)");
        }
        let (max_tokens, batch_size) = match (a.batching.max_tokens, a.batching.batch_size) {
            (None, None) => (Some(DEFAULT_MAX_TOKENS), None),
            other => other,
        };
        let settings = super::resume::settings(global, a, delimiter, (max_tokens, batch_size));
        Ok(Self {
            input: a.input.clone(),
            output: a.output.clone(),
            source_column: a.source_column.clone(),
            target_column: a.target_column.clone(),
            source_lang_column: a.source_lang_column.clone(),
            target_lang_column: a.target_lang_column.clone(),
            delimiter,
            format: a.format,
            per_token: a.per_token,
            max_tokens,
            batch_size,
            buffer_size: a.buffer_size,
            resume: a.resume,
            shard,
            settings,
        })
    }
}

/// `,`, `;`, `|`, a literal tab, or the two characters `\t` (or the word `tab`).
pub(super) fn parse_delimiter(text: &str) -> Result<u8> {
    match text {
        "\\t" | "tab" | "TAB" => Ok(b'\t'),
        _ => match text.as_bytes() {
            [b] if b.is_ascii() && *b != b'"' && *b != b'\n' && *b != b'\r' => Ok(*b),
            _ => bail!("--delimiter must be one ASCII character (or '\\t' for tab), got {text:?}"),
        },
    }
}
