//! The decoder step replayed as a CUDA graph (`TCHSEQ_CUDA_GRAPH=1`, with `TCHSEQ_KV_CACHE=fixed`).
//!
//! A fixed-shape step (`fixed_cache.rs`, `TransformerDecoder::pad_to_bucket`) reads and writes
//! the same memory from step to step within one bucket: its rows, its caches' length and its
//! source length. Its layers, from the embedded input `[1, rows, C]` to the logits, are captured
//! once per bucket and replayed: the input is copied into the graph's static input before a
//! replay and the logits copied out of its static output after. What a capture cannot hold stays
//! outside it: the embedding (it checks the token ids on the host), the write position of every
//! cache (`FixedKvCache::prepare`, a device scalar the graph reads) and the host's count of
//! written positions (`commit`).
//!
//! A graph holds the addresses it was captured with, so it is replayed only while every buffer
//! of the state is where it was, with the shape it had. The bucket keeps the buffers it was
//! captured with (up to [`KEPT_BYTES`] in all): a later batch that reaches the bucket copies its
//! own buffers into them, takes them for as long as it lives, and replays at once; a batch that
//! finds them taken by another runs eagerly. A bucket is captured after [`WARMUP_STEPS`] eager
//! steps at the same addresses, so that a bucket a batch only passes through never pays for a
//! capture. Any failure to capture or replay is reported once and leaves that bucket to the
//! eager step: a graph never gives a result the eager step would not.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tch::{Device, Tensor};

use super::graph_state::copied;
use super::incremental::IncrementalState;
use super::ModelError;
pub use super::graph_state::GraphKey;
use crate::libtorch::{CudaGraph, CudaGraphError};

/// The variable that switches the replayed step on: `1` (or `on`, `true`, `yes`).
pub const CUDA_GRAPH_ENV: &str = "TCHSEQ_CUDA_GRAPH";

/// Eager steps at one bucket's shape and addresses before it is captured.
pub const WARMUP_STEPS: usize = 2;

/// The most device memory the buckets keep for later batches (their caches and encoder keys).
pub const KEPT_BYTES: usize = 2 << 30;

/// Whether `value` (of [`CUDA_GRAPH_ENV`]) asks for the replayed step, or a warning when it is
/// neither on nor off.
pub fn cuda_graph_requested(value: Option<&str>) -> (bool, Option<String>) {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("1" | "on" | "true" | "yes") => (true, None),
        None | Some("" | "0" | "off" | "false" | "no") => (false, None),
        Some(other) => (false, Some(format!("{CUDA_GRAPH_ENV}={other:?}: neither 1 nor 0; the step runs eagerly"))),
    }
}

/// A step's graph, as [`StepGraphs`] uses it: [`CudaGraph`] on a GPU; tests give others.
pub trait StepGraph: Send {
    /// Captures `body`'s device work; the outer error is the capture's, the inner the body's.
    fn capture(&mut self, body: &mut dyn FnMut() -> Result<Tensor, ModelError>) -> Result<Result<Tensor, ModelError>, CudaGraphError>;
    fn replay(&mut self) -> Result<(), CudaGraphError>;
}

/// A [`CudaGraph`] of a step on CUDA device `device`.
struct DeviceGraph {
    graph: CudaGraph,
    device: usize,
}

impl StepGraph for DeviceGraph {
    fn capture(&mut self, body: &mut dyn FnMut() -> Result<Tensor, ModelError>) -> Result<Result<Tensor, ModelError>, CudaGraphError> {
        self.graph.capture(self.device, body)
    }

    fn replay(&mut self) -> Result<(), CudaGraphError> {
        self.graph.replay()
    }
}

/// Makes a graph for a step on `device`.
pub type GraphFactory = fn(Device) -> Result<Box<dyn StepGraph>, CudaGraphError>;

/// [`CudaGraph`] on a CUDA device; anywhere else there is nothing to capture.
pub fn cuda_graph_factory(device: Device) -> Result<Box<dyn StepGraph>, CudaGraphError> {
    match device {
        Device::Cuda(device) => Ok(Box::new(DeviceGraph { graph: CudaGraph::new()?, device })),
        other => Err(CudaGraphError::NoCuda(format!("the step runs on {other:?}"))),
    }
}

struct Captured {
    graph: Box<dyn StepGraph>,
    input: Tensor,
    output: Tensor,
}

#[derive(Default)]
struct Slot {
    /// The buffers (addresses, shapes and strides) the eager steps or the graph saw.
    addresses: Vec<usize>,
    eager_steps: usize,
    captured: Option<Captured>,
    /// The buffers the graph was captured with, kept for later batches (sharing their memory).
    kept: Vec<Option<Tensor>>,
    kept_bytes: usize,
    /// The state that uses this bucket's buffers now.
    user: Weak<()>,
    /// A capture or replay failed here: this bucket stays eager.
    failed: bool,
}

/// What a step at a bucket does.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Eager,
    Capture,
    Replay,
}

impl Slot {
    fn plan(&mut self) -> Plan {
        match (&self.captured, self.eager_steps >= WARMUP_STEPS) {
            (Some(_), _) => Plan::Replay,
            (None, true) => Plan::Capture,
            (None, false) => {
                self.eager_steps += 1;
                Plan::Eager
            }
        }
    }

    /// Whether `state` holds this bucket, taking it when no live state does. A state keeps what
    /// it takes while it lives: it may go on reading a bucket's kept buffers (its encoder keys)
    /// after it has moved to another bucket.
    fn take(&mut self, state: &mut IncrementalState) -> bool {
        match self.user.upgrade() {
            Some(user) => state.graph_leases.iter().any(|lease| Arc::ptr_eq(&user, lease)),
            None => {
                let lease = Arc::new(());
                self.user = Arc::downgrade(&lease);
                state.graph_leases.push(lease);
                true
            }
        }
    }

    /// What was captured or warmed up at other buffers is forgotten; returns the kept bytes freed.
    fn forget(&mut self, addresses: Vec<usize>) -> usize {
        self.captured = None;
        self.eager_steps = 0;
        self.addresses = addresses;
        self.kept.clear();
        std::mem::take(&mut self.kept_bytes)
    }
}

/// How the replayed steps went, for a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphStats {
    pub captures: usize,
    /// Batches that took a bucket's kept buffers and replayed its graph without a capture.
    pub adoptions: usize,
    pub replays: usize,
    pub eager_steps: usize,
    pub failed_buckets: usize,
}

/// One graph per bucket, made by `factory` and kept while its addresses hold.
pub struct StepGraphs {
    factory: GraphFactory,
    slots: Mutex<HashMap<GraphKey, Slot>>,
    reported: AtomicBool,
    kept_bytes: AtomicUsize,
    captures: AtomicUsize,
    adoptions: AtomicUsize,
    replays: AtomicUsize,
    eager_steps: AtomicUsize,
    failed_buckets: AtomicUsize,
}

impl std::fmt::Debug for StepGraphs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepGraphs").field("stats", &self.stats()).finish()
    }
}

impl StepGraphs {
    pub fn new(factory: GraphFactory) -> Self {
        Self {
            factory,
            slots: Mutex::new(HashMap::new()),
            reported: AtomicBool::new(false),
            kept_bytes: AtomicUsize::new(0),
            captures: AtomicUsize::new(0),
            adoptions: AtomicUsize::new(0),
            replays: AtomicUsize::new(0),
            eager_steps: AtomicUsize::new(0),
            failed_buckets: AtomicUsize::new(0),
        }
    }

    pub fn stats(&self) -> GraphStats {
        GraphStats {
            captures: self.captures.load(Ordering::Relaxed),
            adoptions: self.adoptions.load(Ordering::Relaxed),
            replays: self.replays.load(Ordering::Relaxed),
            eager_steps: self.eager_steps.load(Ordering::Relaxed),
            failed_buckets: self.failed_buckets.load(Ordering::Relaxed),
        }
    }

    /// The number of buckets holding a graph.
    pub fn graphs(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|s| s.captured.is_some()).count()
    }

    /// A fixed-shape step: `body` (the step's layers on `x`, `[1, rows, C]`, to the logits) run
    /// eagerly, captured, or replayed at the bucket of `state`. None where the state is not
    /// ready for a replayed step (the first step of a batch; `encoder`: whether the step has an
    /// encoder, whose attentions' keys must be cached); the caller then runs the step itself.
    pub fn step(
        &self,
        x: &Tensor,
        state: &mut IncrementalState,
        encoder: bool,
        body: &mut dyn FnMut(&Tensor, &mut IncrementalState) -> Result<Tensor, ModelError>,
    ) -> Result<Option<Tensor>, ModelError> {
        let rows = x.size().get(1).copied().unwrap_or(0);
        let Some(key) = state.prepare_graph_step(rows, encoder)? else { return Ok(None) };
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = slots.entry(key).or_default();
        let held = !slot.failed && slot.take(state);
        let mut moved = None;
        if held {
            let mut addresses = state.graph_addresses();
            if slot.captured.is_some() && slot.addresses != addresses && state.adopt_graph_buffers(&slot.kept)? {
                self.adoptions.fetch_add(1, Ordering::Relaxed);
                addresses = state.graph_addresses();
            }
            moved = (slot.addresses != addresses).then_some(addresses);
        }
        if let Some(addresses) = moved.as_mut() {
            // another batch, or buffers moved: what was captured reads memory no longer ours.
            // The bucket starts again on buffers of this state's own, none of them another
            // bucket's kept ones: a later batch that takes one bucket's buffers must not write
            // into memory that another batch reads through another bucket.
            let others: Vec<usize> =
                slots.iter().filter(|(k, _)| **k != key).flat_map(|(_, s)| s.kept.iter().flatten()).map(|t| t.data_ptr() as usize).collect();
            if state.unshare_graph_buffers(&others)? {
                *addresses = state.graph_addresses();
            }
        }
        let Some(slot) = slots.get_mut(&key) else { return Ok(None) };
        if let Some(addresses) = moved {
            let freed = slot.forget(addresses);
            self.kept_bytes.fetch_sub(freed, Ordering::Relaxed);
        }
        let plan = if held { slot.plan() } else { Plan::Eager };
        match plan {
            Plan::Eager => {}
            Plan::Replay => {
                if let Some(captured) = slot.captured.as_mut() {
                    captured.input.f_copy_(x)?;
                    match captured.graph.replay() {
                        Ok(()) => {
                            state.commit_fixed_caches();
                            self.replays.fetch_add(1, Ordering::Relaxed);
                            return Ok(Some(copied(&captured.output)?));
                        }
                        Err(e) => self.fail(slot, key, &e.to_string()),
                    }
                }
            }
            Plan::Capture => match self.capture(x, state, body) {
                Ok(mut captured) => match captured.graph.replay() {
                    Ok(()) => {
                        state.commit_fixed_caches();
                        self.captures.fetch_add(1, Ordering::Relaxed);
                        let logits = copied(&captured.output)?;
                        slot.captured = Some(captured);
                        self.keep(slot, state);
                        return Ok(Some(logits));
                    }
                    Err(e) => self.fail(slot, key, &e.to_string()),
                },
                Err(why) => self.fail(slot, key, &why),
            },
        }
        drop(slots);
        self.eager_steps.fetch_add(1, Ordering::Relaxed);
        body(x, state).map(Some)
    }

    /// Keeps the buffers `slot`'s graph was captured with for later batches, within [`KEPT_BYTES`].
    fn keep(&self, slot: &mut Slot, state: &mut IncrementalState) {
        let buffers: Vec<Option<Tensor>> = state.graph_buffers().into_iter().map(|t| t.map(|t| t.shallow_clone())).collect();
        let bytes = buffers.iter().flatten().map(|t| t.numel() * t.kind().elt_size_in_bytes()).sum::<usize>();
        let kept = self.kept_bytes.load(Ordering::Relaxed);
        if kept + bytes <= KEPT_BYTES {
            self.kept_bytes.store(kept + bytes, Ordering::Relaxed);
            (slot.kept, slot.kept_bytes) = (buffers, bytes);
        }
    }

    /// A graph of `body` on a static copy of `x`, the caches' positions prepared and their
    /// count left to the caller.
    fn capture(
        &self,
        x: &Tensor,
        state: &mut IncrementalState,
        body: &mut dyn FnMut(&Tensor, &mut IncrementalState) -> Result<Tensor, ModelError>,
    ) -> Result<Captured, String> {
        let mut graph = (self.factory)(x.device()).map_err(|e| e.to_string())?;
        let input = copied(x).map_err(|e| e.to_string())?;
        state.defer_fixed_caches(true);
        let outcome = graph.capture(&mut || body(&input, state));
        state.defer_fixed_caches(false);
        match outcome {
            Ok(Ok(output)) => Ok(Captured { graph, input, output }),
            Ok(Err(e)) => Err(format!("the step failed inside the capture: {e}")),
            Err(e) => Err(e.to_string()),
        }
    }

    fn fail(&self, slot: &mut Slot, key: GraphKey, why: &str) {
        slot.failed = true;
        let freed = slot.forget(Vec::new());
        self.kept_bytes.fetch_sub(freed, Ordering::Relaxed);
        self.failed_buckets.fetch_add(1, Ordering::Relaxed);
        if !self.reported.swap(true, Ordering::Relaxed) {
            eprintln!(
                "tchseq: the decoder step at {} rows, {} positions and {} source positions runs eagerly, as will any other that fails so: {why}",
                key.rows, key.length, key.source
            );
        }
    }
}

impl Drop for StepGraphs {
    fn drop(&mut self) {
        let s = self.stats();
        if s.captures + s.replays + s.failed_buckets > 0 {
            eprintln!(
                "tchseq: CUDA graphs: {} captured, {} steps replayed, {} eager, {} buckets failed, {} batches took a kept graph",
                s.captures, s.replays, s.eager_steps, s.failed_buckets, s.adoptions
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::model::fixed_cache::FixedKvCache;
    use tch::Kind;

    /// A graph that runs its body when captured (on the CPU that computes it) and does nothing
    /// when replayed.
    struct Recording;

    impl StepGraph for Recording {
        fn capture(&mut self, body: &mut dyn FnMut() -> Result<Tensor, ModelError>) -> Result<Result<Tensor, ModelError>, CudaGraphError> {
            Ok(body())
        }

        fn replay(&mut self) -> Result<(), CudaGraphError> {
            Ok(())
        }
    }

    struct BrokenReplay;

    impl StepGraph for BrokenReplay {
        fn capture(&mut self, body: &mut dyn FnMut() -> Result<Tensor, ModelError>) -> Result<Result<Tensor, ModelError>, CudaGraphError> {
            Ok(body())
        }

        fn replay(&mut self) -> Result<(), CudaGraphError> {
            Err(CudaGraphError::Failed { stage: "replay", message: "test".into() })
        }
    }

    fn recording(_: Device) -> Result<Box<dyn StepGraph>, CudaGraphError> {
        Ok(Box::new(Recording))
    }

    fn broken_replay(_: Device) -> Result<Box<dyn StepGraph>, CudaGraphError> {
        Ok(Box::new(BrokenReplay))
    }

    const ROWS: i64 = 4;

    /// A one-layer state whose fixed cache holds one position of `ROWS` rows.
    fn state() -> IncrementalState {
        state_of(1.0)
    }

    /// [`state`], its first position's keys and values `value`.
    fn state_of(value: f64) -> IncrementalState {
        let mut state = IncrementalState::new();
        let k = Tensor::full([ROWS, 2, 1, 4], value, (Kind::Float, Device::Cpu));
        let mut cache = FixedKvCache::new(&k).unwrap();
        cache.append(&k, &k).unwrap();
        state.layer_mut(0).self_attn.fixed_cache = Some(cache);
        state
    }

    fn cache_len(state: &IncrementalState) -> i64 {
        state.layers[0].self_attn.fixed_cache.as_ref().unwrap().len()
    }

    /// Runs `steps` steps of a body that appends to the cache and doubles its input; returns
    /// how often the body ran and the last result.
    fn run(graphs: &StepGraphs, state: &mut IncrementalState, steps: usize) -> (usize, Tensor) {
        let calls = Cell::new(0);
        let mut body = |x: &Tensor, s: &mut IncrementalState| -> Result<Tensor, ModelError> {
            calls.set(calls.get() + 1);
            let k = Tensor::ones([ROWS, 2, 1, 4], (Kind::Float, Device::Cpu));
            s.layers[0].self_attn.fixed_cache.as_mut().unwrap().append(&k, &k)?;
            Ok(x.f_mul_scalar(2.0)?)
        };
        let mut last = None;
        for step in 0..steps {
            let x = Tensor::full([1, ROWS, 8], step as f64, (Kind::Float, Device::Cpu));
            last = graphs.step(&x, state, false, &mut body).unwrap();
        }
        (calls.get(), last.unwrap())
    }

    #[test]
    fn a_bucket_runs_eagerly_then_is_captured_once_and_replayed_and_each_step_counts_one_position() {
        let graphs = StepGraphs::new(recording);
        let mut state = state();
        let (calls, _) = run(&graphs, &mut state, 6);
        // two eager steps, the capture's run, then replays that do not run the body
        assert_eq!(calls, WARMUP_STEPS + 1);
        assert_eq!(graphs.stats(), GraphStats { captures: 1, adoptions: 0, replays: 6 - WARMUP_STEPS - 1, eager_steps: WARMUP_STEPS, failed_buckets: 0 });
        assert_eq!(cache_len(&state), 1 + 6);
        assert_eq!(graphs.graphs(), 1);
        // the caches are no longer deferred after a capture: an eager append counts itself
        let k = Tensor::ones([ROWS, 2, 1, 4], (Kind::Float, Device::Cpu));
        state.layers[0].self_attn.fixed_cache.as_mut().unwrap().append(&k, &k).unwrap();
        assert_eq!(cache_len(&state), 8);
    }

    fn first_keys(state: &mut IncrementalState) -> Vec<f32> {
        let cache = state.layers[0].self_attn.fixed_cache.as_ref().unwrap();
        Vec::<f32>::try_from(cache.to_tensors().unwrap().0.narrow(2, 0, 1).flatten(0, -1)).unwrap()
    }

    /// A later batch at a captured bucket copies its buffers into the ones the graph was captured
    /// with and replays at once; a new length bucket is another graph.
    #[test]
    fn a_later_state_takes_the_kept_buffers_and_replays_and_a_new_length_bucket_is_another_graph() {
        let graphs = StepGraphs::new(recording);
        let mut first = state_of(1.0);
        let _ = run(&graphs, &mut first, 4);
        let kept = first.graph_addresses();
        drop(first);
        let mut second = state_of(3.0);
        let (calls, _) = run(&graphs, &mut second, 4);
        assert_eq!(calls, 0, "every step of the second batch replays the first batch's graph");
        assert_eq!(graphs.stats(), GraphStats { captures: 1, adoptions: 1, replays: 1 + 4, eager_steps: WARMUP_STEPS, failed_buckets: 0 });
        assert_eq!(second.graph_addresses(), kept, "the second batch works in the kept buffers");
        assert_eq!(first_keys(&mut second), vec![3.0; (ROWS * 2 * 4) as usize], "its own keys were copied there");
        assert_eq!(cache_len(&second), 1 + 4);
        // past 32 positions the cache grows to the next length bucket: a second key
        let (calls, _) = run(&graphs, &mut second, 30);
        assert_eq!(cache_len(&second), 1 + 4 + 30);
        assert_eq!(calls, WARMUP_STEPS + 1);
        assert_eq!(graphs.graphs(), 2);
        assert_eq!(graphs.stats().captures, 2);
    }

    /// While one batch holds a bucket's buffers, another at the same bucket runs eagerly in its
    /// own and leaves the graph alone; once the first is gone, the next takes them.
    #[test]
    fn a_bucket_held_by_a_live_state_is_eager_for_another() {
        let graphs = StepGraphs::new(recording);
        let mut first = state();
        let _ = run(&graphs, &mut first, 4);
        let mut second = state();
        let (calls, _) = run(&graphs, &mut second, 3);
        assert_eq!(calls, 3);
        assert_eq!(cache_len(&second), 1 + 3);
        assert_ne!(second.graph_addresses(), first.graph_addresses());
        let (calls, _) = run(&graphs, &mut first, 2);
        assert_eq!(calls, 0, "the first batch still replays its graph");
        drop((first, second));
        let (calls, _) = run(&graphs, &mut state(), 3);
        assert_eq!(calls, 0);
        assert_eq!(graphs.stats().captures, 1);
        assert_eq!(graphs.stats().adoptions, 1);
    }

    /// A state that crosses into a second length bucket captures it on buffers of its own (its
    /// write position and encoder keys, kept by the first bucket, copied), so the two buckets
    /// keep no memory in common; a later state takes both, one after the other.
    #[test]
    fn buckets_keep_no_buffer_in_common_and_a_later_state_takes_each() {
        let graphs = StepGraphs::new(recording);
        let with_encoder = |value: f64| {
            let mut state = state_of(value);
            let keys = Tensor::full([ROWS, 2, 7, 4], value, (Kind::Float, Device::Cpu));
            let encoder = &mut state.layers[0].encoder_attn;
            (encoder.prev_key, encoder.prev_value) = (Some(keys.copy()), Some(keys));
            state
        };
        let mut first = with_encoder(1.0);
        let (calls, _) = run(&graphs, &mut first, 4 + 30);
        assert_eq!(calls, 2 * (WARMUP_STEPS + 1));
        drop(first);
        let kept: Vec<Vec<usize>> = graphs
            .slots
            .lock()
            .unwrap()
            .values()
            .map(|s| s.kept.iter().flatten().map(|t| t.data_ptr() as usize).collect())
            .collect();
        assert_eq!(kept.len(), 2);
        assert!(kept.iter().all(|k| k.len() == 6), "{kept:?}");
        assert!(!kept[0].iter().any(|p| kept[1].contains(p)), "{kept:?}");
        let mut second = with_encoder(2.0);
        let (calls, _) = run(&graphs, &mut second, 4 + 30);
        assert_eq!(calls, 0);
        assert_eq!(graphs.stats().adoptions, 2);
        let keys = second.layers[0].encoder_attn.prev_key.as_ref().unwrap();
        assert_eq!(keys.max().double_value(&[]), 2.0, "the second state's encoder keys went along");
    }

    /// Buffers beyond [`KEPT_BYTES`] are not kept: a later batch, its buffers elsewhere, then
    /// captures again.
    #[test]
    fn a_bucket_over_the_kept_bytes_keeps_nothing() {
        let graphs = StepGraphs::new(recording);
        graphs.kept_bytes.store(KEPT_BYTES, Ordering::Relaxed);
        let mut first = state();
        let _ = run(&graphs, &mut first, 4);
        assert!(graphs.slots.lock().unwrap().values().all(|s| s.kept.is_empty() && s.kept_bytes == 0));
        assert_eq!(graphs.kept_bytes.load(Ordering::Relaxed), KEPT_BYTES);
        // the first batch lets go of the bucket but not of its memory, so the allocator cannot
        // put the next batch's buffers where the graph was captured (a batch whose buffers lie
        // there, shapes and strides alike, may replay it as it is)
        first.graph_leases.clear();
        let (calls, _) = run(&graphs, &mut state(), 4);
        assert_eq!(calls, WARMUP_STEPS + 1);
        assert_eq!((graphs.stats().captures, graphs.stats().adoptions), (2, 0));
        drop(first);
    }

    /// A graph holds the shapes it was captured with: encoder keys of another source length at
    /// the same address (where the allocator put a new batch's) are captured again.
    #[test]
    fn encoder_keys_of_another_shape_at_the_same_address_are_captured_again() {
        let graphs = StepGraphs::new(recording);
        let mut state = state();
        let keys = Tensor::ones([ROWS, 2, 7, 4], (Kind::Float, Device::Cpu));
        let encoder = &mut state.layers[0].encoder_attn;
        (encoder.prev_key, encoder.prev_value) = (Some(keys.shallow_clone()), Some(keys.shallow_clone()));
        let (calls, _) = run(&graphs, &mut state, 4);
        assert_eq!(calls, WARMUP_STEPS + 1);
        let shorter = keys.narrow(2, 0, 6);
        assert_eq!(shorter.data_ptr(), keys.data_ptr());
        let encoder = &mut state.layers[0].encoder_attn;
        (encoder.prev_key, encoder.prev_value) = (Some(shorter.shallow_clone()), Some(shorter));
        let (calls, _) = run(&graphs, &mut state, 4);
        assert_eq!(calls, WARMUP_STEPS + 1, "a graph of 7 source positions must not run on 6");
        assert_eq!(graphs.stats().captures, 2);
    }

    /// Without CUDA every capture fails: the bucket is reported, then every step is the eager
    /// step's, with its result, and still counts one position.
    #[test]
    fn without_cuda_a_bucket_falls_back_to_the_eager_step() {
        let graphs = StepGraphs::new(cuda_graph_factory);
        let mut state = state();
        let (calls, last) = run(&graphs, &mut state, 5);
        assert_eq!(calls, 5);
        assert_eq!(Vec::<f32>::try_from(last.flatten(0, -1)).unwrap(), vec![8.0; (ROWS * 8) as usize]);
        assert_eq!(graphs.stats(), GraphStats { captures: 0, adoptions: 0, replays: 0, eager_steps: 5, failed_buckets: 1 });
        assert_eq!(cache_len(&state), 1 + 5);
        assert_eq!(graphs.graphs(), 0);
    }

    #[test]
    fn a_failed_replay_gives_the_eager_result_and_leaves_the_bucket_eager() {
        let graphs = StepGraphs::new(broken_replay);
        let mut state = state();
        let (calls, last) = run(&graphs, &mut state, 5);
        // the capture ran the body, its replay failed, so the step ran again eagerly
        assert_eq!(calls, 5 + 1);
        assert_eq!(Vec::<f32>::try_from(last.flatten(0, -1)).unwrap(), vec![8.0; (ROWS * 8) as usize]);
        assert_eq!(graphs.stats().failed_buckets, 1);
        assert_eq!(graphs.stats().replays, 0);
        assert_eq!(cache_len(&state), 1 + 5);
    }

    #[test]
    fn a_step_without_a_written_fixed_cache_is_left_to_the_caller() {
        let graphs = StepGraphs::new(recording);
        let x = Tensor::zeros([1, ROWS, 8], (Kind::Float, Device::Cpu));
        let mut body = |x: &Tensor, _: &mut IncrementalState| Ok(x.shallow_clone());
        assert!(graphs.step(&x, &mut IncrementalState::new(), false, &mut body).unwrap().is_none());
        // an encoder whose attentions have no keys yet: the first step of a batch
        assert!(graphs.step(&x, &mut state(), true, &mut body).unwrap().is_none());
        // rows that are not the cache's bucket
        let three = Tensor::zeros([1, 3, 8], (Kind::Float, Device::Cpu));
        assert!(graphs.step(&three, &mut state(), false, &mut body).unwrap().is_none());
        assert_eq!(graphs.stats(), GraphStats::default());
    }

    #[test]
    fn the_setting_is_on_or_off_and_anything_else_is_named() {
        for on in ["1", "on", " TRUE ", "yes"] {
            assert_eq!(cuda_graph_requested(Some(on)), (true, None), "{on}");
        }
        for off in [None, Some(""), Some("0"), Some("off"), Some("no")] {
            assert_eq!(cuda_graph_requested(off), (false, None), "{off:?}");
        }
        let (on, warning) = cuda_graph_requested(Some("2"));
        assert!(!on);
        assert_eq!(warning.unwrap(), r#"TCHSEQ_CUDA_GRAPH="2": neither 1 nor 0; the step runs eagerly"#);
    }
}
