//! `--compute-type float32` and `int8` on the CPU: a decoder self-attention's keys and values on
//! the host. Each step writes one position of every row in place (fairseq's path concatenates the
//! whole cache anew every step, `torch.cat([prev_key, k], dim=2)`), and a reorder moves no keys:
//! each row keeps, per position, the slot that position was written in, and a reorder copies
//! those indices (`len` of them a row) instead of `len × heads × head_dim` floats of keys and as
//! many of values.

use tch::Tensor;

use super::ModelError;

#[derive(Debug)]
pub struct HostKvCache {
    /// The rows the cache was made for; a reorder never grows the batch.
    slots: usize,
    rows: usize,
    heads: usize,
    head_dim: usize,
    len: usize,
    capacity: usize,
    /// `[slots, heads, capacity, head_dim]`: position `l` of slot `s`, written by row `s` at
    /// step `l`.
    keys: Vec<f32>,
    values: Vec<f32>,
    /// `[rows, capacity]`: the slot each row reads position `l` from.
    source: Vec<u32>,
    /// The reorder's destination, swapped in after it.
    spare: Vec<u32>,
}

/// Positions allocated at a time: the cache holds at most this many unused, where doubling would
/// hold up to as many as it uses (a growth copies the cache once, as fairseq's `cat` does every
/// step).
const GROWTH: usize = 4;

impl HostKvCache {
    pub fn new(rows: usize, heads: usize, head_dim: usize) -> Self {
        let capacity = GROWTH;
        let size = rows * heads * capacity * head_dim;
        Self {
            slots: rows,
            rows,
            heads,
            head_dim,
            len: 0,
            capacity,
            keys: vec![0.0; size],
            values: vec![0.0; size],
            source: vec![0; rows * capacity],
            spare: Vec::new(),
        }
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

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn keys(&self) -> &[f32] {
        &self.keys
    }

    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// `[rows, capacity]`: the slot each row reads each position from.
    pub fn source_table(&self) -> &[u32] {
        &self.source
    }

    /// Row `row`'s slot for each position `0..len`.
    pub fn sources(&self, row: usize) -> &[u32] {
        &self.source[row * self.capacity..][..self.len]
    }

    /// Appends one position to every row: row `r`'s key is `projected[r·stride + key_at ..]`,
    /// its value `projected[r·stride + value_at ..]`, `heads × head_dim` floats each.
    pub fn append(&mut self, projected: &[f32], stride: usize, key_at: usize, value_at: usize) -> Result<(), ModelError> {
        let width = self.heads * self.head_dim;
        if key_at.max(value_at) + width > stride || projected.len() != self.rows * stride {
            return Err(ModelError::Input(format!(
                "a step of {} floats for {} cached rows of {width}",
                projected.len(),
                self.rows
            )));
        }
        if self.len == self.capacity {
            self.grow();
        }
        let (d, cap, len) = (self.head_dim, self.capacity, self.len);
        for r in 0..self.rows {
            let row = &projected[r * stride..][..stride];
            for h in 0..self.heads {
                let at = ((r * self.heads + h) * cap + len) * d;
                self.keys[at..at + d].copy_from_slice(&row[key_at + h * d..][..d]);
                self.values[at..at + d].copy_from_slice(&row[value_at + h * d..][..d]);
            }
            self.source[r * cap + len] = r as u32;
        }
        self.len += 1;
        Ok(())
    }

    fn grow(&mut self) {
        let (old, capacity, len) = (self.capacity, self.capacity + GROWTH, self.len);
        let d = self.head_dim;
        for buffer in [&mut self.keys, &mut self.values] {
            let mut grown = vec![0.0; self.slots * self.heads * capacity * d];
            for (i, chunk) in buffer.chunks_exact(old * d).enumerate() {
                grown[i * capacity * d..][..len * d].copy_from_slice(&chunk[..len * d]);
            }
            *buffer = grown;
        }
        let mut source = vec![0; self.rows * capacity];
        for (i, chunk) in self.source.chunks_exact(old).enumerate() {
            source[i * capacity..][..len].copy_from_slice(&chunk[..len]);
        }
        self.source = source;
        self.capacity = capacity;
    }

    /// `index_select(0, new_order)`: row `i` becomes the old row `new_order[i]`.
    pub fn reorder(&mut self, new_order: &[i64]) -> Result<(), ModelError> {
        if let Some(bad) = new_order.iter().find(|&&o| o < 0 || o as usize >= self.rows) {
            return Err(ModelError::Input(format!("reorder to row {bad} of a cache of {} rows", self.rows)));
        }
        if new_order.len() > self.slots {
            return Err(ModelError::Input(format!("reorder to {} rows of a cache of {}", new_order.len(), self.slots)));
        }
        let (cap, len) = (self.capacity, self.len);
        self.spare.resize(new_order.len() * cap, 0);
        for (to, &from) in new_order.iter().enumerate() {
            self.spare[to * cap..][..len].copy_from_slice(&self.source[from as usize * cap..][..len]);
        }
        std::mem::swap(&mut self.source, &mut self.spare);
        self.rows = new_order.len();
        Ok(())
    }

    /// Keys and values as fairseq's path keeps them, `[rows, heads, len, head_dim]` each.
    pub fn to_tensors(&self) -> Result<(Tensor, Tensor), ModelError> {
        let (heads, cap, d, len) = (self.heads, self.capacity, self.head_dim, self.len);
        let gather = |buffer: &[f32]| -> Result<Tensor, ModelError> {
            let mut out = Vec::with_capacity(self.rows * heads * len * d);
            for row in 0..self.rows {
                for h in 0..heads {
                    for (l, &slot) in self.sources(row).iter().enumerate() {
                        out.extend_from_slice(&buffer[((slot as usize * heads + h) * cap + l) * d..][..d]);
                    }
                }
            }
            Ok(Tensor::f_from_slice(&out)?.f_view([self.rows as i64, heads as i64, len as i64, d as i64])?)
        };
        Ok((gather(&self.keys)?, gather(&self.values)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// The cache against fairseq's: `cat` along the positions, `index_select` over the rows.
    #[test]
    fn appends_grows_and_reorders_as_cat_and_index_select_do() {
        tch::manual_seed(11);
        let (rows, heads, d) = (3usize, 2usize, 4usize);
        let width = heads * d;
        let mut cache = HostKvCache::new(rows, heads, d);
        let (mut want_k, mut want_v): (Option<Tensor>, Option<Tensor>) = (None, None);
        let orders: [&[i64]; 3] = [&[2, 0, 1], &[1, 1, 2], &[0, 2]];
        for step in 0..(3 * GROWTH + 5) {
            let current = cache.rows();
            let projected = Tensor::randn([current as i64, 3 * width as i64], (Kind::Float, Device::Cpu));
            let data = Vec::<f32>::try_from(projected.flatten(0, -1)).unwrap();
            cache.append(&data, 3 * width, width, 2 * width).unwrap();
            let heads_of = |part: i64| projected.narrow(1, part * width as i64, width as i64).view([current as i64, heads as i64, 1, d as i64]);
            let grow = |prev: Option<Tensor>, new: Tensor| prev.map_or(new.shallow_clone(), |p| Tensor::cat(&[p, new], 2));
            want_k = Some(grow(want_k, heads_of(1)));
            want_v = Some(grow(want_v, heads_of(2)));
            if step % 7 == 6 {
                let order = orders[step / 7 % orders.len()].iter().copied().filter(|&o| (o as usize) < current).collect::<Vec<_>>();
                cache.reorder(&order).unwrap();
                let index = Tensor::from_slice(&order);
                want_k = want_k.map(|t| t.index_select(0, &index));
                want_v = want_v.map(|t| t.index_select(0, &index));
            }
            let (k, v) = cache.to_tensors().unwrap();
            assert_eq!(k, *want_k.as_ref().unwrap(), "keys at step {step}");
            assert_eq!(v, *want_v.as_ref().unwrap(), "values at step {step}");
        }
        assert!(cache.capacity() > GROWTH);
        assert_eq!(cache.capacity(), cache.len().div_ceil(GROWTH) * GROWTH, "grown by {GROWTH} positions at a time");
    }

    #[test]
    fn a_bad_step_or_row_is_an_error() {
        let mut cache = HostKvCache::new(2, 1, 2);
        assert!(cache.append(&[0.0; 5], 3, 0, 1).is_err());
        assert!(cache.reorder(&[0, 2]).is_err());
        assert!(cache.reorder(&[-1]).is_err());
        assert!(cache.reorder(&[0, 1, 1]).is_err(), "more rows than the cache was made for");
        assert_eq!(cache.len(), 0);
    }
}
