//! sacreBLEU 2.5.1's corpus chrF / chrF++ (`metrics/chrf.py`), ported exactly.

use std::hash::Hash;

use super::format::{Score, Signature};
use super::numpy_math::NpFloat;
use super::{py_lower, py_split, FxMap, MetricError};

/// The arguments of `CHRF(...)`.
#[derive(Clone, Debug)]
pub struct ChrfOptions {
    pub char_order: usize,
    pub word_order: usize,
    pub beta: u32,
    pub lowercase: bool,
    pub whitespace: bool,
    pub eps_smoothing: bool,
}

impl Default for ChrfOptions {
    fn default() -> Self {
        Self { char_order: 6, word_order: 0, beta: 2, lowercase: false, whitespace: false, eps_smoothing: false }
    }
}

const PUNCTS: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

type Counter<K> = FxMap<K, usize>;

/// One sentence's n-gram counts: character n-grams (orders `1..=char_order`, as slices of the
/// text they were taken from), then word n-grams (orders `1..=word_order`).
struct SentNgrams<'a> {
    chars: Vec<Counter<&'a str>>,
    words: Vec<Counter<&'a [String]>>,
}

/// The text `extract_all_char_ngrams` takes its n-grams from (whitespace removed unless kept).
fn char_text(line: &str, whitespace: bool) -> String {
    if whitespace {
        line.to_string()
    } else {
        py_split(line).concat()
    }
}

/// `extract_all_char_ngrams` on [`char_text`]'s result.
fn char_ngrams(text: &str, max_order: usize) -> Vec<Counter<&str>> {
    let mut bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    bounds.push(text.len());
    let len = bounds.len() - 1;
    (1..=max_order)
        .map(|n| {
            let mut c = Counter::default();
            if len + 1 > n {
                c.reserve(len + 1 - n);
                for i in 0..len + 1 - n {
                    *c.entry(&text[bounds[i]..bounds[i + n]]).or_default() += 1;
                }
            }
            c
        })
        .collect()
}

/// `extract_word_ngrams`.
fn word_ngrams(tokens: &[String], n: usize) -> Counter<&[String]> {
    let mut c = Counter::default();
    if n > 0 && tokens.len() + 1 > n {
        for w in tokens.windows(n) {
            *c.entry(w).or_default() += 1;
        }
    }
    c
}

/// `CHRF._remove_punctuation`.
fn remove_punctuation(sent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in py_split(sent) {
        let chars: Vec<char> = w.chars().collect();
        if chars.len() == 1 {
            out.push(w.to_string());
        } else {
            let (first, last) = (chars[0], chars[chars.len() - 1]);
            if PUNCTS.contains(last) {
                out.push(chars[..chars.len() - 1].iter().collect());
                out.push(last.to_string());
            } else if PUNCTS.contains(first) {
                out.push(first.to_string());
                out.push(chars[1..].iter().collect());
            } else {
                out.push(w.to_string());
            }
        }
    }
    out
}

/// `CHRF._get_match_statistics`.
fn match_stats<K: Hash + Eq>(hyp: &Counter<K>, r: &Counter<K>) -> [usize; 3] {
    let (mut matched, mut hyp_count) = (0, 0);
    for (ng, &count) in hyp {
        hyp_count += count;
        if let Some(&rc) = r.get(ng) {
            matched += count.min(rc);
        }
    }
    [if r.is_empty() { 0 } else { hyp_count }, r.values().sum(), matched]
}

/// `CHRF`: a configured metric.
pub struct Chrf {
    pub opts: ChrfOptions,
}

impl Chrf {
    pub fn new(opts: ChrfOptions) -> Self {
        Self { opts }
    }

    fn order(&self) -> usize {
        self.opts.char_order + self.opts.word_order
    }

    fn preprocess(&self, sent: &str) -> String {
        if self.opts.lowercase {
            py_lower(sent)
        } else {
            sent.to_string()
        }
    }

    /// `_extract_corpus_statistics`'s per-sentence part, on the texts [`Chrf::texts`] made.
    fn all_ngrams<'a>(&self, texts: &'a (String, Vec<String>)) -> SentNgrams<'a> {
        let chars = char_ngrams(&texts.0, self.opts.char_order);
        let words = (1..=self.opts.word_order).map(|n| word_ngrams(&texts.1, n)).collect();
        SentNgrams { chars, words }
    }

    /// The character text and the words (punctuation split off) of a preprocessed sentence.
    fn texts(&self, sent: &str) -> (String, Vec<String>) {
        let words = if self.opts.word_order > 0 { remove_punctuation(sent) } else { Vec::new() };
        (char_text(sent, self.opts.whitespace), words)
    }

    /// `CHRF._compute_f_score`.
    pub fn f_score(&self, stats: &[usize]) -> f64 {
        let eps = 1e-16;
        let mut score = 0.0;
        let mut effective_order = 0usize;
        let factor = (self.opts.beta as f64).powi(2);
        let (mut avg_prec, mut avg_rec) = (0.0f64, 0.0f64);
        for i in 0..self.order() {
            let (n_hyp, n_ref, n_match) = (stats[3 * i], stats[3 * i + 1], stats[3 * i + 2]);
            let prec = if n_hyp > 0 { n_match as f64 / n_hyp as f64 } else { eps };
            let rec = if n_ref > 0 { n_match as f64 / n_ref as f64 } else { eps };
            let denom = factor * prec + rec;
            score += if denom > 0.0 { (1.0 + factor) * prec * rec / denom } else { eps };
            if n_hyp > 0 && n_ref > 0 {
                avg_prec += prec;
                avg_rec += rec;
                effective_order += 1;
            }
        }
        if self.opts.eps_smoothing {
            return 100.0 * score / self.order() as f64;
        }
        if effective_order == 0 {
            avg_prec = 0.0;
            avg_rec = 0.0;
        } else {
            avg_prec /= effective_order as f64;
            avg_rec /= effective_order as f64;
        }
        if avg_prec + avg_rec != 0.0 {
            let mut score = (1.0 + factor) * avg_prec * avg_rec;
            score /= (factor * avg_prec) + avg_rec;
            100.0 * score
        } else {
            0.0
        }
    }

    fn segment_stats(&self, hyp: &SentNgrams, refs: &[SentNgrams]) -> Vec<usize> {
        let mut best: Vec<usize> = Vec::new();
        let mut best_f = -1.0;
        for r in refs {
            let mut stats = Vec::with_capacity(3 * self.order());
            for (h, rr) in hyp.chars.iter().zip(&r.chars) {
                stats.extend(match_stats(h, rr));
            }
            for (h, rr) in hyp.words.iter().zip(&r.words) {
                stats.extend(match_stats(h, rr));
            }
            let f = self.f_score(&stats);
            if f > best_f {
                best_f = f;
                best = stats;
            }
        }
        best
    }

    /// `corpus_score(hyps, refs)`: `refs[k][i]` is the k-th reference of segment i.
    pub fn corpus_score(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<f64, MetricError> {
        super::check_lengths(hyps, refs)?;
        let sums = super::sum_segments(hyps.len(), self.stats_width(), |range, sums: &mut [usize]| {
            for i in range {
                for (s, v) in sums.iter_mut().zip(self.segment_stats_of(hyps, refs, i)) {
                    *s += v;
                }
            }
        });
        Ok(self.f_score(&sums))
    }

    fn segment_stats_of(&self, hyps: &[String], refs: &[Vec<String>], i: usize) -> Vec<usize> {
        let ref_texts: Vec<_> = refs.iter().map(|r| self.texts(&self.preprocess(&r[i]))).collect();
        let seg_refs: Vec<SentNgrams> = ref_texts.iter().map(|t| self.all_ngrams(t)).collect();
        let hyp_texts = self.texts(&self.preprocess(&hyps[i]));
        self.segment_stats(&self.all_ngrams(&hyp_texts), &seg_refs)
    }

    /// The length of a segment's statistics.
    pub fn stats_width(&self) -> usize {
        3 * self.order()
    }

    /// `_extract_corpus_statistics`: `[hyp, ref, match]` per order per segment, in a row-major
    /// array of [`Chrf::stats_width`] columns.
    pub fn segment_statistics(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<Vec<usize>, MetricError> {
        super::check_lengths(hyps, refs)?;
        Ok((0..hyps.len()).flat_map(|i| self.segment_stats_of(hyps, refs, i)).collect())
    }

    /// `_compute_f_score(stats)` for a `float32` array of summed statistics (a bootstrap
    /// resample), with NumPy's types: the result is a `np.float32` or a Python float.
    pub fn f_score_f32(&self, stats: &[f32]) -> NpFloat {
        use NpFloat::{Py, F32};
        let eps = Py(1e-16);
        let mut score = Py(0.0);
        let mut effective_order = 0usize;
        let factor = Py((self.opts.beta as f64).powi(2));
        let one_plus_factor = Py(1.0 + factor.value());
        let (mut avg_prec, mut avg_rec) = (Py(0.0), Py(0.0));
        for i in 0..self.order() {
            let (n_hyp, n_ref, n_match) = (stats[3 * i], stats[3 * i + 1], stats[3 * i + 2]);
            let prec = if n_hyp > 0.0 { F32(n_match / n_hyp) } else { eps };
            let rec = if n_ref > 0.0 { F32(n_match / n_ref) } else { eps };
            let denom = factor.mul(prec).add(rec);
            score = score.add(if denom.value() > 0.0 { one_plus_factor.mul(prec).mul(rec).div(denom) } else { eps });
            if n_hyp > 0.0 && n_ref > 0.0 {
                avg_prec = avg_prec.add(prec);
                avg_rec = avg_rec.add(rec);
                effective_order += 1;
            }
        }
        if self.opts.eps_smoothing {
            return Py(100.0).mul(score).div(Py(self.order() as f64));
        }
        if effective_order == 0 {
            avg_prec = Py(0.0);
            avg_rec = Py(0.0);
        } else {
            avg_prec = avg_prec.div(Py(effective_order as f64));
            avg_rec = avg_rec.div(Py(effective_order as f64));
        }
        if avg_prec.add(avg_rec).is_truthy() {
            let score = one_plus_factor.mul(avg_prec).mul(avg_rec);
            let score = score.div(factor.mul(avg_prec).add(avg_rec));
            Py(100.0).mul(score)
        } else {
            Py(0.0)
        }
    }

    /// `CHRFSignature`.
    pub fn signature(&self, num_refs: usize, version: &str) -> Signature {
        let mut sig = Signature::new(num_refs, version);
        sig.push("case", "c", if self.opts.lowercase { "lc" } else { "mixed" });
        sig.push("eff", "e", if self.opts.eps_smoothing { "no" } else { "yes" });
        sig.push("nc", "nc", &self.opts.char_order.to_string());
        sig.push("nw", "nw", &self.opts.word_order.to_string());
        sig.push("space", "s", if self.opts.whitespace { "yes" } else { "no" });
        sig
    }

    /// `CHRFScore`'s name (`chrF2`, `chrF2++`).
    pub fn name(&self) -> String {
        format!("chrF{}{}", self.opts.beta, "+".repeat(self.opts.word_order))
    }

    pub fn to_score(&self, score: f64) -> Score {
        Score { name: self.name(), score, verbose: String::new(), confidence: None }
    }
}
