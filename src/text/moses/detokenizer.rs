//! `sacremoses.MosesDetokenizer.detokenize(tokens, return_str=True, unescape=True)`.

use std::collections::HashMap;

use super::{props, CharSet, MosesError};
use crate::text::pyutil::{py_split, py_strip};

#[derive(Debug)]
pub struct MosesDetokenizer {
    lang: String,
    is_alpha: CharSet,
    /// `^[{IsSc}\(\[\{\¿\¡]+$`
    currency_or_open: CharSet,
}

/// sacremoses `MOSES_UNESCAPE_XML_REGEXES`, applied in this order.
const UNESCAPE: &[(&str, &str)] = &[
    ("&bar;", "|"),
    ("&#124;", "|"),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&bra;", "["),
    ("&ket;", "]"),
    ("&quot;", "\""),
    ("&apos;", "'"),
    ("&#91;", "["),
    ("&#93;", "]"),
    ("&amp;", "&"),
];

/// sacremoses.util.CJKChars.ranges, with `is_cjk`'s exclusive bounds.
const CJK_RANGES: &[(u32, u32)] = &[
    (4352, 4607), (11904, 42191), (43072, 43135), (44032, 55215), (63744, 64255), (65072, 65103),
    (65381, 65500), (94208, 101119), (110592, 110895), (110960, 111359), (131072, 196607),
];

/// `sacremoses.util.is_cjk` (note the strict comparisons: range ends are not CJK).
pub fn is_cjk(c: char) -> bool {
    let cp = u32::from(c);
    for &(start, end) in CJK_RANGES {
        if cp < end {
            return cp > start;
        }
    }
    false
}

fn all_chars(token: &str, set: impl Fn(char) -> bool) -> bool {
    !token.is_empty() && token.chars().all(set)
}

fn is_ascii_number(token: &str) -> bool {
    all_chars(token, |c| c.is_ascii_digit())
}

impl MosesDetokenizer {
    pub fn new(lang: &str) -> Self {
        let is_sc = props::IS_SC.chars().chain(['(', '[', '{', '\u{bf}', '\u{a1}']);
        Self {
            lang: lang.to_string(),
            is_alpha: CharSet::from_chars(props::IS_ALPHA.chars()),
            currency_or_open: CharSet::from_chars(is_sc),
        }
    }

    pub fn lang(&self) -> &str {
        &self.lang
    }

    /// fairseq's `decode(x)` = `detokenize(x.split())`.
    pub fn detokenize_str(&self, text: &str) -> Result<String, MosesError> {
        let tokens: Vec<&str> = py_split(text).collect();
        self.detokenize(&tokens)
    }

    pub fn detokenize(&self, tokens: &[&str]) -> Result<String, MosesError> {
        let mut text = format!(" {} ", tokens.join(" ")).replace(" @-@ ", "-");
        for (from, to) in UNESCAPE {
            text = text.replace(from, to);
        }
        let tokens: Vec<&str> = py_split(&text).collect();
        let lang = self.lang.as_str();
        let mut quote_counts: HashMap<&str, u64> = HashMap::new();
        let mut prepend_space = " ";
        let mut out = String::with_capacity(text.len());
        let n = tokens.len();
        let mut i = 0;
        while i < n {
            let token = tokens[i];
            let first = token.chars().next().unwrap_or(' ');
            let ends_with_alpha_apostrophe = || {
                let mut rev = token.chars().rev();
                rev.next() == Some('\'') && rev.next().is_some_and(|c| self.is_alpha.contains(c))
            };
            if is_cjk(first) && lang != "ko" {
                if i > 0 && tokens[i - 1].chars().last().is_some_and(is_cjk) {
                    out.push_str(token);
                } else {
                    out.push_str(prepend_space);
                    out.push_str(token);
                }
                prepend_space = " ";
            } else if all_chars(token, |c| self.currency_or_open.contains(c)) {
                out.push_str(prepend_space);
                out.push_str(token);
                prepend_space = "";
            } else if all_chars(token, |c| ",.?!:;\\%}])".contains(c)) {
                if lang == "fr" && token.chars().count() == 1 && "?!:;\\%".contains(first) {
                    out.push(' ');
                }
                out.push_str(token);
                prepend_space = " ";
            } else if lang == "en"
                && i > 0
                && first == '\''
                && token.chars().nth(1).is_some_and(|c| self.is_alpha.contains(c))
            {
                out.push_str(token);
                prepend_space = " ";
            } else if lang == "cs"
                && i > 1
                && is_ascii_number(tokens[n - 2])
                && matches!(tokens[n - 1], "." | ",")
                && is_ascii_number(token)
            {
                // sacremoses looks at the last two tokens of the sentence here, not the previous two.
                out.push_str(token);
                prepend_space = " ";
            } else if matches!(lang, "fr" | "it" | "ga")
                && i + 2 <= n
                && ends_with_alpha_apostrophe()
                && tokens
                    .get(i + 1)
                    .and_then(|t| t.chars().next())
                    .is_some_and(|c| self.is_alpha.contains(c))
            {
                out.push_str(prepend_space);
                out.push_str(token);
                prepend_space = "";
            } else if lang == "cs"
                && i + 3 <= n
                && ends_with_alpha_apostrophe()
                && matches!(tokens[i + 1], "-" | "\u{2013}")
                && {
                    let next = tokens[i + 2].to_lowercase();
                    next == "li" || next.starts_with("mail")
                }
            {
                return Err(MosesError::CzechDashRule);
            } else if all_chars(token, |c| "'\"\u{201e}\u{201c}`".contains(c)) {
                let normalized = if all_chars(token, |c| "\u{201e}\u{201c}\u{201d}".contains(c)) { "\"" } else { token };
                let count = quote_counts.entry(normalized).or_insert(0);
                if lang == "cs" && token == "\u{201e}" {
                    *count = 0;
                }
                if lang == "cs" && token == "\u{201c}" {
                    *count = 1;
                }
                if (*count).is_multiple_of(2) {
                    if lang == "en" && token == "'" && i > 0 && tokens[i - 1].ends_with('s') {
                        out.push_str(token);
                        prepend_space = " ";
                    } else {
                        out.push_str(prepend_space);
                        out.push_str(token);
                        prepend_space = "";
                        *count += 1;
                    }
                } else {
                    out.push_str(token);
                    prepend_space = " ";
                    *count += 1;
                }
            } else {
                // (sacremoses' Finnish case-suffix rule lands here too: it appends the same way.)
                out.push_str(prepend_space);
                out.push_str(token);
                prepend_space = " ";
            }
            i += 1;
        }
        let mut collapsed = String::with_capacity(out.len());
        let mut run = 0usize;
        for c in out.chars() {
            if c == ' ' {
                run += 1;
                continue;
            }
            if run > 0 {
                collapsed.push(' ');
                run = 0;
            }
            collapsed.push(c);
        }
        if run > 0 {
            collapsed.push(' ');
        }
        Ok(py_strip(&collapsed).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detokenizes_fairseq_output() {
        let d = MosesDetokenizer::new("en");
        assert_eq!(d.detokenize_str("It &apos;s a state @-@ of @-@ the @-@ art test .").unwrap(),
                   "It's a state-of-the-art test.");
        assert_eq!(d.detokenize_str("\" Hello , \" he said").unwrap(), "\"Hello,\" he said");
        assert!(is_cjk('中') && !is_cjk('a') && !is_cjk('\u{1100}'));
    }
}
