//! `tchseq decode`: subword lines (e.g. hypotheses) in, detokenized text out.

use anyhow::Result;

use super::args::{DecodeArgs, GlobalArgs};
use super::encode::{build, stream};
use super::Outcome;

pub fn run(_global: &GlobalArgs, a: &DecodeArgs) -> Result<Outcome> {
    let text = build(&a.model, &a.pipeline, a.side, a.ids)?;
    stream(|line| Ok(text.decode(line)?))
}
