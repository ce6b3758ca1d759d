//! The f32 kernels of [`super::gemm::PackedWeight`]: `R` input rows through one unit of
//! panels, the accumulators in registers for the whole sweep of a block's lines.

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use std::arch::x86_64::*;

    use crate::kernels::panel::{by_row_count, Job, PANEL};

    pub unsafe fn dispatch(m: usize, j: &Job<f32>) {
        by_row_count!(m, rows, j)
    }

    /// `R` rows through two panels: 2R accumulators, two weight registers and a broadcast.
    #[target_feature(enable = "avx512f")]
    unsafe fn rows<const R: usize>(j: &Job<f32>) {
        let (p0, p1) = (j.panel, j.panel.add(j.lines * PANEL));
        let mut acc = start::<R, f32>(j);
        for kk in 0..j.k {
            let w0 = _mm512_load_ps(p0.add(kk * PANEL));
            let w1 = _mm512_load_ps(p1.add(kk * PANEL));
            for (r, acc) in acc.iter_mut().enumerate() {
                let xr = _mm512_set1_ps(*j.x.add(r * j.lines + kk));
                acc[0] = _mm512_fmadd_ps(xr, w0, acc[0]);
                acc[1] = _mm512_fmadd_ps(xr, w1, acc[1]);
            }
        }
        store(acc, j);
    }

    /// The accumulators of `R` rows: the bias, or with `j.accumulate` what `j.y` holds.
    ///
    /// # Safety
    /// As [`store`].
    #[target_feature(enable = "avx512f")]
    pub unsafe fn start<const R: usize, X>(j: &Job<X>) -> [[__m512; 2]; R] {
        if !j.accumulate {
            return [[_mm512_loadu_ps(j.bias), _mm512_loadu_ps(j.bias.add(PANEL))]; R];
        }
        let (lo, hi) = masks(j.cols);
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        for (r, acc) in acc.iter_mut().enumerate() {
            let row = j.y.add(r * j.ldy);
            *acc = [_mm512_maskz_loadu_ps(lo, row), _mm512_maskz_loadu_ps(hi, row.add(PANEL))];
        }
        acc
    }

    /// The lanes of a unit's two panels that hold its `cols` columns.
    fn masks(cols: usize) -> (u16, u16) {
        let lo = if cols >= PANEL { 0xffff } else { (1u32 << cols) as u16 - 1 };
        let hi = if cols >= 2 * PANEL { 0xffff } else if cols > PANEL { (1u32 << (cols - PANEL)) as u16 - 1 } else { 0 };
        (lo, hi)
    }

    /// The `R` rows of a unit's accumulators into `j.y`'s `j.cols` columns (ReLU first with
    /// `j.relu`). The accumulators come by value: a reference would let them escape a kernel that
    /// this does not inline into, and the kernel's loop would store every one of them each pass.
    ///
    /// # Safety
    /// `j.y` holds `R` rows `j.ldy` apart with `j.cols` columns to write; the CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn store<const R: usize, X>(acc: [[__m512; 2]; R], j: &Job<X>) {
        let zero = _mm512_setzero_ps();
        let (lo, hi) = masks(j.cols);
        for (r, acc) in acc.iter().enumerate() {
            let (a0, a1) = if j.relu { (_mm512_max_ps(acc[0], zero), _mm512_max_ps(acc[1], zero)) } else { (acc[0], acc[1]) };
            let out = j.y.add(r * j.ldy);
            _mm512_mask_storeu_ps(out, lo, a0);
            _mm512_mask_storeu_ps(out.add(PANEL), hi, a1);
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use crate::kernels::panel::{Job, PANEL};

    pub unsafe fn dispatch(m: usize, j: &Job<f32>) {
        match (j.interleaved, j.prefetch.is_some()) {
            (false, false) => by_row_count::<false, false>(m, j),
            (false, true) => by_row_count::<false, true>(m, j),
            (true, false) => by_row_count::<true, false>(m, j),
            (true, true) => by_row_count::<true, true>(m, j),
        }
    }

    unsafe fn by_row_count<const INTERLEAVED: bool, const PREFETCH: bool>(m: usize, j: &Job<f32>) {
        match m {
            1 => rows::<1, INTERLEAVED, PREFETCH>(j),
            2 => rows::<2, INTERLEAVED, PREFETCH>(j),
            3 => rows::<3, INTERLEAVED, PREFETCH>(j),
            4 => rows::<4, INTERLEAVED, PREFETCH>(j),
            5 => rows::<5, INTERLEAVED, PREFETCH>(j),
            _ => rows::<6, INTERLEAVED, PREFETCH>(j),
        }
    }

    /// `R` rows through one panel: 2R accumulators, two weight registers and a broadcast fit
    /// in the 16 AVX registers. With `PREFETCH`, each line also asks for the matching line of
    /// the next unit.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows<const R: usize, const INTERLEAVED: bool, const PREFETCH: bool>(j: &Job<f32>) {
        let next = j.prefetch.unwrap_or(j.panel);
        let mut tail = [0f32; PANEL];
        let mut acc = [[_mm256_loadu_ps(j.bias), _mm256_loadu_ps(j.bias.add(8))]; R];
        if j.accumulate {
            for (r, acc) in acc.iter_mut().enumerate() {
                let row = j.y.add(r * j.ldy);
                let from = if j.cols >= PANEL {
                    row as *const f32
                } else {
                    std::ptr::copy_nonoverlapping(row, tail.as_mut_ptr(), j.cols);
                    tail.as_ptr()
                };
                *acc = [_mm256_loadu_ps(from), _mm256_loadu_ps(from.add(8))];
            }
        }
        for kk in 0..j.k {
            let w0 = _mm256_load_ps(j.panel.add(kk * PANEL));
            let w1 = _mm256_load_ps(j.panel.add(kk * PANEL + 8));
            if PREFETCH {
                _mm_prefetch::<_MM_HINT_T1>(next.add(kk * PANEL) as *const i8);
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xr = _mm256_set1_ps(*j.x.add(if INTERLEAVED { kk * R + r } else { r * j.lines + kk }));
                acc[0] = _mm256_fmadd_ps(xr, w0, acc[0]);
                acc[1] = _mm256_fmadd_ps(xr, w1, acc[1]);
            }
        }
        let zero = _mm256_setzero_ps();
        for (r, acc) in acc.iter().enumerate() {
            let (a0, a1) = if j.relu { (_mm256_max_ps(acc[0], zero), _mm256_max_ps(acc[1], zero)) } else { (acc[0], acc[1]) };
            let out = j.y.add(r * j.ldy);
            if j.cols >= PANEL {
                _mm256_storeu_ps(out, a0);
                _mm256_storeu_ps(out.add(8), a1);
            } else {
                _mm256_storeu_ps(tail.as_mut_ptr(), a0);
                _mm256_storeu_ps(tail.as_mut_ptr().add(8), a1);
                std::ptr::copy_nonoverlapping(tail.as_ptr(), out, j.cols);
            }
        }
    }
}
