//! sacreBLEU 2.5.1's corpus chrF / chrF++ (`metrics/chrf.py`), ported exactly.

use std::collections::HashMap;

use super::format::{Score, Signature};
use super::{py_lower, py_split, MetricError};

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

type Counter = HashMap<String, usize>;

/// `extract_all_char_ngrams`.
fn char_ngrams(line: &str, max_order: usize, whitespace: bool) -> Vec<Counter> {
    let chars: Vec<char> = if whitespace { line.chars().collect() } else { py_split(line).concat().chars().collect() };
    (1..=max_order)
        .map(|n| {
            let mut c = Counter::new();
            if chars.len() + 1 > n {
                for i in 0..chars.len() + 1 - n {
                    *c.entry(chars[i..i + n].iter().collect()).or_default() += 1;
                }
            }
            c
        })
        .collect()
}

/// `extract_word_ngrams`.
fn word_ngrams(tokens: &[String], n: usize) -> Counter {
    let mut c = Counter::new();
    if tokens.len() + 1 > n {
        for i in 0..tokens.len() + 1 - n {
            *c.entry(tokens[i..i + n].join(" ")).or_default() += 1;
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
fn match_stats(hyp: &Counter, r: &Counter) -> [usize; 3] {
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

    fn all_ngrams(&self, sent: &str) -> Vec<Counter> {
        let mut stats = char_ngrams(sent, self.opts.char_order, self.opts.whitespace);
        if self.opts.word_order > 0 {
            let words = remove_punctuation(sent);
            for n in 1..=self.opts.word_order {
                stats.push(word_ngrams(&words, n));
            }
        }
        stats
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

    fn segment_stats(&self, hyp: &str, refs: &[Vec<Counter>]) -> Vec<usize> {
        let hyp_ngrams = self.all_ngrams(hyp);
        let mut best: Vec<usize> = Vec::new();
        let mut best_f = -1.0;
        for r in refs {
            let mut stats = Vec::with_capacity(3 * self.order());
            for (h, rr) in hyp_ngrams.iter().zip(r) {
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
        let mut sums = vec![0usize; 3 * self.order()];
        for (i, hyp) in hyps.iter().enumerate() {
            let seg_refs: Vec<Vec<Counter>> = refs.iter().map(|r| self.all_ngrams(&self.preprocess(&r[i]))).collect();
            let stats = self.segment_stats(&self.preprocess(hyp), &seg_refs);
            for (s, v) in sums.iter_mut().zip(stats) {
                *s += v;
            }
        }
        Ok(self.f_score(&sums))
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
        Score { name: self.name(), score, verbose: String::new() }
    }
}
