//! A decoder self-attention's keys and values on fairseq's path, kept one position longer than
//! the steps so far: the beam's reorder selects their rows into the first positions of new
//! buffers, and the next step writes its key and value into the last one in place of
//! `torch.cat([prev_key, k], dim=1)`. The attention then reads the cat's values in the cat's
//! layout, a contiguous `[B·H, len + 1, D]`, and each step copies the cache once instead of twice.

use tch::{Device, Tensor};

use super::ModelError;
use crate::libtorch::host::{f32_view, f32_view_mut, is_host_f32};
use crate::libtorch::parallel::parallel_for;

/// Buffers `[B, H, len + 1, D]` whose first `len` positions are `prev_key` and `prev_value`.
#[derive(Debug)]
pub struct KvRoom {
    key: Tensor,
    value: Tensor,
}

impl KvRoom {
    /// `prev_key.index_select(0, new_order)` and `prev_value`'s, written into buffers with room
    /// for one more position: the room and the selected keys and values `[B', H, len, D]` (views
    /// of it). None where the caches are not `[B, H, len, D]` alike. `host_order`, `new_order`'s
    /// indices on the host, lets host caches be copied there ([`Self::on_host`]).
    pub fn select(prev_key: &Tensor, prev_value: &Tensor, new_order: &Tensor, host_order: Option<&[i64]>) -> Result<Option<(Self, Tensor, Tensor)>, ModelError> {
        let size = prev_key.size();
        if size.len() != 4 || prev_value.size() != size || new_order.dim() != 1 || prev_value.kind() != prev_key.kind() {
            return Ok(None);
        }
        let rows = new_order.size()[0];
        let host_order = host_order.filter(|_| Self::on_host(prev_key, prev_value, new_order));
        let select = |prev: &Tensor| -> Result<(Tensor, Tensor), ModelError> {
            let mut buffer = Tensor::f_empty([rows, size[1], size[2] + 1, size[3]], (prev.kind(), prev.device()))?;
            let selected = buffer.f_narrow(2, 0, size[2])?;
            match host_order {
                Some(order) => select_on_host(prev, &mut buffer, order)?,
                None => {
                    let _ = prev.f_index_select_out(&selected, 0, new_order)?;
                }
            }
            Ok((buffer, selected))
        };
        let (key, prev_key) = select(prev_key)?;
        let (value, prev_value) = select(prev_value)?;
        Ok(Some((Self { key, value }, prev_key, prev_value)))
    }

    /// Whether [`Self::select`] copies these caches on the host, given the order's host indices.
    pub fn on_host(prev_key: &Tensor, prev_value: &Tensor, new_order: &Tensor) -> bool {
        is_host_f32(prev_key) && is_host_f32(prev_value) && new_order.device() == Device::Cpu
    }

    /// Whether `prev_key` and `prev_value` are still this room's first positions and a step's key
    /// and value `[B·H, 1, D]` fill its last.
    pub fn fits(&self, prev_key: &Tensor, prev_value: &Tensor, k: &Tensor, v: &Tensor) -> bool {
        let holds = |buffer: &Tensor, prev: &Tensor, new: &Tensor| {
            let size = buffer.size();
            let [b, h, len, d] = size[..] else { return false };
            prev.size() == [b, h, len - 1, d]
                && prev.data_ptr() == buffer.data_ptr()
                && prev.stride() == buffer.stride()
                && new.size() == [b * h, 1, d]
                && new.kind() == buffer.kind()
                && new.device() == buffer.device()
        };
        holds(&self.key, prev_key, k) && holds(&self.value, prev_value, v)
    }

    /// Writes a step's key and value (see [`Self::fits`]) into the last position: the whole
    /// caches, `[B·H, len + 1, D]`.
    pub fn append(self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor), ModelError> {
        let fill = |buffer: Tensor, new: &Tensor| -> Result<Tensor, ModelError> {
            let size = buffer.size();
            let all = buffer.f_view([size[0] * size[1], size[2], size[3]])?;
            all.f_narrow(1, size[2] - 1, 1)?.f_copy_(new)?;
            Ok(all)
        };
        Ok((fill(self.key, k)?, fill(self.value, v)?))
    }
}

/// `prev.index_select(0, order)` into the first `len` positions of `room` (`[B', H, len + 1, D]`,
/// both host f32 tensors), a `[len, D]` block at a time: the bytes of libtorch's copies, without
/// its dispatch for every row.
fn select_on_host(prev: &Tensor, room: &mut Tensor, order: &[i64]) -> Result<(), ModelError> {
    let (size, room_size) = (prev.size(), room.size());
    let (&[b, h, len, d], &[rows, _, _, _]) = (size.as_slice(), room_size.as_slice()) else {
        return Err(ModelError::Input(format!("a cache {size:?} for a room {room_size:?}")));
    };
    if let Some(&o) = order.iter().find(|&&o| !(0..b).contains(&o)) {
        return Err(ModelError::Input(format!("reorder index {o} of a cache with {b} rows")));
    }
    if order.len() as i64 != rows || room_size != [rows, h, len + 1, d] {
        return Err(ModelError::Input(format!("{} reorder indices for a room {room_size:?}", order.len())));
    }
    let (h, len, d) = (h as usize, len as usize, d as usize);
    // SAFETY: `prev` is the state's own cache and `room` a fresh buffer; nothing else reads or
    // writes either while the slices live.
    let (Some(src), Some(dst)) = (unsafe { f32_view(prev) }, unsafe { f32_view_mut(room) }) else {
        return Err(ModelError::Input("a host cache that is not contiguous f32".into()));
    };
    let (block, src_row, dst_row) = (len * d, h * len * d, h * (len + 1) * d);
    let out = RowsOut(dst.as_mut_ptr());
    parallel_for(order.len(), (1 << 15) / src_row.max(1) + 1, |start, end| {
        let out = &out;
        for (i, &o) in order.iter().enumerate().take(end).skip(start) {
            for head in 0..h {
                let from = &src[o as usize * src_row + head * block..][..block];
                // SAFETY: row `i` of the room, `dst_row` floats from `i * dst_row`, lies inside it
                // (its size was checked) and is written by this range alone.
                unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), out.0.add(i * dst_row + head * (len + 1) * d), block) };
            }
        }
    });
    Ok(())
}

struct RowsOut(*mut f32);
// SAFETY: `select_on_host` hands each thread disjoint rows.
unsafe impl Sync for RowsOut {}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn cache(b: i64, len: i64, offset: f64) -> Tensor {
        (Tensor::arange(b * 2 * len * 3, (Kind::Float, Device::Cpu)) + offset).view([b, 2, len, 3])
    }

    /// The room's caches are `cat([index_select(prev, 0, order), new], 1)`, value and layout.
    #[test]
    fn a_selected_room_filled_by_a_step_is_the_cat_of_fairseqs_path() {
        let (prev_key, prev_value) = (cache(3, 4, 0.0), cache(3, 4, 100.0));
        let order = Tensor::from_slice(&[2i64, 0, 0]);
        let (room, k, v) = KvRoom::select(&prev_key, &prev_value, &order, None).unwrap().unwrap();
        let (new_k, new_v) = (cache(3, 1, 500.0).view([6, 1, 3]), cache(3, 1, 700.0).view([6, 1, 3]));
        assert!(room.fits(&k, &v, &new_k, &new_v));
        let (keys, values) = room.append(&new_k, &new_v).unwrap();
        for (got, prev, new) in [(keys, &prev_key, &new_k), (values, &prev_value, &new_v)] {
            let want = Tensor::cat(&[prev.index_select(0, &order).view([6, 4, 3]), new.shallow_clone()], 1);
            assert!(got.equal(&want));
            assert_eq!((got.size(), got.stride()), (want.size(), want.stride()));
            assert!(got.is_contiguous());
        }
    }

    /// The host's block copies give libtorch's `index_select`, over rows shared out among the
    /// threads, and refuse an index outside the cache; a strided cache goes through libtorch.
    #[test]
    fn the_host_selection_is_index_select_and_checks_its_indices() {
        let (b, h, len, d) = (300i64, 4, 7, 8);
        let prev = Tensor::randn([b, h, len, d], (Kind::Float, Device::Cpu));
        let indices: Vec<i64> = (0..b).map(|i| (i * 7 + 3) % b).rev().collect();
        let order = Tensor::from_slice(&indices);
        assert!(KvRoom::on_host(&prev, &prev, &order));
        let (_, k, v) = KvRoom::select(&prev, &prev, &order, Some(&indices)).unwrap().unwrap();
        let want = prev.index_select(0, &order);
        assert!(k.equal(&want) && v.equal(&want));
        let strided = prev.transpose(1, 2).contiguous().transpose(1, 2);
        assert!(!KvRoom::on_host(&strided, &strided, &order));
        let (_, k, _) = KvRoom::select(&strided, &strided, &order, Some(&indices)).unwrap().unwrap();
        assert!(k.equal(&want));
        for bad in [-1i64, b] {
            let indices = [0i64, bad];
            assert!(KvRoom::select(&prev, &prev, &Tensor::from_slice(&indices), Some(&indices)).is_err(), "index {bad}");
        }
    }

    #[test]
    fn a_room_does_not_take_other_caches_or_longer_steps() {
        let (prev_key, prev_value) = (cache(2, 3, 0.0), cache(2, 3, 100.0));
        let order = Tensor::from_slice(&[1i64, 0]);
        let (room, k, v) = KvRoom::select(&prev_key, &prev_value, &order, None).unwrap().unwrap();
        let step = cache(2, 1, 0.0).view([4, 1, 3]);
        assert!(!room.fits(&k.copy(), &v, &step, &step));
        assert!(!room.fits(&k, &v, &cache(2, 2, 0.0).view([4, 2, 3]), &step));
        assert!(!room.fits(&k, &v, &step.to_kind(Kind::Double), &step));
        assert!(KvRoom::select(&prev_key, &cache(2, 4, 0.0), &order, None).unwrap().is_none());
    }
}
