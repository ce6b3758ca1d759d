//! sacreBLEU 2.5.1's resampling tests (`significance.py`, `Metric.corpus_score(...,
//! n_bootstrap)`, `Score.estimate_ci`): `--confidence` for one system, `--paired-bs` and
//! `--paired-ar` for several, drawing from NumPy's `default_rng(SACREBLEU_SEED)` exactly.
//!
//! Each metric's per-segment statistics are computed once. Bootstrap resamples sum them as
//! `float32` (`np.array(stats, dtype='float32')`) in row order, as NumPy's `_s.sum(0)` does;
//! approximate randomization sums them exactly (NumPy's `int64` matrix product).

use super::format::{Score, Signature};
use super::numpy_math::{statistics_mean, NpArray, NpFloat};
use super::numpy_random::{Generator, SeedSequence};
use super::{py_strip, Bleu, Chrf, MetricError, MetricKind, SacrebleuOptions, Ter};

/// sacreBLEU's default seed (`SACREBLEU_SEED` unset).
pub const DEFAULT_SEED: &str = "12345";

/// `SACREBLEU_SEED` read as sacreBLEU reads it (`int(seed)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedChoice {
    /// The integer, as 32-bit words, least significant first (`SeedSequence`'s entropy).
    pub words: Vec<u32>,
    /// `str(int(seed))`: what paired tests write in signatures.
    pub value: String,
    /// `str(seed).lower()`: what `--confidence` writes in signatures.
    pub text: String,
}

impl SeedChoice {
    /// Parses the variable's value (`None` when unset) as Python's `int()` does.
    pub fn parse(env: Option<&str>) -> Result<Self, MetricError> {
        let raw = env.unwrap_or(DEFAULT_SEED);
        let text = super::py_lower(raw);
        if text == "none" {
            return Err(MetricError::Unsupported(
                "SACREBLEU_SEED=None (seeding from the operating system cannot be reproduced)".into(),
            ));
        }
        let invalid = || MetricError::BadSeed(format!("invalid literal for int() with base 10: {raw:?}"));
        let body = py_strip(raw);
        let (negative, digits) = match body.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, body.strip_prefix('+').unwrap_or(body)),
        };
        if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
            return Err(invalid());
        }
        let digits: String = digits.chars().filter(|&c| c != '_').collect();
        if !digits.chars().all(|c| c.is_ascii_digit()) {
            return Err(invalid());
        }
        let mut words: Vec<u32> = Vec::new();
        for d in digits.bytes() {
            let mut carry = (d - b'0') as u64;
            for w in words.iter_mut() {
                let v = *w as u64 * 10 + carry;
                *w = v as u32;
                carry = v >> 32;
            }
            if carry > 0 {
                words.push(carry as u32);
            }
        }
        let value = match digits.trim_start_matches('0') {
            "" => "0".to_string(),
            v => v.to_string(),
        };
        if negative && !words.is_empty() {
            return Err(MetricError::BadSeed(format!("expected a non-negative integer, not {raw:?}")));
        }
        Ok(Self { words, value, text })
    }

    /// Whether the seed is 0, which paired tests take as "no seed" (`seed if seed else None`).
    pub fn is_zero(&self) -> bool {
        self.words.is_empty()
    }

    /// `np.random.default_rng(seed).choice(n, size=(n_samples, n), replace=True)`, row-major.
    pub fn resample_indices(&self, n: usize, n_samples: usize) -> Result<Vec<u32>, MetricError> {
        if n as u64 > 1 << 32 {
            return Err(MetricError::Unsupported(format!("bootstrap resampling of {n} segments (at most 2**32)")));
        }
        let count = n.checked_mul(n_samples).ok_or_else(|| MetricError::Unsupported("so many resamples".into()))?;
        Ok(Generator::default_rng(&SeedSequence::from_words(&self.words)).choice(n as u64, count))
    }
}

enum Scorer {
    Bleu(Bleu),
    Chrf(Chrf),
    Ter,
}

/// One metric on one system: its actual score and signature, and its per-segment statistics.
pub struct MetricStats {
    pub score: Score,
    pub signature: Signature,
    width: usize,
    /// `np.array(stats, dtype='float32')`, row-major.
    rows: Vec<f32>,
    /// The statistics as Python has them (integers, TER's average lengths), row-major.
    exact_rows: Vec<f64>,
    scorer: Scorer,
}

impl MetricStats {
    /// `_extract_corpus_statistics` and `_aggregate_and_compute` for the metric `kind`.
    pub fn extract(
        kind: MetricKind,
        opts: &SacrebleuOptions,
        hyps: &[String],
        refs: &[Vec<String>],
    ) -> Result<Self, MetricError> {
        let n = refs.len();
        Ok(match kind {
            MetricKind::Bleu => {
                let m = Bleu::new(opts.bleu.clone());
                let stats = m.segment_statistics(hyps, refs)?;
                let width = m.stats_width();
                let mut sums = vec![0i64; width];
                for row in stats.chunks_exact(width) {
                    sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
                }
                let score = Bleu::to_score(&m.score_from_sums(&sums));
                let signature = m.signature(n, &opts.version);
                let rows = stats.iter().map(|&v| v as f32).collect();
                let exact_rows = stats.iter().map(|&v| v as f64).collect();
                Self { score, signature, width, rows, exact_rows, scorer: Scorer::Bleu(m) }
            }
            MetricKind::Chrf => {
                let m = Chrf::new(opts.chrf.clone());
                let stats = m.segment_statistics(hyps, refs)?;
                let width = m.stats_width();
                let mut sums = vec![0usize; width];
                for row in stats.chunks_exact(width) {
                    sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
                }
                let score = m.to_score(m.f_score(&sums));
                let signature = m.signature(n, &opts.version);
                let rows = stats.iter().map(|&v| v as f32).collect();
                let exact_rows = stats.iter().map(|&v| v as f64).collect();
                Self { score, signature, width, rows, exact_rows, scorer: Scorer::Chrf(m) }
            }
            MetricKind::Ter => {
                let m = Ter::new(opts.ter.clone())?;
                let stats = m.segment_statistics(hyps, refs)?;
                let score = Ter::to_score(Ter::score_from_stats(&stats).0);
                let signature = m.signature(n, &opts.version);
                let rows = stats.iter().flat_map(|&(e, l)| [e as f32, l as f32]).collect();
                let exact_rows = stats.iter().flat_map(|&(e, l)| [e as f64, l]).collect();
                Self { score, signature, width: 2, rows, exact_rows, scorer: Scorer::Ter }
            }
        })
    }

    pub fn segments(&self) -> usize {
        self.rows.len() / self.width
    }

    /// `[metric._compute_score_from_stats(_s.sum(0)).score for _s in stats_np[idxs]]`.
    pub fn resample_scores(&self, idxs: &[u32]) -> Vec<NpFloat> {
        let (n, width) = (self.segments(), self.width);
        let mut sums = vec![0f32; width];
        idxs.chunks_exact(n.max(1))
            .map(|sample| {
                sums.iter_mut().for_each(|s| *s = 0.0);
                for &j in sample {
                    let row = &self.rows[j as usize * width..(j as usize + 1) * width];
                    sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
                }
                match &self.scorer {
                    Scorer::Bleu(m) => NpFloat::Py(m.score_from_f32_sums(&sums)),
                    Scorer::Chrf(m) => m.f_score_f32(&sums),
                    Scorer::Ter => Ter::score_from_f32_sums(&sums),
                }
            })
            .collect()
    }
}

impl MetricStats {
    /// `_aggregate_and_compute(x).score` for summed statistics `x` held in a NumPy `int64` (or,
    /// for TER, `float64`) array, as the approximate randomization test computes them: the
    /// arithmetic of Python's, but BLEU's add-k smoothing is added into the integer array.
    fn score_from_exact_sums(&self, sums: &[f64]) -> f64 {
        match &self.scorer {
            Scorer::Bleu(m) => {
                let order = m.opts.max_ngram_order;
                let mut opts = m.opts.clone();
                if opts.smooth_method == super::Smooth::AddK {
                    // c + k cast back to int64, for a count c >= 0: c + trunc(k)
                    opts.smooth_value = Some(opts.smooth_value.unwrap_or(1.0).trunc());
                }
                super::bleu::compute_bleu(
                    &sums[2..2 + order],
                    &sums[2 + order..],
                    sums[0] as usize,
                    sums[1] as usize,
                    opts.smooth_method,
                    opts.smooth_value,
                    opts.effective_order,
                    order,
                )
                .score
            }
            Scorer::Chrf(m) => m.f_score(&sums.iter().map(|&v| v as usize).collect::<Vec<_>>()),
            Scorer::Ter => {
                let (edits, ref_len) = (sums[0], sums[1]);
                100.0 * if ref_len > 0.0 { edits / ref_len } else if edits > 0.0 { 1.0 } else { 0.0 }
            }
        }
    }

    /// Whether the statistics are all multiples of 2**-20 (integers, halves of two references'
    /// lengths...), so that their sums are exact in any order.
    fn exactly_summable(&self) -> bool {
        self.exact_rows.iter().all(|v| (v * 1048576.0).fract() == 0.0) && self.exact_rows.iter().sum::<f64>() < 1e9
    }
}

/// `Score.estimate_ci` (single-system `--confidence`): `(statistics.mean, half the 95% range)`.
pub fn score_estimate_ci(scores: &[NpFloat]) -> Result<(NpFloat, NpFloat), MetricError> {
    if scores.iter().any(|s| s.is_f32()) && !scores.iter().all(|s| s.is_f32()) {
        return Err(MetricError::SacrebleuFails(
            "its bootstrap scores mix float and numpy.float32 here, which statistics.mean refuses \
             (TypeError: don't know how to coerce)"
                .into(),
        ));
    }
    let mut raw = scores.to_vec();
    raw.sort_by(|a, b| a.value().total_cmp(&b.value()));
    let (lower, upper) = ci_bounds(raw.len());
    let ci = NpFloat::Py(0.5).mul(raw[upper].sub(raw[lower]));
    Ok((statistics_mean(&raw), ci))
}

fn ci_bounds(n: usize) -> (usize, usize) {
    let lower_idx = n / 40;
    (lower_idx, n - lower_idx - 1)
}

/// `significance.estimate_ci` (paired tests): `(scores.mean(), half the 95% range)`.
pub fn estimate_ci(scores: &NpArray) -> (NpFloat, NpFloat) {
    let sorted = scores.sorted();
    let (lower, upper) = ci_bounds(sorted.len());
    let diff = sorted.get(upper).sub(sorted.get(lower));
    let ci = match diff {
        NpFloat::F32(d) => NpFloat::F32(0.5 * d),
        NpFloat::Py(d) => NpFloat::Py(0.5 * d),
    };
    (sorted.mean(), ci)
}

/// `--confidence`: the score of `stats` with its bootstrap mean and 95% confidence interval, and
/// its signature with `bs` and `seed`.
pub fn confidence(stats: &MetricStats, seed: &SeedChoice, n_bootstrap: usize) -> Result<(Score, Signature), MetricError> {
    let mut score = stats.score.clone();
    let mut signature = stats.signature.clone();
    if n_bootstrap > 1 {
        let idxs = seed.resample_indices(stats.segments(), n_bootstrap)?;
        let (mean, ci) = score_estimate_ci(&stats.resample_scores(&idxs))?;
        score.confidence = Some((mean.value(), ci.value()));
        signature.set_resampling(Some(n_bootstrap), None, &seed.text);
    }
    Ok((score, signature))
}

/// `significance.Result`.
#[derive(Clone, Debug, PartialEq)]
pub struct TestResult {
    pub score: f64,
    pub p_value: Option<f64>,
    /// The bootstrap mean and 95% interval (paired bootstrap only).
    pub mean: Option<NpFloat>,
    pub ci: Option<NpFloat>,
}

/// `_compute_p_value`.
fn p_value(stats: &NpArray, real_difference: f64) -> f64 {
    let c = stats.count_greater(real_difference);
    (c + 1) as f64 / (stats.len() + 1) as f64
}

/// One metric's column of a paired test: its name, signature and a result per system.
pub struct PairedColumn {
    pub name: String,
    pub signature: Signature,
    pub results: Vec<TestResult>,
}

/// `PairedTest(named_systems, metrics, test_type='bs', n_samples)()`: the first system is the
/// baseline; metrics in the order given (duplicates once).
pub fn paired_bs(
    systems: &[Vec<String>],
    refs: &[Vec<String>],
    opts: &SacrebleuOptions,
    n_samples: usize,
    seed: &SeedChoice,
) -> Result<Vec<PairedColumn>, MetricError> {
    check_paired(systems, seed)?;
    let n_samples = if n_samples > 0 { n_samples } else { 1000 };
    let kinds = unique_metrics(opts);
    let mut idxs = Vec::new();
    let mut columns = Vec::new();
    for kind in kinds {
        let bl = MetricStats::extract(kind, opts, &systems[0], refs)?;
        if idxs.is_empty() {
            idxs = seed.resample_indices(bl.segments(), n_samples)?;
        }
        let bl_scores = NpArray::from_scalars(&bl.resample_scores(&idxs));
        let (bl_mean, bl_ci) = estimate_ci(&bl_scores);
        let mut signature = bl.signature.clone();
        signature.set_resampling(Some(n_samples), None, &seed.value);
        let mut results =
            vec![TestResult { score: bl.score.score, p_value: None, mean: Some(bl_mean), ci: Some(bl_ci) }];
        for hyps in &systems[1..] {
            let sys = MetricStats::extract(kind, opts, hyps, refs)?;
            let diff = (bl.score.score - sys.score.score).abs();
            let sys_scores = NpArray::from_scalars(&sys.resample_scores(&idxs));
            let (mean, ci) = estimate_ci(&sys_scores);
            let sample_diffs = sys_scores.sub(&bl_scores).abs();
            let stats = sample_diffs.sub_scalar(sample_diffs.mean());
            let p = Some(p_value(&stats, diff));
            results.push(TestResult { score: sys.score.score, p_value: p, mean: Some(mean), ci: Some(ci) });
        }
        columns.push(PairedColumn { name: bl.score.name.clone(), signature, results });
    }
    Ok(columns)
}

fn check_paired(systems: &[Vec<String>], seed: &SeedChoice) -> Result<(), MetricError> {
    if systems.len() < 2 {
        return Err(MetricError::Usage("Paired tests require multiple input systems given to --input (-i).".into()));
    }
    if seed.is_zero() {
        return Err(MetricError::Unsupported(
            "SACREBLEU_SEED=0 with paired tests (sacreBLEU then seeds each system's test from the operating system)"
                .into(),
        ));
    }
    Ok(())
}

/// The metrics of `-m` in the order given, each once (the keys of sacreBLEU's `metrics` dict).
fn unique_metrics(opts: &SacrebleuOptions) -> Vec<MetricKind> {
    let mut kinds: Vec<MetricKind> = Vec::new();
    for &k in &opts.metrics {
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    kinds
}

/// `PairedTest(named_systems, metrics, test_type='ar', n_samples)()` (no bootstrap interval, as
/// the CLI runs it): `n_trials` random swaps of each segment between the baseline and a system.
pub fn paired_ar(
    systems: &[Vec<String>],
    refs: &[Vec<String>],
    opts: &SacrebleuOptions,
    n_trials: usize,
    seed: &SeedChoice,
) -> Result<Vec<PairedColumn>, MetricError> {
    check_paired(systems, seed)?;
    let n_trials = if n_trials > 0 { n_trials } else { 10000 };
    let n = systems[0].len();
    let count = n.checked_mul(n_trials).ok_or_else(|| MetricError::Unsupported("so many trials".into()))?;
    let pos_sel = Generator::default_rng(&SeedSequence::from_words(&seed.words)).integers_bool(count);
    let mut columns = Vec::new();
    for kind in unique_metrics(opts) {
        let bl = MetricStats::extract(kind, opts, &systems[0], refs)?;
        let mut signature = bl.signature.clone();
        signature.set_resampling(None, Some(n_trials), &seed.value);
        let mut results = vec![TestResult { score: bl.score.score, p_value: None, mean: None, ci: None }];
        for hyps in &systems[1..] {
            let sys = MetricStats::extract(kind, opts, hyps, refs)?;
            if !(bl.exactly_summable() && sys.exactly_summable()) {
                return Err(MetricError::Unsupported(
                    "--paired-ar with TER's average reference lengths of three or more references when \
                     they are not binary fractions (NumPy sums them in an order its BLAS picks)"
                        .into(),
                ));
            }
            let diff = (bl.score.score - sys.score.score).abs();
            let width = bl.width;
            let mut diffs = Vec::with_capacity(n_trials);
            let (mut a, mut b) = (vec![0f64; width], vec![0f64; width]);
            for sel in pos_sel.chunks_exact(n) {
                a.iter_mut().chain(b.iter_mut()).for_each(|v| *v = 0.0);
                for (j, &pos) in sel.iter().enumerate() {
                    let (bl_row, sys_row) =
                        (&bl.exact_rows[j * width..(j + 1) * width], &sys.exact_rows[j * width..(j + 1) * width]);
                    let (to_a, to_b) = if pos { (bl_row, sys_row) } else { (sys_row, bl_row) };
                    a.iter_mut().zip(to_a).for_each(|(s, v)| *s += v);
                    b.iter_mut().zip(to_b).for_each(|(s, v)| *s += v);
                }
                diffs.push((bl.score_from_exact_sums(&a) - bl.score_from_exact_sums(&b)).abs());
            }
            let p = Some(p_value(&NpArray::F64(diffs), diff));
            results.push(TestResult { score: sys.score.score, p_value: p, mean: None, ci: None });
        }
        columns.push(PairedColumn { name: bl.score.name.clone(), signature, results });
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_read_as_python_int() {
        let s = SeedChoice::parse(None).unwrap();
        assert_eq!((s.words.as_slice(), s.value.as_str(), s.text.as_str()), (&[12345u32][..], "12345", "12345"));
        let s = SeedChoice::parse(Some(" +0_07\n")).unwrap();
        assert_eq!((s.words.as_slice(), s.value.as_str(), s.text.as_str()), (&[7u32][..], "7", " +0_07\n"));
        let s = SeedChoice::parse(Some("18446744073709551621")).unwrap();
        assert_eq!(s.words, [5, 0, 1]);
        let s = SeedChoice::parse(Some("-0")).unwrap();
        assert!(s.is_zero() && s.value == "0");
        for bad in ["", "_1", "1_", "1__2", "0x10", "1.0", "-1", "NONE", "None"] {
            assert!(SeedChoice::parse(Some(bad)).is_err(), "{bad:?}");
        }
    }
}
