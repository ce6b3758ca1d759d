//! The settings of a `score` run that `--resume` holds it to (see [`crate::cli::settings`]).

use crate::cli::args::{GlobalArgs, ScoreArgs};
pub use crate::cli::settings::{check, Settings};
use crate::cli::settings::{canonical, clap_name, model_settings, opt};

/// The settings of a `score` run that decide its output rows.
pub fn settings(global: &GlobalArgs, a: &ScoreArgs, delimiter: u8, batching: (Option<usize>, Option<usize>)) -> Settings {
    let mut s = model_settings(global, &a.model, &a.pipeline);
    let mut put = |k: &str, v: String| {
        s.insert(k.to_string(), v);
    };
    put("--input", canonical(&a.input));
    put("--tokenized", a.tokenized.to_string());
    put("--source-column", a.source_column.clone());
    put("--target-column", a.target_column.clone());
    put("--source-lang-column", opt(a.source_lang_column.as_ref()));
    put("--target-lang-column", opt(a.target_lang_column.as_ref()));
    put("--delimiter", char::from(delimiter).escape_default().to_string());
    put("--format", clap_name(a.format));
    put("--per-token", a.per_token.to_string());
    put("--compute-type", a.compute_type.name().to_string());
    // batch composition moves the low bits of a score, as in fairseq
    put("--max-tokens", opt(batching.0));
    put("--batch-size", opt(batching.1));
    put("--buffer-size", a.buffer_size.to_string());
    s
}
