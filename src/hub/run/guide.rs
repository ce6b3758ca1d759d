//! What a sentence's hypotheses must hold besides its source: a forced target prefix and
//! lexical constraints, checked once here for every door (the CLI's lines, the server's
//! requests, Python's calls).

use crate::generate::GenerateError;

/// What a sentence's hypotheses must hold, as target token ids without EOS: a forced prefix
/// (fairseq's `prefix_tokens`; empty forces nothing) and lexical constraints (fairseq's
/// `constraints`, for a generator made with `constraints` set).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetGuide {
    /// Forced first tokens (fairseq's `prefix_tokens`).
    pub prefix: Vec<i64>,
    /// Token sequences every hypothesis must contain (fairseq's `constraints`).
    pub constraints: Vec<Vec<i64>>,
    /// The decoder's language token of a multilingual model when the sentence goes into another
    /// target language than the loaded pair's ([`Translator::pair_tokens`]'s `target_prefix`).
    pub language: Option<i64>,
}

/// Why a sentence's prefix or constraints cannot guide its search.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuideError {
    /// The prefix holds `</s>`: fairseq's prefix search cannot take one.
    #[error("the prefix holds the end-of-sentence symbol </s>")]
    PrefixWithEos,
    /// Constraint `n` (counted from 1) encodes to no tokens.
    #[error("constraint {0} is empty")]
    EmptyConstraint(usize),
    /// Constraint `n` (counted from 1) holds `<s>`, `</s>` or `<pad>`.
    #[error("constraint {0} holds one of the symbols <s>, </s>, <pad>")]
    SpecialSymbol(usize),
}

impl GuideError {
    /// What kind of failure it is, for a tally of failed lines.
    pub fn kind(&self) -> &'static str {
        match self {
            GuideError::PrefixWithEos => "a prefix with </s>",
            GuideError::EmptyConstraint(_) => "an empty constraint",
            GuideError::SpecialSymbol(_) => "a constraint with a special symbol",
        }
    }
}

/// The prefixes of a batch's rows, right-padded with `pad` (fairseq's `prefix_tokens`), or
/// `None` when no row has one.
pub(super) fn batch_prefixes(guides: &[TargetGuide], ids: &[usize], pad: i64) -> Result<Option<tch::Tensor>, GenerateError> {
    let rows: Vec<&[i64]> = ids.iter().map(|&i| guides.get(i).map_or(&[][..], |g| g.prefix.as_slice())).collect();
    let width = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    if width == 0 {
        return Ok(None);
    }
    let mut flat = vec![pad; rows.len() * width];
    for (r, row) in rows.iter().enumerate() {
        flat[r * width..r * width + row.len()].copy_from_slice(row);
    }
    Ok(Some(tch::Tensor::from_slice(&flat).f_view([rows.len() as i64, width as i64])?))
}
