//! How fairseq-interactive turns a buffer of lines into batches: the inference
//! `LanguagePairDataset` (`ordered_indices`, `filter_indices_by_size`, `collater`) and
//! `data_utils.batch_by_size` (the Cython `batch_by_size_vec`; fairseq-interactive passes
//! `required_batch_size_multiple=1`, fairseq-generate 8).
//!
//! The order matters for parity: padding and GEMM shapes depend on which sentences share a
//! batch, and fairseq's low bits follow them.

use tch::{Device, Kind, Tensor};

use super::GenerateError;

/// numpy's legacy `RandomState` MT19937 (`np.random.seed(int)`).
struct Mt19937 {
    mt: [u32; 624],
    mti: usize,
}

impl Mt19937 {
    fn new(seed: u32) -> Self {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { mt, mti: 624 }
    }

    fn next_u32(&mut self) -> u32 {
        const UPPER: u32 = 0x8000_0000;
        const LOWER: u32 = 0x7fff_ffff;
        const MATRIX_A: u32 = 0x9908_b0df;
        if self.mti >= 624 {
            for i in 0..624 {
                let y = (self.mt[i] & UPPER) | (self.mt[(i + 1) % 624] & LOWER);
                let mut v = self.mt[(i + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= MATRIX_A;
                }
                self.mt[i] = v;
            }
            self.mti = 0;
        }
        let mut y = self.mt[self.mti];
        self.mti += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// numpy's legacy `random_interval(max)` (rejection sampling with a bit mask).
    fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mut mask = max;
        for shift in [1, 2, 4, 8, 16, 32] {
            mask |= mask >> shift;
        }
        if max <= 0xffff_ffff {
            loop {
                let v = u64::from(self.next_u32()) & mask;
                if v <= max {
                    return v;
                }
            }
        }
        loop {
            let hi = u64::from(self.next_u32());
            let lo = u64::from(self.next_u32());
            let v = ((hi << 32) | lo) & mask;
            if v <= max {
                return v;
            }
        }
    }
}

/// `np.random.seed(seed); np.random.permutation(n)` (numpy's legacy shuffle).
pub fn numpy_permutation(n: usize, seed: u32) -> Vec<usize> {
    let mut rng = Mt19937::new(seed);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.interval(i as u64) as usize;
        v.swap(i, j);
    }
    v
}

/// `LanguagePairDataset.ordered_indices()` of the inference dataset (shuffle=True, no target),
/// under `data_utils.numpy_seed(1)`: a seeded permutation, then a stable sort by source length.
pub fn ordered_indices(src_sizes: &[usize]) -> Vec<usize> {
    let mut indices = numpy_permutation(src_sizes.len(), 1);
    // np.argsort(kind="mergesort") is stable
    indices.sort_by_key(|&i| src_sizes[i]);
    indices
}

/// `data_utils.batch_by_size` (`batch_by_size_vec` of `data_utils_fast.pyx`): splits the ordered
/// `indices` into batches of at most `max_sentences` sentences and at most `max_tokens` tokens
/// (batch size × longest sentence), with sizes that are multiples of `bsz_mult` where
/// possible. `num_tokens[k]` is the size of `indices[k]` (fairseq: max(src, tgt) length).
///
/// Every index lands in exactly one batch, for any sizes and limits. Unlike fairseq, which
/// asserts, a sentence longer than `max_tokens` is not an error: it gets a batch of its own, and
/// the sentences between such sentences are batched by fairseq's rule.
pub fn batch_by_size(
    indices: &[usize],
    num_tokens: &[usize],
    max_tokens: Option<usize>,
    max_sentences: Option<usize>,
    bsz_mult: usize,
) -> Vec<Vec<usize>> {
    let n = indices.len().min(num_tokens.len());
    let over_budget = |t: usize| max_tokens.is_some_and(|m| m > 0 && t > m);
    let mut batches = Vec::new();
    let mut run_start = 0;
    for pos in 0..=n {
        if pos < n && !over_budget(num_tokens[pos]) {
            continue;
        }
        batches.extend(batch_by_size_vec(&indices[run_start..pos], &num_tokens[run_start..pos], Limits { max_tokens, max_sentences, bsz_mult }));
        if pos < n {
            batches.push(vec![indices[pos]]);
        }
        run_start = pos + 1;
    }
    // `indices` longer than `num_tokens`: the rest, unsized, one batch each
    batches.extend(indices[n..].iter().map(|&i| vec![i]));
    batches
}

/// `batch_by_size_vec`'s limits, as `batch_by_size` passes them on.
#[derive(Clone, Copy)]
struct Limits {
    max_tokens: Option<usize>,
    max_sentences: Option<usize>,
    bsz_mult: usize,
}

/// fairseq's `batch_by_size_vec` itself, for `num_tokens` that are all within `max_tokens`.
fn batch_by_size_vec(indices: &[usize], num_tokens: &[usize], limits: Limits) -> Vec<Vec<usize>> {
    let Limits { max_tokens, max_sentences, bsz_mult } = limits;
    let n = indices.len();
    if n == 0 {
        return Vec::new();
    }
    let bsz_mult = bsz_mult.max(1);
    let over_sentences = |s: usize| max_sentences.is_some_and(|m| m > 0 && s > m);
    let over_tokens = |t: usize| max_tokens.is_some_and(|m| m > 0 && t > m);

    // fairseq sizes this `n`; a tail overflow finalizes two batches at one position, so `2n + 1`
    // bounds the index whatever the sizes
    let mut batches_ends: Vec<usize> = vec![0; 2 * n + 1];
    let mut batches_count = 0usize;
    let mut batch_start = 0usize;
    let mut tail_max_tokens = 0usize;
    let mut batch_max_tokens = 0usize;
    for (pos, &tokens) in num_tokens[..n].iter().enumerate() {
        tail_max_tokens = tail_max_tokens.max(tokens);
        let new_batch_end = pos + 1;
        let mut new_batch_max_tokens = batch_max_tokens.max(tail_max_tokens);
        let new_batch_sentences = new_batch_end - batch_start;
        let new_batch_num_tokens = new_batch_sentences.saturating_mul(new_batch_max_tokens);

        let overflow = over_sentences(new_batch_sentences) || over_tokens(new_batch_num_tokens);
        let size_matches_with_bsz_mult =
            new_batch_sentences < bsz_mult || new_batch_sentences.is_multiple_of(bsz_mult);

        if overflow {
            let tail_num_tokens = tail_max_tokens.saturating_mul(new_batch_end.saturating_sub(batches_ends[batches_count]));
            if over_tokens(tail_num_tokens) {
                batches_count += 1;
                batches_ends[batches_count] = pos;
                tail_max_tokens = tokens;
            }
            batch_start = batches_ends[batches_count];
            batches_count += 1;
            new_batch_max_tokens = tail_max_tokens;
        }
        if overflow || size_matches_with_bsz_mult {
            batches_ends[batches_count] = new_batch_end;
            batch_max_tokens = new_batch_max_tokens;
            tail_max_tokens = 0;
        }
    }
    if batches_ends[batches_count] != n {
        batches_count += 1;
    }
    // np.split(indices, batches_ends[:batches_count]); empty pieces are dropped
    let mut batches = Vec::with_capacity(batches_count + 1);
    let mut start = 0;
    for &end in batches_ends[..batches_count].iter().chain(std::iter::once(&n)) {
        let end = end.min(n);
        if end > start {
            batches.push(indices[start..end].to_vec());
        }
        start = start.max(end);
    }
    batches
}

/// One collated batch (`LanguagePairDataset.collater` without targets).
pub struct Batch {
    /// Dataset indices (positions in the buffer), sorted by descending source length.
    pub ids: Vec<usize>,
    /// `[bsz, max_len]`, left-padded.
    pub src_tokens: Tensor,
}

/// `collate`: left-pad (`collate_tokens(..., left_pad=True)`), then reorder rows by
/// `src_lengths.sort(descending=True)` (libtorch's sort, as fairseq).
pub fn collate(samples: &[(usize, &[i64])], pad: i64) -> Result<Batch, GenerateError> {
    let width = samples.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
    let mut flat = vec![pad; samples.len() * width];
    for (row, (_, toks)) in samples.iter().enumerate() {
        let start = row * width + width - toks.len();
        flat[start..start + toks.len()].copy_from_slice(toks);
    }
    let src = Tensor::from_slice(&flat).f_view([samples.len() as i64, width as i64])?;
    let lengths: Vec<i64> = samples.iter().map(|(_, t)| t.iter().filter(|&&x| x != pad).count() as i64).collect();
    let (_, sort_order) = Tensor::from_slice(&lengths).f_sort(0, true)?;
    let order = Vec::<i64>::try_from(&sort_order)?;
    let src_tokens = src.f_index_select(0, &sort_order)?;
    let ids = order.iter().map(|&i| samples[i as usize].0).collect();
    Ok(Batch { ids, src_tokens })
}

/// Moves a batch's tokens to `device` (fairseq: `src_tokens.cuda()`).
pub fn to_device(t: &Tensor, device: Device) -> Result<Tensor, GenerateError> {
    Ok(t.f_to_device(device)?.f_to_kind(Kind::Int64)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_matches_numpy_legacy_seed_1() {
        // np.random.seed(1); np.random.permutation(10) with numpy 2.2.6
        assert_eq!(numpy_permutation(10, 1), vec![2, 9, 6, 4, 0, 3, 1, 7, 8, 5]);
        let p = numpy_permutation(70, 1);
        assert_eq!(&p[..12], &[65, 26, 66, 54, 27, 60, 49, 36, 48, 31, 2, 39]);
        assert_eq!(&p[60..], &[45, 7, 68, 1, 16, 64, 5, 9, 12, 37]);
    }

    #[test]
    fn ordered_indices_match_language_pair_dataset() {
        // LanguagePairDataset(...).ordered_indices() under numpy_seed(1), then
        // batch_by_size(max_sentences=4), computed by fairseq 0.12.2 for these sizes
        let sizes = [3, 5, 1, 4, 4, 2, 7, 3, 5, 1, 1, 6, 4, 3, 2, 2, 8, 5];
        let idx = ordered_indices(&sizes);
        assert_eq!(idx, vec![2, 10, 9, 14, 15, 5, 13, 7, 0, 3, 4, 12, 1, 17, 8, 11, 6, 16]);
        let by_position: Vec<usize> = idx.iter().map(|&i| sizes[i]).collect();
        assert_eq!(
            batch_by_size(&idx, &by_position, None, Some(4), 1),
            vec![vec![2, 10, 9, 14], vec![15, 5, 13, 7], vec![0, 3, 4, 12], vec![1, 17, 8, 11], vec![6, 16]]
        );
    }

    #[test]
    fn batch_by_size_matches_fairseq_cython() {
        // fairseq.data.data_utils_fast.batch_by_size_vec on these inputs
        let idx: Vec<usize> = (0..10).collect();
        let nt = [3, 3, 4, 5, 5, 6, 7, 9, 9, 12];
        assert_eq!(
            batch_by_size(&idx, &nt, Some(20), None, 1),
            vec![vec![0, 1, 2, 3], vec![4, 5], vec![6, 7], vec![8], vec![9]]
        );
        assert_eq!(batch_by_size(&idx, &nt, None, Some(3), 1), vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8], vec![9]]);
        assert_eq!(
            batch_by_size(&idx, &nt, Some(24), Some(3), 1),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7], vec![8, 9]]
        );
        // longer than the budget: its own batch, nothing dropped
        assert_eq!(batch_by_size(&[0, 1, 2], &[3, 30, 3], Some(10), None, 1), vec![vec![0], vec![1], vec![2]]);
    }

    /// Every index in exactly one batch, in order; no batch over `max_sentences`; a batch over
    /// `max_tokens` only for one sentence that is itself over it. Seeded, 20,000 cases.
    #[test]
    fn batch_by_size_property_every_index_once_within_limits() {
        let mut rng = Mt19937::new(62);
        let mut pick = |max: u64| rng.interval(max) as usize;
        let mut long = 0;
        for case in 0..20_000 {
            let n = pick(40);
            let spread = if pick(3) == 0 { 600 } else { 30 };
            let sizes: Vec<usize> = (0..n).map(|_| 1 + pick(spread)).collect();
            let indices = ordered_indices(&sizes);
            let num_tokens: Vec<usize> = indices.iter().map(|&i| sizes[i]).collect();
            let max_tokens = [None, Some(0), Some(1 + pick(120))][pick(2)];
            let max_sentences = [None, Some(0), Some(1 + pick(20))][pick(2)];
            let bsz_mult = 1 + pick(8);
            let batches = batch_by_size(&indices, &num_tokens, max_tokens, max_sentences, bsz_mult);
            let what = format!("case {case}: sizes {num_tokens:?} max_tokens {max_tokens:?} max_sentences {max_sentences:?} mult {bsz_mult}");
            assert_eq!(batches.concat(), indices, "{what}");
            for b in &batches {
                assert!(!b.is_empty(), "{what}");
                if let Some(m) = max_sentences.filter(|&m| m > 0) {
                    assert!(b.len() <= m, "{what}: {b:?}");
                }
                if let Some(m) = max_tokens.filter(|&m| m > 0) {
                    let longest = b.iter().map(|&i| sizes[i]).max().unwrap_or(0);
                    assert!(b.len() * longest <= m || b.len() == 1, "{what}: {b:?}");
                    long += usize::from(longest > m);
                }
            }
        }
        assert!(long > 1000, "the cases put too few sentences over max_tokens: {long}");
    }

    #[test]
    fn collate_left_pads_and_sorts_by_length() {
        let a = [5i64, 2];
        let b = [6i64, 7, 8, 2];
        let c = [9i64, 9, 2];
        let batch = collate(&[(10, &a[..]), (11, &b[..]), (12, &c[..])], 1).unwrap();
        assert_eq!(batch.ids, vec![11, 12, 10]);
        let rows = Vec::<i64>::try_from(batch.src_tokens.view([-1])).unwrap();
        assert_eq!(rows, vec![6, 7, 8, 2, 1, 9, 9, 2, 1, 1, 5, 2]);
    }
}
