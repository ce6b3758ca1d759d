//! sacreBLEU 2.5.1's corpus TER (`metrics/ter.py`, `metrics/lib_ter.py`), ported exactly.
//!
//! lib_ter's row cache is left out: every row of the beam edit distance is a function of the
//! hypothesis prefix and of the length ratio (which shifts do not change), so the cache only
//! saves time.

use super::format::{Score, Signature};
use super::numpy_math::NpFloat;
use super::{py_lower, py_rstrip, py_split, MetricError};

const COST: i64 = 1;
const MAX_SHIFT_SIZE: usize = 10;
const MAX_SHIFT_DIST: i64 = 50;
const BEAM_WIDTH: i64 = 25;
const MAX_SHIFT_CANDIDATES: usize = 1000;
const INT_INFINITY: i64 = 10_000_000_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Ins,
    Del,
    Nop,
    Sub,
    Undef,
}

/// The arguments of `TER(...)`; only the tercom tokenizer's lowercasing is ported.
#[derive(Clone, Debug, Default)]
pub struct TerOptions {
    pub case_sensitive: bool,
    pub normalized: bool,
    pub no_punct: bool,
    pub asian_support: bool,
}

/// `BeamEditDistance.__call__` without the cache: (edit distance, trace).
fn edit_distance(words_h: &[&str], words_r: &[&str]) -> (i64, Vec<Op>) {
    let (n_h, n_r) = (words_h.len(), words_r.len());
    let mut dist = vec![vec![(INT_INFINITY, Op::Undef); n_r + 1]; n_h + 1];
    for (i, cell) in dist[0].iter_mut().enumerate() {
        *cell = (i as i64 * COST, Op::Ins);
    }
    let length_ratio = if n_h > 0 { n_r as f64 / n_h as f64 } else { 1.0 };
    let beam_width = if (BEAM_WIDTH as f64) < length_ratio / 2.0 {
        (length_ratio / 2.0 + BEAM_WIDTH as f64).ceil() as i64
    } else {
        BEAM_WIDTH
    };
    for i in 1..=n_h {
        let pseudo_diag = (i as f64 * length_ratio).floor() as i64;
        let min_j = 0.max(pseudo_diag - beam_width);
        let mut max_j = (n_r as i64 + 1).min(pseudo_diag + beam_width);
        if i == n_h {
            max_j = n_r as i64 + 1;
        }
        for j in min_j.max(0) as usize..max_j.max(0) as usize {
            if j == 0 {
                dist[i][0] = (dist[i - 1][0].0 + COST, Op::Del);
            } else {
                let (cost_sub, op_sub) = if words_h[i - 1] == words_r[j - 1] { (0, Op::Nop) } else { (COST, Op::Sub) };
                let ops = [
                    (dist[i - 1][j - 1].0 + cost_sub, op_sub),
                    (dist[i - 1][j].0 + COST, Op::Del),
                    (dist[i][j - 1].0 + COST, Op::Ins),
                ];
                for (cost, op) in ops {
                    if dist[i][j].0 > cost {
                        dist[i][j] = (cost, op);
                    }
                }
            }
        }
    }
    let mut trace = Vec::new();
    let (mut i, mut j) = (n_h, n_r);
    while i > 0 || j > 0 {
        let op = dist[i][j].1;
        trace.push(op);
        match op {
            Op::Sub | Op::Nop => {
                i -= 1;
                j -= 1;
            }
            Op::Ins => j -= 1,
            Op::Del => i -= 1,
            // lib_ter raises here; the beam always reaches the last cell
            Op::Undef => break,
        }
    }
    trace.reverse();
    (dist[n_h][n_r].0, trace)
}

/// `trace_to_alignment` of the flipped trace: (align by reference position, ref_err, hyp_err).
fn flipped_alignment(trace: &[Op]) -> (Vec<i64>, Vec<u8>, Vec<u8>) {
    let (mut pos_hyp, mut pos_ref) = (-1i64, -1i64);
    let (mut hyp_err, mut ref_err, mut align) = (Vec::new(), Vec::new(), Vec::new());
    for &op in trace {
        let op = match op {
            Op::Ins => Op::Del,
            Op::Del => Op::Ins,
            o => o,
        };
        match op {
            Op::Nop | Op::Sub => {
                pos_hyp += 1;
                pos_ref += 1;
                align.push(pos_hyp);
                let e = u8::from(op == Op::Sub);
                hyp_err.push(e);
                ref_err.push(e);
            }
            Op::Ins => {
                pos_hyp += 1;
                hyp_err.push(1);
            }
            Op::Del => {
                pos_ref += 1;
                align.push(pos_hyp);
                ref_err.push(1);
            }
            Op::Undef => {}
        }
    }
    let _ = pos_ref;
    (align, ref_err, hyp_err)
}

/// Python's `xs[a:b]` for 0 <= a.
fn slice<T>(xs: &[T], a: usize, b: usize) -> &[T] {
    let b = b.min(xs.len());
    let a = a.min(b);
    &xs[a..b]
}

/// `_perform_shift`.
fn perform_shift<'a>(words: &[&'a str], start: usize, length: usize, target: usize) -> Vec<&'a str> {
    let n = words.len();
    let mut out = Vec::with_capacity(n);
    if target < start {
        out.extend_from_slice(slice(words, 0, target));
        out.extend_from_slice(slice(words, start, start + length));
        out.extend_from_slice(slice(words, target, start));
        out.extend_from_slice(slice(words, start + length, n));
    } else if target > start + length {
        out.extend_from_slice(slice(words, 0, start));
        out.extend_from_slice(slice(words, start + length, target));
        out.extend_from_slice(slice(words, start, start + length));
        out.extend_from_slice(slice(words, target, n));
    } else {
        out.extend_from_slice(slice(words, 0, start));
        out.extend_from_slice(slice(words, start + length, length + target));
        out.extend_from_slice(slice(words, start, start + length));
        out.extend_from_slice(slice(words, length + target, n));
    }
    out
}

fn err_sum(errs: &[u8], a: usize, len: usize) -> u32 {
    slice(errs, a, a + len).iter().map(|&e| e as u32).sum()
}

/// A shift candidate's rank: (gain, length, -start_h, -idx).
type RankKey = (i64, usize, i64, i64);

/// `_shift`: (gain, shifted words, checked candidates).
fn shift<'a>(words_h: &[&'a str], words_r: &[&str], checked: usize) -> (i64, Vec<&'a str>, usize) {
    let mut checked = checked;
    let (pre_score, inv_trace) = edit_distance(words_h, words_r);
    let (align, ref_err, hyp_err) = flipped_alignment(&inv_trace);
    // (gain, length, -start_h, -idx): lib_ter's ranking of candidates (equal keys mean equal shifts)
    let mut best: Option<(RankKey, Vec<&'a str>)> = None;
    let (n_h, n_r) = (words_h.len(), words_r.len());
    'pairs: for start_h in 0..n_h {
        for start_r in 0..n_r {
            if (start_r as i64 - start_h as i64).abs() > MAX_SHIFT_DIST {
                continue;
            }
            let mut length = 0;
            while words_h[start_h + length] == words_r[start_r + length] && length < MAX_SHIFT_SIZE {
                length += 1;
                // the body of `_shift`'s loop over `_find_shifted_pairs`
                let consider = err_sum(&hyp_err, start_h, length) != 0
                    && err_sum(&ref_err, start_r, length) != 0
                    && !(start_h as i64 <= align[start_r] && align[start_r] < (start_h + length) as i64);
                if consider {
                    let mut prev_idx = -1i64;
                    for offset in -1i64..length as i64 {
                        let pos = start_r as i64 + offset;
                        let idx = if pos == -1 {
                            0
                        } else if (pos as usize) < align.len() {
                            align[pos as usize] + 1
                        } else {
                            break;
                        };
                        if idx == prev_idx {
                            continue;
                        }
                        prev_idx = idx;
                        let shifted = perform_shift(words_h, start_h, length, idx as usize);
                        let key = (pre_score - edit_distance(&shifted, words_r).0, length, -(start_h as i64), -idx);
                        checked += 1;
                        if best.as_ref().is_none_or(|(b, _)| key > *b) {
                            best = Some((key, shifted));
                        }
                    }
                    if checked >= MAX_SHIFT_CANDIDATES {
                        break 'pairs;
                    }
                }
                if n_h == start_h + length || n_r == start_r + length {
                    break;
                }
            }
        }
    }
    match best {
        None => (0, words_h.to_vec(), checked),
        Some(((gain, ..), words)) => (gain, words, checked),
    }
}

/// `translation_edit_rate`: (number of edits, reference length).
pub fn translation_edit_rate(words_hyp: &[&str], words_ref: &[&str]) -> (i64, usize) {
    if words_ref.is_empty() {
        return (words_hyp.len() as i64, 0);
    }
    let mut shifts = 0;
    let mut input: Vec<&str> = words_hyp.to_vec();
    let mut checked = 0;
    loop {
        let (delta, new_input, c) = shift(&input, words_ref, checked);
        checked = c;
        if checked >= MAX_SHIFT_CANDIDATES || delta <= 0 {
            break;
        }
        shifts += 1;
        input = new_input;
    }
    (shifts + edit_distance(&input, words_ref).0, words_ref.len())
}

/// `TER`: a configured metric.
pub struct Ter {
    pub opts: TerOptions,
}

impl Ter {
    pub fn new(opts: TerOptions) -> Result<Self, MetricError> {
        if opts.normalized || opts.no_punct || opts.asian_support {
            return Err(MetricError::Unsupported("TER's --ter-normalized, --ter-no-punct and --ter-asian-support".into()));
        }
        Ok(Self { opts })
    }

    /// `TER._preprocess_segment` with the tercom tokenizer's defaults.
    fn preprocess(&self, sent: &str) -> String {
        let sent = py_rstrip(sent);
        if sent.is_empty() {
            return String::new();
        }
        let sent = if self.opts.case_sensitive { sent.to_string() } else { py_lower(sent) };
        py_split(&sent).join(" ")
    }

    /// `corpus_score(hyps, refs)`: (score, total edits, summed average reference length).
    pub fn corpus_score(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<(f64, i64, f64), MetricError> {
        let stats = self.segment_statistics(hyps, refs)?;
        Ok(Self::score_from_stats(&stats))
    }

    /// `_extract_corpus_statistics`: `(best number of edits, average reference length)` per
    /// segment.
    pub fn segment_statistics(&self, hyps: &[String], refs: &[Vec<String>]) -> Result<Vec<(i64, f64)>, MetricError> {
        super::check_lengths(hyps, refs)?;
        Ok(hyps
            .iter()
            .enumerate()
            .map(|(i, hyp)| {
                let hyp = self.preprocess(hyp);
                let words_hyp = py_split(&hyp);
                let refs_i: Vec<String> = refs.iter().map(|r| self.preprocess(&r[i])).collect();
                let mut ref_lengths = 0usize;
                let mut best = INT_INFINITY;
                for r in &refs_i {
                    let (edits, len) = translation_edit_rate(&words_hyp, &py_split(r));
                    ref_lengths += len;
                    best = best.min(edits);
                }
                (best, ref_lengths as f64 / refs_i.len() as f64)
            })
            .collect())
    }

    /// `_aggregate_and_compute`: (score, total edits, summed average reference length).
    pub fn score_from_stats(stats: &[(i64, f64)]) -> (f64, i64, f64) {
        let (mut total_edits, mut sum_ref_lengths) = (0i64, 0.0f64);
        for &(edits, ref_len) in stats {
            total_edits += edits;
            sum_ref_lengths += ref_len;
        }
        let score = if sum_ref_lengths > 0.0 {
            total_edits as f64 / sum_ref_lengths
        } else if total_edits > 0 {
            1.0
        } else {
            0.0
        };
        (100.0 * score, total_edits, sum_ref_lengths)
    }

    /// `_compute_score_from_stats(stats).score` for a `float32` array of summed statistics (a
    /// bootstrap resample), with NumPy's types.
    pub fn score_from_f32_sums(stats: &[f32]) -> NpFloat {
        let (total_edits, sum_ref_lengths) = (stats[0], stats[1]);
        let score = if sum_ref_lengths > 0.0 {
            NpFloat::F32(total_edits / sum_ref_lengths)
        } else if total_edits > 0.0 {
            NpFloat::Py(1.0)
        } else {
            NpFloat::Py(0.0)
        };
        NpFloat::Py(100.0).mul(score)
    }

    /// `TERSignature`.
    pub fn signature(&self, num_refs: usize, version: &str) -> Signature {
        let yn = |b: bool| if b { "yes" } else { "no" };
        let mut sig = Signature::new(num_refs, version);
        sig.push("case", "c", if self.opts.case_sensitive { "mixed" } else { "lc" });
        sig.push("tok", "t", "tercom");
        sig.push("norm", "nr", yn(self.opts.normalized));
        sig.push("punct", "pn", yn(!self.opts.no_punct));
        sig.push("asian", "as", yn(self.opts.asian_support));
        sig
    }

    pub fn to_score(score: f64) -> Score {
        Score { name: "TER".to_string(), score, verbose: String::new(), confidence: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_shift() {
        let h: Vec<&str> = "d e f g h a b c".split(' ').collect();
        let r: Vec<&str> = "a b c d e f g h".split(' ').collect();
        assert_eq!(translation_edit_rate(&h, &r), (1, 8));
    }
}
