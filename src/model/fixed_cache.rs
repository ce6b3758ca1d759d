//! A decoder self-attention's keys and values at a fixed capacity, for the fused path on
//! libtorch (`fused.rs`): what a replayed step (a CUDA graph) needs, fixed shapes and addresses.
//!
//! The cache holds `[rows, heads, length, head_dim]` in buckets: rows a power of two at least
//! the batch's (beams included), length a multiple of [`LENGTH_BUCKET`]. A step writes its
//! position in place and attends over the whole capacity, the positions not written yet masked
//! by an additive bias of -inf; a reorder writes the selected rows back into the same buffers.
//! As sentences finish, the batch shrinks and the rows it no longer has stay in the buffers as
//! padding, until the batch fits a smaller bucket; only a new length bucket or a smaller row
//! bucket allocates. Within one shape every step reads and writes the same memory.

use tch::Tensor;

use super::ModelError;

/// Positions a length bucket adds.
pub const LENGTH_BUCKET: i64 = 32;

/// Source positions a source bucket adds: a fixed-shape step's encoder attentions attend over
/// their source padded to a multiple of it, the padding masked.
pub const SOURCE_BUCKET: i64 = 16;

/// The row capacity for `rows` rows: the next power of two.
pub fn row_bucket(rows: i64) -> i64 {
    (rows.max(1) as u64).next_power_of_two() as i64
}

/// The length capacity for `len` positions: the next multiple of [`LENGTH_BUCKET`].
pub fn length_bucket(len: i64) -> i64 {
    (len.max(1) + LENGTH_BUCKET - 1) / LENGTH_BUCKET * LENGTH_BUCKET
}

/// The source length a fixed-shape step's encoder attentions attend over for `len` positions: the
/// next multiple of [`SOURCE_BUCKET`].
pub fn source_bucket(len: i64) -> i64 {
    (len.max(1) + SOURCE_BUCKET - 1) / SOURCE_BUCKET * SOURCE_BUCKET
}

#[derive(Debug)]
pub struct FixedKvCache {
    /// `[row capacity, H, length capacity, D]`; rows past `rows` are padding.
    keys: Tensor,
    values: Tensor,
    /// `[1, 1, 1, length capacity]`: 0 where a position is written, -inf after.
    bias: Tensor,
    /// `[1]` int64 on the cache's device: the position the next write goes to, so that a
    /// replayed step reads it from memory instead of having it captured as a constant.
    position: Tensor,
    rows: i64,
    len: i64,
    /// The next position is prepared ([`Self::prepare`]) and its write left to a replayed step.
    deferred: bool,
}

impl FixedKvCache {
    /// An empty cache for steps shaped as `k`, `[rows, H, 1, D]`.
    pub fn new(k: &Tensor) -> Result<Self, ModelError> {
        let (rows, heads, _, head_dim) = k.size4()?;
        let (keys, values, bias) = Self::buffers(row_bucket(rows), heads, LENGTH_BUCKET, head_dim, k)?;
        let position = Tensor::f_zeros([1], (tch::Kind::Int64, k.device()))?;
        Ok(Self { keys, values, bias, position, rows, len: 0, deferred: false })
    }

    fn buffers(rows: i64, heads: i64, len: i64, head_dim: i64, like: &Tensor) -> Result<(Tensor, Tensor, Tensor), ModelError> {
        let options = (like.kind(), like.device());
        let keys = Tensor::f_zeros([rows, heads, len, head_dim], options)?;
        let values = Tensor::f_zeros([rows, heads, len, head_dim], options)?;
        let bias = Tensor::f_full([1, 1, 1, len], f64::NEG_INFINITY, options)?;
        Ok((keys, values, bias))
    }

    /// (row capacity, length capacity).
    pub fn capacity(&self) -> (i64, i64) {
        (self.keys.size()[0], self.keys.size()[2])
    }

    pub fn rows(&self) -> i64 {
        self.rows
    }

    pub fn len(&self) -> i64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the next position's keys and values, `[rows, H, 1, D]` each: [`Self::prepare`],
    /// [`Self::write`] and [`Self::commit`], or the write alone while a replayed step defers the
    /// other two to its caller.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(), ModelError> {
        if self.deferred {
            return self.write(k, v);
        }
        self.prepare()?;
        self.write(k, v)?;
        self.commit();
        Ok(())
    }

    /// Makes room for the next position (a new length bucket when the capacity is full) and
    /// points [`Self::write`] at it. Outside a captured step: this reads the host's length.
    pub fn prepare(&mut self) -> Result<(), ModelError> {
        let (row_capacity, length_capacity) = self.capacity();
        if self.len == length_capacity {
            self.resize(row_capacity, length_bucket(self.len + 1))?;
        }
        let _ = self.position.f_fill_(self.len)?;
        Ok(())
    }

    /// Writes `k` and `v` at the prepared position: device operations alone, the same from step
    /// to step, which a CUDA graph can capture.
    pub fn write(&mut self, k: &Tensor, v: &Tensor) -> Result<(), ModelError> {
        if k.size()[0] != self.rows || v.size() != k.size() {
            return Err(ModelError::Input(format!(
                "a step of {:?} keys and {:?} values for a cache of {} rows",
                k.size(),
                v.size(),
                self.rows
            )));
        }
        let _ = self.keys.f_narrow(0, 0, self.rows)?.f_index_copy_(2, &self.position, k)?;
        let _ = self.values.f_narrow(0, 0, self.rows)?.f_index_copy_(2, &self.position, v)?;
        let _ = self.bias.f_index_fill_(3, &self.position, 0.0)?;
        Ok(())
    }

    /// Counts the prepared position as written.
    pub fn commit(&mut self) {
        self.len += 1;
    }

    /// While set, [`Self::append`] only writes: the caller prepared the position and commits it.
    pub fn defer(&mut self, deferred: bool) {
        self.deferred = deferred;
    }

    /// New buffers of `rows` × `len` capacity holding what is written.
    fn resize(&mut self, rows: i64, len: i64) -> Result<(), ModelError> {
        let (_, heads, _, head_dim) = self.keys.size4()?;
        let (keys, values, bias) = Self::buffers(rows, heads, len, head_dim, &self.keys)?;
        let kept = self.rows.min(rows);
        for (to, from) in [(&keys, &self.keys), (&values, &self.values)] {
            to.f_narrow(0, 0, kept)?.f_narrow(2, 0, self.len)?.f_copy_(&from.f_narrow(0, 0, kept)?.f_narrow(2, 0, self.len)?)?;
        }
        let _ = bias.f_narrow(3, 0, self.len)?.f_fill_(0.0)?;
        (self.keys, self.values, self.bias) = (keys, values, bias);
        Ok(())
    }

    /// The keys, values and bias a step attends over: every row of the batch, the whole
    /// length capacity.
    pub fn attended(&self) -> Result<(Tensor, Tensor, Tensor), ModelError> {
        let rows = |t: &Tensor| t.f_narrow(0, 0, self.rows);
        Ok((rows(&self.keys)?, rows(&self.values)?, self.bias.shallow_clone()))
    }

    /// `reorder_incremental_state`: row `i` becomes row `new_order[i]`; the batch may shrink.
    pub fn reorder(&mut self, new_order: &Tensor) -> Result<(), ModelError> {
        let rows = new_order.size().first().copied().unwrap_or(0);
        let (row_capacity, length_capacity) = self.capacity();
        let keys = self.keys.f_index_select(0, new_order)?;
        let values = self.values.f_index_select(0, new_order)?;
        if row_bucket(rows) != row_capacity {
            self.resize(row_bucket(rows), length_capacity)?;
        }
        self.keys.f_narrow(0, 0, rows)?.f_copy_(&keys)?;
        self.values.f_narrow(0, 0, rows)?.f_copy_(&values)?;
        self.rows = rows;
        Ok(())
    }

    /// The written keys and values `[rows, H, len, D]`, for a step that takes fairseq's path.
    pub fn to_tensors(&self) -> Result<(Tensor, Tensor), ModelError> {
        let written = |t: &Tensor| -> Result<Tensor, ModelError> { Ok(t.f_narrow(0, 0, self.rows)?.f_narrow(2, 0, self.len)?.f_contiguous()?) };
        Ok((written(&self.keys)?, written(&self.values)?))
    }

    /// The buffers' addresses: the same from step to step within one shape.
    pub fn addresses(&self) -> [usize; 3] {
        [self.keys.data_ptr() as usize, self.values.data_ptr() as usize, self.bias.data_ptr() as usize]
    }

    /// Keys, values, bias and write position: every buffer a replayed step reads or writes.
    pub(crate) fn buffers_mut(&mut self) -> [&mut Tensor; 4] {
        [&mut self.keys, &mut self.values, &mut self.bias, &mut self.position]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    fn attend(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>) -> Tensor {
        Tensor::scaled_dot_product_attention(q, k, v, bias, 0.0, false, Some(1.0), false)
    }

    /// Forty steps (two length buckets) while the batch shrinks 6 → 5 → 3 → 2 (row buckets 8,
    /// 8, 4, 2) and reorders: the fixed cache attends as fairseq's growing `cat` cache does, and
    /// keeps its buffers wherever the shape stays.
    #[test]
    fn a_fixed_cache_attends_as_the_growing_one_and_keeps_its_addresses_within_a_bucket() {
        let mut rng = TestRng::new(446);
        let (heads, d) = (2, 8);
        let mut rows = 6;
        let (mut keys, mut values): (Option<Tensor>, Option<Tensor>) = (None, None);
        let mut cache: Option<FixedKvCache> = None;
        let mut moved = Vec::new();
        for step in 0..40 {
            let k = rng.randn([rows, heads, 1, d]);
            let v = rng.randn([rows, heads, 1, d]);
            let q = rng.randn([rows, heads, 1, d]) * 0.3;
            let grow = |prev: &Option<Tensor>, new: &Tensor| match prev {
                Some(p) => Tensor::cat(&[p, new], 2),
                None => new.copy(),
            };
            (keys, values) = (Some(grow(&keys, &k)), Some(grow(&values, &v)));
            let c = match cache.as_mut() {
                Some(c) => c,
                None => cache.insert(FixedKvCache::new(&k).unwrap()),
            };
            let before = c.addresses();
            c.append(&k, &v).unwrap();
            let (fk, fv, bias) = c.attended().unwrap();
            let want = attend(&q, keys.as_ref().unwrap(), values.as_ref().unwrap(), None);
            let got = attend(&q, &fk, &fv, Some(&bias));
            let diff = (&got - &want).abs().max().double_value(&[]);
            assert!(crate::tolerance::MASKED_CAPACITY.holds(diff), "step {step}: {diff}");
            assert_eq!(c.to_tensors().unwrap().0.size(), keys.as_ref().unwrap().size());
            if c.addresses() != before {
                moved.push(format!("append {step}"));
            }
            let new_rows = match step {
                9 => 5,
                19 => 3,
                29 => 2,
                _ => rows,
            };
            let order: Vec<i64> = (0..new_rows).map(|i| (i * 7 + step) % rows).collect();
            let order = Tensor::from_slice(&order);
            let before = c.addresses();
            c.reorder(&order).unwrap();
            keys = Some(keys.unwrap().index_select(0, &order));
            values = Some(values.unwrap().index_select(0, &order));
            if c.addresses() != before {
                moved.push(format!("reorder {step} to {new_rows}"));
            }
            rows = new_rows;
            assert_eq!(c.rows(), rows);
            assert_eq!(c.capacity().0, row_bucket(rows));
        }
        assert_eq!(cache.unwrap().capacity().1, 64);
        // only a new length bucket (step 32) and a smaller row bucket (3 rows: 4, 2 rows: 2)
        assert_eq!(moved, ["reorder 19 to 3", "reorder 29 to 2", "append 32"]);
    }

    /// A deferred append (a replayed step's) writes at the position `prepare` put on the device,
    /// as often as it runs, and counts nothing; the caller's `commit` counts it once.
    #[test]
    fn a_deferred_append_writes_at_the_prepared_position_and_the_caller_counts_it() {
        let k = |v: f64| Tensor::full([2, 1, 1, 2], v, (tch::Kind::Float, tch::Device::Cpu));
        let mut c = FixedKvCache::new(&k(1.0)).unwrap();
        c.append(&k(1.0), &k(1.0)).unwrap();
        c.prepare().unwrap();
        c.defer(true);
        c.append(&k(2.0), &k(2.0)).unwrap();
        c.append(&k(3.0), &k(3.0)).unwrap();
        assert_eq!(c.len(), 1);
        c.defer(false);
        c.commit();
        let (keys, values) = c.to_tensors().unwrap();
        assert_eq!(Vec::<f32>::try_from(keys.select(0, 1).flatten(0, -1)).unwrap(), [1., 1., 3., 3.]);
        assert_eq!(Vec::<f32>::try_from(values.select(0, 0).flatten(0, -1)).unwrap(), [1., 1., 3., 3.]);
        let (_, _, bias) = c.attended().unwrap();
        let bias = Vec::<f32>::try_from(bias.flatten(0, -1)).unwrap();
        assert_eq!(bias[..2], [0., 0.]);
        assert!(bias[2..].iter().all(|b| *b == f32::NEG_INFINITY));
        // an append of its own prepares the next position
        c.append(&k(4.0), &k(4.0)).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(Vec::<f32>::try_from(c.to_tensors().unwrap().0.select(0, 0).flatten(0, -1)).unwrap(), [1., 1., 3., 3., 4., 4.]);
    }

    #[test]
    fn buckets_round_up() {
        assert_eq!([1, 2, 3, 5, 8, 9].map(row_bucket), [1, 2, 4, 8, 8, 16]);
        assert_eq!([0, 1, 32, 33, 64].map(length_bucket), [32, 32, 32, 64, 64]);
        assert_eq!([0, 1, 16, 17, 33].map(source_bucket), [16, 16, 16, 32, 48]);
    }
}
