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
                    .map(|t| dictionary_id(t, d.len()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                d.string(&ids, None, false, &[])
            }
            None => line.to_string(),
        };
        text.decode(&subwords).map_err(|e| BadLine { kind: "not decodable", reason: e.to_string() })
    })
}

/// One `--ids` token: an id of the dictionary (0 to its size - 1), or why it is not one. fairseq's
/// `Dictionary.string` would print `<unk>` for an id past the end (and Python would index from
/// the end for a negative one): either way not the text of the ids given.
fn dictionary_id(token: &str, size: usize) -> std::result::Result<i64, BadLine> {
    let not_id = |reason: String| BadLine { kind: "not dictionary ids", reason };
    let id = token.parse::<i64>().map_err(|_| not_id(format!("{token:?} is not a dictionary id")))?;
    if id < 0 || usize::try_from(id).map_or(true, |i| i >= size) {
        return Err(not_id(format!("{id} is not a dictionary id (the dictionary has {size} symbols, ids 0 to {})", size.saturating_sub(1))));
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::dictionary_id;

    #[test]
    fn an_id_outside_the_dictionary_is_a_bad_line() {
        assert_eq!(dictionary_id("0", 10).unwrap(), 0);
        assert_eq!(dictionary_id("9", 10).unwrap(), 9);
        for bad in ["10", "-1", "99999999999999999999", "x"] {
            assert!(dictionary_id(bad, 10).is_err(), "{bad}");
        }
        assert!(dictionary_id("10", 10).unwrap_err().reason.contains("the dictionary has 10 symbols"));
    }
}
