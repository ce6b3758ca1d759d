//! sacreBLEU 2.5.1's BLEU tokenizers (`tokenizers/tokenizer_*.py`), ported exactly.

use std::sync::LazyLock;

use regex::Regex;

use super::{py_split, py_strip, MetricError};

/// The tokenizers `--tokenize` accepts (sacreBLEU's `_TOKENIZERS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    None,
    Zh,
    T13a,
    Intl,
    Char,
}

/// The names sacreBLEU knows but tchseq does not implement (they need mecab or sentencepiece).
pub const UNAVAILABLE_TOKENIZERS: [&str; 5] = ["ja-mecab", "ko-mecab", "spm", "flores101", "flores200"];

impl TokenizerKind {
    /// Parses a `--tokenize` name; the mecab and sentencepiece ones are a typed error.
    pub fn parse(name: &str) -> Result<Self, MetricError> {
        match name {
            "none" => Ok(Self::None),
            "zh" => Ok(Self::Zh),
            "13a" => Ok(Self::T13a),
            "intl" => Ok(Self::Intl),
            "char" => Ok(Self::Char),
            n if UNAVAILABLE_TOKENIZERS.contains(&n) => Err(MetricError::TokenizerUnavailable(n.to_string())),
            n => Err(MetricError::UnknownTokenizer(n.to_string())),
        }
    }

    /// The name in the signature (`tok:`).
    pub fn signature(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Zh => "zh",
            Self::T13a => "13a",
            Self::Intl => "intl",
            Self::Char => "char",
        }
    }

    /// Tokenizes one line.
    pub fn tokenize(self, line: &str) -> String {
        match self {
            Self::None => line.to_string(),
            Self::Zh => tokenize_zh(line),
            Self::T13a => tokenize_13a(line),
            Self::Intl => tokenize_intl(line),
            Self::Char => {
                let mut out = String::with_capacity(line.len() * 2);
                for (i, c) in line.chars().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push(c);
                }
                out
            }
        }
    }
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("static regex")
}

/// `TokenizerRegexp`'s first rule, `([\{-\~\[-\` -\&\(-\+\:-\@\/])` -> `" \1 "`: the
/// ASCII bytes it puts spaces around.
fn post_rule1(b: u8) -> bool {
    matches!(b, 0x7B..=0x7E | 0x5B..=0x60 | 0x20..=0x26 | 0x28..=0x2B | 0x3A..=0x40 | b'/')
}

/// One `re.sub` of a two-character pattern `(A)(B)`, as leftmost non-overlapping matches:
/// `hit(x, y)` says whether bytes `x`, `y` match, and `emit` writes the replacement. Working on
/// bytes is exact here: every rule's `B` (or `A` in the third) is ASCII, so a match's ASCII side
/// pins it to a character boundary, and the other side (`[^0-9]`, any non-digit character) is
/// the adjacent byte of a whole character; continuation bytes never match either side alone.
fn sub_pairs(s: &[u8], hit: impl Fn(u8, u8) -> bool, emit: impl Fn(&mut Vec<u8>, u8, u8)) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + s.len() / 4 + 8);
    let mut i = 0;
    while i < s.len() {
        if i + 1 < s.len() && hit(s[i], s[i + 1]) {
            emit(&mut out, s[i], s[i + 1]);
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    out
}

/// `TokenizerRegexp`'s four rules (without the final split/join).
fn apply_post(line: &str) -> String {
    let mut b = Vec::with_capacity(line.len() * 2);
    for &c in line.as_bytes() {
        if post_rule1(c) {
            b.extend_from_slice(&[b' ', c, b' ']);
        } else {
            b.push(c);
        }
    }
    let sep = |c: u8| c == b'.' || c == b',';
    // ([^0-9])([\.,]) -> "\1 \2 "
    let b = sub_pairs(&b, |x, y| !x.is_ascii_digit() && sep(y), |o, x, y| o.extend_from_slice(&[x, b' ', y, b' ']));
    // ([\.,])([^0-9]) -> " \1 \2"  (a multi-byte second character keeps its other bytes as they are)
    let b = sub_pairs(&b, |x, y| sep(x) && !y.is_ascii_digit(), |o, x, y| o.extend_from_slice(&[b' ', x, b' ', y]));
    // ([0-9])(-) -> "\1 \2 "
    let b = sub_pairs(&b, |x, y| x.is_ascii_digit() && y == b'-', |o, x, y| o.extend_from_slice(&[x, b' ', y, b' ']));
    String::from_utf8(b).expect("ASCII-only edits keep UTF-8 valid")
}

/// Code points the `regex` module (2026.11.19, Unicode 17) puts in \p{P}, \p{S}, \p{N} and Rust's
/// regex crate (Unicode 16) does not (tests/it/sacrebleu.rs checks all of them, from
/// tests/fixtures/sacrebleu/unicode_classes.json).
const EXTRA_P: &[(u32, u32)] = &[(0x2E60, 0x2E63), (0x10ED0, 0x10ED0)];
const EXTRA_S: &[(u32, u32)] = &[(0x20C1, 0x20C4), (0x2B96, 0x2B96), (0xFBC3, 0xFBD2), (0xFD90, 0xFD91), (0xFDC8, 0xFDCE), (0x10EC9, 0x10ECA), (0x10ED1, 0x10ED8), (0x1CCFA, 0x1CCFC), (0x1CEBA, 0x1CED0), (0x1CED2, 0x1CED4), (0x1CEDD, 0x1CEFD), (0x1D1EB, 0x1D1FF), (0x1D253, 0x1D25A), (0x1D25D, 0x1D25E), (0x1D260, 0x1D27F), (0x1DB00, 0x1DB1C), (0x1F1AE, 0x1F1AE), (0x1F6D8, 0x1F6D9), (0x1F777, 0x1F77A), (0x1F7DA, 0x1F7DB), (0x1F7F1, 0x1F7FF), (0x1F8D0, 0x1F8D8), (0x1FA54, 0x1FA57), (0x1FA8A, 0x1FA8E), (0x1FAC8, 0x1FAC8), (0x1FACC, 0x1FACD), (0x1FADD, 0x1FADD), (0x1FAEA, 0x1FAEB), (0x1FAEF, 0x1FAEF), (0x1FAF9, 0x1FAFA), (0x1FBFA, 0x1FBFA)];
const EXTRA_N: &[(u32, u32)] = &[(0x11DE0, 0x11DE9), (0x1246F, 0x1246F), (0x12475, 0x1247F), (0x12550, 0x12686), (0x16FF4, 0x16FF6)];

/// `\p{cls}` plus the extra ranges, as the inside of a character class.
fn class_items(cls: &str, extra: &[(u32, u32)]) -> String {
    let mut s = format!(r"\p{{{cls}}}");
    for &(a, b) in extra {
        s += &format!(r"\x{{{a:X}}}-\x{{{b:X}}}");
    }
    s
}

static RE_INTL: LazyLock<[(Regex, &'static str); 3]> = LazyLock::new(|| {
    let (p, s, n) = (class_items("P", EXTRA_P), class_items("S", EXTRA_S), class_items("N", EXTRA_N));
    [
        // (\P{N})(\p{P})
        (re(&format!("([^{n}])([{p}])")), "${1} ${2} "),
        // (\p{P})(\P{N})
        (re(&format!("([{p}])([^{n}])")), " ${1} ${2}"),
        // (\p{S})
        (re(&format!("([{s}])")), " ${1} "),
    ]
});

fn apply(rules: &[(Regex, &'static str)], line: &str) -> String {
    let mut line = line.to_string();
    for (re, repl) in rules {
        line = re.replace_all(&line, *repl).into_owned();
    }
    py_split(&line).join(" ")
}

/// `TokenizerRegexp.__call__`.
pub fn tokenize_re(line: &str) -> String {
    py_split(&apply_post(line)).join(" ")
}

/// `Tokenizer13a.__call__`.
pub fn tokenize_13a(line: &str) -> String {
    let mut line = line.replace("<skipped>", "");
    if line.contains('\n') {
        line = line.replace("-\n", "").replace('\n', " ");
    }
    if line.contains('&') {
        line = line
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">");
    }
    tokenize_re(&format!(" {line} "))
}

/// `TokenizerV14International.__call__`.
pub fn tokenize_intl(line: &str) -> String {
    apply(&RE_INTL[..], line)
}

/// `TokenizerZh._is_chinese_char`: the code points `_UCODE_RANGES` accepts as Python compares
/// them (its `'\u20000'` and `'\u2f800'` bounds are two-character strings, so those two ranges are
/// really U+2001..=U+2A6D and U+2F81..=U+2FA1), merged.
pub fn is_chinese_char(c: char) -> bool {
    const RANGES: [(u32, u32); 13] = [
        (0x2001, 0x2a6d),
        (0x2e80, 0x2fdf),
        (0x2ff0, 0x303f),
        (0x3100, 0x312f),
        (0x31a0, 0x31ef),
        (0x3200, 0x4db5),
        (0x4e00, 0x9fbb),
        (0xf900, 0xfa2d),
        (0xfa30, 0xfa6a),
        (0xfa70, 0xfad9),
        (0xfe10, 0xfe1f),
        (0xfe30, 0xfe4f),
        (0xff00, 0xffef),
    ];
    let c = c as u32;
    RANGES.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

/// `TokenizerZh.__call__`.
pub fn tokenize_zh(line: &str) -> String {
    let line = py_strip(line);
    let mut chars = String::with_capacity(line.len() * 2);
    for c in line.chars() {
        if is_chinese_char(c) {
            chars.push(' ');
            chars.push(c);
            chars.push(' ');
        } else {
            chars.push(c);
        }
    }
    tokenize_re(&chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t13a_basics() {
        assert_eq!(tokenize_13a("Hello, world! 1,000.5 e-mail"), "Hello , world ! 1,000.5 e-mail");
        assert_eq!(tokenize_13a("a &amp; b &lt;c&gt;"), "a & b < c >");
    }

    #[test]
    fn zh_ranges() {
        assert!(is_chinese_char('\u{2001}'));
        assert!(!is_chinese_char('\u{2000}'));
        assert!(is_chinese_char('\u{2a6d}'));
        assert!(!is_chinese_char('\u{2a6e}'));
        assert!(!is_chinese_char('\u{20000}'));
    }

    #[test]
    fn unavailable() {
        assert!(matches!(TokenizerKind::parse("ja-mecab"), Err(MetricError::TokenizerUnavailable(_))));
    }
}
