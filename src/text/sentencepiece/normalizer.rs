//! sentencepiece's normalizer: the precompiled charsmap (a Darts double-array trie), the dummy
//! prefix and whitespace handling.

use super::*;

#[derive(Debug, Clone, Default)]
pub(super) struct DoubleArray {
    pub(super) units: Vec<u32>,
}

impl DoubleArray {
    pub(super) fn unit(&self, pos: usize) -> Option<u32> {
        self.units.get(pos).copied()
    }

    /// `commonPrefixSearch`: (value, length) of every key that is a prefix of `key`.
    pub(super) fn common_prefix_search(&self, key: &[u8], out: &mut Vec<(u32, usize)>) {
        out.clear();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let Some(root) = self.unit(0) else { return };
        let mut node = offset(root);
        for (i, &c) in key.iter().enumerate() {
            node ^= c as usize;
            let Some(unit) = self.unit(node) else { return };
            if unit & ((1 << 31) | 0xff) != u32::from(c) {
                return;
            }
            node ^= offset(unit);
            if (unit >> 8) & 1 == 1 {
                if let Some(leaf) = self.unit(node) {
                    out.push((leaf & ((1 << 31) - 1), i + 1));
                }
            }
        }
    }
}

// --- normalizer ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub(super) struct Normalizer {
    pub(super) trie: Option<DoubleArray>,
    pub(super) normalized: Vec<u8>,
    pub(super) add_dummy_prefix: bool,
    pub(super) remove_extra_whitespaces: bool,
    pub(super) escape_whitespaces: bool,
    pub(super) treat_whitespace_as_suffix: bool,
    /// user-defined symbols, matched longest-first before the charsmap
    pub(super) user_defined: Vec<String>,
}

pub(super) const SPACE_SYMBOL: &str = "\u{2581}";

impl Normalizer {
    pub(super) fn from_spec(spec: &[u8], treat_whitespace_as_suffix: bool, user_defined: Vec<String>) -> Result<Self, SentencePieceError> {
        let mut n = Normalizer {
            trie: None,
            normalized: Vec::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
            treat_whitespace_as_suffix,
            user_defined,
        };
        let mut r = Reader::new(spec);
        while let Some((field, value)) = r.next()? {
            match (field, value) {
                (2, Value::Bytes(blob)) if !blob.is_empty() => {
                    let (trie, normalized) = decode_charsmap(blob)?;
                    n.trie = Some(trie);
                    n.normalized = normalized;
                }
                (3, Value::Varint(v)) => n.add_dummy_prefix = v != 0,
                (4, Value::Varint(v)) => n.remove_extra_whitespaces = v != 0,
                (5, Value::Varint(v)) => n.escape_whitespaces = v != 0,
                _ => {}
            }
        }
        Ok(n)
    }

    /// `NormalizePrefix`: the normalized form of the longest rule matching the start of `input`
    /// and how many bytes of `input` it consumes.
    pub(super) fn normalize_prefix<'a>(&'a self, input: &'a str, scratch: &mut Vec<(u32, usize)>) -> (&'a str, usize) {
        if let Some(len) = self.user_defined_prefix(input) {
            return (&input[..len], len);
        }
        let mut longest: Option<(u32, usize)> = None;
        if let Some(trie) = &self.trie {
            trie.common_prefix_search(input.as_bytes(), scratch);
            for &(value, length) in scratch.iter() {
                if longest.is_none_or(|(_, l)| length > l) {
                    longest = Some((value, length));
                }
            }
        }
        match longest {
            // A rule may end inside a UTF-8 sequence only if the charsmap is corrupt; then fall
            // back to one character.
            Some((value, length)) if input.is_char_boundary(length) => {
                let start = value as usize;
                let tail = self.normalized.get(start..).unwrap_or(&[]);
                let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
                match std::str::from_utf8(&tail[..end]) {
                    Ok(s) => (s, length),
                    Err(_) => one_char(input),
                }
            }
            _ => one_char(input),
        }
    }

    pub(super) fn user_defined_prefix(&self, input: &str) -> Option<usize> {
        self.user_defined.iter().filter(|s| input.starts_with(s.as_str())).map(|s| s.len()).max()
    }

    /// `Normalizer::Normalize` (without the offset mapping).
    pub(super) fn normalize(&self, mut input: &str) -> String {
        let mut out = String::with_capacity(input.len() * 3 / 2 + 4);
        if input.is_empty() {
            return out;
        }
        let mut scratch = Vec::new();
        if self.remove_extra_whitespaces {
            while !input.is_empty() {
                let (s, len) = self.normalize_prefix(input, &mut scratch);
                if s != " " {
                    break;
                }
                input = &input[len..];
            }
        }
        if input.is_empty() {
            return out;
        }
        let space = if self.escape_whitespaces { SPACE_SYMBOL } else { " " };
        if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.push_str(space);
        }
        let mut is_prev_space = self.remove_extra_whitespaces;
        while !input.is_empty() {
            let (s, len) = self.normalize_prefix(input, &mut scratch);
            let sp = if is_prev_space { s.trim_start_matches(' ') } else { s };
            if !sp.is_empty() {
                for c in sp.chars() {
                    if self.escape_whitespaces && c == ' ' {
                        out.push_str(SPACE_SYMBOL);
                    } else {
                        out.push(c);
                    }
                }
                is_prev_space = sp.ends_with(' ');
            }
            input = &input[len..];
            if !self.remove_extra_whitespaces {
                is_prev_space = false;
            }
        }
        if self.remove_extra_whitespaces {
            while let Some(rest) = out.strip_suffix(space) {
                let keep = rest.len();
                out.truncate(keep);
            }
        }
        if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.push_str(space);
        }
        out
    }
}

pub(super) fn one_char(input: &str) -> (&str, usize) {
    let len = input.chars().next().map_or(0, char::len_utf8);
    (&input[..len], len)
}

/// `DecodePrecompiledCharsMap`: u32 trie size, the trie's units, then NUL-separated outputs.
pub(super) fn decode_charsmap(blob: &[u8]) -> Result<(DoubleArray, Vec<u8>), SentencePieceError> {
    let size_bytes = blob.get(..4).ok_or_else(|| format_err("precompiled charsmap too short"))?;
    let trie_size = u32::from_le_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]) as usize;
    let trie_bytes = blob
        .get(4..4usize.saturating_add(trie_size))
        .filter(|b| b.len() % 4 == 0)
        .ok_or_else(|| format_err("precompiled charsmap trie is truncated"))?;
    let units = trie_bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok((DoubleArray { units }, blob[4 + trie_size..].to_vec()))
}
