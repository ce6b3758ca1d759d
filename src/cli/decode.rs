//! `tchseq decode`: subword lines (or dictionary ids, e.g. a hypothesis) in, detokenized text out.

use anyhow::{Context, Result};

use super::args::{DecodeArgs, GlobalArgs};
use super::encode::{build, stream, SideText};
use super::Outcome;

pub fn run(_global: &GlobalArgs, a: &DecodeArgs) -> Result<Outcome> {
    let SideText { text, dict } = build(&a.model, &a.pipeline, a.side, a.ids)?;
    stream(|line| {
        let subwords = match &dict {
            // The hub's decode: tgt_dict.string(tokens) (drops EOS/BOS), then bpe and tokenizer.
            Some(d) => {
                let ids = tchseq::text::pyutil::py_split(line)
                    .map(|t| t.parse::<i64>().with_context(|| format!("{t:?} is not a dictionary id")))
                    .collect::<Result<Vec<_>>>()?;
                d.string(&ids, None, false, &[])
            }
            None => line.to_string(),
        };
        Ok(text.decode(&subwords)?)
    })
}
