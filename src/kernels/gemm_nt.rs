//! `--compute-type float32`: an output projection tied to the embedding table, computed on the
//! host from that table as it is (`[vocab, dim]`, row-major), so that the table is held once for
//! both. Packing it into panels would hold a second copy of the largest weight while it is made
//! (512 MB at M2M-100's 128k × 1024). Each output is a dot product of an input row and a table
//! row: blocks of 4 × 4 of them accumulate along the input width in vector registers and are
//! summed across lanes once at the end. Needs AVX2 and FMA (AVX-512F used where present).

use tch::{Device, Kind, Tensor};

use super::isa::Isa;
use super::KernelError;
use crate::libtorch::host::{f32_view, f32_view_mut};
use crate::libtorch::parallel::parallel_for;

/// Table rows (outputs) and input rows per block, at most.
const V: usize = 4;
const R: usize = 4;

/// Table rows a block of `nr` input rows takes. AVX2 takes three against three or four rows, so
/// that the accumulators, table registers and an input register fit its 16 registers (four
/// against four spilled five accumulators to the stack every step of the loop); four against
/// fewer rows, which load more per product.
fn table_rows(isa: Isa, nr: usize) -> usize {
    match isa {
        Isa::Avx2 => avx2_table_rows(nr),
        Isa::Avx512 => V,
    }
}

/// [`table_rows`] on AVX2, where the kernel is compiled for each count.
const fn avx2_table_rows(nr: usize) -> usize {
    if nr >= 3 {
        3
    } else {
        V
    }
}

/// What a chunk of table rows is a multiple of: every count [`table_rows`] gives for `isa`.
fn table_rows_multiple(isa: Isa) -> usize {
    match isa {
        Isa::Avx2 => 12,
        Isa::Avx512 => V,
    }
}

/// Work below this many flops is not worth waking another thread for.
const GRAIN_FLOPS: usize = 1 << 19;

/// `x · Tᵀ` for a table `T` `[vocab, dim]` (f32, contiguous, on the CPU).
#[derive(Debug)]
pub struct TableProjection {
    table: Tensor,
    isa: Isa,
}

impl TableProjection {
    /// `None` when the CPU lacks AVX2/FMA or the table is not a contiguous f32 CPU matrix.
    pub fn new(table: &Tensor) -> Option<Self> {
        let isa = Isa::detect()?;
        (table.dim() == 2 && crate::libtorch::host::is_host_f32(table)).then(|| Self { table: table.shallow_clone(), isa })
    }

    #[cfg(test)]
    fn with_isa(table: &Tensor, isa: Isa) -> Self {
        Self { table: table.shallow_clone(), isa }
    }

    /// `x · Tᵀ` for a contiguous f32 CPU `x` `[..., dim]`, into `y` when given (its size must be
    /// `[..., vocab]`), else a new tensor; `None` for any other input.
    pub fn forward(&self, x: &Tensor, y: Option<Tensor>) -> Result<Option<Tensor>, KernelError> {
        let (vocab, dim) = self.table.size2()?;
        let size = x.size();
        if size.last() != Some(&dim) {
            return Ok(None);
        }
        let mut out_size = size.clone();
        if let Some(last) = out_size.last_mut() {
            *last = vocab;
        }
        let mut y = match y {
            Some(y) if y.size() == out_size => y,
            _ => Tensor::f_empty(out_size.as_slice(), (Kind::Float, Device::Cpu))?,
        };
        // SAFETY: nothing writes `x` during the call; `y` is the caller's to write.
        let (Some(x_data), Some(y_data)) = (unsafe { f32_view(x) }, unsafe { f32_view_mut(&mut y) }) else {
            return Ok(None);
        };
        Ok(self.gemm(x_data, y_data).then_some(y))
    }

    /// `(vocab, dim)` of the table.
    pub fn shape(&self) -> (usize, usize) {
        let (vocab, dim) = self.table.size2().unwrap_or((0, 0));
        (vocab as usize, dim as usize)
    }

    /// [`TableProjection::forward`] on slices: `x` `[rows, dim]` into `y` `[rows, vocab]`; false
    /// (nothing written) when their lengths do not fit.
    pub fn gemm(&self, x: &[f32], y: &mut [f32]) -> bool {
        let (vocab, dim) = self.shape();
        // SAFETY: nothing writes the table during the call.
        let Some(t_data) = (unsafe { f32_view(&self.table) }) else { return false };
        let rows = x.len().checked_div(dim).unwrap_or(y.len() / vocab.max(1));
        if rows * dim != x.len() || y.len() != rows * vocab {
            return false;
        }
        gemm_nt(self.isa, x, t_data, y, dim);
        true
    }
}

struct SendPtr(*mut f32);
// SAFETY: the ranges of `parallel_for` write disjoint columns through it.
unsafe impl Sync for SendPtr {}

/// `y[r][v] = Σ_c x[r][c] · t[v][c]`: `x` `[rows, k]`, `t` `[vocab, k]`, `y` `[rows, vocab]`.
/// Table rows go in chunks that fit L1 (about 32 KiB), each chunk against every input row in
/// blocks of up to 4 × 4 (`table_rows`), so that an input row is read once per chunk, not once
/// per block.
fn gemm_nt(isa: Isa, x: &[f32], t: &[f32], y: &mut [f32], k: usize) {
    if k == 0 {
        y.fill(0.0);
        return;
    }
    let (rows, vocab) = (x.len() / k, t.len() / k);
    let unit = table_rows_multiple(isa);
    let chunk = ((8192 / k) / unit * unit).clamp(unit, 64 / unit * unit);
    let chunks = vocab.div_ceil(chunk);
    let grain = GRAIN_FLOPS.div_ceil(rows.max(1) * k * chunk * 2);
    let y_ptr = SendPtr(y.as_mut_ptr());
    parallel_for(chunks, grain, |c0, c1| {
        let y_ptr = &y_ptr;
        for c in c0..c1 {
            let (first, last) = (c * chunk, vocab.min((c + 1) * chunk));
            for r0 in (0..rows).step_by(R) {
                let nr = R.min(rows - r0);
                let v_step = table_rows(isa, nr);
                for v0 in (first..last).step_by(v_step) {
                    let nv = v_step.min(last - v0);
                    let mut out = [[0f32; V]; R];
                    // The first block of input rows pulls the next chunk's table rows into the
                    // cache as it goes, for the blocks after it.
                    let ahead = if r0 == 0 { chunk.min(vocab - v0 - nv) } else { 0 };
                    // SAFETY: the rows and table rows read are inside `x` and `t`, and so are
                    // the `ahead` rows; the ISA was detected.
                    unsafe { block(isa, x.as_ptr().add(r0 * k), nr, t.as_ptr().add(v0 * k), nv, k, ahead, &mut out) };
                    for (r, row) in out.iter().enumerate().take(nr) {
                        // SAFETY: chunk `c` owns columns first..last of every row; no other
                        // range writes them.
                        let dst = unsafe { std::slice::from_raw_parts_mut(y_ptr.0.add((r0 + r) * vocab + v0), nv) };
                        dst.copy_from_slice(&row[..nv]);
                    }
                }
            }
        }
    });
}

/// One block: `nr` input rows (≤ R) against `nv` table rows (≤ `table_rows(isa, nr)`); a
/// missing table row repeats the first, and its sums are not written. With `ahead`, the AVX2
/// kernel also prefetches the table rows `ahead` rows past these.
///
/// # Safety
/// `x` holds `nr` rows of `k`, `t` `nv` rows of `k` and `ahead` rows more; `isa` is available.
#[allow(clippy::too_many_arguments)]
unsafe fn block(isa: Isa, x: *const f32, nr: usize, t: *const f32, nv: usize, k: usize, ahead: usize, out: &mut [[f32; V]; R]) {
    let xs: [*const f32; R] = std::array::from_fn(|r| x.add(if r < nr { r } else { 0 } * k));
    let ts: [*const f32; V] = std::array::from_fn(|v| t.add(if v < nv { v } else { 0 } * k));
    #[cfg(target_arch = "x86_64")]
    match (isa, nr) {
        (Isa::Avx512, 1) => avx512::block::<1>(&xs, &ts, k, out),
        (Isa::Avx512, 2) => avx512::block::<2>(&xs, &ts, k, out),
        (Isa::Avx512, 3) => avx512::block::<3>(&xs, &ts, k, out),
        (Isa::Avx512, _) => avx512::block::<4>(&xs, &ts, k, out),
        (Isa::Avx2, _) if ahead > 0 => avx2::by_row_count::<true>(nr, &xs, &ts, k, ahead * k, out),
        (Isa::Avx2, _) => avx2::by_row_count::<false>(nr, &xs, &ts, k, 0, out),
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (isa, xs, ts, k, ahead, out);
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{R, V};

    #[target_feature(enable = "avx512f,avx2,fma")]
    pub unsafe fn block<const NR: usize>(x: &[*const f32; R], t: &[*const f32; V], k: usize, out: &mut [[f32; V]; R]) {
        let mut acc = [[_mm512_setzero_ps(); V]; NR];
        let whole = k / 16 * 16;
        let mut c = 0;
        while c < whole {
            let tv: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(t[v].add(c)));
            for r in 0..NR {
                let xv = _mm512_loadu_ps(x[r].add(c));
                for v in 0..V {
                    acc[r][v] = _mm512_fmadd_ps(xv, tv[v], acc[r][v]);
                }
            }
            c += 16;
        }
        if c < k {
            let mask = ((1u32 << (k - c)) - 1) as u16;
            let tv: [__m512; V] = std::array::from_fn(|v| _mm512_maskz_loadu_ps(mask, t[v].add(c)));
            for r in 0..NR {
                let xv = _mm512_maskz_loadu_ps(mask, x[r].add(c));
                for v in 0..V {
                    acc[r][v] = _mm512_fmadd_ps(xv, tv[v], acc[r][v]);
                }
            }
        }
        for r in 0..NR {
            let half = |a: __m512| _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
            let sums = super::avx2::sum4([half(acc[r][0]), half(acc[r][1]), half(acc[r][2]), half(acc[r][3])]);
            _mm_storeu_ps(out[r].as_mut_ptr(), sums);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{avx2_table_rows, R, V};

    /// [`block`] for `nr` input rows, against as many table rows as `table_rows` gives.
    pub unsafe fn by_row_count<const PREFETCH: bool>(nr: usize, x: &[*const f32; R], t: &[*const f32; V], k: usize, ahead: usize, out: &mut [[f32; V]; R]) {
        match nr {
            1 => block::<1, { avx2_table_rows(1) }, PREFETCH>(x, t, k, ahead, out),
            2 => block::<2, { avx2_table_rows(2) }, PREFETCH>(x, t, k, ahead, out),
            3 => block::<3, { avx2_table_rows(3) }, PREFETCH>(x, t, k, ahead, out),
            _ => block::<4, { avx2_table_rows(4) }, PREFETCH>(x, t, k, ahead, out),
        }
    }

    /// `NR` input rows against the first `NV` (≤ V) table rows; with `PREFETCH`, each line of
    /// theirs asks for the line `ahead` floats on.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn block<const NR: usize, const NV: usize, const PREFETCH: bool>(x: &[*const f32; R], t: &[*const f32; V], k: usize, ahead: usize, out: &mut [[f32; V]; R]) {
        let mut acc = [[_mm256_setzero_ps(); NV]; NR];
        let whole = k / 8 * 8;
        let mut c = 0;
        while c < whole {
            let tv: [__m256; NV] = std::array::from_fn(|v| _mm256_loadu_ps(t[v].add(c)));
            if PREFETCH && c % 16 == 0 {
                for row in &t[..NV] {
                    _mm_prefetch::<_MM_HINT_T1>(row.add(c + ahead) as *const i8);
                }
            }
            for r in 0..NR {
                let xv = _mm256_loadu_ps(x[r].add(c));
                for v in 0..NV {
                    acc[r][v] = _mm256_fmadd_ps(xv, tv[v], acc[r][v]);
                }
            }
            c += 8;
        }
        for r in 0..NR {
            let mut four = [_mm256_setzero_ps(); 4];
            four[..NV].copy_from_slice(&acc[r]);
            _mm_storeu_ps(out[r].as_mut_ptr(), sum4(four));
            for v in 0..NV {
                for cc in c..k {
                    out[r][v] += *x[r].add(cc) * *t[v].add(cc);
                }
            }
        }
    }

    /// The lane sums of four registers, in one: three horizontal adds and a fold.
    #[inline(always)]
    pub unsafe fn sum4(a: [__m256; 4]) -> __m128 {
        let h = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestRng;

    #[test]
    #[cfg_attr(not(all(tchseq_cpu = "avx2", tchseq_cpu = "fma")), ignore = "needs AVX2 and FMA")]
    fn equals_f_linear_within_rounding_for_every_shape_and_isa() {
        let mut rng = TestRng::new(835);
        let opts = (Kind::Float, Device::Cpu);
        for isa in Isa::all_here() {
            assert!((1..=R).all(|nr| table_rows_multiple(isa).is_multiple_of(table_rows(isa, nr))), "{isa:?}");
            for (vocab, dim) in [(7944i64, 128i64), (37, 20), (5, 3), (9, 33), (1, 1)] {
                let table = rng.randn([vocab, dim]);
                let projection = TableProjection::with_isa(&table, isa);
                for rows in [1i64, 3, 4, 5, 9, 160] {
                    let x = rng.randn([rows, 1, dim]);
                    let want = x.linear(&table, None::<&Tensor>);
                    let got = projection.forward(&x, None).unwrap().expect("a contiguous input");
                    assert_eq!(got.size(), want.size());
                    let diff = (&got - &want).abs().max().double_value(&[]);
                    assert!(crate::tolerance::HOST_LINEAR.holds(diff), "{isa:?} {vocab}x{dim}, {rows} rows: {diff}");
                    let into = projection.forward(&x, Some(Tensor::zeros(want.size(), opts))).unwrap().unwrap();
                    assert!(into.equal(&got), "into a buffer");
                }
            }
            let table = rng.randn([6, 4]);
            let projection = TableProjection::with_isa(&table, isa);
            assert!(projection.forward(&rng.randn([4, 3]).tr(), None).unwrap().is_none(), "strided input");
            assert!(projection.forward(&rng.randn([2, 5]), None).unwrap().is_none(), "another width");
        }
    }
}
