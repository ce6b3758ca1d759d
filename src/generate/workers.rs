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
/// returned (the error of the earliest job, as a sequential run would report it).
///
/// Each worker uses the calling thread's intra-op thread count. With one thread (or one job)
/// everything runs on the calling thread.
pub fn run_jobs<J, R, E, F>(
    models: &[TransformerModel],
    jobs: Vec<J>,
    inter_threads: usize,
    job: F,
) -> Result<Vec<R>, E>
where
    J: Send,
    R: Send,
    E: Send + From<GenerateError>,
    F: Fn(&[TransformerModel], J) -> Result<R, E> + Sync,
{
    let workers = inter_threads.min(jobs.len());
    if workers <= 1 {
        return jobs.into_iter().map(|j| job(models, j)).collect();
    }
    let n = jobs.len();
    let intra_threads = tch::get_num_threads();
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<VecDeque<_>>());
    let failed = AtomicBool::new(false);
    let shared = SharedModels(models);
    let (tx, rx) = mpsc::channel::<(usize, Result<R, E>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let tx = tx.clone();
            let (queue, failed, shared, job) = (&queue, &failed, &shared, &job);
            scope.spawn(move || {
                tch::set_num_threads(intra_threads);
                while !failed.load(Ordering::Relaxed) {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((i, j)) = next else { break };
                    let result = job(shared.0, j);
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
    let mut results: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut first_error: Option<(usize, E)> = None;
    for (i, r) in rx {
        match r {
            Ok(v) => results[i] = Some(v),
            Err(e) if first_error.as_ref().is_none_or(|(j, _)| i < *j) => first_error = Some((i, e)),
            Err(_) => {}
        }
    }
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| GenerateError::Invariant("a worker stopped before its job finished".into()).into()))
        .collect()
}

#[cfg(test)]
mod tests;
