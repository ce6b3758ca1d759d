//! sacreBLEU 2.5.1's corpus metrics (BLEU, chrF/chrF++, TER), ported exactly, and the output of
//! `sacrebleu REF... -i HYP -m bleu chrf ter [-f json|text] [-b] [-w N] [--short]`.
//!
//! Everything follows the Python: lines split on `\n` only and `rstrip`ped, Python's notion of
//! whitespace for `split`/`strip`, `str.lower`, the same arithmetic order, the same printing.
//! The version in signatures is a parameter ([`SACREBLEU_VERSION`] by default).
//! `--confidence` and `--paired-bs` resample as sacreBLEU does, from NumPy's RNG reproduced bit
//! for bit ([`significance`], [`numpy_random`]), and so does `--paired-ar` (but for TER with
//! fractional average reference lengths). Not ported: multi-system scoring
//! without a paired test, the mecab/sentencepiece tokenizers, TER's normalization/punctuation/Asian options,
//! sentence-level mode, test sets (`-t`) and `--num-refs` tab-separated references.

pub mod bleu;
pub mod chrf;
pub mod fairseq_scorers;
pub mod format;
pub mod numpy_math;
pub mod numpy_random;
pub mod results_table;
pub mod significance;
pub mod ter;
pub mod tokenizers;

use std::path::Path;

pub use bleu::{Bleu, BleuOptions, BleuScore, Smooth};
pub use chrf::{Chrf, ChrfOptions};
pub use format::{Score, Signature};
pub use ter::{Ter, TerOptions};
pub use tokenizers::TokenizerKind;

/// A small FxHash-style hasher (rustc's), for the n-gram maps: fast, not DoS-resistant, which
/// does not matter for counting n-grams of files the user gives.
#[derive(Clone, Copy, Default)]
pub(crate) struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_SEED);
    }
}

impl std::hash::Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`FxHasher`].
pub(crate) type FxMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// Sums per-segment integer statistics over segments `0..n`: `add(range, sums)` adds those of a
/// range of segments to `sums` (of length `width`). Ranges run on up to
/// `available_parallelism` threads; integer sums make the result independent of the split.
pub(crate) fn sum_segments<T>(n: usize, width: usize, add: impl Fn(std::ops::Range<usize>, &mut [T]) + Sync) -> Vec<T>
where
    T: Copy + Default + std::ops::AddAssign + Send,
{
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).min(8);
    let threads = if n < 2000 { 1 } else { threads };
    let chunk = n.div_ceil(threads.max(1)).max(1);
    let parts: Vec<Vec<T>> = std::thread::scope(|scope| {
        let add = &add;
        let handles: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| {
                scope.spawn(move || {
                    let mut sums = vec![T::default(); width];
                    add(start..(start + chunk).min(n), &mut sums);
                    sums
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("metric thread panicked")).collect()
    });
    let mut sums = vec![T::default(); width];
    for part in parts {
        for (s, v) in sums.iter_mut().zip(part) {
            *s += v;
        }
    }
    sums
}

/// The sacreBLEU version whose output this module reproduces.
pub const SACREBLEU_VERSION: &str = "2.5.1";

/// What can go wrong computing or printing a metric.
#[derive(Debug, thiserror::Error)]
pub enum MetricError {
    #[error("tokenizer {0:?} is not available in tchseq (it needs mecab or sentencepiece)")]
    TokenizerUnavailable(String),
    #[error("unknown tokenizer {0:?} (choose from none, zh, 13a, intl, char)")]
    UnknownTokenizer(String),
    #[error("unknown smoothing method {0:?} (choose from none, floor, add-k, exp)")]
    UnknownSmoothing(String),
    #[error("unknown metric {0:?} (choose from bleu, chrf, ter)")]
    UnknownMetric(String),
    #[error("unknown format {0:?} (choose from json, text)")]
    UnknownFormat(String),
    #[error("{0} is not available in tchseq")]
    Unsupported(String),
    #[error("System and reference streams have different lengths ({hyps} hypotheses, {refs} references)")]
    LengthMismatch { hyps: usize, refs: usize },
    #[error("no references given")]
    NoReferences,
    #[error("the system output contains no sentence")]
    EmptySystem,
    #[error("invalid SACREBLEU_SEED: {0}")]
    BadSeed(String),
    #[error("sacreBLEU 2.5.1 fails here: {0}")]
    SacrebleuFails(String),
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
}

/// Python's `str.isspace` for one character (Rust's `is_whitespace` lacks U+001C..U+001F).
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.split()`.
pub fn py_split(s: &str) -> Vec<&str> {
    s.split(py_isspace).filter(|t| !t.is_empty()).collect()
}

/// Python's `str.rstrip()`.
pub fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_isspace)
}

/// Python's `str.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// Upper-case letters whose lowercase mapping is newer than Python 3.11's Unicode 14.0, so that
/// Python's `str.lower()` leaves them as they are while Rust's tables lower them.
const LOWER_NEWER_THAN_PY311: &[(char, char)] = &[
    ('\u{1c89}', '\u{1c89}'),
    ('\u{a7cb}', '\u{a7cc}'),
    ('\u{a7ce}', '\u{a7ce}'),
    ('\u{a7d2}', '\u{a7d2}'),
    ('\u{a7d4}', '\u{a7d4}'),
    ('\u{a7da}', '\u{a7da}'),
    ('\u{a7dc}', '\u{a7dc}'),
    ('\u{10d50}', '\u{10d65}'),
    ('\u{16ea0}', '\u{16eb8}'),
];

fn lower_newer_than_py311(c: char) -> bool {
    LOWER_NEWER_THAN_PY311.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

/// Python 3.11's `str.lower()` (Rust's `to_lowercase`, final sigma included, but leaving the
/// letters Unicode 14.0 does not lower).
pub fn py_lower(s: &str) -> String {
    if !s.chars().any(lower_newer_than_py311) {
        return s.to_lowercase();
    }
    let mut out = String::with_capacity(s.len());
    for run in s.split_inclusive(lower_newer_than_py311) {
        let mut chars = run.chars();
        match chars.next_back() {
            Some(last) if lower_newer_than_py311(last) => {
                out.push_str(&chars.as_str().to_lowercase());
                out.push(last);
            }
            _ => out.push_str(&run.to_lowercase()),
        }
    }
    out
}

/// How the CLI reads a file (`open(newline="\n")`, one `rstrip()`ped line per `\n`).
pub fn split_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.split('\n').map(|l| py_rstrip(l).to_string()).collect();
    if text.is_empty() || text.ends_with('\n') {
        lines.pop();
    }
    lines
}

/// Reads a UTF-8 file as [`split_lines`] does (`.gz` is not handled).
pub fn read_lines(path: &Path) -> Result<Vec<String>, MetricError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| MetricError::Read { path: path.display().to_string(), source })?;
    Ok(split_lines(&text))
}

pub(crate) fn check_lengths(hyps: &[String], refs: &[Vec<String>]) -> Result<(), MetricError> {
    if refs.is_empty() {
        return Err(MetricError::NoReferences);
    }
    if hyps.is_empty() {
        return Err(MetricError::EmptySystem);
    }
    if let Some(r) = refs.iter().find(|r| r.len() != hyps.len()) {
        return Err(MetricError::LengthMismatch { hyps: hyps.len(), refs: r.len() });
    }
    Ok(())
}

/// A metric `-m` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MetricKind {
    Bleu,
    Chrf,
    Ter,
}

impl MetricKind {
    pub fn parse(name: &str) -> Result<Self, MetricError> {
        match name.to_ascii_lowercase().as_str() {
            "bleu" => Ok(Self::Bleu),
            "chrf" => Ok(Self::Chrf),
            "ter" => Ok(Self::Ter),
            _ => Err(MetricError::UnknownMetric(name.to_string())),
        }
    }
}

/// Everything the sacreBLEU CLI's single-system corpus mode takes.
#[derive(Clone, Debug)]
pub struct SacrebleuOptions {
    /// `-m` (printed in sorted order, BLEU, chrF, TER, as sacreBLEU does).
    pub metrics: Vec<MetricKind>,
    pub bleu: BleuOptions,
    pub chrf: ChrfOptions,
    pub ter: TerOptions,
    /// `-f json` (default) or `-f text`.
    pub json: bool,
    /// `-w` (default 1).
    pub width: usize,
    /// `-b`.
    pub score_only: bool,
    /// `--short` (ignored with JSON, as in sacreBLEU).
    pub short: bool,
    /// The `version:` field of signatures.
    pub version: String,
    /// `--confidence` with `--confidence-n` (sacreBLEU resamples only when it is above 1).
    pub confidence_n: Option<i64>,
    /// `SACREBLEU_SEED` (unset: 12345).
    pub seed: Option<String>,
}

impl Default for SacrebleuOptions {
    fn default() -> Self {
        Self {
            metrics: vec![MetricKind::Bleu],
            bleu: BleuOptions::default(),
            chrf: ChrfOptions::default(),
            ter: TerOptions::default(),
            json: true,
            width: 1,
            score_only: false,
            short: false,
            version: SACREBLEU_VERSION.to_string(),
            confidence_n: None,
            seed: None,
        }
    }
}

/// One metric's result: the score and its signature.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricResult {
    pub score: Score,
    pub signature: Signature,
}

/// Computes the requested metrics; `refs[k][i]` is the k-th reference of hypothesis i.
pub fn corpus_scores(
    hyps: &[String],
    refs: &[Vec<String>],
    opts: &SacrebleuOptions,
) -> Result<Vec<MetricResult>, MetricError> {
    check_lengths(hyps, refs)?;
    let mut kinds = opts.metrics.clone();
    kinds.sort();
    kinds.dedup();
    let n = refs.len();
    let mut out = Vec::new();
    for kind in kinds {
        out.push(match kind {
            MetricKind::Bleu => {
                let m = Bleu::new(opts.bleu.clone());
                let s = m.corpus_score(hyps, refs)?;
                MetricResult { score: Bleu::to_score(&s), signature: m.signature(n, &opts.version) }
            }
            MetricKind::Chrf => {
                let m = Chrf::new(opts.chrf.clone());
                let s = m.corpus_score(hyps, refs)?;
                MetricResult { score: m.to_score(s), signature: m.signature(n, &opts.version) }
            }
            MetricKind::Ter => {
                let m = Ter::new(opts.ter.clone())?;
                let (s, _, _) = m.corpus_score(hyps, refs)?;
                MetricResult { score: Ter::to_score(s), signature: m.signature(n, &opts.version) }
            }
        });
    }
    Ok(out)
}

/// Exactly what `sacrebleu REFS... -i HYP ...` prints on stdout for one system.
pub fn sacrebleu_report(hyps: &[String], refs: &[Vec<String>], opts: &SacrebleuOptions) -> Result<String, MetricError> {
    let results = match opts.confidence_n {
        None => corpus_scores(hyps, refs, opts)?,
        Some(n) => confidence_scores(hyps, refs, opts, n)?,
    };
    let lines: Vec<String> = results
        .iter()
        .map(|r| {
            let sig = r.signature.format(opts.short && !opts.json);
            r.score.format(opts.width, opts.score_only, &sig, opts.json)
        })
        .collect();
    Ok(format::print_single_results(&lines, opts.json))
}

/// The scores of `--confidence`, each with its bootstrap mean and confidence interval.
fn confidence_scores(
    hyps: &[String],
    refs: &[Vec<String>],
    opts: &SacrebleuOptions,
    n_bootstrap: i64,
) -> Result<Vec<MetricResult>, MetricError> {
    check_lengths(hyps, refs)?;
    let seed = significance::SeedChoice::parse(opts.seed.as_deref())?;
    let mut kinds = opts.metrics.clone();
    kinds.sort();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|kind| {
            let stats = significance::MetricStats::extract(kind, opts, hyps, refs)?;
            let (score, signature) = significance::confidence(&stats, &seed, n_bootstrap.max(0) as usize)?;
            Ok(MetricResult { score, signature })
        })
        .collect()
}

/// [`sacrebleu_report`] on files, read as the CLI reads them.
pub fn sacrebleu_report_files(hyp: &Path, refs: &[&Path], opts: &SacrebleuOptions) -> Result<String, MetricError> {
    let hyps = read_lines(hyp)?;
    let refs = refs.iter().map(|p| read_lines(p)).collect::<Result<Vec<_>, _>>()?;
    sacrebleu_report(&hyps, &refs, opts)
}

/// Exactly what `sacrebleu REFS... -i BASELINE SYS... --paired-bs` (or `--paired-ar`) prints on
/// stdout: `systems` are (name, lines), the baseline first; `n` is `--paired-bs-n`
/// (`--paired-ar-n`).
pub fn sacrebleu_paired_report(
    systems: &[(String, Vec<String>)],
    refs: &[Vec<String>],
    opts: &SacrebleuOptions,
    test: results_table::PairedTest,
    n: i64,
) -> Result<String, MetricError> {
    let seed = significance::SeedChoice::parse(opts.seed.as_deref())?;
    for (_, hyps) in systems {
        check_lengths(hyps, refs)?;
    }
    let hyps: Vec<Vec<String>> = systems.iter().map(|(_, h)| h.clone()).collect();
    let columns = match test {
        results_table::PairedTest::Bootstrap => significance::paired_bs(&hyps, refs, opts, n.max(0) as usize, &seed)?,
        results_table::PairedTest::ApproximateRandomization => {
            significance::paired_ar(&hyps, refs, opts, n.max(0) as usize, &seed)?
        }
    };
    let names: Vec<String> = systems.iter().map(|(n, _)| n.clone()).collect();
    results_table::ResultsTable::paired(&names, columns, test, n, opts.short).print(opts.json, opts.width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_like_python() {
        assert_eq!(split_lines("a \nb\r\n\n"), vec!["a", "b", ""]);
        assert_eq!(split_lines("a\nb"), vec!["a", "b"]);
        assert!(split_lines("").is_empty());
        assert_eq!(py_split("a\u{1c}b\u{a0}c"), vec!["a", "b", "c"]);
        assert_eq!(py_lower("AΣ \u{a7cb}B\u{10d50}"), "aς \u{a7cb}b\u{10d50}");
    }

    #[test]
    fn default_report() {
        let h = vec!["the cat sat on the mat".to_string()];
        let r = vec![vec!["the cat sat on the mat".to_string()]];
        let out = sacrebleu_report(&h, &r, &SacrebleuOptions { json: false, ..Default::default() }).unwrap();
        assert_eq!(
            out,
            "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1 = 100.0 \
             100.0/100.0/100.0/100.0 (BP = 1.000 ratio = 1.000 hyp_len = 6 ref_len = 6)\n"
        );
    }
}
