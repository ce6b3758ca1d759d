//! Python `str` semantics the reference tools rely on: `str.isspace`, `split()`, `strip()`.

/// Python's `str.isspace()` (and `re`'s `\s`): Rust's `char::is_whitespace` plus U+001C..U+001F.
pub fn is_py_space(c: char) -> bool {
    matches!(c, '\u{1c}'..='\u{1f}') || c.is_whitespace()
}

/// Python `s.split()`: runs of whitespace separate, empty pieces are dropped.
pub fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_py_space).filter(|t| !t.is_empty())
}

/// Python `s.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// The `re` character-class body for Python's `\s`.
pub const PY_SPACE_CLASS: &str = r"\t\n\x0B\x0C\r\x1C-\x1F \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_whitespace_matches_the_class() {
        let re = regex::Regex::new(&format!("^[{PY_SPACE_CLASS}]$")).unwrap();
        for cp in 0..0x11_0000u32 {
            if let Some(c) = char::from_u32(cp) {
                assert_eq!(is_py_space(c), re.is_match(c.encode_utf8(&mut [0; 4])), "U+{cp:04X}");
            }
        }
        // The 29 code points Python 3.11 reports as str.isspace().
        assert_eq!((0..0x11_0000u32).filter_map(char::from_u32).filter(|&c| is_py_space(c)).count(), 29);
    }

    #[test]
    fn split_and_strip_like_python() {
        assert_eq!(py_split("\x1ca\u{3000}b  c\t").collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(py_strip("\u{85} x \x1f"), "x");
    }
}
