//! `--compute-type float32` and `int8` on the CPU: a decoder self-attention's keys and values on
//! the host, `[rows, heads, capacity, head_dim]`, written in place at each step (fairseq's path
//! concatenates the whole cache anew every step, `torch.cat([prev_key, k], dim=2)`), and
//! reordered by copying the kept positions only. CTranslate2 keeps its cache so too.

use tch::{Device, Kind, Tensor};

use super::ModelError;

#[derive(Debug)]
pub struct HostKvCache {
    rows: usize,
    heads: usize,
    head_dim: usize,
    len: usize,
    capacity: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
    /// The reorder's destination, swapped in after it.
    spare: Vec<f32>,
}

/// Positions allocated at the first step; the capacity doubles from there.
const FIRST_CAPACITY: usize = 16;

impl HostKvCache {
    pub fn new(rows: usize, heads: usize, head_dim: usize) -> Self {
        let capacity = FIRST_CAPACITY;
        let size = rows * heads * capacity * head_dim;
        Self { rows, heads, head_dim, len: 0, capacity, keys: vec![0.0; size], values: vec![0.0; size], spare: Vec::new() }
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
        }
        self.len += 1;
        Ok(())
    }

    fn grow(&mut self) {
        let capacity = self.capacity * 2;
        let (d, len) = (self.head_dim, self.len);
        for buffer in [&mut self.keys, &mut self.values] {
            let mut grown = vec![0.0; self.rows * self.heads * capacity * d];
            for (i, old) in buffer.chunks_exact(self.capacity * d).enumerate() {
                grown[i * capacity * d..][..len * d].copy_from_slice(&old[..len * d]);
            }
            *buffer = grown;
        }
        self.capacity = capacity;
    }

    /// `index_select(0, new_order)`: row `i` becomes the old row `new_order[i]`.
    pub fn reorder(&mut self, new_order: &[i64]) -> Result<(), ModelError> {
        if let Some(bad) = new_order.iter().find(|&&o| o < 0 || o as usize >= self.rows) {
            return Err(ModelError::Input(format!("reorder to row {bad} of a cache of {} rows", self.rows)));
        }
        let (d, cap, len) = (self.head_dim, self.capacity, self.len);
        let per_row = self.heads * cap * d;
        for buffer in [&mut self.keys, &mut self.values] {
            self.spare.resize(new_order.len() * per_row, 0.0);
            for (to, &from) in new_order.iter().enumerate() {
                for h in 0..self.heads {
                    let src = from as usize * per_row + h * cap * d;
                    let dst = to * per_row + h * cap * d;
                    self.spare[dst..dst + len * d].copy_from_slice(&buffer[src..src + len * d]);
                }
            }
            std::mem::swap(buffer, &mut self.spare);
        }
        self.rows = new_order.len();
        Ok(())
    }

    /// Keys and values as fairseq's path keeps them, `[rows, heads, len, head_dim]` each.
    pub fn to_tensors(&self) -> Result<(Tensor, Tensor), ModelError> {
        let (rows, heads, cap, d, len) = (self.rows, self.heads, self.capacity, self.head_dim, self.len);
        let tensor = |buffer: &[f32]| -> Result<Tensor, ModelError> {
            let full = Tensor::f_from_slice(buffer)?.f_view([rows as i64, heads as i64, cap as i64, d as i64])?;
            Ok(full.f_narrow(2, 0, len as i64)?.f_contiguous()?.f_to_device(Device::Cpu)?.f_to_kind(Kind::Float)?)
        };
        Ok((tensor(&self.keys)?, tensor(&self.values)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache against fairseq's: `cat` along the positions, `index_select` over the rows.
    #[test]
    fn appends_grows_and_reorders_as_cat_and_index_select_do() {
        tch::manual_seed(11);
        let (rows, heads, d) = (3usize, 2usize, 4usize);
        let width = heads * d;
        let mut cache = HostKvCache::new(rows, heads, d);
        let (mut want_k, mut want_v): (Option<Tensor>, Option<Tensor>) = (None, None);
        let orders: [&[i64]; 3] = [&[2, 0, 1], &[1, 1, 2], &[0, 2]];
        for step in 0..(FIRST_CAPACITY + 5) {
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
        assert!(cache.capacity() > FIRST_CAPACITY);
    }

    #[test]
    fn a_bad_step_or_row_is_an_error() {
        let mut cache = HostKvCache::new(2, 1, 2);
        assert!(cache.append(&[0.0; 5], 3, 0, 1).is_err());
        assert!(cache.reorder(&[0, 2]).is_err());
        assert!(cache.reorder(&[-1]).is_err());
        assert_eq!(cache.len(), 0);
    }
}
