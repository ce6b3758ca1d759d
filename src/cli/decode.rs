//! `tchseq decode`: subword lines (or dictionary ids, e.g. a hypothesis) in, detokenized text out.

use anyhow::Result;

use super::args::{DecodeArgs, GlobalArgs};
use super::side_text::{build, stream, SideText};
use super::lines::BadLine;
use super::Outcome;

pub fn run(_global: &GlobalArgs, a: &DecodeArgs) -> Result<Outcome> {
    let SideText { text, dict } = build(&a.model, &a.pipeline, a.side, a.ids)?;
    stream("decoded", |line| {
        let subwords = match &dict {
            // The hub's decode: tgt_dict.string(tokens) (drops EOS/BOS), then bpe and tokenizer.
            Some(d) => {
                let ids = tchseq::text::pyutil::py_split(line)
                    .map(|t| {
                        t.parse::<i64>().map_err(|_| BadLine {
                            kind: "not dictionary ids",
                            reason: format!("{t:?} is not a dictionary id"),
                        })
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                d.string(&ids, None, false, &[])
            }
            None => line.to_string(),
        };
        text.decode(&subwords).map_err(|e| BadLine { kind: "not decodable", reason: e.to_string() })
    })
}
