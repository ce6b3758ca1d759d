//! Character sets built from perluniprops data, usable both for direct membership tests and
//! as `regex` character classes.

/// A set of code points stored as sorted, disjoint, inclusive ranges.
#[derive(Debug, Clone, Default)]
pub struct CharSet {
    ranges: Vec<(u32, u32)>,
    ascii: u128,
}

impl CharSet {
    pub fn from_chars(chars: impl IntoIterator<Item = char>) -> Self {
        let mut cps: Vec<u32> = chars.into_iter().map(u32::from).collect();
        cps.sort_unstable();
        cps.dedup();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for cp in cps {
            match ranges.last_mut() {
                Some(last) if last.1 + 1 == cp => last.1 = cp,
                _ => ranges.push((cp, cp)),
            }
        }
        let mut ascii = 0u128;
        for &(lo, hi) in &ranges {
            for cp in lo..=hi.min(127) {
                ascii |= 1 << cp;
            }
        }
        Self { ranges, ascii }
    }

    pub fn union(&self, other: &CharSet) -> CharSet {
        CharSet::from_chars(self.chars().chain(other.chars()))
    }

    pub fn chars(&self) -> impl Iterator<Item = char> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| (lo..=hi).filter_map(char::from_u32))
    }

    pub fn contains(&self, c: char) -> bool {
        let cp = u32::from(c);
        if cp < 128 {
            return self.ascii & (1 << cp) != 0;
        }
        self.ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < cp {
                    std::cmp::Ordering::Less
                } else if lo > cp {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }

    /// The body of a `regex` character class (without the brackets) matching this set.
    pub fn class_body(&self) -> String {
        let mut s = String::with_capacity(self.ranges.len() * 16);
        for &(lo, hi) in &self.ranges {
            if lo == hi {
                s.push_str(&format!("\\x{{{lo:X}}}"));
            } else {
                s.push_str(&format!("\\x{{{lo:X}}}-\\x{{{hi:X}}}"));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_and_class_agree() {
        let set = CharSet::from_chars("azé€\n😀-]^".chars().chain('0'..='9'));
        let re = regex::Regex::new(&format!("^[{}]$", set.class_body())).unwrap();
        for c in ['a', 'z', 'é', '€', '\n', '😀', '-', ']', '^', '5', 'b', 'E', ' ', '[', '\\'] {
            let mut buf = [0; 4];
            assert_eq!(set.contains(c), re.is_match(c.encode_utf8(&mut buf)), "{c:?}");
        }
        assert!(set.contains('7') && !set.contains('b'));
    }
}
