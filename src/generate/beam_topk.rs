//! `BeamSearch.step`'s `torch.topk(lprobs + scores[:, :, step - 1], k)` over each sentence's
//! `beam × V` row, computed on the host in one pass without materialising the sum, sentences
//! shared out among the intra-op threads.
//!
//! When the `k + 1` largest values are all distinct, the sorted top `k` (values and indices) is
//! unique, so it equals libtorch's bit for bit: the sums are the same IEEE single-precision
//! additions. When two of them are equal, libtorch's order depends on its partial sort, so
//! [`beam_topk`] returns `None` and the caller asks libtorch.

use tch::Tensor;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::kernels::isa::Isa;
use crate::libtorch::host::f32_view;
use crate::libtorch::parallel::parallel_for;

/// Values and flat `beam · V + token` indices, `[bsz, k]` each, best first.
pub struct TopK {
    pub values: Vec<f32>,
    pub indices: Vec<i64>,
}

/// Elements scanned per threshold check.
const CHUNK: usize = 32;

/// `lprobs` `[bsz, beam, V]` (only beam 0 at step 0, when `prev` is `None`), `prev` the
/// cumulative score of each of the `bsz · beam` hypotheses. `None` when the tensor is not a
/// contiguous f32 CPU tensor, when it holds NaN, or when the answer has ties.
pub fn beam_topk(lprobs: &Tensor, prev: Option<&[f32]>, k: usize) -> Option<TopK> {
    // SAFETY: the generator holds `lprobs` and nothing writes it during the call.
    let data = unsafe { f32_view(lprobs) }?;
    let &[bsz, beam, vocab] = lprobs.size().as_slice() else { return None };
    let (bsz, beam, vocab) = (usize::try_from(bsz).ok()?, usize::try_from(beam).ok()?, usize::try_from(vocab).ok()?);
    let rows_used = if prev.is_some() { beam } else { 1 };
    if prev.is_some_and(|p| p.len() != bsz * beam) || k == 0 || k >= rows_used * vocab {
        return None;
    }
    let mut out = TopK { values: vec![0.0; bsz * k], indices: vec![0; bsz * k] };
    let failed = AtomicBool::new(false);
    let slots = Slots(out.values.as_mut_ptr(), out.indices.as_mut_ptr());
    // sentences are independent: the threads share them out, each with its own `Best`
    parallel_for(bsz, GRAIN_ELEMENTS.div_ceil(rows_used * vocab), |start, end| {
        let slots = &slots;
        let mut best = Best::new(k + 1);
        for s in start..end {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            let ranked = sentence_topk(&mut best, &data[s * beam * vocab..][..rows_used * vocab], vocab, prev.map(|p| &p[s * beam..][..rows_used]));
            if ranked.is_none() || best.values.windows(2).any(|w| w[0] <= w[1]) {
                failed.store(true, Ordering::Relaxed);
                return;
            }
            // SAFETY: sentence `s` writes only its own `k` slots of each vector, which outlive
            // the parallel region.
            unsafe {
                std::ptr::copy_nonoverlapping(best.values.as_ptr(), slots.0.add(s * k), k);
                std::ptr::copy_nonoverlapping(best.indices.as_ptr(), slots.1.add(s * k), k);
            }
        }
    });
    (!failed.into_inner()).then_some(out)
}

/// Elements a thread scans at least (a sentence's `beam × V` is the unit).
const GRAIN_ELEMENTS: usize = 1 << 15;

struct Slots(*mut f32, *mut i64);
// SAFETY: `beam_topk` hands each thread disjoint sentences, so disjoint slots.
unsafe impl Sync for Slots {}

/// One sentence's rows (`rows.len() / vocab` of them) into `best`, cleared first, each row
/// with its hypothesis's previous score added.
fn sentence_topk(best: &mut Best, rows: &[f32], vocab: usize, prev: Option<&[f32]>) -> Option<()> {
    best.clear();
    for (b, row) in rows.chunks_exact(vocab).enumerate() {
        best.scan(row, (b * vocab) as i64, prev.map(|p| p[b]))?;
    }
    Some(())
}

/// The largest values seen so far, in descending order, at most `cap` of them.
struct Best {
    cap: usize,
    values: Vec<f32>,
    indices: Vec<i64>,
}

impl Best {
    fn new(cap: usize) -> Self {
        Self { cap, values: Vec::with_capacity(cap + 1), indices: Vec::with_capacity(cap + 1) }
    }

    fn clear(&mut self) {
        self.values.clear();
        self.indices.clear();
    }

    /// Offers `row[i] (+ add)` at flat index `offset + i` for every `i`. `None` on NaN.
    fn scan(&mut self, row: &[f32], offset: i64, add: Option<f32>) -> Option<()> {
        #[cfg(target_arch = "x86_64")]
        if Isa::here().is_some() {
            // SAFETY: the CPU has AVX2 (an AVX-512 CPU has it too).
            return unsafe { self.scan_avx2(row, offset, add) };
        }
        self.scan_any(row, offset, add)
    }

    /// [`Best::scan`] in AVX2's vectors: each chunk's comparisons with the threshold as a bit
    /// mask, and only the elements it marks offered, in order. An element the threshold held
    /// back cannot pass the threshold that offers before it raised, so the result is the same.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn scan_avx2(&mut self, row: &[f32], offset: i64, add: Option<f32>) -> Option<()> {
        use std::arch::x86_64::*;
        let start = self.fill(row, offset, add)?;
        // `+ 0.0` leaves every value as it is, a NaN a NaN
        let add_v = _mm256_set1_ps(add.unwrap_or(0.0));
        let mut chunks = row[start..].chunks_exact(CHUNK);
        let mut base = start;
        for chunk in &mut chunks {
            let threshold = _mm256_set1_ps(self.values[self.cap - 1]);
            let mut marked = 0u32;
            for (j, eight) in chunk.chunks_exact(8).enumerate() {
                // SAFETY: eight floats.
                let x = _mm256_add_ps(unsafe { _mm256_loadu_ps(eight.as_ptr()) }, add_v);
                // above the threshold, or NaN (unordered)
                let above = _mm256_cmp_ps::<_CMP_NLE_UQ>(x, threshold);
                marked |= (_mm256_movemask_ps(above) as u32) << (8 * j);
            }
            while marked != 0 {
                let i = marked.trailing_zeros() as usize;
                self.offer(plus(chunk[i], add), offset + (base + i) as i64)?;
                marked &= marked - 1;
            }
            base += CHUNK;
        }
        self.offer_each(chunks.remainder(), offset + base as i64, add)
    }

    /// Offers the first elements until `cap` are held; the index of the next one.
    #[inline(always)]
    fn fill(&mut self, row: &[f32], offset: i64, add: Option<f32>) -> Option<usize> {
        let start = (self.cap - self.values.len()).min(row.len());
        self.offer_each(&row[..start], offset, add)?;
        Some(start)
    }

    /// Offers every element of `xs`, `xs[i]` at flat index `offset + i`.
    #[inline(always)]
    fn offer_each(&mut self, xs: &[f32], offset: i64, add: Option<f32>) -> Option<()> {
        for (i, &x) in xs.iter().enumerate() {
            self.offer(plus(x, add), offset + i as i64)?;
        }
        Some(())
    }

    #[inline(always)]
    fn scan_any(&mut self, row: &[f32], offset: i64, add: Option<f32>) -> Option<()> {
        let start = self.fill(row, offset, add)?;
        let mut chunks = row[start..].chunks_exact(CHUNK);
        let mut base = start;
        for chunk in &mut chunks {
            let threshold = self.values[self.cap - 1];
            // a branch-free pass the compiler vectorizes; most chunks end here
            let any = match add {
                Some(p) => chunk.iter().fold(false, |any, &x| any | (x + p > threshold) | x.is_nan()),
                None => chunk.iter().fold(false, |any, &x| any | (x > threshold) | x.is_nan()),
            };
            if any {
                self.offer_each(chunk, offset + base as i64, add)?;
            }
            base += CHUNK;
        }
        self.offer_each(chunks.remainder(), offset + base as i64, add)
    }

    /// Inserts `v` if it belongs to the largest `cap` (equal values keep the earlier index first).
    #[inline]
    fn offer(&mut self, v: f32, index: i64) -> Option<()> {
        if v.is_nan() {
            return None;
        }
        let full = self.values.len() == self.cap;
        if full && v <= self.values[self.cap - 1] {
            return Some(());
        }
        let at = self.values.iter().position(|&w| v > w).unwrap_or(self.values.len());
        self.values.insert(at, v);
        self.indices.insert(at, index);
        if self.values.len() > self.cap {
            self.values.pop();
            self.indices.pop();
        }
        Some(())
    }
}

/// `x + add`, or `x` without one.
#[inline(always)]
fn plus(x: f32, add: Option<f32>) -> f32 {
    match add {
        Some(p) => x + p,
        None => x,
    }
}

/// Tensors `[bsz, k]` of a [`TopK`]: the candidates' scores, tokens and beams.
pub fn candidates(top: TopK, bsz: i64, k: i64, vocab: i64) -> Result<(Tensor, Tensor, Tensor), tch::TchError> {
    let tokens: Vec<i64> = top.indices.iter().map(|i| i % vocab).collect();
    let beams: Vec<i64> = top.indices.iter().map(|i| i / vocab).collect();
    Ok((
        Tensor::f_from_slice(&top.values)?.f_view([bsz, k])?,
        Tensor::f_from_slice(&tokens)?.f_view([bsz, k])?,
        Tensor::f_from_slice(&beams)?.f_view([bsz, k])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Kind;
    use crate::testing::TestRng;

    fn torch_topk(l: &Tensor, prev: Option<&Tensor>, k: i64) -> (Vec<f32>, Vec<i64>) {
        let (bsz, beam, _) = l.size3().unwrap();
        let sums = match prev {
            Some(p) => l + p.view([bsz, beam, 1]),
            None => l.slice(1, 0, None, beam).contiguous(),
        };
        let (v, i) = sums.view([bsz, -1]).topk(k, -1, true, true);
        (Vec::<f32>::try_from(v.view([-1])).unwrap(), Vec::<i64>::try_from(i.view([-1])).unwrap())
    }

    /// `n` values spread over [-4, 4) from a fixed xorshift sequence: the same data on every run,
    /// whatever other tests draw from libtorch's global generator meanwhile.
    fn spread(n: i64, seed: u64) -> Tensor {
        let mut x = seed;
        let values: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
            })
            .collect();
        Tensor::from_slice(&values)
    }

    #[test]
    fn equals_libtorch_topk_on_random_log_probabilities() {
        for (case, &(bsz, beam, vocab)) in [(1i64, 5i64, 7944i64), (32, 5, 1000), (3, 1, 40), (4, 2, 33)].iter().enumerate() {
            let seed = 0x9E37_79B9_7F4A_7C15 ^ case as u64;
            let l = spread(bsz * beam * vocab, seed).view([bsz, beam, vocab]).log_softmax(-1, Kind::Float);
            let p = spread(bsz * beam, !seed).view([bsz, beam]) * 3.0;
            let prev = Vec::<f32>::try_from(p.view([-1])).unwrap();
            let k = (2 * beam).min(beam * vocab - 1);
            let host = beam_topk(&l, Some(&prev), k as usize).expect("no ties in random data");
            assert_eq!((host.values, host.indices), torch_topk(&l, Some(&p), k));
            let k0 = (2 * beam).min(vocab - 1);
            let host = beam_topk(&l, None, k0 as usize).expect("no ties in random data");
            assert_eq!((host.values, host.indices), torch_topk(&l, None, k0));
        }
    }

    #[test]
    fn negative_infinity_and_large_values_rank_as_libtorch_ranks_them() {
        let mut row = vec![f32::NEG_INFINITY; 100];
        row[7] = -0.5;
        row[70] = f32::INFINITY;
        row[99] = -1.0;
        let l = Tensor::from_slice(&row).view([1, 1, 100]);
        let host = beam_topk(&l, None, 3).expect("three distinct values");
        assert_eq!(host.values, [f32::INFINITY, -0.5, -1.0]);
        assert_eq!(host.indices, [70, 7, 99]);
        // a fourth candidate would be one of many -inf: a tie at the boundary
        assert!(beam_topk(&l, None, 4).is_none());
    }

    #[test]
    fn ties_and_nan_are_left_to_libtorch() {
        let mut row: Vec<f32> = (0..64).map(|i| -(i as f32)).collect();
        row[40] = -1.0; // equals row[1]: a tie inside the top 3
        let l = Tensor::from_slice(&row).view([1, 1, 64]);
        assert!(beam_topk(&l, None, 3).is_none());
        // beyond the top k + 1, a tie does not matter
        assert!(beam_topk(&l, None, 1).is_some());
        row[40] = f32::NAN;
        let l = Tensor::from_slice(&row).view([1, 1, 64]);
        assert!(beam_topk(&l, None, 3).is_none());
        // a NaN inside a whole chunk of the scan (40 lies in the part after the last one)
        (row[40], row[20]) = (-40.0, f32::NAN);
        let l = Tensor::from_slice(&row).view([1, 1, 64]);
        assert!(beam_topk(&l, None, 3).is_none());
        assert!(beam_topk(&l, Some(&[0.5]), 3).is_none(), "with the hypothesis' score added");
        // one tied sentence of many, whichever thread scans it
        let (bsz, vocab) = (32usize, 4000usize);
        let mut rows = Vec::<f32>::try_from(spread((bsz * vocab) as i64, 3)).unwrap();
        assert!(beam_topk(&Tensor::from_slice(&rows).view([bsz as i64, 1, vocab as i64]), None, 3).is_some());
        let last = &mut rows[(bsz - 3) * vocab..][..vocab];
        let top = last.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        last[vocab - 1] = top;
        last[0] = top;
        assert!(beam_topk(&Tensor::from_slice(&rows).view([bsz as i64, 1, vocab as i64]), None, 3).is_none());
    }

    #[test]
    fn a_strided_tensor_is_left_to_libtorch() {
        let mut rng = TestRng::new(994);
        let l = rng.randn([2, 3, 50]).transpose(0, 1);
        assert!(beam_topk(&l, Some(&[0.0; 6]), 4).is_none());
    }
}
