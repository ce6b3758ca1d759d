//! libtorch's `at::parallel_for` for host kernels (`csrc/parallel_for.cpp`): the threads
//! `--threads` sets, run inline with one thread or inside another parallel region.

use std::ffi::c_void;

mod ffi {
    use std::ffi::c_void;

    extern "C" {
        pub fn tchseq_parallel_for(
            begin: i64,
            end: i64,
            grain: i64,
            body: unsafe extern "C" fn(*mut c_void, i64, i64),
            context: *mut c_void,
        );
    }
}

/// Calls `body(start, end)` on disjoint ranges covering `0..n`, each at least `grain` long
/// (but the last), on libtorch's intra-op threads.
pub fn parallel_for<F: Fn(usize, usize) + Sync>(n: usize, grain: usize, body: F) {
    if n == 0 {
        return;
    }
    if n <= grain.max(1) {
        return body(0, n);
    }
    unsafe extern "C" fn trampoline<F: Fn(usize, usize) + Sync>(context: *mut c_void, begin: i64, end: i64) {
        // SAFETY: `context` is the `&F` passed below, alive for the whole call.
        let body = unsafe { &*(context as *const F) };
        // a panic must not unwind into C++
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(begin as usize, end as usize))).is_err() {
            std::process::abort();
        }
    }
    // SAFETY: the trampoline matches `body`'s type, and at::parallel_for returns only when
    // every range has run.
    unsafe {
        ffi::tchseq_parallel_for(0, n as i64, grain.max(1) as i64, trampoline::<F>, &body as *const F as *mut c_void);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn covers_every_index_once_in_ranges_of_at_least_the_grain() {
        for (n, grain) in [(0, 1), (1, 1), (7, 1), (100, 7), (1000, 1000), (1000, 3000)] {
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            let short = AtomicUsize::new(0);
            parallel_for(n, grain, |start, end| {
                if end - start < grain && end != n {
                    short.fetch_add(1, Ordering::Relaxed);
                }
                for s in &seen[start..end] {
                    s.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "n {n} grain {grain}");
            assert_eq!(short.load(Ordering::Relaxed), 0);
        }
    }
}
