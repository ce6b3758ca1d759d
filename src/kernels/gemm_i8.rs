//! `--compute-type int8` on the host: a linear layer in int8. The weight is quantized once per
//! output column (symmetric, `max |w| / 127`) and packed into panels of 16 columns × 4 inputs,
//! 64 bytes each, a column's four inputs in one 32-bit lane. Each input row is quantized on the
//! fly into unsigned bytes, a signed row shifted up and the shift taken back with each column's
//! weight sum; a row with no negative value, as ReLU gives `fc2`, takes the unsigned range, one
//! bit more than the signed range leaves it.
//! - With AVX-512 VNNI, rows take a byte's levels (`s = max |x| / 127`, `+ 128`; unsigned `max x
//!   / 255`), and `vpdpbusd` sums four byte products into each 32-bit lane.
//! - With AVX2, rows take seven bits (`s = max |x| / 63`, `+ 64`; unsigned `max x / 127`), as
//!   fbgemm's AVX2 path does: `vpmaddubsw` sums two byte products into 16 bits, where `2 · 127 ·
//!   127` fits and the byte's `2 · 255 · 127` would saturate, then `vpmaddwd` by ones widens to
//!   32 bits. Against 16-bit products (`vpmaddwd` on sign-extended weights), as many multiply
//!   instructions, but half the additions and broadcasts and no sign extensions, for one bit of
//!   each input row (`docs/performance.md`, "On AVX2").
//!
//! Either kernel's integer sums are exact, and the scaling is the same expression: the AVX2
//! kernel on a CPU with VNNI gives what it gives on an AVX2-only CPU. fbgemm's path (`int8.rs`),
//! for a CPU without AVX2, quantizes each weight the same way and each input as fbgemm does.

use tch::{Device, Kind, Tensor};

use super::panel::by_row_count;
use super::isa::{cpu_has, Isa};
use super::quantize_i8::{input_scale, max_abs, quantize_row_u8, quantize_weights, Levels, Range};
use super::KernelError;
use crate::libtorch::host::{f32_view, f32_view_mut};
use crate::libtorch::parallel::parallel_for;

const PANEL: usize = 16;
/// Work below this many multiply-adds is not worth waking another thread for.
const GRAIN_MACS: usize = 1 << 20;
/// Weights a thread quantizes at least (a layer of transformer-big is 16 of these).
const GRAIN_QUANTIZE: usize = 1 << 16;

/// One panel's 16 columns × 4 inputs, in the order its kernel reads them ([`Kernel::slot`]).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Block([i8; 64]);

/// Which instructions multiply the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    Vnni,
    Avx2,
}

impl Kernel {
    /// The best this CPU has, unless `TCHSEQ_CPU_FEATURES_OFF` hides it.
    fn here() -> Option<Self> {
        match Isa::here() {
            Some(Isa::Avx512) if cpu_has("avx512vnni") => Some(Self::Vnni),
            Some(_) => Some(Self::Avx2),
            None => None,
        }
    }

    /// Every kernel this CPU runs, best first (the tests run each).
    #[cfg(test)]
    fn all_here() -> Vec<Self> {
        match Self::here() {
            Some(Self::Vnni) => vec![Self::Vnni, Self::Avx2],
            Some(Self::Avx2) => vec![Self::Avx2],
            None => vec![],
        }
    }

    /// The levels of an input row (`quantize_i8.rs`).
    fn levels(self) -> Levels {
        match self {
            Self::Vnni => Levels::Byte,
            Self::Avx2 => Levels::Seven,
        }
    }
}

/// Where input `i` (of 4) of column `j` (of 16) lies in a [`Block`]: each kernel reads a column's
/// four inputs as one 32-bit lane.
fn slot(j: usize, i: usize) -> usize {
    j * 4 + i
}

/// Whether int8's host kernel takes seven-bit input rows here (AVX2) rather than a byte's
/// (AVX-512 VNNI), as `TCHSEQ_CPU_FEATURES_OFF` leaves the CPU; None where it has no host kernel.
pub fn seven_bit_rows_here() -> Option<bool> {
    Kernel::here().map(|kernel| kernel.levels() == Levels::Seven)
}

#[derive(Debug)]
pub struct PackedInt8 {
    kernel: Kernel,
    in_features: usize,
    out_features: usize,
    /// Groups of 4 inputs (the last one zero-padded).
    groups: usize,
    /// `[panels][groups]`.
    blocks: Vec<Block>,
    /// Per column (padded to whole panels): the weight's scale, the signed rows' shift times
    /// `Σ w_q`, and the bias.
    scale: Vec<f32>,
    offset: Vec<i32>,
    bias: Vec<f32>,
}

impl PackedInt8 {
    /// Whether this CPU runs a kernel (AVX-512 VNNI or AVX2), unless `TCHSEQ_CPU_FEATURES_OFF`
    /// hides it.
    pub fn available() -> bool {
        Kernel::here().is_some()
    }

    /// `weight` `[out, in]` and `bias` `[out]`, any float kind on the CPU; only where
    /// [`PackedInt8::available`].
    pub fn quantize(weight: &Tensor, bias: Option<&Tensor>) -> Result<Self, KernelError> {
        let kernel = Kernel::here().ok_or(KernelError::NoKernel { kernel: "int8", needs: "AVX2" })?;
        Self::quantize_for(kernel, weight, bias)
    }

    fn quantize_for(kernel: Kernel, weight: &Tensor, bias: Option<&Tensor>) -> Result<Self, KernelError> {
        let (out_features, in_features) = weight.size2()?;
        let (n, k) = (out_features as usize, in_features as usize);
        // read in place: a copy of M2M-100's tied output projection would be 512 MB more at load
        let weight = weight.f_to_kind(Kind::Float)?.f_contiguous()?;
        // SAFETY: nothing writes the weight while it is quantized.
        let w = unsafe { f32_view(&weight) }.ok_or_else(|| KernelError::Operand { kernel: "int8 linear", operand: "a weight not on the CPU".into() })?;
        let b = match bias {
            Some(b) => Vec::<f32>::try_from(b.f_to_kind(Kind::Float)?.f_contiguous()?)?,
            None => vec![0.0; n],
        };
        if b.len() != n {
            return Err(KernelError::Operand { kernel: "int8 linear", operand: format!("a bias of {} for {n} outputs", b.len()) });
        }
        if k == 0 {
            return Err(KernelError::Operand { kernel: "int8 linear", operand: format!("a weight of {n} outputs and no inputs") });
        }
        let (groups, panels) = (k.div_ceil(4), n.div_ceil(PANEL));
        let mut blocks = vec![Block([0; 64]); panels * groups];
        let (mut scale, mut offset, mut bias) = (vec![0f32; panels * PANEL], vec![0i32; panels * PANEL], vec![0f32; panels * PANEL]);
        // each panel's blocks and columns are its own, so the threads share the panels out
        let outs: Vec<_> = blocks
            .chunks_mut(groups)
            .zip(scale.chunks_mut(PANEL).zip(offset.chunks_mut(PANEL)).zip(bias.chunks_mut(PANEL)))
            .map(std::sync::Mutex::new)
            .collect();
        // signed rows carry a shift, taken back with the column's weight sum
        let shift = Range::Signed.shift(kernel.levels());
        parallel_for(panels, GRAIN_QUANTIZE.div_ceil(PANEL * k), |start, end| {
            let mut values = vec![0i16; k];
            for (p, out) in outs.iter().enumerate().take(end).skip(start) {
                let mut out = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let (blocks, ((scale, offset), bias)) = &mut *out;
                for j in 0..PANEL.min(n - p * PANEL) {
                    let col = p * PANEL + j;
                    let row = &w[col * k..][..k];
                    // SAFETY: `kernel` is one this CPU runs.
                    let s = unsafe { max_abs(row) }.max(1e-8) / 127.0;
                    // SAFETY: as above.
                    unsafe { quantize_weights(row, 1.0 / s, &mut values) };
                    let slots = [0, 1, 2, 3].map(|i| slot(j, i));
                    let mut sum = 0i32;
                    for (block, group) in blocks.iter_mut().zip(values.chunks(4)) {
                        for (&slot, &q) in slots.iter().zip(group) {
                            sum += i32::from(q);
                            block.0[slot] = q as i8;
                        }
                    }
                    (scale[j], offset[j], bias[j]) = (s, shift * sum, b[col]);
                }
            }
        });
        drop(outs);
        Ok(Self { kernel, in_features: k, out_features: n, groups, blocks, scale, offset, bias })
    }

    pub fn in_features(&self) -> usize {
        self.in_features
    }

    pub fn out_features(&self) -> usize {
        self.out_features
    }

    /// Column `o` as the kernel computes with it, `scale · w_q` (`in_features` floats): an
    /// embedding table tied to this projection looks its rows up here, as CTranslate2's int8
    /// embeddings are quantized too.
    pub fn row_into(&self, o: usize, out: &mut [f32]) {
        let (p, j, s) = (o / PANEL, o % PANEL, self.scale[o]);
        for (i, v) in out.iter_mut().enumerate().take(self.in_features) {
            *v = s * f32::from(self.blocks[p * self.groups + i / 4].0[slot(j, i % 4)]);
        }
    }

    /// `F.linear(x, weight, bias)` (then ReLU with `relu`) for a float32 CPU `x` `[..., in]`
    /// (made contiguous); None for any other input.
    pub fn linear(&self, x: &Tensor, relu: bool) -> Result<Option<Tensor>, KernelError> {
        let x = x.f_contiguous()?;
        // SAFETY: nothing writes `x` during the call.
        let Some(data) = (unsafe { f32_view(&x) }) else { return Ok(None) };
        if x.size().last() != Some(&(self.in_features as i64)) {
            return Ok(None);
        }
        let mut size = x.size();
        if let Some(last) = size.last_mut() {
            *last = self.out_features as i64;
        }
        let mut y = Tensor::f_empty(size.as_slice(), (Kind::Float, Device::Cpu))?;
        // SAFETY: `y` is new and not shared.
        let Some(out) = (unsafe { f32_view_mut(&mut y) }) else { return Ok(None) };
        self.gemm(data, out, relu);
        Ok(Some(y))
    }

    /// `y[m, :] = x[m, :] · Wᵀ + b` for every row of `x` `[M, in]`, into `y` `[M, out]`.
    pub fn gemm(&self, x: &[f32], y: &mut [f32], relu: bool) {
        let m = x.len() / self.in_features.max(1);
        if m == 0 {
            return;
        }
        let input = self.quantize_rows(x, m);
        let pairs = self.out_features.div_ceil(2 * PANEL);
        let per_pair = (m * self.groups * 8 * PANEL).max(1);
        let out = SendPtr(y.as_mut_ptr());
        parallel_for(pairs, GRAIN_MACS.div_ceil(per_pair), |start, end| {
            let out = &out;
            for pair in start..end {
                // SAFETY: `available()` held when the layer chose this kernel; each pair of
                // panels writes only its own columns of `y`.
                unsafe { self.panels(2 * pair, &input, m, out.0, relu) };
            }
        });
    }

    /// Each row quantized as its kernel reads it, unsigned bytes four to a 32-bit word, and its
    /// scale.
    fn quantize_rows(&self, x: &[f32], m: usize) -> QuantizedRows {
        let (k, words, levels) = (self.in_features, self.groups, self.kernel.levels());
        // the padding's inputs meet zero weights
        let mut q = vec![0u32; m * words];
        let mut scales = vec![0f32; m];
        let mut unsigned = vec![0; m];
        for r in 0..m {
            let row = &x[r * k..][..k];
            // SAFETY: either kernel's CPU has AVX2 (a CPU with VNNI has it too).
            let (range, s) = unsafe { input_scale(row, levels) };
            // SAFETY: as above.
            unsafe { quantize_row_u8(row, 1.0 / s, range, levels, bytemuck_u32(&mut q[r * words..][..words])) };
            scales[r] = s;
            unsigned[r] = if range == Range::Unsigned { -1 } else { 0 };
        }
        QuantizedRows { q, scales, unsigned }
    }

    /// Panels `first` and `first + 1` (where there is one) for every row: up to twelve rows
    /// through both a pass (VNNI), or five rows through one (AVX2).
    #[cfg(target_arch = "x86_64")]
    unsafe fn panels(&self, first: usize, input: &QuantizedRows, m: usize, y: *mut f32, relu: bool) {
        let g = self.groups;
        let count = (self.out_features.div_ceil(PANEL) - first).min(2);
        let unit = |r0: usize, panel: usize, count: usize| Unit {
            a: self.blocks[panel * g..].as_ptr(),
            b: self.blocks[(panel + count - 1) * g..].as_ptr(),
            groups: g,
            x: input.q[r0 * g..].as_ptr(),
            row_scale: input.scales[r0..].as_ptr(),
            row_unsigned: input.unsigned[r0..].as_ptr(),
            columns: [panel * PANEL, (panel + 1) * PANEL],
            count,
            packed: self,
            y: y.add(r0 * self.out_features),
            relu,
        };
        let mut r0 = 0;
        while r0 < m {
            match self.kernel {
                Kernel::Vnni => {
                    let rows = (m - r0).min(12);
                    by_row_count!(rows, vnni_rows, &unit(r0, first, count));
                    r0 += rows;
                }
                Kernel::Avx2 => {
                    // five: a sixth row's accumulators would not fit AVX2's 16 registers
                    let rows = (m - r0).min(5);
                    for panel in first..first + count {
                        let u = unit(r0, panel, 1);
                        match rows {
                            1 => avx2_rows::<1>(&u),
                            2 => avx2_rows::<2>(&u),
                            3 => avx2_rows::<3>(&u),
                            4 => avx2_rows::<4>(&u),
                            _ => avx2_rows::<5>(&u),
                        }
                    }
                    r0 += rows;
                }
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn panels(&self, _first: usize, _input: &QuantizedRows, _m: usize, _y: *mut f32, _relu: bool) {
        unreachable!("PackedInt8::available() is false off x86_64")
    }
}

/// A product's input rows as [`PackedInt8::quantize_rows`] leaves them.
struct QuantizedRows {
    /// One 32-bit word (four inputs) a group, `groups` words a row.
    q: Vec<u32>,
    scales: Vec<f32>,
    /// All ones for a row in the unsigned range, else 0.
    unsigned: Vec<i32>,
}

/// Up to twelve rows through one or two panels (`b` is `a` when there is one).
struct Unit<'a> {
    a: *const Block,
    b: *const Block,
    groups: usize,
    /// The unit's first row of quantized inputs, `groups` words a row, and its scales.
    x: *const u32,
    row_scale: *const f32,
    /// All ones for a row in the unsigned range, else 0.
    row_unsigned: *const i32,
    /// The first column of each panel.
    columns: [usize; 2],
    count: usize,
    packed: &'a PackedInt8,
    /// The unit's first output row.
    y: *mut f32,
    relu: bool,
}

/// `R` rows of a unit: 2R accumulators, two weight loads and R broadcasts a group of four
/// inputs, then each column's `(Σ − 128 Σ w_q) · s_w · s_x + b` (without the `128 Σ w_q` for an
/// unsigned row).
///
/// # Safety
/// `u` describes `R` readable rows and writable outputs; the CPU has AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn vnni_rows<const R: usize>(u: &Unit) {
    use std::arch::x86_64::*;
    let g = u.groups;
    // an unsigned row starts from the `128 Σ w_q` that every row's sum gives back at the end
    let offsets = [0, u.count - 1].map(|panel| _mm512_loadu_si512(u.packed.offset.as_ptr().add(u.columns[0] + panel * PANEL) as *const __m512i));
    let mut acc: [[__m512i; 2]; R] = std::array::from_fn(|r| {
        let unsigned = _mm512_set1_epi32(*u.row_unsigned.add(r));
        offsets.map(|o| _mm512_and_si512(o, unsigned))
    });
    for gi in 0..g {
        let wa = _mm512_load_si512(u.a.add(gi) as *const __m512i);
        let wb = _mm512_load_si512(u.b.add(gi) as *const __m512i);
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm512_set1_epi32(*u.x.add(r * u.groups + gi) as i32);
            acc[0] = _mm512_dpbusd_epi32(acc[0], x, wa);
            acc[1] = _mm512_dpbusd_epi32(acc[1], x, wb);
        }
    }
    let p = u.packed;
    for (i, &col0) in u.columns.iter().enumerate().take(u.count) {
        let width = (p.out_features - col0).min(PANEL);
        let mask: __mmask16 = if width == PANEL { 0xffff } else { (1u16 << width) - 1 };
        let scale = _mm512_loadu_ps(p.scale.as_ptr().add(col0));
        let offset = _mm512_loadu_si512(p.offset.as_ptr().add(col0) as *const __m512i);
        let bias = _mm512_loadu_ps(p.bias.as_ptr().add(col0));
        for (r, acc) in acc.iter().enumerate() {
            let sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], offset));
            let s = _mm512_mul_ps(scale, _mm512_set1_ps(*u.row_scale.add(r)));
            let mut v = _mm512_fmadd_ps(sum, s, bias);
            if u.relu {
                v = _mm512_max_ps(v, _mm512_setzero_ps());
            }
            _mm512_mask_storeu_ps(u.y.add(r * p.out_features + col0), mask, v);
        }
    }
}

/// `R` rows of one panel: 2R accumulators of 8 columns, started as [`vnni_rows`] starts them;
/// for each group of four inputs, two weight loads and R broadcasts, `vpmaddubsw` (two byte
/// products in 16 bits, which seven-bit inputs keep from saturating) and `vpmaddwd` by ones; then
/// [`vnni_rows`]'s scaling.
///
/// # Safety
/// `u` describes `R` readable rows, one panel and writable outputs; the CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_rows<const R: usize>(u: &Unit) {
    use std::arch::x86_64::*;
    let p = u.packed;
    let offsets = [0, 8].map(|half| _mm256_loadu_si256(p.offset.as_ptr().add(u.columns[0] + half) as *const __m256i));
    let mut acc: [[__m256i; 2]; R] = std::array::from_fn(|r| {
        let unsigned = _mm256_set1_epi32(*u.row_unsigned.add(r));
        offsets.map(|o| _mm256_and_si256(o, unsigned))
    });
    let ones = _mm256_set1_epi16(1);
    for gi in 0..u.groups {
        let block = u.a.add(gi) as *const __m256i;
        let (w0, w1) = (_mm256_load_si256(block), _mm256_load_si256(block.add(1)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = _mm256_set1_epi32(*u.x.add(r * u.groups + gi) as i32);
            acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w0), ones));
            acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w1), ones));
        }
    }
    for half in 0..2 {
        let col0 = u.columns[0] + 8 * half;
        let Some(width) = p.out_features.checked_sub(col0).filter(|&w| w > 0).map(|w| w.min(8)) else { break };
        let scale = _mm256_loadu_ps(p.scale.as_ptr().add(col0));
        let bias = _mm256_loadu_ps(p.bias.as_ptr().add(col0));
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(width as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (r, acc) in acc.iter().enumerate() {
            let sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[half], offsets[half]));
            let s = _mm256_mul_ps(scale, _mm256_set1_ps(*u.row_scale.add(r)));
            let mut v = _mm256_fmadd_ps(sum, s, bias);
            if u.relu {
                v = _mm256_max_ps(v, _mm256_setzero_ps());
            }
            let out = u.y.add(r * p.out_features + col0);
            if width == 8 {
                _mm256_storeu_ps(out, v);
            } else {
                _mm256_maskstore_ps(out, mask, v);
            }
        }
    }
}

/// The bytes of `u32`s, in memory order.
fn bytemuck_u32(words: &mut [u32]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirement; the length covers the same bytes.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 4) }
}

struct SendPtr(*mut f32);
// SAFETY: `gemm` hands each thread disjoint columns.
unsafe impl Sync for SendPtr {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    /// The kernels of a CPU without AVX2 or FMA: none, and int8 then runs through fbgemm (the
    /// int8 end-to-end tests hold it).
    #[test]
    #[cfg_attr(all(tchseq_cpu = "avx2", tchseq_cpu = "fma"), ignore = "this CPU has AVX2 and FMA")]
    fn no_kernel_without_avx2() {
        assert!(Kernel::all_here().is_empty() && !PackedInt8::available());
    }

    /// Each kernel against the same quantization in plain integer arithmetic.
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn equals_the_quantized_product_computed_plainly() {
        let kernels = Kernel::all_here();
        assert!(PackedInt8::available() && !kernels.is_empty(), "built where AVX2 and FMA were found, run where they are not");
        let mut rng = TestRng::new(17);
        for &(m, k, n) in &[(1usize, 8usize, 16usize), (5, 128, 384), (13, 70, 37), (9, 512, 33), (7, 24, 9)] {
            let x = with_unsigned_rows(&rng.randn([m as i64, k as i64]));
            let unsigned: Vec<bool> = (0..m as i64).map(|r| x.get(r).min().double_value(&[]) >= 0.0).collect();
            assert!(unsigned.iter().enumerate().all(|(r, &u)| u == (r % 2 == 1)), "{unsigned:?}");
            let w = rng.randn([n as i64, k as i64]) * 0.1;
            let b = rng.randn([n as i64]);
            for &kernel in &kernels {
                computes_plainly(kernel, &x, &w, &b);
            }
        }
    }

    /// Rows and weights at the tops of their ranges, every pair of products the largest the
    /// levels allow: AVX2's 16-bit pair sums hold them exactly (a byte's levels would saturate).
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn the_largest_products_sum_exactly() {
        let kernels = Kernel::all_here();
        assert!(kernels.contains(&Kernel::Avx2), "built where AVX2 and FMA were found, run where they are not");
        let (m, k, n) = (4i64, 64i64, 20i64);
        let ones = Tensor::ones([k], (Kind::Float, Device::Cpu));
        let last_negative = Tensor::ones([k], (Kind::Float, Device::Cpu));
        let _ = last_negative.get(k - 1).fill_(-1.0);
        // signed rows whose shifted bytes sit at the top and at the bottom; an unsigned row at its top
        let x = Tensor::stack(&[&last_negative, &(&last_negative * -1.0), &ones, &(&ones * 0.5)], 0);
        assert_eq!(x.size(), [m, k]);
        let sign = Tensor::arange(n, (Kind::Float, Device::Cpu)).remainder(2) * -2.0 + 1.0;
        let w = sign.unsqueeze(1).expand([n, k], false).contiguous();
        for &kernel in &kernels {
            computes_plainly(kernel, &x, &w, &Tensor::zeros([n], (Kind::Float, Device::Cpu)));
        }
    }

    /// `kernel`'s product of `x` `[m, k]` and `w` `[n, k]` (with bias `b`, then with ReLU) is its
    /// quantization's product in plain integer arithmetic, bit for bit, and within that
    /// quantization's error of the float32 product.
    fn computes_plainly(kernel: Kernel, x: &Tensor, w: &Tensor, b: &Tensor) {
        let (m, k) = x.size2().map(|(m, k)| (m as usize, k as usize)).unwrap();
        let n = w.size()[0] as usize;
        let (signed_top, unsigned_top) = match kernel.levels() {
            Levels::Byte => (127.0, 255.0),
            Levels::Seven => (63.0, 127.0),
        };
        let packed = PackedInt8::quantize_for(kernel, w, Some(b)).unwrap();
        for relu in [false, true] {
            let got = Vec::<f32>::try_from(packed.linear(x, relu).unwrap().unwrap().view([-1])).unwrap();
            let (xs, ws, bs) = (Vec::<f32>::try_from(x.view([-1])).unwrap(), Vec::<f32>::try_from(w.view([-1])).unwrap(), Vec::<f32>::try_from(b).unwrap());
            let f = x.linear(w, Some(b));
            let f = Vec::<f32>::try_from(if relu { f.relu() } else { f }.view([-1])).unwrap();
            for r in 0..m {
                let row = &xs[r * k..][..k];
                let unsigned = row.iter().all(|&v| v >= 0.0);
                let sx = row.iter().fold(0f32, |a, v| a.max(v.abs())) / if unsigned { unsigned_top } else { signed_top };
                for c in 0..n {
                    let col = &ws[c * k..][..k];
                    let sw = col.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                    let dot: i32 = row
                        .iter()
                        .zip(col)
                        .map(|(a, b)| ((a * (1.0 / sx)).round_ties_even() as i32) * ((b * (1.0 / sw)).round_ties_even() as i32))
                        .sum();
                    let want = (dot as f32).mul_add(sw * sx, bs[c]);
                    let want = if relu { want.max(0.0) } else { want };
                    assert_eq!(got[r * n + c].to_bits(), want.to_bits(), "{kernel:?} m {m} k {k} n {n} [{r},{c}]: {} vs {want}", got[r * n + c]);
                    // and within the quantization's own error of the f32 product: each
                    // quantized input is off by at most half its step, |x − x̂| ≤ sx/2 and
                    // |w − ŵ| ≤ sw/2, so |x·w − x̂·ŵ| ≤ |x|·sw/2 + |ŵ|·sx/2 (relu keeps
                    // it); plus the f32 sums' own rounding, at most (k + 2)·ε of the magnitudes
                    let quantized: f32 = row.iter().zip(col).map(|(a, b)| a.abs() * sw / 2.0 + (b.abs() + sw / 2.0) * sx / 2.0).sum();
                    let magnitude: f32 = row.iter().zip(col).map(|(a, b)| (a * b).abs()).sum::<f32>() + bs[c].abs() + want.abs();
                    let bound = quantized + (k as f32 + 2.0) * f32::EPSILON * magnitude;
                    let err = (got[r * n + c] - f[r * n + c]).abs();
                    assert!(err <= bound, "{kernel:?} m {m} k {k} n {n} [{r},{c}]: {err} > {bound}");
                }
            }
        }
    }

    /// `x` with every odd row through ReLU: rows both kernels quantize to the unsigned range.
    fn with_unsigned_rows(x: &Tensor) -> Tensor {
        let odd = Tensor::arange(x.size()[0], (Kind::Int64, Device::Cpu)).remainder(2).eq(1).unsqueeze(1);
        x.where_self(&odd.logical_not(), &x.relu())
    }

    /// A column read back (a tied embedding's row) is the weight as the kernel quantized it.
    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn row_into_reads_back_each_quantized_column() {
        let mut rng = TestRng::new(23);
        let (n, k) = (37usize, 70usize);
        let w = rng.randn([n as i64, k as i64]);
        let ws = Vec::<f32>::try_from(w.view([-1])).unwrap();
        let kernels = Kernel::all_here();
        for &kernel in &kernels {
            let packed = PackedInt8::quantize_for(kernel, &w, None).unwrap();
            let mut row = vec![f32::NAN; k];
            for c in 0..n {
                packed.row_into(c, &mut row);
                let col = &ws[c * k..][..k];
                let sw = col.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
                for (i, (&got, &w)) in row.iter().zip(col).enumerate() {
                    let want = sw * ((w * (1.0 / sw)).round_ties_even() as i32) as f32;
                    assert_eq!(got.to_bits(), want.to_bits(), "{kernel:?} [{c},{i}]: {got} vs {want} (from {w})");
                    assert!((got - w).abs() <= sw / 2.0 * 1.0001, "{kernel:?} [{c},{i}]: {got} is not {w} quantized");
                }
            }
        }
        assert!(!kernels.is_empty(), "built where AVX2 and FMA were found, run where they are not");
    }
}
