//! What a replayed decoder step reads and writes in an incremental state (`step_graphs.rs`): its
//! bucket, its buffers in a fixed order, their addresses and shapes, and the copies that move a
//! state's buffers into a bucket's kept ones or out of them.

use tch::Tensor;

use super::incremental::IncrementalState;
use super::ModelError;

/// A graph's bucket: the step's rows (a row bucket), its caches' length capacity and its
/// encoder attentions' source length (a source bucket; 0 without an encoder).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphKey {
    pub rows: i64,
    pub length: i64,
    pub source: i64,
}

/// A new tensor holding `t`'s values, laid out as `t`.
pub(super) fn copied(t: &Tensor) -> Result<Tensor, tch::TchError> {
    let mut out = t.f_empty_like()?;
    out.f_copy_(t)?;
    Ok(out)
}

impl IncrementalState {
    /// The key of a replayable step: every layer's self-attention holds a fixed cache with a
    /// position written and the batch's rows, and (`encoder`) every encoder attention its keys;
    /// the next position prepared. None where the step must run eagerly.
    pub(crate) fn prepare_graph_step(&mut self, rows: i64, encoder: bool) -> Result<Option<GraphKey>, ModelError> {
        let ready = !self.layers.is_empty()
            && self.layers.iter().all(|l| {
                l.self_attn.fixed_cache.as_ref().is_some_and(|c| !c.is_empty() && c.rows() == rows && c.capacity().0 == rows)
                    && (!encoder || l.encoder_attn.prev_key.is_some())
            });
        if !ready {
            return Ok(None);
        }
        let mut length = 0;
        for cache in self.layers.iter_mut().filter_map(|l| l.self_attn.fixed_cache.as_mut()) {
            cache.prepare()?;
            length = cache.capacity().1;
        }
        let source = match self.layers[0].encoder_attn.prev_key.as_ref().filter(|_| encoder) {
            Some(keys) => keys.size().get(2).copied().unwrap_or(0),
            None => 0,
        };
        Ok(Some(GraphKey { rows, length, source }))
    }

    /// Every buffer a replayed step reads or writes, in a fixed order: each layer's cache (keys,
    /// values, bias, write position), then its encoder attention's keys, values and bias.
    pub(super) fn graph_buffers(&mut self) -> Vec<Option<&mut Tensor>> {
        let mut buffers = Vec::new();
        for layer in &mut self.layers {
            if let Some(cache) = layer.self_attn.fixed_cache.as_mut() {
                buffers.extend(cache.buffers_mut().map(Some));
            }
            let e = &mut layer.encoder_attn;
            buffers.extend([e.prev_key.as_mut(), e.prev_value.as_mut(), e.attn_bias.as_mut()]);
        }
        buffers
    }

    /// [`Self::graph_buffers`]' addresses, shapes and strides: a new batch's buffers of
    /// another shape may sit where the last batch's were.
    pub(crate) fn graph_addresses(&mut self) -> Vec<usize> {
        let mut addresses = Vec::new();
        for t in self.graph_buffers() {
            match t {
                Some(t) => {
                    addresses.push(t.data_ptr() as usize);
                    addresses.extend(t.size().into_iter().chain(t.stride()).map(|n| n as usize));
                    addresses.push(usize::MAX);
                }
                None => addresses.push(0),
            }
        }
        addresses
    }

    /// Gives this state a copy of its own of every buffer at one of the `kept` addresses;
    /// whether there was one.
    pub(super) fn unshare_graph_buffers(&mut self, kept: &[usize]) -> Result<bool, ModelError> {
        let mut copied_any = false;
        for t in self.graph_buffers().into_iter().flatten() {
            if kept.contains(&(t.data_ptr() as usize)) {
                *t = copied(t)?;
                copied_any = true;
            }
        }
        Ok(copied_any)
    }

    /// Copies this state's buffers into `kept` (a bucket's, of the same shapes) and takes them
    /// as its own; false, and nothing changed, where they differ in number, shape or kind.
    pub(super) fn adopt_graph_buffers(&mut self, kept: &[Option<Tensor>]) -> Result<bool, ModelError> {
        let mut buffers = self.graph_buffers();
        let same = |a: &Option<&mut Tensor>, b: &Option<Tensor>| match (a, b) {
            (Some(a), Some(b)) => a.size() == b.size() && a.kind() == b.kind() && a.device() == b.device(),
            (None, None) => true,
            _ => false,
        };
        if kept.is_empty() || buffers.len() != kept.len() || !buffers.iter().zip(kept).all(|(a, b)| same(a, b)) {
            return Ok(false);
        }
        for (mine, theirs) in buffers.iter_mut().zip(kept) {
            if let (Some(mine), Some(theirs)) = (mine, theirs) {
                let mut theirs = theirs.shallow_clone();
                theirs.f_copy_(mine)?;
                **mine = theirs;
            }
        }
        Ok(true)
    }

    pub(crate) fn defer_fixed_caches(&mut self, deferred: bool) {
        for cache in self.layers.iter_mut().filter_map(|l| l.self_attn.fixed_cache.as_mut()) {
            cache.defer(deferred);
        }
    }

    pub(crate) fn commit_fixed_caches(&mut self) {
        for cache in self.layers.iter_mut().filter_map(|l| l.self_attn.fixed_cache.as_mut()) {
            cache.commit();
        }
    }
}
