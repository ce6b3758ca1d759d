//! sacreBLEU 2.5.1's corpus BLEU (`metrics/bleu.py`), ported exactly.


use super::format::{py_fixed, Score, Signature};
use super::tokenizers::TokenizerKind;
use super::{py_lower, py_rstrip, py_split, FxMap, MetricError};

/// `--smooth-method`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Smooth {
    None,
    Floor,
    AddK,
    Exp,
}

impl Smooth {
    pub fn parse(name: &str) -> Result<Self, MetricError> {
        match name {
            "none" => Ok(Self::None),
            "floor" => Ok(Self::Floor),
            "add-k" => Ok(Self::AddK),
            "exp" => Ok(Self::Exp),
            n => Err(MetricError::UnknownSmoothing(n.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Floor => "floor",
            Self::AddK => "add-k",
            Self::Exp => "exp",
        }
    }

    /// `BLEU.SMOOTH_DEFAULTS`.
    pub fn default_value(self) -> Option<f64> {
        match self {
            Self::Floor => Some(0.1),
            Self::AddK => Some(1.0),
            Self::None | Self::Exp => None,
        }
    }
}

/// The arguments of `BLEU(...)`.
#[derive(Clone, Debug)]
pub struct BleuOptions {
    pub lowercase: bool,
    pub tokenize: TokenizerKind,
    pub smooth_method: Smooth,
    pub smooth_value: Option<f64>,
    pub max_ngram_order: usize,
    pub effective_order: bool,
}

impl Default for BleuOptions {
    fn default() -> Self {
        Self {
            lowercase: false,
            tokenize: TokenizerKind::T13a,
            smooth_method: Smooth::Exp,
            smooth_value: None,
            max_ngram_order: 4,
            effective_order: false,
        }
    }
}

/// `BLEUScore`.
#[derive(Clone, Debug, PartialEq)]
pub struct BleuScore {
    pub score: f64,
    pub counts: Vec<f64>,
    pub totals: Vec<f64>,
    pub precisions: Vec<f64>,
    pub bp: f64,
    pub sys_len: usize,
    pub ref_len: usize,
}

impl BleuScore {
    /// `BLEUScore._verbose`.
    pub fn verbose(&self) -> String {
        let prec: Vec<String> = self.precisions.iter().map(|&p| py_fixed(p, 1)).collect();
        let ratio = if self.ref_len > 0 { self.sys_len as f64 / self.ref_len as f64 } else { 0.0 };
        format!(
            "{} (BP = {} ratio = {} hyp_len = {} ref_len = {})",
            prec.join("/"),
            py_fixed(self.bp, 3),
            py_fixed(ratio, 3),
            self.sys_len,
            self.ref_len
        )
    }
}

/// `my_log`.
fn my_log(x: f64) -> f64 {
    if x == 0.0 {
        -9999999999.0
    } else {
        x.ln()
    }
}

/// `BLEU.compute_bleu` from sufficient statistics.
#[allow(clippy::too_many_arguments)]
pub fn compute_bleu(
    correct: &[f64],
    total: &[f64],
    sys_len: usize,
    ref_len: usize,
    smooth_method: Smooth,
    smooth_value: Option<f64>,
    effective_order: bool,
    max_ngram_order: usize,
) -> BleuScore {
    let smooth_value = smooth_value.or(smooth_method.default_value()).unwrap_or(0.0);
    let mut correct = correct.to_vec();
    let mut total = total.to_vec();
    let mut bp = 1.0;
    if sys_len < ref_len {
        bp = if sys_len > 0 { (1.0 - ref_len as f64 / sys_len as f64).exp() } else { 0.0 };
    }
    let mut precisions = vec![0.0; max_ngram_order];
    let done = |score, correct, total, precisions| BleuScore { score, counts: correct, totals: total, precisions, bp, sys_len, ref_len };
    if !correct.iter().any(|&c| c != 0.0) {
        return done(0.0, correct, total, precisions);
    }
    let mut smooth_mteval = 1.0f64;
    let mut eff_order = max_ngram_order;
    for n in 1..=max_ngram_order {
        if smooth_method == Smooth::AddK && n > 1 {
            correct[n - 1] += smooth_value;
            total[n - 1] += smooth_value;
        }
        if total[n - 1] == 0.0 {
            break;
        }
        if effective_order {
            eff_order = n;
        }
        if correct[n - 1] == 0.0 {
            match smooth_method {
                Smooth::Exp => {
                    smooth_mteval *= 2.0;
                    precisions[n - 1] = 100.0 / (smooth_mteval * total[n - 1]);
                }
                Smooth::Floor => precisions[n - 1] = 100.0 * smooth_value / total[n - 1],
                _ => {}
            }
        } else {
            precisions[n - 1] = 100.0 * correct[n - 1] / total[n - 1];
        }
    }
    let mut sum = 0.0;
    for &p in &precisions[..eff_order] {
        sum += my_log(p);
    }
    let score = bp * (sum / eff_order as f64).exp();
    done(score, correct, total, precisions)
}

/// N-gram counts, keyed by the n-gram's tokens: `[in the references (the maximum over them), in
/// the hypothesis]`.
type Ngrams<'a> = FxMap<&'a [&'a str], [usize; 2]>;

/// `extract_all_word_ngrams` (orders `1..=max_order`) over a line's tokens, counted in slot `k`.
fn count_ngrams<'a>(tokens: &'a [&'a str], max_order: usize, ngrams: &mut Ngrams<'a>, k: usize) {
    for n in 1..=max_order.min(tokens.len()) {
        for w in tokens.windows(n) {
            ngrams.entry(w).or_default()[k] += 1;
        }
    }
}

/// How many n-grams of orders `1..=max_order` a line of `len` tokens has.
fn ngram_capacity(len: usize, max_order: usize) -> usize {
    (1..=max_order.min(len)).map(|n| len + 1 - n).sum()
}

/// `BLEU`: a configured metric.
pub struct Bleu {
    pub opts: BleuOptions,
}

impl Bleu {
    pub fn new(opts: BleuOptions) -> Self {
        Self { opts }
    }

    fn preprocess(&self, sent: &str) -> String {
        let sent = if self.opts.lowercase { py_lower(sent) } else { sent.to_string() };
        self.opts.tokenize.tokenize(py_rstrip(&sent))
    }

    /// `_get_closest_ref_len`.
    fn closest_ref_len(hyp_len: usize, ref_lens: &[usize]) -> i64 {
        let (mut closest_diff, mut closest_len) = (-1i64, -1i64);
        for &r in ref_lens {
            let diff = (hyp_len as i64 - r as i64).abs();
            if closest_diff == -1 || diff < closest_diff {
                closest_diff = diff;
                closest_len = r as i64;
            } else if diff == closest_diff && (r as i64) < closest_len {
                closest_len = r as i64;
            }
        }
        closest_len
    }

    /// Adds one segment's statistics to `sums` (`[hyp_len, ref_len, correct.., total..]`).
    fn add_segment_stats(&self, hyp: &str, refs: &[&str], sums: &mut [i64]) {
        let order = self.opts.max_ngram_order;
        let ref_toks: Vec<String> = refs.iter().map(|r| self.preprocess(r)).collect();
        let ref_words: Vec<Vec<&str>> = ref_toks.iter().map(|t| py_split(t)).collect();
        let ref_lens: Vec<usize> = ref_words.iter().map(Vec::len).collect();
        let hyp_tok = self.preprocess(hyp);
        let hyp_words = py_split(&hyp_tok);
        let cap = ref_lens.iter().chain([&hyp_words.len()]).map(|&l| ngram_capacity(l, order)).sum();
        let mut ngrams = Ngrams::with_capacity_and_hasher(cap, Default::default());
        // The references' counts, merged by taking the maximum (`_extract_reference_info`).
        for (k, words) in ref_words.iter().enumerate() {
            if k == 0 {
                count_ngrams(words, order, &mut ngrams, 0);
            } else {
                let mut this = Ngrams::with_capacity_and_hasher(ngram_capacity(words.len(), order), Default::default());
                count_ngrams(words, order, &mut this, 0);
                for (ng, [v, _]) in this {
                    let e = &mut ngrams.entry(ng).or_default()[0];
                    *e = (*e).max(v);
                }
            }
        }
        count_ngrams(&hyp_words, order, &mut ngrams, 1);
        sums[0] += hyp_words.len() as i64;
        sums[1] += Self::closest_ref_len(hyp_words.len(), &ref_lens);
        for (ng, &[r, count]) in &ngrams {
            let n = ng.len() - 1;
            sums[2 + order + n] += count as i64;
            sums[2 + n] += count.min(r) as i64;
        }
    }

    /// `corpus_score(hyps, refs)`: `refs[k][i]` is the k-th reference of segment i.
    pub fn corpus_score(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<BleuScore, MetricError> {
        super::check_lengths(hyps, refs)?;
        let sums = super::sum_segments(hyps.len(), self.stats_width(), |range, sums: &mut [i64]| {
            for i in range {
                let seg_refs: Vec<&str> = refs.iter().map(|r| r[i].as_str()).collect();
                self.add_segment_stats(&hyps[i], &seg_refs, sums);
            }
        });
        Ok(self.score_from_sums(&sums))
    }

    /// The length of a segment's statistics.
    pub fn stats_width(&self) -> usize {
        2 + 2 * self.opts.max_ngram_order
    }

    /// `_extract_corpus_statistics`: `[hyp_len, ref_len, correct.., total..]` per segment, in a
    /// row-major array of [`Bleu::stats_width`] columns.
    pub fn segment_statistics(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<Vec<i64>, MetricError> {
        super::check_lengths(hyps, refs)?;
        let width = self.stats_width();
        let mut rows = vec![0i64; hyps.len() * width];
        for (i, row) in rows.chunks_exact_mut(width).enumerate() {
            let seg_refs: Vec<&str> = refs.iter().map(|r| r[i].as_str()).collect();
            self.add_segment_stats(&hyps[i], &seg_refs, row);
        }
        Ok(rows)
    }

    /// `_compute_score_from_stats` on the summed integer statistics.
    pub fn score_from_sums(&self, sums: &[i64]) -> BleuScore {
        let order = self.opts.max_ngram_order;
        let correct: Vec<f64> = sums[2..2 + order].iter().map(|&v| v as f64).collect();
        let total: Vec<f64> = sums[2 + order..].iter().map(|&v| v as f64).collect();
        compute_bleu(
            &correct,
            &total,
            sums[0] as usize,
            sums[1] as usize,
            self.opts.smooth_method,
            self.opts.smooth_value,
            self.opts.effective_order,
            order,
        )
    }

    /// `_compute_score_from_stats(stats).score` for a `float32` array of summed statistics (a
    /// bootstrap resample): the precisions are then `np.float32`s, the rest Python floats.
    pub fn score_from_f32_sums(&self, stats: &[f32]) -> f64 {
        let order = self.opts.max_ngram_order;
        let method = self.opts.smooth_method;
        let smooth_value = self.opts.smooth_value.or(method.default_value()).unwrap_or(0.0);
        let (sys_len, ref_len) = (stats[0] as i64, stats[1] as i64);
        let mut correct = stats[2..2 + order].to_vec();
        let mut total = stats[2 + order..2 + 2 * order].to_vec();
        let mut bp = 1.0;
        if sys_len < ref_len {
            bp = if sys_len > 0 { (1.0 - ref_len as f64 / sys_len as f64).exp() } else { 0.0 };
        }
        if !correct.iter().any(|&c| c != 0.0) {
            return 0.0;
        }
        let mut precisions = vec![0.0f64; order];
        let mut smooth_mteval = 1.0f64;
        let mut eff_order = order;
        for n in 1..=order {
            if method == Smooth::AddK && n > 1 {
                correct[n - 1] += smooth_value as f32;
                total[n - 1] += smooth_value as f32;
            }
            if total[n - 1] == 0.0 {
                break;
            }
            if self.opts.effective_order {
                eff_order = n;
            }
            if correct[n - 1] == 0.0 {
                match method {
                    Smooth::Exp => {
                        smooth_mteval *= 2.0;
                        precisions[n - 1] = (100.0f32 / (smooth_mteval as f32 * total[n - 1])) as f64;
                    }
                    Smooth::Floor => precisions[n - 1] = ((100.0 * smooth_value) as f32 / total[n - 1]) as f64,
                    _ => {}
                }
            } else {
                precisions[n - 1] = (100.0f32 * correct[n - 1] / total[n - 1]) as f64;
            }
        }
        let mut sum = 0.0;
        for &p in &precisions[..eff_order] {
            sum += my_log(p);
        }
        bp * (sum / eff_order as f64).exp()
    }

    /// `BLEUSignature`.
    pub fn signature(&self, num_refs: usize, version: &str) -> Signature {
        let mut smooth = self.opts.smooth_method.name().to_string();
        if let Some(def) = self.opts.smooth_method.default_value() {
            smooth += &format!("[{}]", py_fixed(self.opts.smooth_value.unwrap_or(def), 2));
        }
        let mut sig = Signature::new(num_refs, version);
        sig.push("case", "c", if self.opts.lowercase { "lc" } else { "mixed" });
        sig.push("eff", "e", if self.opts.effective_order { "yes" } else { "no" });
        sig.push("tok", "tok", self.opts.tokenize.signature());
        sig.push("smooth", "s", &smooth);
        sig
    }

    /// The score in the form the printer takes.
    pub fn to_score(score: &BleuScore) -> Score {
        Score { name: "BLEU".to_string(), score: score.score, verbose: score.verbose(), confidence: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn perfect_and_zero() {
        let b = Bleu::new(BleuOptions::default());
        let r = b.corpus_score(&s(&["this is a test"]), &[s(&["this is a test"])]).unwrap();
        assert!((r.score - 100.0).abs() < 1e-9);
        let r = b.corpus_score(&s(&["this is a test", "another test"]), &[s(&["ref1", "ref2"])]).unwrap();
        assert_eq!(r.score, 0.0);
    }
}
