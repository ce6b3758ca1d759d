//! glibc's malloc, told to hand large blocks back. Its dynamic mmap threshold otherwise moves
//! blocks of up to 32 MB onto the heap once one is freed, where `score`'s batches, each of
//! another shape, fragment it: the peak RSS of a long run crept up with the row count.

/// Blocks of 1 MiB and more are mapped and unmapped on their own (a fixed threshold also turns
/// the dynamic one off), and the heap top is trimmed past 4 MiB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn return_large_blocks() {
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    const M_TRIM_THRESHOLD: i32 = -1;
    const M_MMAP_THRESHOLD: i32 = -3;
    // SAFETY: mallopt takes malloc's own lock and only changes its tunables.
    unsafe {
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
        mallopt(M_TRIM_THRESHOLD, 4 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn return_large_blocks() {}
