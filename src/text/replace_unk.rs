//! fairseq's unknown-word replacement (`utils.load_align_dict`, `utils.replace_unk`): each
//! `<unk>` of a hypothesis becomes the source word it is aligned with, or that word's entry in an
//! alignment dictionary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A bad alignment dictionary.
#[derive(Debug, thiserror::Error)]
pub enum AlignDictError {
    #[error("cannot read the alignment dictionary {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}, line {line}: an alignment dictionary line is `SOURCE TARGET`")]
    Line { path: PathBuf, line: usize },
}

/// `load_align_dict(FILE)`: a source word and its replacement on each line, separated by
/// whitespace; a later line wins.
pub fn load_align_dict(path: &Path) -> Result<HashMap<String, String>, AlignDictError> {
    let text = std::fs::read_to_string(path).map_err(|source| AlignDictError::Io { path: path.to_path_buf(), source })?;
    let mut dict = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let mut cols = line.split_whitespace();
        match (cols.next(), cols.next()) {
            (Some(src), Some(tgt)) => {
                dict.insert(src.to_string(), tgt.to_string());
            }
            _ => return Err(AlignDictError::Line { path: path.to_path_buf(), line: i + 1 }),
        }
    }
    Ok(dict)
}

/// `replace_unk` on a hypothesis' symbols: symbol `t` equal to `unk` and aligned (`(source,
/// target)` pairs, as hard alignments number the tokens) with source token `s` becomes
/// `align_dict[src_words[s]]`, else that word itself. `src_words` are the source line's
/// whitespace-separated words, to which fairseq appends `<eos>`. An unaligned `<unk>` stays.
pub fn replace_unk(symbols: &mut [String], src_words: &[&str], alignment: &[(usize, usize)], align_dict: &HashMap<String, String>, unk: &str) {
    for (t, symbol) in symbols.iter_mut().enumerate() {
        if symbol != unk {
            continue;
        }
        let Some(&(s, _)) = alignment.iter().find(|&&(_, at)| at == t) else { continue };
        let word = src_words.get(s).copied().unwrap_or("<eos>");
        *symbol = align_dict.get(word).cloned().unwrap_or_else(|| word.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbols(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn an_unknown_word_becomes_its_aligned_source_word_or_its_dictionary_entry() {
        let dict: HashMap<String, String> = [("Haus".to_string(), "house".to_string())].into();
        let mut h = symbols("the <unk> of <unk> <unk>");
        replace_unk(&mut h, &["das", "Haus", "von", "Kraxel"], &[(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)], &dict, "<unk>");
        // the last <unk> is aligned with the EOS fairseq appends to the source words
        assert_eq!(h.join(" "), "the house of Kraxel <eos>");
        let mut unaligned = symbols("a <unk>");
        replace_unk(&mut unaligned, &["x"], &[(0, 0)], &dict, "<unk>");
        assert_eq!(unaligned.join(" "), "a <unk>");
    }

    #[test]
    fn an_alignment_dictionary_is_pairs_of_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("align.txt");
        std::fs::write(&path, "Haus house\nHaus home extra\n").unwrap();
        assert_eq!(load_align_dict(&path).unwrap()["Haus"], "home");
        std::fs::write(&path, "Haus house\nlonely\n").unwrap();
        let e = load_align_dict(&path).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("SOURCE TARGET"), "{e}");
        assert!(load_align_dict(&dir.path().join("none")).is_err());
    }
}
