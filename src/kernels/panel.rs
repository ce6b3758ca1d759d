//! What the host GEMM kernels are handed, shared by their dispatcher (`gemm.rs`), the
//! packing (`pack.rs`) and the kernels (`gemm_f32.rs`, `gemm_bf16.rs`,
//! `gemm_i8.rs`): a panel's width and cache lines, one kernel call, and the dispatch on a
//! call's row count.

/// Output columns per panel: one AVX-512 register, two AVX ones.
pub(super) const PANEL: usize = 16;

/// One cache line of a panel; a `Vec` of them is 64-byte aligned.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(super) struct Line(pub(super) [f32; PANEL]);

/// One kernel call: `m` rows of `x` through `k` lines of one unit of panels into `cols` columns
/// of `y` (`ldy` apart), starting from `bias`, or with `accumulate` from what `y` holds. A whole
/// panel is `lines` long. In bfloat16 `x` holds input pairs and lines count pairs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy)]
pub(super) struct Job<X> {
    pub(super) k: usize,
    pub(super) lines: usize,
    /// The `m` rows' inputs from the first line on: `[k][m]` when `interleaved`, otherwise
    /// rows `lines` apart.
    pub(super) x: *const X,
    pub(super) interleaved: bool,
    /// The lines of the next unit's panels that match this call's, for the kernel to pull into
    /// the cache (AVX2), if any.
    pub(super) prefetch: Option<*const f32>,
    pub(super) panel: *const f32,
    pub(super) bias: *const f32,
    pub(super) accumulate: bool,
    pub(super) y: *mut f32,
    pub(super) ldy: usize,
    pub(super) cols: usize,
    pub(super) relu: bool,
}

/// `$rows::<m>($job)` for `m` rows, 1 to 12 (more: 12), as the AVX-512 kernels take them.
macro_rules! by_row_count {
    ($m:expr, $rows:ident, $job:expr) => {
        match $m {
            1 => $rows::<1>($job),
            2 => $rows::<2>($job),
            3 => $rows::<3>($job),
            4 => $rows::<4>($job),
            5 => $rows::<5>($job),
            6 => $rows::<6>($job),
            7 => $rows::<7>($job),
            8 => $rows::<8>($job),
            9 => $rows::<9>($job),
            10 => $rows::<10>($job),
            11 => $rows::<11>($job),
            _ => $rows::<12>($job),
        }
    };
}
pub(super) use by_row_count;
