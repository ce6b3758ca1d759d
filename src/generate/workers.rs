//! Several batches decoded (or scored) at once, one thread each (CTranslate2's `inter_threads`).
//!
//! fairseq runs one batch at a time and spreads each op over the intra-op threads. On a few
//! cores the small ops of incremental decoding parallelize badly, while whole batches do not
//! interfere at all. Every batch is computed exactly as it would be alone, so the output does
//! not depend on the number of workers; with one intra-op thread per worker it equals fairseq's
//! single-threaded output bit for bit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};

use super::GenerateError;
use crate::model::TransformerModel;

/// The models, read by several threads at once.
struct SharedModels<'m>(&'m [TransformerModel]);

// SAFETY: `tch::Tensor` is not `Sync` because a shared handle can reach in-place ops through
// `shallow_clone`. After loading, nothing in `TransformerModel` is mutated: every forward takes
// `&self` and writes only to tensors it allocated itself, libtorch reads of one tensor from
// several threads are safe (its reference counts are atomic), and grad mode, the only state
// a forward consults, is thread-local.
unsafe impl Sync for SharedModels<'_> {}

/// Runs `job` on every item of `jobs` with up to `inter_threads` threads that share `models`.
/// Results come back in the order of `jobs`. The first error stops the remaining jobs and is
/// returned (the error of the earliest job, as a sequential run would report it). A job that
/// panics fails with [`GenerateError::Panicked`].
///
/// Each worker uses the calling thread's intra-op thread count. With one thread (or one job)
/// everything runs on the calling thread.
pub fn run_jobs<J, R, E, F>(models: &[TransformerModel], jobs: Vec<J>, inter_threads: usize, job: F) -> Result<Vec<R>, E>
where
    J: Send,
    R: Send,
    E: Send + From<GenerateError>,
    F: Fn(&[TransformerModel], J) -> Result<R, E> + Sync,
{
    let mut results = Vec::new();
    for r in run(models, jobs, inter_threads, &job, true) {
        match r {
            Some(Ok(v)) => results.push(v),
            Some(Err(e)) => return Err(e),
            None => return Err(GenerateError::Invariant("a worker stopped before its job finished".into()).into()),
        }
    }
    Ok(results)
}

/// [`run_jobs`] where a failing job fails only itself: one result per job, in order, every job
/// run. A job that panics fails with [`GenerateError::Panicked`] and the others go on.
pub fn run_each<J, R, E, F>(models: &[TransformerModel], jobs: Vec<J>, inter_threads: usize, job: F) -> Vec<Result<R, E>>
where
    J: Send,
    R: Send,
    E: Send + From<GenerateError>,
    F: Fn(&[TransformerModel], J) -> Result<R, E> + Sync,
{
    run(models, jobs, inter_threads, &job, false)
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(GenerateError::Invariant("a worker stopped before its job finished".into()).into())))
        .collect()
}

/// Every job's result (`None` for a job not run because an earlier one failed and
/// `stop_on_error` is set).
fn run<J, R, E, F>(models: &[TransformerModel], jobs: Vec<J>, inter_threads: usize, job: &F, stop_on_error: bool) -> Vec<Option<Result<R, E>>>
where
    J: Send,
    R: Send,
    E: Send + From<GenerateError>,
    F: Fn(&[TransformerModel], J) -> Result<R, E> + Sync,
{
    let n = jobs.len();
    let workers = inter_threads.min(n);
    if workers <= 1 {
        let mut failed = false;
        return jobs
            .into_iter()
            .map(|j| {
                if failed && stop_on_error {
                    return None;
                }
                let r = guarded(job, models, j);
                failed |= r.is_err();
                Some(r)
            })
            .collect();
    }
    let intra_threads = tch::get_num_threads();
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<VecDeque<_>>());
    let failed = AtomicBool::new(false);
    let shared = SharedModels(models);
    let (tx, rx) = mpsc::channel::<(usize, Result<R, E>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (queue, failed, shared) = (&queue, &failed, &shared);
            scope.spawn(move || {
                tch::set_num_threads(intra_threads);
                while !(stop_on_error && failed.load(Ordering::Relaxed)) {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((i, j)) = next else { break };
                    let result = guarded(job, shared.0, j);
                    if result.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    if tx.send((i, result)).is_err() {
                        break;
                    }
                }
            });
        }
    });
    drop(tx);
    let mut results: Vec<Option<Result<R, E>>> = (0..n).map(|_| None).collect();
    for (i, r) in rx {
        results[i] = Some(r);
    }
    if stop_on_error {
        // the earliest error is the one a sequential run would meet; nothing after it counts
        if let Some(first) = results.iter().position(|r| matches!(r, Some(Err(_)))) {
            results.truncate(first + 1);
            results.resize_with(n, || None);
        }
    }
    results
}

/// `job(models, j)`, with a panic inside it caught and returned as [`GenerateError::Panicked`].
fn guarded<J, R, E, F>(job: &F, models: &[TransformerModel], j: J) -> Result<R, E>
where
    E: From<GenerateError>,
    F: Fn(&[TransformerModel], J) -> Result<R, E>,
{
    catch_panic(|| job(models, j))
}

/// `f()`, with a panic inside it caught and returned as [`GenerateError::Panicked`]. A batch that
/// panics leaves nothing half-written that another reads: its own tensors are dropped, and the
/// models are only read.
pub fn catch_panic<R, E: From<GenerateError>>(f: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(GenerateError::Panicked(panic_message(payload.as_ref())).into()),
    }
}

/// The message a panic was raised with.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_string(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".to_string(),
    }
}

#[cfg(test)]
mod tests;
