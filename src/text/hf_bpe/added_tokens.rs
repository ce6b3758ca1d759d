//! `tokenizers`' `AddedVocabulary`: the added tokens found in the input before pre-tokenization,
//! leftmost and longest first, the tokens that are not `normalized` before those that are;
//! `single_word` ones only between non-word characters, `lstrip`/`rstrip` ones taking the
//! whitespace beside them.

use serde_json::Value;

use super::{Reader, TokenizerJsonError};

/// One entry of `added_tokens`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    pub normalized: bool,
    pub special: bool,
}

impl AddedToken {
    pub(super) fn list_from_json(r: &Reader, added: Option<&Value>) -> Result<Vec<AddedToken>, TokenizerJsonError> {
        let entries = match added {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(entries)) => entries,
            Some(_) => return Err(r.invalid("added_tokens", "not a list")),
        };
        entries
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let field = format!("added_tokens[{i}]");
                let flag = |key: &str, default: bool| match t.get(key) {
                    None => Ok(default),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(v) => Err(r.invalid(&format!("{field}.{key}"), format!("{v} is not true or false"))),
                };
                let id = t.get("id").and_then(Value::as_u64).and_then(|i| u32::try_from(i).ok()).ok_or_else(|| r.invalid(&format!("{field}.id"), "not a token id"))?;
                let content = t.get("content").and_then(Value::as_str).filter(|c| !c.is_empty()).ok_or_else(|| r.invalid(&format!("{field}.content"), "not a token"))?;
                let special = flag("special", false)?;
                Ok(AddedToken {
                    id,
                    content: content.to_string(),
                    single_word: flag("single_word", false)?,
                    lstrip: flag("lstrip", false)?,
                    rstrip: flag("rstrip", false)?,
                    normalized: flag("normalized", !special)?,
                    special,
                })
            })
            .collect()
    }
}

/// A section of the input: its byte offset, its text, and the added token's id where it is one.
pub(super) type Section<'a> = (usize, &'a str, Option<u32>);

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The leftmost-longest matches of `tokens` in `text`, as `(start, stop, id)` after stripping.
fn find_matches(tokens: &[&AddedToken], text: &str) -> Vec<(usize, usize, u32)> {
    let mut found = Vec::new();
    let mut search = 0;
    let mut previous_stop = 0;
    while search < text.len() {
        let longest_at = |at: usize| tokens.iter().filter(|t| text[at..].starts_with(t.content.as_str())).max_by_key(|t| t.content.len());
        let Some((start, token)) = text[search..].char_indices().map(|(i, _)| search + i).find_map(|at| longest_at(at).map(|t| (at, *t))) else { break };
        let mut stop = start + token.content.len();
        search = stop;
        if token.single_word {
            let start_space = !text[..start].chars().next_back().is_some_and(is_word_char);
            let stop_space = !text[stop..].chars().next().is_some_and(is_word_char);
            if !start_space || !stop_space {
                continue;
            }
        }
        let mut start = start;
        if token.lstrip {
            let new_start = text[..start].char_indices().rev().find(|(_, c)| !c.is_whitespace()).map_or(0, |(i, c)| i + c.len_utf8());
            start = new_start.max(previous_stop);
        }
        if token.rstrip {
            stop = text[stop..].char_indices().find(|(_, c)| !c.is_whitespace()).map_or(text.len(), |(i, _)| stop + i);
            search = stop;
        }
        found.push((start, stop, token.id));
        previous_stop = stop;
    }
    found
}

/// `text` from `offset` split at the matches of `tokens`.
fn split_at<'a>(tokens: &[&AddedToken], offset: usize, text: &'a str, out: &mut Vec<Section<'a>>) {
    let mut at = 0;
    for (start, stop, id) in find_matches(tokens, text) {
        if at < start {
            out.push((offset + at, &text[at..start], None));
        }
        out.push((offset + start, &text[start..stop], Some(id)));
        at = stop;
    }
    if at < text.len() {
        out.push((offset + at, &text[at..], None));
    }
}

/// `text` in sections: the added tokens and the text between them.
pub(super) fn split<'a>(added: &[AddedToken], text: &'a str) -> Vec<Section<'a>> {
    let (normalized, raw): (Vec<&AddedToken>, Vec<&AddedToken>) = added.iter().partition(|t| t.normalized);
    let mut first = Vec::new();
    split_at(&raw, 0, text, &mut first);
    let mut sections = Vec::with_capacity(first.len());
    for section in first {
        match section {
            (offset, text, None) => split_at(&normalized, offset, text, &mut sections),
            added => sections.push(added),
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32, content: &str) -> AddedToken {
        AddedToken { id, content: content.into(), single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }
    }

    #[test]
    fn added_tokens_are_split_off_leftmost_longest() {
        let added = [token(1, "<s>"), token(2, "eng_Latn"), token(3, "eng")];
        assert_eq!(split(&added, "a<s>eng_Latn b eng"), [(0, "a", None), (1, "<s>", Some(1)), (4, "eng_Latn", Some(2)), (12, " b ", None), (15, "eng", Some(3))]);
        assert_eq!(split(&added, "plain"), [(0, "plain", None)]);
    }

    #[test]
    fn single_word_strip_and_normalized_as_tokenizers_has_them() {
        let word = AddedToken { single_word: true, ..token(1, "ab") };
        assert_eq!(split(&[word.clone()], "cab ab"), [(0, "cab ", None), (4, "ab", Some(1))]);
        let strip = AddedToken { lstrip: true, rstrip: true, ..token(2, "<m>") };
        assert_eq!(split(&[strip], "a  <m> b"), [(0, "a", None), (1, "  <m> ", Some(2)), (7, "b", None)]);
        // the tokens that are not normalized are found first
        let normalized = AddedToken { normalized: true, ..token(3, "xy") };
        assert_eq!(split(&[normalized, token(4, "yz")], "xyz"), [(0, "x", None), (1, "yz", Some(4))]);
    }
}
