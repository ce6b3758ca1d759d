//! `--compute-type float32` (and int8's fp32 output projection): a linear layer on the host, with
//! its weight packed once into panels of 16 output columns, the one copy of it the layer keeps.
//! CTranslate2 packs its weights once too. MKL's sgemm, which `F.linear` calls, copies the weight
//! into its own layout on every call, and on AMD CPUs runs AVX2 code where the CPU has AVX-512
//! (on a Zen 5: 108 GFLOP/s against 250 for oneDNN and for this kernel); oneDNN's linear costs
//! some 15 µs a call and holds a second copy. Panels are shared out among libtorch's intra-op
//! threads. Needs AVX2 and FMA (AVX-512F used where present); without them the layer stays on
//! libtorch.

use std::sync::Arc;

use tch::{Device, Kind, Tensor};

#[cfg(target_arch = "x86_64")]
use super::gemm_f32::{avx2, avx512};
use super::isa::Isa;
use super::panel::{Job, Line, PANEL};
use super::pack::pack_f32;
use super::{gemm_bf16, KernelError};
use crate::libtorch::host::{f32_view, f32_view_mut};
use crate::libtorch::parallel::parallel_for;

/// Lines of a panel that one kernel call runs through at most. A longer panel (transformer-big's
/// fc2: 4,096) runs block by block, so that a chunk of rows (sized to this block, not to the
/// whole row) covers a batch's rows and the weight streams from memory once a call, not once a
/// chunk: at 160 rows × 4,096 → 1,024 on a Zen 3, 50–55 GFLOP/s a thread became 70–78. Each call
/// after a block's first starts from the sums the one before stored in `y`; an f32 stored and
/// loaded is the same f32, so the bits do not depend on the blocks.
const BLOCK_LINES: usize = 1024;
/// Input rows kept hot across a sweep of the panels: 5/8 of a core's L2 (640 KiB of 1 MiB on a
/// Zen 4 or 5), the rest for the panels streaming through. Each sweep reads every panel once, so
/// fewer, larger chunks read the weight fewer times a step: at transformer-big size 640 KiB
/// took 10% off float32's time against 192 KiB. The chunks split rows only, so the bits do not
/// depend on it.
pub(super) fn chunk_bytes() -> usize {
    static CHUNK: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CHUNK.get_or_init(|| {
        let read = |name: &str| std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index2/{name}")).ok();
        let l2 = read("level").filter(|l| l.trim() == "2").and(read("size")).and_then(|s| {
            let s = s.trim();
            let (digits, scale) = match (s.strip_suffix('K'), s.strip_suffix('M')) {
                (Some(d), _) => (d, 1 << 10),
                (_, Some(d)) => (d, 1 << 20),
                _ => (s, 1),
            };
            digits.parse::<usize>().ok().map(|n| n * scale)
        });
        l2.filter(|&b| b >= 128 << 10).map_or(192 << 10, |b| b / 8 * 5)
    })
}
/// Input rows of this many bytes or more go to the AVX2 kernels interleaved ([`Job::interleaved`]),
/// so that a pass reads one stream of inputs, not six rows 4 KiB or more apart. With the next
/// unit's prefetch, at 160 rows × 1,024 or 4,096 inputs on a Zen 3 with both threads: 7–21% more
/// GFLOP/s. Shorter rows showed no gain: the bundled model (128 and 512 inputs) was 4–13% slower
/// with every row interleaved, part of that a per-call overhead since removed.
const INTERLEAVE_ROW_BYTES: usize = 4096;
/// Work below this many flops is not worth waking another thread for.
const GRAIN_FLOPS: usize = 1 << 19;


/// What a panel's weights are stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// bfloat16 pairs for `vdpbf16ps` (`gemm_bf16.rs`); AVX-512 only.
    Bf16,
}

impl Precision {
    /// Whether this CPU runs the kernels of this precision.
    pub fn available(self) -> bool {
        match self {
            Self::F32 => Isa::detect().is_some(),
            Self::Bf16 => gemm_bf16::available(),
        }
    }
}

/// A weight `[out, in]` as panels `[units · panels_per_unit][in][16]` (in bfloat16:
/// `[in / 2]` lines of pairs) and its bias (zeros without one), both zero-padded to whole units;
/// or a range of its output columns ([`PackedWeight::columns`]), sharing the panels.
#[derive(Debug)]
pub struct PackedWeight {
    panels: Arc<Vec<Line>>,
    precision: Precision,
    bias: Arc<Vec<f32>>,
    /// This weight's first panel and panel count in `panels`.
    first_panel: usize,
    panel_count: usize,
    in_features: usize,
    out_features: usize,
    isa: Isa,
}

impl PackedWeight {
    /// `None` when the CPU lacks AVX2/FMA or the weight is not f32 on the CPU.
    pub fn pack(weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Self>, KernelError> {
        match Isa::detect() {
            Some(isa) => Self::pack_for(isa, weight, bias),
            None => Ok(None),
        }
    }

    /// [`PackedWeight::pack`] in `precision`; `None` where this CPU lacks its kernels.
    pub fn pack_with(precision: Precision, weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Self>, KernelError> {
        match precision {
            _ if !precision.available() => Ok(None),
            Precision::F32 => Self::pack(weight, bias),
            Precision::Bf16 => Self::pack_in(Isa::Avx512, Precision::Bf16, weight, bias),
        }
    }

    pub fn pack_for(isa: Isa, weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Self>, KernelError> {
        Self::pack_in(isa, Precision::F32, weight, bias)
    }

    fn pack_in(isa: Isa, precision: Precision, weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Self>, KernelError> {
        if weight.device() != Device::Cpu || weight.kind() != Kind::Float || weight.dim() != 2 {
            return Ok(None);
        }
        let (out_features, in_features) = weight.size2()?;
        let (out_features, in_features) = (out_features as usize, in_features as usize);
        let weight = weight.f_contiguous()?;
        // SAFETY: nothing writes the weight while it is packed.
        let Some(w) = (unsafe { f32_view(&weight) }) else {
            return Ok(None);
        };
        let unit = PANEL * isa.panels_per_unit();
        let panel_count = out_features.div_ceil(unit) * isa.panels_per_unit();
        let panels = match precision {
            Precision::Bf16 => gemm_bf16::pack(w, out_features, in_features, panel_count),
            Precision::F32 => pack_f32(w, out_features, in_features, panel_count),
        };
        let mut padded_bias = vec![0f32; panel_count * PANEL];
        if let Some(b) = bias {
            let b = Vec::<f32>::try_from(b.f_contiguous()?.f_view([-1])?)?;
            let n = b.len().min(out_features);
            padded_bias[..n].copy_from_slice(&b[..n]);
        }
        Ok(Some(Self { panels: Arc::new(panels), precision, bias: Arc::new(padded_bias), first_panel: 0, panel_count, in_features, out_features, isa }))
    }

    /// Output columns `range` of this weight (rows of `W`), sharing its panels: `None` unless
    /// the range starts on a whole unit of panels.
    pub fn columns(&self, range: std::ops::Range<usize>) -> Option<Self> {
        let unit = PANEL * self.isa.panels_per_unit();
        if !range.start.is_multiple_of(unit) || range.start >= range.end || range.end > self.out_features {
            return None;
        }
        let width = range.end - range.start;
        Some(Self {
            panels: Arc::clone(&self.panels),
            precision: self.precision,
            bias: Arc::clone(&self.bias),
            first_panel: self.first_panel + range.start / PANEL,
            panel_count: width.div_ceil(unit) * self.isa.panels_per_unit(),
            in_features: self.in_features,
            out_features: width,
            isa: self.isa,
        })
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Row `o` of the weight (what an embedding tied to this projection looks up), into `out`.
    pub fn row_into(&self, o: usize, out: &mut [f32]) {
        let (p, c) = (self.first_panel + o / PANEL, o % PANEL);
        for (i, v) in out.iter_mut().enumerate().take(self.in_features) {
            *v = match self.precision {
                Precision::F32 => self.panels[p * self.in_features + i].0[c],
                Precision::Bf16 => gemm_bf16::weight_at(&self.panels, self.in_features, self.first_panel * PANEL + o, i),
            };
        }
    }

    /// Lines of a panel: one an input in f32, one a pair of inputs in bfloat16.
    fn lines_per_panel(&self) -> usize {
        self.in_features.div_ceil(self.inputs_per_line())
    }

    fn inputs_per_line(&self) -> usize {
        match self.precision {
            Precision::F32 => 1,
            Precision::Bf16 => 2,
        }
    }

    /// `x · Wᵀ + b` (then ReLU with `relu`) when `x` is a contiguous f32 CPU tensor `[..., in]`;
    /// `None` otherwise.
    pub fn linear(&self, x: &Tensor, relu: bool) -> Result<Option<Tensor>, KernelError> {
        let size = x.size();
        if size.last() != Some(&(self.in_features as i64)) {
            return Ok(None);
        }
        // SAFETY: nothing writes `x` during the call.
        let Some(x_data) = (unsafe { f32_view(x) }) else {
            return Ok(None);
        };
        let mut out_size = size.clone();
        if let Some(last) = out_size.last_mut() {
            *last = self.out_features as i64;
        }
        let mut y = Tensor::f_empty(out_size.as_slice(), (Kind::Float, Device::Cpu))?;
        // SAFETY: `y` is new and not shared.
        let Some(y_data) = (unsafe { f32_view_mut(&mut y) }) else {
            return Ok(None);
        };
        self.gemm(x_data, y_data, relu);
        Ok(Some(y))
    }

    /// As [`PackedWeight::linear`], into `y` (a contiguous f32 CPU tensor of the output's size)
    /// instead of a new tensor; false (and `y` untouched) where `linear` would give `None`.
    pub fn linear_into(&self, x: &Tensor, y: &mut Tensor, relu: bool) -> Result<bool, KernelError> {
        let size = x.size();
        if size.last() != Some(&(self.in_features as i64)) {
            return Ok(false);
        }
        let rows: i64 = size[..size.len() - 1].iter().product();
        if y.numel() as i64 != rows * self.out_features as i64 {
            return Ok(false);
        }
        // SAFETY: nothing writes `x` during the call, and `y` is the caller's to write.
        let (Some(x_data), Some(y_data)) = (unsafe { f32_view(x) }, unsafe { f32_view_mut(y) }) else {
            return Ok(false);
        };
        self.gemm(x_data, y_data, relu);
        Ok(true)
    }

    /// `y = x · Wᵀ + b` for `x` `[rows, in]` and `y` `[rows, out]`, row-major.
    pub fn gemm(&self, x: &[f32], y: &mut [f32], relu: bool) {
        self.gemm_threads(x, y, relu, tch::get_num_threads().max(1) as usize)
    }

    /// [`PackedWeight::gemm`] as it runs on `threads` intra-op threads.
    fn gemm_threads(&self, x: &[f32], y: &mut [f32], relu: bool, threads: usize) {
        let (k, n) = (self.in_features, self.out_features);
        if k == 0 {
            let bias = &self.bias[self.first_panel * PANEL..];
            for row in y.chunks_mut(n.max(1)) {
                for (o, v) in row.iter_mut().enumerate() {
                    *v = if relu { bias[o].max(0.0) } else { bias[o] };
                }
            }
            return;
        }
        let rows = x.len() / k;
        assert!(rows * k == x.len() && y.len() == rows * n, "host gemm: mismatched operands");
        match self.precision {
            // SAFETY (both): the jobs come from `sweep`, and the ISA was detected when packing.
            Precision::Bf16 => {
                let pairs = gemm_bf16::input_pairs(x, rows, k);
                self.sweep(&pairs, rows, y, relu, threads, |m, j| unsafe { self.unit_bf16(m, j) })
            }
            Precision::F32 => self.sweep(x, rows, y, relu, threads, |m, j| unsafe { self.unit(m, j) }),
        }
    }

    /// `kernel(m, job)` for every unit and pass of `m` rows of `x` (rows of `lines_per_panel`
    /// values), a chunk of rows at a time, and in each chunk a block of lines at a time.
    ///
    /// Rows that fill one chunk are shared out by units: each thread reads its columns of the
    /// weight once. Rows beyond one chunk are shared out by rows instead, each thread sweeping the
    /// whole weight for its own chunks: shared by units, each chunk would stream the weight from
    /// memory again, while two threads sweeping it side by side read it from memory once and
    /// from L3 once (transformer-big, 160 rows in chunks of 80 on a Zen 3: 7% off float32's time
    /// with intra-op threads). Each output is computed alike either way.
    fn sweep<X: Input>(&self, x: &[X], rows: usize, y: &mut [f32], relu: bool, threads: usize, kernel: impl Fn(usize, &Job<X>) + Sync) {
        let pass = self.isa.rows_per_pass();
        let block = BLOCK_LINES.min(self.lines_per_panel());
        let chunk_rows = (chunk_bytes() / (block * self.inputs_per_line() * 4)).max(1).div_ceil(pass) * pass;
        let y = SendPtr(y.as_mut_ptr());
        if threads > 1 && rows > chunk_rows {
            let share = rows.div_ceil(threads);
            parallel_for(threads, 1, |t0, t1| {
                for t in t0..t1 {
                    let mine = (t * share).min(rows)..((t + 1) * share).min(rows);
                    self.sweep_rows(x, mine, chunk_rows, &y, relu, &kernel, false);
                }
            });
        } else {
            self.sweep_rows(x, 0..rows, chunk_rows, &y, relu, &kernel, true);
        }
    }

    /// [`PackedWeight::sweep`] over `rows`, with each block's units shared out among the threads
    /// when `share_units`.
    #[allow(clippy::too_many_arguments)]
    fn sweep_rows<X: Input>(
        &self,
        x: &[X],
        rows: std::ops::Range<usize>,
        chunk_rows: usize,
        y: &SendPtr,
        relu: bool,
        kernel: &(impl Fn(usize, &Job<X>) + Sync),
        share_units: bool,
    ) {
        let n = self.out_features;
        let units = self.panel_count / self.isa.panels_per_unit();
        let pass = self.isa.rows_per_pass();
        let lines = self.lines_per_panel();
        let block = BLOCK_LINES.min(lines);
        let interleaved = self.isa == Isa::Avx2 && lines * std::mem::size_of::<X>() >= INTERLEAVE_ROW_BYTES;
        X::with_scratch(|passes| for start in rows.clone().step_by(chunk_rows) {
            let chunk = start..(start + chunk_rows).min(rows.end);
            let (input, first_row) = match interleaved {
                true => {
                    interleave(x, chunk.clone(), lines, pass, passes);
                    (&passes[..], chunk.start)
                }
                false => (x, 0),
            };
            for b0 in (0..lines).step_by(block) {
                let span = b0..(b0 + block).min(lines);
                let units_of = |u0: usize, u1: usize| {
                    for u in u0..u1 {
                        // SAFETY: `y` holds `rows` rows of `n` values.
                        let unit = unsafe { self.job(u, span.clone(), y.0, relu) };
                        // The first pass over a unit pulls the next unit's lines into the cache
                        // as it goes, for the passes after it.
                        let next = (u + 1 < units).then(|| self.panel_lines(u + 1, span.start));
                        for r in chunk.clone().step_by(pass) {
                            let m = pass.min(chunk.end - r);
                            let first_line = span.start * if interleaved { m } else { 1 };
                            let x = input[(r - first_row) * lines + first_line..].as_ptr();
                            // SAFETY: the kernel reads `m` rows of `x` from row `r` and writes
                            // only unit `u`'s columns of those rows of `y`, which no other range
                            // writes; `next` lies within the panels.
                            let job = Job { x, interleaved, prefetch: next.filter(|_| r == chunk.start), y: unsafe { unit.y.add(r * n) }, ..unit };
                            kernel(m, &job);
                        }
                    }
                };
                if share_units {
                    let unit_flops = chunk.len() * span.len() * PANEL * self.isa.panels_per_unit() * 2;
                    parallel_for(units, GRAIN_FLOPS.div_ceil(unit_flops), units_of);
                } else {
                    units_of(0, units);
                }
            }
        });
    }

    /// Unit `u`'s panels from line `line` on.
    fn panel_lines(&self, u: usize, line: usize) -> *const f32 {
        let first = self.first_panel + u * self.isa.panels_per_unit();
        self.panels[first * self.lines_per_panel() + line..].as_ptr() as *const f32
    }

    /// The kernel calls for unit `u` over `lines` of its panels (inputs in f32, input pairs in
    /// bfloat16), into the first row of `y`; each call sets its own input, row and prefetch.
    ///
    /// # Safety
    /// `u` is a unit of this weight, `lines` lies within its panels, and `y` points to a row of
    /// `out_features` values.
    unsafe fn job<X>(&self, u: usize, lines: std::ops::Range<usize>, y: *mut f32, relu: bool) -> Job<X> {
        let panel_lines = self.lines_per_panel();
        let first = u * self.isa.panels_per_unit();
        let panel = self.panel_lines(u, lines.start);
        let bias = self.bias.as_ptr().add((self.first_panel + first) * PANEL);
        let col = first * PANEL;
        let cols = (self.out_features - col).min(PANEL * self.isa.panels_per_unit());
        Job {
            k: lines.len(),
            lines: panel_lines,
            x: std::ptr::null(),
            interleaved: false,
            prefetch: None,
            panel,
            bias,
            accumulate: lines.start > 0,
            y: y.add(col),
            ldy: self.out_features,
            cols,
            relu: relu && lines.end == panel_lines,
        }
    }

    /// [`PackedWeight::unit`] for bfloat16 panels, from `m` rows of input pairs.
    ///
    /// # Safety
    /// As `unit`, with `j.x` rows of input pairs; AVX512_BF16 is available.
    unsafe fn unit_bf16(&self, m: usize, j: &Job<u32>) {
        #[cfg(target_arch = "x86_64")]
        gemm_bf16::avx512bf16::dispatch(m, j);
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (m, j);
    }

    /// # Safety
    /// `j` (from [`PackedWeight::job`]) has `m` rows of `x` and `y`; `isa` is available.
    unsafe fn unit(&self, m: usize, j: &Job<f32>) {
        #[cfg(target_arch = "x86_64")]
        match self.isa {
            Isa::Avx512 => avx512::dispatch(m, j),
            Isa::Avx2 => avx2::dispatch(m, j),
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (m, j);
    }
}

/// What the kernels read as input: f32 values, or bfloat16 pairs as `u32`.
trait Input: Copy + Sync + 'static {
    /// `f` with this thread's scratch vector for interleaved passes, kept from call to call.
    fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
}

macro_rules! input_with_scratch {
    ($($t:ty),*) => {$(
        impl Input for $t {
            fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
                thread_local!(static SCRATCH: std::cell::RefCell<Vec<$t>> = const { std::cell::RefCell::new(Vec::new()) });
                SCRATCH.with(|s| match s.try_borrow_mut() {
                    Ok(mut scratch) => f(&mut scratch),
                    Err(_) => f(&mut Vec::new()),
                })
            }
        }
    )*};
}
input_with_scratch!(f32, u32);

/// `rows` of `x` (rows of `lines` values) into `out` as the passes of `pass` rows that an
/// interleaved job takes: the pass from row `r` at `(r - rows.start) · lines`, as `[lines][m]`
/// for its `m` rows.
fn interleave<X: Copy>(x: &[X], rows: std::ops::Range<usize>, lines: usize, pass: usize, out: &mut Vec<X>) {
    out.clear();
    let Some(&first) = x.first() else { return };
    out.resize(rows.len() * lines, first);
    for r in rows.clone().step_by(pass) {
        let m = pass.min(rows.end - r);
        let pass_rows = &x[r * lines..(r + m) * lines];
        let to = &mut out[(r - rows.start) * lines..(r - rows.start + m) * lines];
        for (i, row) in pass_rows.chunks_exact(lines).enumerate() {
            for (line, &v) in row.iter().enumerate() {
                to[line * m + i] = v;
            }
        }
    }
}

struct SendPtr(*mut f32);
// SAFETY: the ranges of `parallel_for` write disjoint columns or rows through it.
unsafe impl Sync for SendPtr {}



#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    fn interleaved_passes_hold_each_line_of_their_rows_together() {
        let (lines, pass) = (3, 2);
        let x: Vec<u32> = (0..5 * lines as u32).collect();
        let mut out = vec![99];
        interleave(&x, 1..4, lines, pass, &mut out);
        // Rows 1 and 2 as a pass of two, then row 3 alone.
        assert_eq!(out, [3, 6, 4, 7, 5, 8, 9, 10, 11]);
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn equals_f_linear_within_rounding_for_every_shape_row_count_and_isa() {
        let mut seed = 0x9e37_79b9_u32;
        let mut rand = |shape: &[i64]| {
            let n = shape.iter().product::<i64>() as usize;
            let data: Vec<f32> = (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
                })
                .collect();
            Tensor::from_slice(&data).view(shape)
        };
        for isa in Isa::all_here() {
            for &(out, inp) in &[(384i64, 128i64), (37, 20), (16, 8), (5, 3), (33, 1), (70, 300), (50, 1000)] {
                let w = rand(&[out, inp]);
                let b = rand(&[out]);
                let packed = PackedWeight::pack_for(isa, &w, Some(&b)).unwrap().unwrap();
                for rows in [1i64, 2, 5, 6, 7, 11, 12, 13, 25, 160, 700] {
                    let x = rand(&[1, rows, inp]);
                    let want = x.linear(&w, Some(&b));
                    let got = packed.linear(&x, false).unwrap().expect("a contiguous input");
                    assert_eq!(got.size(), want.size());
                    let diff = (&got - &want).abs().max().double_value(&[]);
                    assert!(crate::tolerance::HOST_LINEAR.holds(diff), "{isa:?} {out}x{inp}, {rows} rows: max diff {diff}");
                    let relu = packed.linear(&x, true).unwrap().unwrap();
                    assert!(crate::tolerance::HOST_LINEAR.holds((&relu - want.relu()).abs().max().double_value(&[])));
                }
            }
        }
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn a_range_of_columns_computes_what_that_slice_of_the_weight_does() {
        let mut rng = TestRng::new(529);
        let (w, b) = (rng.randn([3 * 64 + 5, 40]), rng.randn([3 * 64 + 5]));
        for isa in Isa::all_here() {
            let packed = PackedWeight::pack_for(isa, &w, Some(&b)).unwrap().unwrap();
            let x = rng.randn([7, 40]);
            for (start, end) in [(0, 64), (64, 128), (128, 3 * 64 + 5), (64, 70)] {
                let part = packed.columns(start..end).expect("starts on a whole unit");
                let want = x.linear(&w.narrow(0, start as i64, (end - start) as i64), Some(&b.narrow(0, start as i64, (end - start) as i64)));
                let got = part.linear(&x, false).unwrap().unwrap();
                assert_eq!(got.size(), want.size());
                assert!(crate::tolerance::HOST_LINEAR.holds((&got - &want).abs().max().double_value(&[])), "{isa:?} {start}..{end}");
            }
            assert!(packed.columns(8..64).is_none(), "not on a unit");
            assert!(packed.columns(0..3 * 64 + 6).is_none(), "past the weight");
        }
    }

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn a_layer_without_bias_a_strided_input_and_the_rows_of_the_weight() {
        let mut rng = TestRng::new(909);
        let w = rng.randn([20, 10]);
        for isa in Isa::all_here() {
            let packed = PackedWeight::pack_for(isa, &w, None).unwrap().unwrap();
            let x = rng.randn([10, 3]).transpose(0, 1);
            assert!(packed.linear(&x, false).unwrap().is_none(), "a transposed input is left to libtorch");
            let x = rng.randn([3, 10]);
            let diff = (packed.linear(&x, false).unwrap().unwrap() - x.linear(&w, None::<&Tensor>)).abs().max().double_value(&[]);
            assert!(crate::tolerance::HOST_LINEAR.holds(diff), "{diff}");
            let mut row = [0f32; 10];
            packed.row_into(17, &mut row);
            assert_eq!(row.as_slice(), Vec::<f32>::try_from(w.get(17)).unwrap().as_slice());
        }
    }

    /// Every output is the bias followed by one fused multiply-add per input, in input order,
    /// also across the blocks of a panel longer than [`BLOCK_LINES`].
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn each_output_is_the_ordered_chain_of_fused_multiply_adds_bit_for_bit() {
        let mut rng = TestRng::new(289);
        for isa in Isa::all_here() {
            // the last: rows beyond one chunk, which the threads share out by rows
            let beyond_a_chunk = 2 * chunk_bytes() / (1024 * 4) + 7;
            for &(out, inp, rows) in &[(37usize, 2500usize, 13usize), (40, 1024, 7), (20, 1025, 3), (19, 1024, beyond_a_chunk)] {
                let (w, b, x) = (rng.randn([out as i64, inp as i64]), rng.randn([out as i64]), rng.randn([rows as i64, inp as i64]));
                let packed = PackedWeight::pack_for(isa, &w, Some(&b)).unwrap().unwrap();
                let (wv, bv, xv) = (Vec::<f32>::try_from(w.view([-1])).unwrap(), Vec::<f32>::try_from(&b).unwrap(), Vec::<f32>::try_from(x.view([-1])).unwrap());
                let chains: Vec<f32> = (0..rows * out).map(|i| (0..inp).fold(bv[i % out], |acc, j| xv[i / out * inp + j].mul_add(wv[i % out * inp + j], acc))).collect();
                for relu in [false, true] {
                    for threads in [1, 2, 3] {
                        let mut y = vec![0f32; rows * out];
                        packed.gemm_threads(&xv, &mut y, relu, threads);
                        for (i, (got, chain)) in y.iter().zip(&chains).enumerate() {
                            let want = if relu { chain.max(0.0) } else { *chain };
                            assert_eq!(got.to_bits(), want.to_bits(), "{isa:?} {out}x{inp}, row {}, output {}, relu {relu}, {threads} threads", i / out, i % out);
                        }
                    }
                }
            }
        }
    }
}
