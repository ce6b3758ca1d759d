//! `tchseq encode`: raw lines in, the subword lines (or dictionary ids) fairseq feeds the model
//! out.

use anyhow::Result;

use super::args::{EncodeArgs, GlobalArgs};
use super::side_text::{build, stream, SideText};
use super::Outcome;

pub fn run(_global: &GlobalArgs, a: &EncodeArgs) -> Result<Outcome> {
    let SideText { text, dict } = build(&a.model, &a.pipeline, a.side, a.ids)?;
    stream("encoded", |line| {
        // fairseq-interactive strips every input line before encoding it.
        let encoded = text.encode(tchseq::text::pyutil::py_strip(line));
        Ok(match &dict {
            Some(d) => d.encode_line(&encoded, true).iter().map(i64::to_string).collect::<Vec<_>>().join(" "),
            None => encoded,
        })
    })
}
