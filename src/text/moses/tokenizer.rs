//! `sacremoses.MosesTokenizer.tokenize(text, aggressive_dash_splits, return_str=True, escape)`.

use std::collections::HashSet;

use regex::{Regex, RegexBuilder};

use super::{nonbreaking_prefixes, props, CharSet};
use crate::text::pyutil::{py_split, py_strip, PY_SPACE_CLASS};

/// Which apostrophe rules sacremoses applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ApostropheRules {
    English,
    FrenchItalian,
    Generic,
}

#[derive(Debug)]
pub struct MosesTokenizer {
    lang: String,
    /// `self.IsAlnum` / `self.IsAlpha`: the class sets plus CJK for zh/ja/ko/cjk.
    is_alnum: CharSet,
    is_alpha: CharSet,
    is_lower: CharSet,
    nonbreaking_prefixes: HashSet<&'static str>,
    numeric_only_prefixes: HashSet<&'static str>,
    deduplicate_space: Regex,
    pad_not_isalnum: Regex,
    multidot_1: Regex,
    multidot_2: Regex,
    comma_separate: [(Regex, &'static str); 3],
    apostrophe_rules: Vec<(Regex, &'static str)>,
    trailing_dot_apostrophe: Regex,
}

fn compile(pattern: &str) -> Regex {
    // The patterns are built from our own data; a failure is a bug in this file, caught by the
    // unit tests, never a consequence of user input.
    RegexBuilder::new(pattern)
        .size_limit(64 << 20)
        .dfa_size_limit(64 << 20)
        .build()
        .unwrap_or_else(|e| unreachable!("invalid built-in Moses pattern {pattern:.80}: {e}"))
}

impl MosesTokenizer {
    /// `MosesTokenizer(lang)`. Languages without sacremoses data use the English prefixes and the
    /// generic apostrophe rule, exactly as sacremoses does (see [`super::has_language_data`]).
    pub fn new(lang: &str) -> Self {
        let extra = props::VIRAMAS_NUKTAS.iter().copied();
        let class_alnum = CharSet::from_chars(props::IS_ALNUM.chars().chain(extra.clone()));
        let class_alpha = CharSet::from_chars(props::IS_ALPHA.chars().chain(extra));
        let is_n = CharSet::from_chars(props::IS_N.chars());

        let mut cjk = String::new();
        if matches!(lang, "ko" | "cjk") {
            cjk.push_str(props::HANGUL);
        }
        if matches!(lang, "zh" | "cjk") {
            cjk.push_str(props::HAN);
        }
        if matches!(lang, "ja" | "cjk") {
            cjk.push_str(props::HIRAGANA);
            cjk.push_str(props::KATAKANA);
            cjk.push_str(props::HAN);
        }
        let cjk = CharSet::from_chars(cjk.chars());
        let is_alnum = class_alnum.union(&cjk);
        let is_alpha = class_alpha.union(&cjk);

        let nonbreaking_prefixes: HashSet<&'static str> = nonbreaking_prefixes(lang).collect();
        let numeric_only = compile(&format!("[{PY_SPACE_CLASS}]+#NUMERIC_ONLY#"));
        let numeric_only_prefixes = nonbreaking_prefixes
            .iter()
            .filter(|w| numeric_only.is_match(w))
            .map(|w| w.rsplit_once(' ').map_or("", |(head, _)| head))
            .collect();

        let alpha = class_alpha.class_body();
        let isn = is_n.class_body();
        let apostrophes = match lang {
            "en" => ApostropheRules::English,
            "fr" | "it" => ApostropheRules::FrenchItalian,
            _ => ApostropheRules::Generic,
        };
        let apostrophe_rules = match apostrophes {
            ApostropheRules::English => vec![
                (compile(&format!("([^{alpha}])'([^{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([^{alpha}{isn}])'([{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([{alpha}])'([^{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([{alpha}])'([{alpha}])")), "${1} '${2}"),
                (compile(&format!("([{isn}])'(s)")), "${1} '${2}"),
            ],
            ApostropheRules::FrenchItalian => vec![
                (compile(&format!("([^{alpha}])'([^{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([^{alpha}])'([{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([{alpha}])'([^{alpha}])")), "${1} ' ${2}"),
                (compile(&format!("([{alpha}])'([{alpha}])")), "${1}' ${2}"),
            ],
            ApostropheRules::Generic => vec![(compile("'"), " ' ")],
        };

        Self {
            lang: lang.to_string(),
            deduplicate_space: compile(&format!("[{PY_SPACE_CLASS}]+")),
            pad_not_isalnum: compile(&format!("([^{}{PY_SPACE_CLASS}.'`,\\-])", is_alnum.class_body())),
            multidot_1: compile(r"\.(\.+)"),
            multidot_2: compile(r"DOTMULTI\.([^.])"),
            comma_separate: [
                (compile(&format!("([^{isn}]),")), "${1} , "),
                (compile(&format!(",([^{isn}])")), " , ${1}"),
                (compile(&format!("([{isn}]),$")), "${1} , "),
            ],
            apostrophe_rules,
            trailing_dot_apostrophe: compile(r"\.' ?$"),
            is_alnum,
            is_alpha,
            is_lower: CharSet::from_chars(props::IS_LOWER.chars()),
            nonbreaking_prefixes,
            numeric_only_prefixes,
        }
    }

    pub fn lang(&self) -> &str {
        &self.lang
    }

    /// `tokenize(text, aggressive_dash_splits, return_str=True, escape)`.
    pub fn tokenize(&self, text: &str, aggressive_dash_splits: bool, escape: bool) -> String {
        let text = self.deduplicate_space.replace_all(text, " ");
        let text: String = text.chars().filter(|&c| u32::from(c) > 0x1f).collect();
        let text = py_strip(&text);
        let mut text = self.pad_not_isalnum.replace_all(text, " ${1} ").into_owned();
        if aggressive_dash_splits {
            text = self.split_hyphens(&text);
        }
        text = self.replace_multidots(text);
        for (re, rep) in self.comma_separate.iter().chain(&self.apostrophe_rules) {
            text = re.replace_all(&text, *rep).into_owned();
        }
        text = self.handle_nonbreaking_prefixes(&text);
        let text = self.deduplicate_space.replace_all(&text, " ");
        let text = py_strip(&text);
        let text = self.trailing_dot_apostrophe.replace_all(text, " . ' ");
        let text = restore_multidots(&text);
        if escape {
            escape_xml(&text)
        } else {
            text
        }
    }

    /// `([alnum])\-(?=[alnum])` -> `\1 @-@ `: every '-' between two alphanumerics.
    fn split_hyphens(&self, text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len() + 16);
        for (i, &c) in chars.iter().enumerate() {
            if c == '-'
                && i > 0
                && self.is_alnum.contains(chars[i - 1])
                && chars.get(i + 1).is_some_and(|&n| self.is_alnum.contains(n))
            {
                out.push_str(" @-@ ");
            } else {
                out.push(c);
            }
        }
        out
    }

    fn replace_multidots(&self, text: String) -> String {
        let mut text = self.multidot_1.replace_all(&text, " DOTMULTI${1}").into_owned();
        while text.contains("DOTMULTI.") {
            text = self.multidot_2.replace_all(&text, "DOTDOTMULTI ${1}").into_owned();
            text = text.replace("DOTMULTI.", "DOTDOTMULTI");
        }
        text
    }

    fn handle_nonbreaking_prefixes(&self, text: &str) -> String {
        let tokens: Vec<&str> = py_split(text).collect();
        let mut out: Vec<String> = Vec::with_capacity(tokens.len());
        for (i, &token) in tokens.iter().enumerate() {
            let Some(prefix) = token.strip_suffix('.').filter(|p| !p.is_empty()) else {
                out.push(token.to_string());
                continue;
            };
            let next = tokens.get(i + 1).copied();
            let keep = (prefix.contains('.') && prefix.chars().any(|c| self.is_alpha.contains(c)))
                || (self.nonbreaking_prefixes.contains(prefix) && !self.numeric_only_prefixes.contains(prefix))
                || next.and_then(|n| n.chars().next()).is_some_and(|c| self.is_lower.contains(c))
                || (self.numeric_only_prefixes.contains(prefix)
                    && next.is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit())));
            if keep {
                out.push(token.to_string());
            } else {
                out.push(format!("{prefix} ."));
            }
        }
        out.join(" ")
    }
}

fn restore_multidots(text: &str) -> String {
    let mut text = text.to_string();
    while text.contains("DOTDOTMULTI") {
        text = text.replace("DOTDOTMULTI", "DOTMULTI.");
    }
    text.replace("DOTMULTI", ".")
}

/// sacremoses' `MOSES_ESCAPE_XML_REGEXES`, applied in one pass (no replacement introduces a
/// character a later rule would touch, except `&`, which is escaped first).
pub fn escape_xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '|' => out.push_str("&#124;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            '[' => out.push_str("&#91;"),
            ']' => out.push_str("&#93;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairseq_defaults_on_a_simple_sentence() {
        let tok = MosesTokenizer::new("en");
        assert_eq!(tok.tokenize("Hello, world! It's a state-of-the-art test.", true, true),
                   "Hello , world ! It &apos;s a state @-@ of @-@ the @-@ art test .");
        assert_eq!(tok.tokenize("Dr. Smith paid $5.", false, false), "Dr. Smith paid $ 5 .");
    }
}
