//! The incremental-decoding cache: fairseq's `incremental_state`, one `attn_state` buffer per
//! `MultiheadAttention` (each decoder layer's `self_attn` and `encoder_attn`).

use tch::Tensor;

use super::fixed_cache::{row_bucket, FixedKvCache};
use super::kv_room::KvRoom;
use crate::kernels::kv_cache::HostKvCache;
use crate::kernels::step_buffers::HostStepBuffers;
use super::ModelError;

/// `{prev_key, prev_value, prev_key_padding_mask}` of one `MultiheadAttention`; keys and
/// values are `[B, H, len, D]`.
#[derive(Debug, Default)]
pub struct AttentionState {
    pub prev_key: Option<Tensor>,
    pub prev_value: Option<Tensor>,
    pub prev_key_padding_mask: Option<Tensor>,
    /// The fused path's additive padding mask of an encoder attention, `[B, 1, 1, S]`.
    pub attn_bias: Option<Tensor>,
    /// BART's beamable encoder attention (`set_beam_size`): keys and values are kept once per
    /// sentence, not once per beam. 1 = off.
    pub beam_size: i64,
    /// The fused self-attention's keys and values on the host (float32 and int8 on the CPU),
    /// in place of `prev_key` and `prev_value`.
    pub host_cache: Option<HostKvCache>,
    /// A self-attention's keys and values at a fixed capacity (`fixed_cache.rs`), in place of
    /// `prev_key` and `prev_value`, where the decoder asks for it.
    pub fixed_cache: Option<FixedKvCache>,
    pub fixed_capacity: bool,
    /// A self-attention on fairseq's path: the reorder leaves room after `prev_key` and
    /// `prev_value` for the next step's key and value (`kv_room.rs`).
    pub(crate) room_for_next_key: bool,
    pub(crate) kv_room: Option<KvRoom>,
    /// An encoder attention's cached padding mask holds no padding (None: not yet looked at).
    /// Reorders keep it: they only select rows.
    pub(crate) static_padding_free: Option<bool>,
}

/// `new_order`'s indices on the host, read once per reorder for every layer.
fn host_indices<'a>(new_order: &Tensor, host_order: &'a mut Option<Vec<i64>>) -> Result<&'a [i64], ModelError> {
    Ok(match host_order {
        Some(order) => order,
        None => host_order.insert(Vec::<i64>::try_from(&new_order.f_to_device(tch::Device::Cpu)?)?),
    })
}

impl AttentionState {
    fn index_select(&mut self, new_order: &Tensor, host_order: &mut Option<Vec<i64>>) -> Result<(), ModelError> {
        let mut slots = vec![&mut self.prev_key_padding_mask, &mut self.attn_bias];
        self.kv_room = None;
        let room = match (&self.prev_key, &self.prev_value) {
            (Some(k), Some(v)) if self.room_for_next_key => {
                let order = match KvRoom::on_host(k, v, new_order) {
                    true => Some(host_indices(new_order, host_order)?),
                    false => None,
                };
                KvRoom::select(k, v, new_order, order)?
            }
            _ => None,
        };
        match room {
            Some((room, k, v)) => {
                (self.prev_key, self.prev_value, self.kv_room) = (Some(k), Some(v), Some(room));
            }
            None => slots.extend([&mut self.prev_key, &mut self.prev_value]),
        }
        for slot in slots {
            if let Some(t) = slot.as_ref() {
                *slot = Some(t.f_index_select(0, new_order)?);
            }
        }
        if let Some(cache) = self.host_cache.as_mut() {
            cache.reorder(host_indices(new_order, host_order)?)?;
        }
        if let Some(cache) = self.fixed_cache.as_mut() {
            cache.reorder(new_order)?;
        }
        Ok(())
    }

    /// [`Self::index_select`] into the same buffers where `order` keeps their row count, so that
    /// a padded step's encoder attention reads the same memory from step to step.
    fn select_in_place(&mut self, order: &Tensor) -> Result<(), ModelError> {
        self.kv_room = None;
        let rows = order.size().first().copied().unwrap_or(0);
        for slot in [&mut self.prev_key, &mut self.prev_value, &mut self.prev_key_padding_mask, &mut self.attn_bias] {
            if let Some(t) = slot.as_mut() {
                let picked = t.f_index_select(0, order)?;
                if t.size()[0] == rows {
                    t.f_copy_(&picked)?;
                } else {
                    *t = picked;
                }
            }
        }
        if let Some(cache) = self.fixed_cache.as_mut() {
            cache.reorder(order)?;
        }
        Ok(())
    }

    fn rows(&self) -> Option<i64> {
        [&self.prev_key, &self.prev_value, &self.prev_key_padding_mask, &self.attn_bias]
            .into_iter()
            .flatten()
            .next()
            .map(|t| t.size()[0])
            .or(self.host_cache.as_ref().map(|c| c.rows() as i64))
            .or(self.fixed_cache.as_ref().map(FixedKvCache::rows))
    }

    /// Moves a host cache into `prev_key` and `prev_value`, for a step that takes fairseq's path.
    pub fn host_cache_to_tensors(&mut self) -> Result<(), ModelError> {
        if let Some(cache) = self.host_cache.take() {
            let (k, v) = cache.to_tensors()?;
            (self.prev_key, self.prev_value) = (Some(k), Some(v));
        }
        if let Some(cache) = self.fixed_cache.take() {
            let (k, v) = cache.to_tensors()?;
            (self.prev_key, self.prev_value) = (Some(k), Some(v));
        }
        Ok(())
    }

    /// A self-attention step's key and value `[B·H, 1, D]` written into the room the reorder
    /// left: the caches with them, `[B·H, len + 1, D]`, or None where there is no room for them.
    pub(crate) fn append_in_place(&mut self, k: &Tensor, v: &Tensor) -> Result<Option<(Tensor, Tensor)>, ModelError> {
        let (Some(prev_key), Some(prev_value)) = (&self.prev_key, &self.prev_value) else {
            return Ok(None);
        };
        match self.kv_room.take() {
            Some(room) if room.fits(prev_key, prev_value, k, v) => Ok(Some(room.append(k, v)?)),
            _ => Ok(None),
        }
    }
}

#[derive(Debug, Default)]
pub struct LayerState {
    pub self_attn: AttentionState,
    pub encoder_attn: AttentionState,
}

/// Per-layer attention caches, filled by the decoder on its first incremental step.
#[derive(Debug, Default)]
pub struct IncrementalState {
    pub layers: Vec<LayerState>,
    /// The beam size of BART's beamable encoder attention (0 or 1: off).
    pub beamable: i64,
    /// The host step's activations (`host_step.rs`).
    pub(crate) host_buffers: HostStepBuffers,
    /// Self-attentions on the fused path keep a fixed-capacity cache (`fixed_cache.rs`).
    pub(crate) fixed_capacity: bool,
    /// The batch's rows when the steps run padded to their row bucket (`fixed_cache::row_bucket`):
    /// every cached tensor then has the bucket's rows.
    pub(crate) padded_rows: Option<i64>,
    /// The replayed-step buckets this state holds (`step_graphs.rs`): while it lives, no other
    /// state takes their kept buffers.
    pub(crate) graph_leases: Vec<std::sync::Arc<()>>,
}

impl IncrementalState {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn layer_mut(&mut self, idx: usize) -> &mut LayerState {
        if self.layers.len() <= idx {
            let (beam_size, fixed_capacity) = (self.beamable.max(1), self.fixed_capacity);
            self.layers.resize_with(idx + 1, || LayerState {
                self_attn: AttentionState { fixed_capacity, ..Default::default() },
                encoder_attn: AttentionState { beam_size, ..Default::default() },
            });
        }
        &mut self.layers[idx]
    }

    /// `reorder_incremental_state`: `index_select(0, new_order)` on every cached tensor.
    /// Like fairseq's `MultiheadAttention.reorder_incremental_state` (beam_size 1), an
    /// encoder-attention buffer that already has `new_order.len()` rows is left as it is (its
    /// rows only ever differ between sentences, and then the batch shrinks).
    ///
    /// `new_order`: an int64 tensor of row indices on the model device.
    pub fn reorder(&mut self, new_order: &Tensor) -> Result<(), ModelError> {
        if let Some(before) = self.padded_rows {
            return self.reorder_padded(new_order, before);
        }
        let rows = new_order.size().first().copied().unwrap_or(0);
        let beam = self.beamable;
        let mut host_order = None;
        for layer in &mut self.layers {
            layer.self_attn.index_select(new_order, &mut host_order)?;
            if beam > 1 {
                // one row per sentence: fairseq keeps them unless the batch shrinks, then takes
                // each sentence's first new row divided by the beam size
                if layer.encoder_attn.rows().is_some_and(|r| r * beam != rows) {
                    let sentences = new_order.f_reshape([-1, beam])?.f_select(1, 0)?.f_floor_divide_scalar(beam)?;
                    layer.encoder_attn.index_select(&sentences, &mut None)?;
                }
            } else if layer.encoder_attn.rows() != Some(rows) {
                layer.encoder_attn.index_select(new_order, &mut None)?;
            }
        }
        Ok(())
    }

    /// [`Self::reorder`] of a state whose rows are padded to a row bucket: `new_order` padded
    /// the same way (with row 0), every buffer written in place while the bucket holds, and the
    /// encoder attentions' rows selected whenever the batch changed, which the padded row count
    /// does not show.
    fn reorder_padded(&mut self, new_order: &Tensor, before: i64) -> Result<(), ModelError> {
        let rows = new_order.size().first().copied().unwrap_or(0);
        let bucket = row_bucket(rows);
        let order = if bucket > rows {
            let padding = Tensor::f_zeros([bucket - rows], (tch::Kind::Int64, new_order.device()))?;
            Tensor::f_cat(&[new_order, &padding], 0)?
        } else {
            new_order.shallow_clone()
        };
        for layer in &mut self.layers {
            layer.self_attn.select_in_place(&order)?;
            if rows != before || layer.encoder_attn.rows() != Some(bucket) {
                layer.encoder_attn.select_in_place(&order)?;
            }
        }
        self.padded_rows = Some(rows);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn rows(n: i64) -> Tensor {
        Tensor::arange(n, (Kind::Float, Device::Cpu)).view([n, 1, 1, 1])
    }

    fn first_column(t: &Option<Tensor>) -> Vec<f32> {
        Vec::<f32>::try_from(t.as_ref().unwrap().flatten(0, -1)).unwrap()
    }

    #[test]
    fn reorder_selects_self_attention_rows_and_keeps_same_sized_encoder_buffers() {
        let mut state = IncrementalState::new();
        let layer = state.layer_mut(0);
        layer.self_attn.prev_key = Some(rows(3));
        layer.encoder_attn.prev_key = Some(rows(3));
        state.reorder(&Tensor::from_slice(&[2i64, 2, 0])).unwrap();
        assert_eq!(first_column(&state.layers[0].self_attn.prev_key), [2., 2., 0.]);
        assert_eq!(first_column(&state.layers[0].encoder_attn.prev_key), [0., 1., 2.]);
        // a shrinking batch reorders the encoder buffers too
        state.reorder(&Tensor::from_slice(&[1i64, 2])).unwrap();
        assert_eq!(first_column(&state.layers[0].self_attn.prev_key), [2., 0.]);
        assert_eq!(first_column(&state.layers[0].encoder_attn.prev_key), [1., 2.]);
    }

    /// A self-attention on fairseq's path is reordered into buffers with room for the next key;
    /// a second reorder before any step selects from the first one's.
    #[test]
    fn a_fairseq_self_attention_is_reordered_with_room_for_the_next_key() {
        let mut state = IncrementalState::new();
        let attn = &mut state.layer_mut(0).self_attn;
        (attn.prev_key, attn.prev_value, attn.room_for_next_key) = (Some(rows(3)), Some(rows(3)), true);
        state.reorder(&Tensor::from_slice(&[2i64, 2, 0])).unwrap();
        state.reorder(&Tensor::from_slice(&[1i64, 2])).unwrap();
        let attn = &mut state.layers[0].self_attn;
        assert_eq!(first_column(&attn.prev_key), [2., 0.]);
        assert_eq!(first_column(&attn.prev_value), [2., 0.]);
        let step = Tensor::from_slice(&[7.0f32, 8.0]).view([2, 1, 1]);
        let (keys, _) = attn.append_in_place(&step, &step).unwrap().unwrap();
        assert_eq!(Vec::<f32>::try_from(keys.flatten(0, -1)).unwrap(), [2., 7., 0., 8.]);
        // the room is used once
        assert!(attn.append_in_place(&step, &step).unwrap().is_none());
    }

    /// A padded state reorders into its own buffers while the row bucket holds: the encoder
    /// attention's keys and the fixed cache keep their addresses; a smaller bucket moves them.
    #[test]
    fn a_padded_reorder_keeps_every_buffer_while_the_bucket_holds() {
        let mut state = IncrementalState { fixed_capacity: true, ..IncrementalState::new() };
        let layer = state.layer_mut(0);
        assert!(layer.self_attn.fixed_capacity);
        layer.encoder_attn.prev_key = Some(rows(4));
        let k = Tensor::arange(4, (Kind::Float, Device::Cpu)).view([4, 1, 1, 1]);
        let mut cache = FixedKvCache::new(&k).unwrap();
        cache.append(&k, &k).unwrap();
        layer.self_attn.fixed_cache = Some(cache);
        state.padded_rows = Some(4);
        let addresses = |s: &IncrementalState| {
            let l = &s.layers[0];
            (l.encoder_attn.prev_key.as_ref().unwrap().data_ptr() as usize, l.self_attn.fixed_cache.as_ref().unwrap().addresses())
        };
        let before = addresses(&state);
        // a sentence finished: 3 rows in the bucket of 4, one padding row (a copy of row 0)
        state.reorder(&Tensor::from_slice(&[2i64, 0, 1])).unwrap();
        assert_eq!(addresses(&state), before);
        assert_eq!(first_column(&state.layers[0].encoder_attn.prev_key), [2., 0., 1., 0.]);
        let (keys, _) = state.layers[0].self_attn.fixed_cache.as_ref().unwrap().to_tensors().unwrap();
        assert_eq!(Vec::<f32>::try_from(keys.flatten(0, -1)).unwrap(), [2., 0., 1., 0.]);
        // 2 rows: a bucket of 2, new buffers
        state.reorder(&Tensor::from_slice(&[1i64, 2])).unwrap();
        let after = addresses(&state);
        assert_ne!(after.0, before.0);
        assert_ne!(after.1, before.1);
        assert_eq!(first_column(&state.layers[0].encoder_attn.prev_key), [0., 1.]);
        assert_eq!(state.padded_rows, Some(2));
    }
}
