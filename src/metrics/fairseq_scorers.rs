//! fairseq-generate's `--scoring` scorers (`fairseq/scoring/`): `bleu` (the C `libbleu` over
//! token ids), `sacrebleu` (fairseq's `EvaluationTokenizer`, then sacreBLEU on the tokenized
//! text), `chrf` and `wer`, each with the `result_string()` that ends fairseq-generate's output.

use std::collections::HashMap;

use super::bleu::{Bleu, BleuOptions};
use super::chrf::{Chrf, ChrfOptions};
use super::format::py_fixed;
use super::tokenizers::TokenizerKind;
use super::{py_lower, py_split, MetricError};

/// `libbleu`'s `bleu_stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BleuStat {
    pub reflen: usize,
    pub predlen: usize,
    /// `match1..4`.
    pub matched: [usize; 4],
    /// `count1..4`.
    pub count: [usize; 4],
}

/// fairseq's `bleu.Scorer`: BLEU over token ids, `<unk>` in the reference never matching.
#[derive(Debug, Clone)]
pub struct TokenBleu {
    pub stat: BleuStat,
    pad: i32,
    eos: i32,
    unk: i32,
}

/// `bleu_hash`: FNV-1a over the n ids' bytes, each byte sign-extended as a C `char`.
fn bleu_hash(ids: &[i32]) -> u64 {
    let mut h: u64 = 14_695_981_039_346_656_037;
    for id in ids {
        for b in id.to_ne_bytes() {
            h ^= b as i8 as i64 as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// `bleu_trim`: leading pads off; trailing EOS and pads off, the first id always kept.
fn bleu_trim(sent: &[i32], pad: i32, eos: i32) -> &[i32] {
    let start = sent.iter().position(|&t| t != pad).unwrap_or(sent.len());
    let sent = &sent[start..];
    if sent.is_empty() {
        return sent;
    }
    let mut end = sent.len() - 1;
    while end > 0 && (sent[end] == eos || sent[end] == pad) {
        end -= 1;
    }
    &sent[..=end]
}

/// `bleu_addngram`: every reference n-gram whose hash a hypothesis n-gram still holds matches.
fn add_ngram(total: &mut usize, matched: &mut usize, n: usize, r: &[i32], p: &[i32]) {
    if p.len() < n {
        return;
    }
    *total += p.len() - n + 1;
    if r.len() < n {
        return;
    }
    let mut count: HashMap<u64, usize> = HashMap::new();
    for w in p.windows(n) {
        *count.entry(bleu_hash(w)).or_default() += 1;
    }
    for w in r.windows(n) {
        if let Some(c) = count.get_mut(&bleu_hash(w)).filter(|c| **c > 0) {
            *matched += 1;
            *c -= 1;
        }
    }
}

impl TokenBleu {
    /// `BleuConfig(pad, eos, unk)` of the target dictionary.
    pub fn new(pad: i64, eos: i64, unk: i64) -> Self {
        let id = |x: i64| i32::try_from(x).unwrap_or(i32::MIN);
        TokenBleu { stat: BleuStat::default(), pad: id(pad), eos: id(eos), unk: id(unk) }
    }

    /// `add(ref, pred)` (the ids as the int32 tensors fairseq passes).
    pub fn add(&mut self, reference: &[i32], pred: &[i32]) {
        let reference: Vec<i32> = reference.iter().map(|&t| if t == self.unk { -999 } else { t }).collect();
        let r = bleu_trim(&reference, self.pad, self.eos);
        let p = bleu_trim(pred, self.pad, self.eos);
        self.stat.reflen += r.len();
        self.stat.predlen += p.len();
        for n in 1..=4 {
            add_ngram(&mut self.stat.count[n - 1], &mut self.stat.matched[n - 1], n, r, p);
        }
    }

    pub fn precision(&self) -> [f64; 4] {
        std::array::from_fn(|i| {
            let (a, b) = (self.stat.matched[i], self.stat.count[i]);
            if b > 0 {
                a as f64 / b as f64
            } else {
                0.0
            }
        })
    }

    pub fn brevity(&self) -> f64 {
        let r = self.stat.reflen as f64 / self.stat.predlen as f64;
        (1.0 - r).exp().min(1.0)
    }

    pub fn score(&self) -> f64 {
        let psum = self.precision().iter().fold(0.0, |s, &p| s + if p > 0.0 { p.ln() } else { f64::NEG_INFINITY });
        self.brevity() * (psum / 4.0).exp() * 100.0
    }

    /// `result_string(order=4)`.
    pub fn result_string(&self) -> String {
        let p = self.precision().map(|p| py_fixed(p * 100.0, 1));
        format!(
            "BLEU4 = {}, {}/{}/{}/{} (BP={}, ratio={}, syslen={}, reflen={})",
            py_fixed(self.score(), 2),
            p[0],
            p[1],
            p[2],
            p[3],
            py_fixed(self.brevity(), 3),
            py_fixed(self.stat.predlen as f64 / self.stat.reflen as f64, 3),
            self.stat.predlen,
            self.stat.reflen
        )
    }
}

/// fairseq's `EvaluationTokenizer`: a sacreBLEU tokenizer, then punctuation removal, character
/// splitting and lowercasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvaluationTokenizer {
    pub tokenizer: TokenizerKind,
    pub lowercase: bool,
    pub punctuation_removal: bool,
    pub character_tokenization: bool,
}

impl EvaluationTokenizer {
    pub fn tokenize(&self, sent: &str) -> String {
        let mut tokenized = self.tokenizer.tokenize(sent);
        if self.punctuation_removal {
            tokenized = remove_punctuation(&tokenized);
        }
        if self.character_tokenization {
            let escaped = tokenized.replace(' ', "\u{2581}");
            tokenized = escaped.chars().map(String::from).collect::<Vec<_>>().join(" ");
        }
        if self.lowercase {
            tokenized = py_lower(&tokenized);
        }
        tokenized
    }
}

/// `EvaluationTokenizer.remove_punctuation`: the space-separated tokens whose every character
/// is in a Unicode punctuation category (`P*`; so is an empty token) are dropped. The categories
/// are the `regex` crate's Unicode tables; Python's `unicodedata` may be an older Unicode, which
/// differs only on code points that it leaves unassigned.
pub fn remove_punctuation(sent: &str) -> String {
    static PUNCTUATION: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let all_punctuation = PUNCTUATION.get_or_init(|| regex::Regex::new(r"^\p{P}*$").expect("a valid pattern"));
    sent.split(' ').filter(|t| !all_punctuation.is_match(t)).collect::<Vec<_>>().join(" ")
}

/// Levenshtein distance of two word lists (`editdistance.eval`).
fn edit_distance(a: &[&str], b: &[&str]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(x != y);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// One of fairseq-generate's scorers, fed the top hypothesis of every sentence that has a
/// reference.
#[derive(Debug, Clone)]
pub enum GenerateScorer {
    Bleu(TokenBleu),
    Sacrebleu { tokenizer: EvaluationTokenizer, refs: Vec<String>, preds: Vec<String> },
    Chrf { refs: Vec<String>, preds: Vec<String> },
    Wer { tokenizer: EvaluationTokenizer, distance: usize, ref_length: usize },
}

impl GenerateScorer {
    /// Whether the scorer takes strings (`add_string`) rather than token ids.
    pub fn takes_strings(&self) -> bool {
        !matches!(self, GenerateScorer::Bleu(_))
    }

    /// Adds one pair: ids for `bleu`, text for the others.
    pub fn add(&mut self, reference: (&[i32], &str), pred: (&[i32], &str)) {
        match self {
            GenerateScorer::Bleu(b) => b.add(reference.0, pred.0),
            GenerateScorer::Sacrebleu { tokenizer, refs, preds } => {
                refs.push(tokenizer.tokenize(reference.1));
                preds.push(tokenizer.tokenize(pred.1));
            }
            GenerateScorer::Chrf { refs, preds } => {
                refs.push(reference.1.to_string());
                preds.push(pred.1.to_string());
            }
            GenerateScorer::Wer { tokenizer, distance, ref_length } => {
                let (r, p) = (tokenizer.tokenize(reference.1), tokenizer.tokenize(pred.1));
                let (r, p) = (py_split(&r), py_split(&p));
                *distance += edit_distance(&r, &p);
                *ref_length += r.len();
            }
        }
    }

    /// `result_string()`: what follows `Generate SUBSET with beam=N: `.
    pub fn result_string(&self) -> Result<String, MetricError> {
        Ok(match self {
            GenerateScorer::Bleu(b) => b.result_string(),
            GenerateScorer::Sacrebleu { refs, preds, .. } => {
                let bleu = Bleu::new(BleuOptions { tokenize: TokenizerKind::None, ..BleuOptions::default() });
                let score = bleu.corpus_score(preds, std::slice::from_ref(refs))?;
                Bleu::to_score(&score).format(2, false, "", false)
            }
            GenerateScorer::Chrf { refs, preds } => {
                let chrf = Chrf::new(ChrfOptions::default());
                let score = chrf.corpus_score(preds, std::slice::from_ref(refs))?;
                chrf.to_score(score).format(2, false, "", false)
            }
            GenerateScorer::Wer { distance, ref_length, .. } => {
                let wer = if *ref_length > 0 { 100.0 * *distance as f64 / *ref_length as f64 } else { 0.0 };
                format!("WER: {}", py_fixed(wer, 2))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What fairseq's `EvaluationTokenizer.remove_punctuation` returns for the same line under
    /// Python 3.11's `unicodedata`: `%` and `@` are punctuation (Po), `$` a symbol (Sc); a token
    /// with one letter stays, and the empty token between two spaces goes.
    #[test]
    fn punctuation_removal_drops_the_tokens_fairseq_drops() {
        let line = "« Bonjour » , dit-il … ¿ Qué ?  — ok ! \"quoted\" 3.5 % @ #hash ‽ ، 。 $";
        assert_eq!(remove_punctuation(line), "Bonjour dit-il Qué ok \"quoted\" 3.5 #hash $");
        let wer = EvaluationTokenizer { tokenizer: TokenizerKind::parse("none").unwrap(), lowercase: false, punctuation_removal: true, character_tokenization: false };
        assert_eq!(wer.tokenize("a , b ."), "a b");
    }

    #[test]
    fn trim_keeps_the_first_id_as_libbleu_does() {
        assert_eq!(bleu_trim(&[1, 1, 5, 6, 2, 1], 1, 2), &[5, 6]);
        // a lone EOS stays one token long
        assert_eq!(bleu_trim(&[2], 1, 2), &[2]);
        assert_eq!(bleu_trim(&[1, 1], 1, 2), &[] as &[i32]);
    }

    #[test]
    fn unknown_words_in_the_reference_never_match() {
        let mut b = TokenBleu::new(1, 2, 3);
        b.add(&[4, 3, 5, 6, 7, 2], &[4, 3, 5, 6, 7, 2]);
        assert_eq!(b.stat.matched, [4, 2, 1, 0]);
        assert_eq!(b.stat.count, [5, 4, 3, 2]);
        assert_eq!((b.stat.reflen, b.stat.predlen), (5, 5));
        assert_eq!(b.result_string(), "BLEU4 = 0.00, 80.0/50.0/33.3/0.0 (BP=1.000, ratio=1.000, syslen=5, reflen=5)");
    }

    #[test]
    fn edit_distance_counts_word_edits() {
        assert_eq!(edit_distance(&["a", "b", "c"], &["a", "c", "d"]), 2);
        assert_eq!(edit_distance(&[], &["a"]), 1);
        assert_eq!(edit_distance(&["kitten"], &["kitten"]), 0);
    }
}
