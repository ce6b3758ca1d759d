//! A port of sacremoses 0.1.1's `MosesTokenizer.tokenize` and `MosesDetokenizer.detokenize`
//! (the two calls fairseq's `moses` tokenizer makes), with sacremoses' own data files.

mod charset;
mod detokenizer;
mod tokenizer;

pub use charset::CharSet;
pub use detokenizer::MosesDetokenizer;
pub use tokenizer::MosesTokenizer;

#[derive(Debug, thiserror::Error)]
pub enum MosesError {
    /// sacremoses 0.1.1 raises `TypeError` here (`next()` on a list in its Czech "-li" rule).
    #[error("sacremoses 0.1.1 fails on this Czech input (a contraction followed by '-' and 'li'/'mail…'); no reference output exists")]
    CzechDashRule,
}

/// sacremoses' `NonbreakingPrefixes.available_langs`: names and codes with a prefix file.
const LANGUAGE_NAMES: &[(&str, &str)] = &[
    ("assamese", "as"), ("bengali", "bn"), ("catalan", "ca"), ("czech", "cs"), ("german", "de"),
    ("greek", "el"), ("english", "en"), ("spanish", "es"), ("estonian", "et"), ("finnish", "fi"),
    ("french", "fr"), ("irish", "ga"), ("gujarati", "gu"), ("hindi", "hi"), ("hungarian", "hu"),
    ("icelandic", "is"), ("italian", "it"), ("kannada", "kn"), ("lithuanian", "lt"),
    ("latvian", "lv"), ("malayalam", "ml"), ("manipuri", "mni"), ("marathi", "mr"),
    ("dutch", "nl"), ("oriya", "or"), ("punjabi", "pa"), ("polish", "pl"), ("portuguese", "pt"),
    ("romanian", "ro"), ("russian", "ru"), ("slovak", "sk"), ("slovenian", "sl"),
    ("swedish", "sv"), ("tamil", "ta"), ("telugu", "te"), ("tetum", "tdt"), ("cantonese", "yue"),
    ("chinese", "zh"),
];

/// True when sacremoses has a non-breaking-prefix file for `lang`; other languages get the
/// English prefixes and the language-independent rules (as in sacremoses).
pub fn has_language_data(lang: &str) -> bool {
    LANGUAGE_NAMES.iter().any(|&(name, code)| lang == name || lang == code)
}

macro_rules! prefix_files {
    ($($code:literal),* $(,)?) => {
        fn prefix_file(code: &str) -> Option<&'static str> {
            match code {
                $($code => Some(include_str!(concat!("data/nonbreaking_prefixes/nonbreaking_prefix.", $code))),)*
                _ => None,
            }
        }
    };
}

prefix_files!(
    "as", "bn", "ca", "cs", "de", "el", "en", "es", "et", "fi", "fr", "ga", "gu", "hi", "hu", "is",
    "it", "kn", "lt", "lv", "ml", "mni", "mr", "nl", "or", "pa", "pl", "pt", "ro", "ru", "sk", "sl",
    "sv", "ta", "tdt", "te", "yue", "zh",
);

/// `NonbreakingPrefixes.words(lang)`: stripped, non-empty lines not starting with `#`.
fn nonbreaking_prefixes(lang: &str) -> impl Iterator<Item = &'static str> {
    let code = LANGUAGE_NAMES
        .iter()
        .find(|&&(name, code)| lang == name || lang == code)
        .map_or("en", |&(_, code)| code);
    let text = prefix_file(code).unwrap_or("");
    // Python's str.splitlines() boundaries.
    text.split(['\n', '\r', '\x0b', '\x0c', '\x1c', '\x1d', '\x1e', '\u{85}', '\u{2028}', '\u{2029}'])
        .map(crate::text::pyutil::py_strip)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

pub(crate) mod props {
    pub const IS_ALNUM: &str = include_str!("data/perluniprops/IsAlnum.txt");
    pub const IS_ALPHA: &str = include_str!("data/perluniprops/IsAlpha.txt");
    pub const IS_LOWER: &str = include_str!("data/perluniprops/IsLower.txt");
    pub const IS_N: &str = include_str!("data/perluniprops/IsN.txt");
    pub const IS_SC: &str = include_str!("data/perluniprops/IsSc.txt");
    pub const HANGUL: &str = include_str!("data/perluniprops/Hangul.txt");
    pub const HAN: &str = include_str!("data/perluniprops/Han.txt");
    pub const HIRAGANA: &str = include_str!("data/perluniprops/Hiragana.txt");
    pub const KATAKANA: &str = include_str!("data/perluniprops/Katakana.txt");

    /// sacremoses.indic.VIRAMAS + NUKTAS, added to IsAlnum/IsAlpha by the tokenizer.
    pub const VIRAMAS_NUKTAS: &[char] = &[
        '\u{094D}', '\u{09CD}', '\u{0A4D}', '\u{0ACD}', '\u{0B4D}', '\u{0BCD}', '\u{0C4D}',
        '\u{0CCD}', '\u{0D3B}', '\u{0D3C}', '\u{0D4D}', '\u{0EBA}', '\u{1039}', '\u{1714}',
        '\u{1BAB}', '\u{A8C4}', '\u{A8F3}', '\u{A8F4}', '\u{A953}', '\u{AAF6}', '\u{10A3F}',
        '\u{11046}', '\u{110B9}', '\u{11133}', '\u{111C0}', '\u{11235}', '\u{112EA}', '\u{1134D}',
        '\u{11442}', '\u{114C2}', '\u{115BF}', '\u{1163F}', '\u{116B6}', '\u{11839}', '\u{119E0}',
        '\u{11A34}', '\u{11C3F}', '\u{11D45}', '\u{11D97}', '\u{0DCA}',
        '\u{093C}', '\u{09BC}', '\u{0A3C}', '\u{0ABC}', '\u{0AFD}', '\u{0AFE}', '\u{0AFF}',
        '\u{0B3C}', '\u{0CBC}', '\u{1C37}', '\u{110BA}', '\u{11173}', '\u{111CA}', '\u{11236}',
        '\u{112E9}', '\u{1133C}', '\u{11446}', '\u{114C3}', '\u{115C0}', '\u{116B7}', '\u{1183A}',
        '\u{11D42}', '\u{1E94A}',
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_follow_sacremoses_language_lookup() {
        let en: Vec<_> = nonbreaking_prefixes("en").take(3).collect();
        assert_eq!(en, ["A", "B", "C"]);
        assert_eq!(nonbreaking_prefixes("english").count(), nonbreaking_prefixes("en").count());
        // Unknown languages use the English list.
        assert_eq!(nonbreaking_prefixes("xx").count(), nonbreaking_prefixes("en").count());
        assert!(nonbreaking_prefixes("de").any(|p| p == "z.B"));
        assert!(has_language_data("fr") && !has_language_data("ja"));
    }
}
