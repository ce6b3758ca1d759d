//! `--compute-type float32` and `int8` on the CPU: a decoder self-attention's keys and values on
//! the host. Each step writes one position of every row in place (fairseq's path concatenates the
//! whole cache anew every step, `torch.cat([prev_key, k], dim=2)`), and a reorder moves no keys:
//! each row keeps, per position, the slot that position was written in, and a reorder copies
//! those indices (`len` of them a row) instead of `len × heads × head_dim` floats of keys and as
//! many of values.
//!
//! Positions live in blocks of [`BLOCK`], allocated as the cache reaches them and never moved: a
//! cache that grew by copying held the old and the new buffer at once, and the old ones, each
//! smaller than the next, stayed in the heap as holes (at transformer-base size, batch 32, some
//! 60 MB of a run's peak). A block holds the rows there are when it is made: as sentences
//! finish, the batch shrinks, and so do the blocks after it (as CTranslate2's cache does, which
//! drops the finished rows).
use tch::Tensor;

use super::KernelError;

#[derive(Debug)]
pub struct HostKvCache {
    /// The most rows the cache has held: the width of `source`.
    slots: usize,
    rows: usize,
    heads: usize,
    head_dim: usize,
    len: usize,
    /// Block `b` holds positions `b·BLOCK ..`, `[rows, heads, BLOCK, head_dim]` for the rows
    /// there were when it was made: position `l` of slot `s` was written by row `s` at step `l`.
    keys: Vec<Box<[f32]>>,
    values: Vec<Box<[f32]>>,
    /// `[len, slots]`: the slot row `r` reads position `l` from, at `l · slots + r`.
    source: Vec<u32>,
    /// The reorder's destination, swapped in after it.
    spare: Vec<u32>,
}

/// Positions a block holds: the cache holds at most this many unused.
pub const BLOCK: usize = 4;

impl HostKvCache {
    pub fn new(rows: usize, heads: usize, head_dim: usize) -> Self {
        Self { slots: rows, rows, heads, head_dim, len: 0, keys: Vec::new(), values: Vec::new(), source: Vec::new(), spare: Vec::new() }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn heads(&self) -> usize {
        self.heads
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Positions allocated.
    pub fn capacity(&self) -> usize {
        self.keys.len() * BLOCK
    }

    /// Floats from one head's key (or value) to the next head's at the same position.
    pub fn head_stride(&self) -> usize {
        BLOCK * self.head_dim
    }

    /// Row `row`'s key and value at position `l < len`, from head 0 on (head `h` at
    /// `h · head_stride()`).
    #[inline(always)]
    pub fn position(&self, row: usize, l: usize) -> (&[f32], &[f32]) {
        let slot = self.source[l * self.slots + row] as usize;
        let at = (slot * self.heads * BLOCK + l % BLOCK) * self.head_dim;
        (&self.keys[l / BLOCK][at..], &self.values[l / BLOCK][at..])
    }

    /// Appends one position to every row: row `r`'s key is `projected[r·stride + key_at ..]`,
    /// its value `projected[r·stride + value_at ..]`, `heads × head_dim` floats each.
    pub fn append(&mut self, projected: &[f32], stride: usize, key_at: usize, value_at: usize) -> Result<(), KernelError> {
        let width = self.heads * self.head_dim;
        if key_at.max(value_at) + width > stride || projected.len() != self.rows * stride {
            return Err(KernelError::Operand {
                kernel: "host key/value cache",
                operand: format!("a step of {} floats for {} cached rows of {width}", projected.len(), self.rows),
            });
        }
        let size = self.rows * width * BLOCK;
        if self.len == self.capacity() {
            self.keys.push(vec![0.0; size].into_boxed_slice());
            self.values.push(vec![0.0; size].into_boxed_slice());
        } else if self.keys[self.len / BLOCK].len() < size {
            // the rows grew again since the block was made for fewer
            for block in [&mut self.keys[self.len / BLOCK], &mut self.values[self.len / BLOCK]] {
                let mut grown = vec![0.0; size];
                grown[..block.len()].copy_from_slice(block);
                *block = grown.into_boxed_slice();
            }
        }
        let (d, len) = (self.head_dim, self.len);
        let (keys, values) = (&mut self.keys[len / BLOCK], &mut self.values[len / BLOCK]);
        for r in 0..self.rows {
            let row = &projected[r * stride..][..stride];
            for h in 0..self.heads {
                let at = ((r * self.heads + h) * BLOCK + len % BLOCK) * d;
                keys[at..at + d].copy_from_slice(&row[key_at + h * d..][..d]);
                values[at..at + d].copy_from_slice(&row[value_at + h * d..][..d]);
            }
        }
        self.source.resize((len + 1) * self.slots, 0);
        for (r, s) in self.source[len * self.slots..][..self.rows].iter_mut().enumerate() {
            *s = r as u32;
        }
        self.len += 1;
        Ok(())
    }

    /// `index_select(0, new_order)`: row `i` becomes the old row `new_order[i]`. The rows may
    /// grow: a first step computed once per sentence is repeated for each of its beams.
    pub fn reorder(&mut self, new_order: &[i64]) -> Result<(), KernelError> {
        if let Some(bad) = new_order.iter().find(|&&o| o < 0 || o as usize >= self.rows) {
            return Err(KernelError::Operand { kernel: "host key/value cache", operand: format!("reorder to row {bad} of a cache of {} rows", self.rows) });
        }
        let slots = self.slots.max(new_order.len());
        self.spare.resize(self.len * slots, 0);
        for (to, from) in self.spare.chunks_exact_mut(slots).zip(self.source.chunks_exact(self.slots)) {
            for (t, &o) in to.iter_mut().zip(new_order) {
                *t = from[o as usize];
            }
        }
        std::mem::swap(&mut self.source, &mut self.spare);
        (self.slots, self.rows) = (slots, new_order.len());
        Ok(())
    }

    /// Keys and values as fairseq's path keeps them, `[rows, heads, len, head_dim]` each.
    pub fn to_tensors(&self) -> Result<(Tensor, Tensor), KernelError> {
        let (heads, d, len, stride) = (self.heads, self.head_dim, self.len, self.head_stride());
        let mut keys = Vec::with_capacity(self.rows * heads * len * d);
        let mut values = Vec::with_capacity(keys.capacity());
        for row in 0..self.rows {
            for h in 0..heads {
                for l in 0..len {
                    let (k, v) = self.position(row, l);
                    keys.extend_from_slice(&k[h * stride..][..d]);
                    values.extend_from_slice(&v[h * stride..][..d]);
                }
            }
        }
        let shape = [self.rows as i64, heads as i64, len as i64, d as i64];
        Ok((Tensor::f_from_slice(&keys)?.f_view(shape)?, Tensor::f_from_slice(&values)?.f_view(shape)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    /// fairseq's cache beside ours: `cat` along the positions, `index_select` over the rows.
    #[derive(Default)]
    struct Fairseq {
        keys: Option<Tensor>,
        values: Option<Tensor>,
    }

    impl Fairseq {
        /// A step of random projections `[q; k; v]` for every row, into both caches.
        fn append(&mut self, cache: &mut HostKvCache, rng: &mut TestRng) {
            let (rows, heads, d) = (cache.rows() as i64, cache.heads() as i64, cache.head_dim() as i64);
            let width = heads * d;
            let projected = rng.randn([rows, 3 * width]);
            let data = Vec::<f32>::try_from(projected.flatten(0, -1)).unwrap();
            cache.append(&data, 3 * width as usize, width as usize, 2 * width as usize).unwrap();
            let heads_of = |part: i64| projected.narrow(1, part * width, width).view([rows, heads, 1, d]);
            let grow = |prev: Option<Tensor>, new: Tensor| Some(prev.map_or(new.shallow_clone(), |p| Tensor::cat(&[p, new], 2)));
            self.keys = grow(self.keys.take(), heads_of(1));
            self.values = grow(self.values.take(), heads_of(2));
        }

        fn reorder(&mut self, cache: &mut HostKvCache, order: &[i64]) {
            cache.reorder(order).unwrap();
            let index = Tensor::from_slice(order);
            self.keys = self.keys.take().map(|t| t.index_select(0, &index));
            self.values = self.values.take().map(|t| t.index_select(0, &index));
        }

        fn holds_what(&self, cache: &HostKvCache, step: usize) {
            let (k, v) = cache.to_tensors().unwrap();
            assert_eq!(k, *self.keys.as_ref().unwrap(), "keys at step {step}");
            assert_eq!(v, *self.values.as_ref().unwrap(), "values at step {step}");
        }
    }

    /// The cache against fairseq's: `cat` along the positions, `index_select` over the rows.
    #[test]
    fn appends_grows_and_reorders_as_cat_and_index_select_do() {
        let mut rng = TestRng::new(11);
        let (rows, heads, d) = (3usize, 2usize, 4usize);
        let mut cache = HostKvCache::new(rows, heads, d);
        let mut fairseq = Fairseq::default();
        // the rows stay, shrink (the blocks after are smaller), and grow again within a block
        let orders: [&[i64]; 4] = [&[2, 0, 1], &[0, 2], &[1, 0, 1], &[1, 1, 2]];
        for step in 0..(7 * BLOCK + 2) {
            let current = cache.rows();
            fairseq.append(&mut cache, &mut rng);
            if step % 7 == 6 {
                let order = orders[step / 7 % orders.len()].iter().copied().filter(|&o| (o as usize) < current).collect::<Vec<_>>();
                fairseq.reorder(&mut cache, &order);
            }
            fairseq.holds_what(&cache, step);
        }
        assert_eq!(cache.keys.iter().map(|b| b.len() / (heads * d * BLOCK)).collect::<Vec<_>>(), [3, 3, 3, 3, 2, 3, 3, 3], "rows each block holds");
        assert!(cache.capacity() > BLOCK);
        assert_eq!(cache.capacity(), cache.len().div_ceil(BLOCK) * BLOCK, "grown by {BLOCK} positions at a time");
    }

    #[test]
    fn a_bad_step_or_row_is_an_error() {
        let mut cache = HostKvCache::new(2, 1, 2);
        assert!(cache.append(&[0.0; 5], 3, 0, 1).is_err());
        assert!(cache.reorder(&[0, 2]).is_err());
        assert!(cache.reorder(&[-1]).is_err());
        assert_eq!(cache.len(), 0);
    }

    /// A first step's rows repeated for each beam (more rows than the cache was made for), then
    /// steps of all the rows: as `index_select` and `cat` give them.
    #[test]
    fn a_reorder_may_grow_the_rows() {
        let mut rng = TestRng::new(13);
        let beam = 3usize;
        let mut cache = HostKvCache::new(2, 2, 4);
        let mut fairseq = Fairseq::default();
        for step in 0..(2 * BLOCK + 1) {
            let current = cache.rows();
            fairseq.append(&mut cache, &mut rng);
            let order: Vec<i64> = match step {
                0 => (0..2 * beam as i64).map(|r| r / beam as i64).collect(),
                _ => (0..current as i64).rev().collect(),
            };
            fairseq.reorder(&mut cache, &order);
            fairseq.holds_what(&cache, step);
        }
        assert_eq!(cache.rows(), 2 * beam);
    }
}
