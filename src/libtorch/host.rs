//! A contiguous float32 CPU tensor's elements as a Rust slice, for the kernels that run on the
//! host (`kernels/one_query.rs`, `kernels/gemm.rs`, `generate/beam_topk.rs`); and a tensor's
//! largest element as a number, for the reports that compare tensors.

use tch::{Device, Kind, TchError, Tensor};

/// `t`'s largest element; 0 for an empty tensor.
pub fn largest(t: &Tensor) -> Result<f64, TchError> {
    if t.numel() == 0 { Ok(0.0) } else { t.f_max()?.f_double_value(&[]) }
}

/// Whether `t` can be read through [`f32_view`].
pub fn is_host_f32(t: &Tensor) -> bool {
    t.device() == Device::Cpu && t.kind() == Kind::Float && t.is_contiguous()
}

/// `t`'s elements in memory order; `None` unless it is a contiguous float32 CPU tensor.
///
/// # Safety
/// Nothing may write `t`'s storage (through another tensor sharing it) while the slice lives.
pub unsafe fn f32_view(t: &Tensor) -> Option<&[f32]> {
    if !is_host_f32(t) {
        return None;
    }
    let n = t.numel();
    if n == 0 {
        return Some(&[]);
    }
    // SAFETY: a contiguous f32 CPU tensor holds `n` initialized floats at `data_ptr`, kept alive
    // by `t`; the caller rules out writers.
    Some(unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, n) })
}

/// `t`'s elements in memory order, to write; `None` unless it is a contiguous float32 CPU tensor.
///
/// # Safety
/// Nothing may read or write `t`'s storage through another tensor while the slice lives.
pub unsafe fn f32_view_mut(t: &mut Tensor) -> Option<&mut [f32]> {
    if !is_host_f32(t) {
        return None;
    }
    let n = t.numel();
    if n == 0 {
        return Some(&mut []);
    }
    // SAFETY: as in `f32_view`, and the caller rules out every other access.
    Some(unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) })
}

/// Column `col` of an int64 CPU matrix `t` (any strides) into `out`; false (and `out` left
/// empty) for any other tensor or column.
///
/// # Safety
/// Nothing may write `t`'s storage while it is read.
pub unsafe fn i64_column_into(t: &Tensor, col: i64, out: &mut Vec<i64>) -> bool {
    out.clear();
    if t.device() != Device::Cpu || t.kind() != Kind::Int64 || t.dim() != 2 {
        return false;
    }
    let (size, stride) = (t.size(), t.stride());
    if !(0..size[1]).contains(&col) {
        return false;
    }
    let base = t.data_ptr() as *const i64;
    for r in 0..size[0] {
        // SAFETY: `(r, col)` is inside the tensor, whose storage `t` keeps alive; the caller
        // rules out writers.
        out.push(unsafe { *base.offset((r * stride[0] + col * stride[1]) as isize) });
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_only_contiguous_f32_cpu_tensors() {
        let mut t = Tensor::from_slice(&[1f32, 2., 3., 4., 5., 6.]).view([2, 3]);
        assert_eq!(unsafe { f32_view(&t) }, Some(&[1f32, 2., 3., 4., 5., 6.][..]));
        unsafe { f32_view_mut(&mut t) }.unwrap()[4] = 9.;
        assert_eq!(t.double_value(&[1, 1]), 9.);
        assert!(unsafe { f32_view(&t.tr()) }.is_none());
        assert!(unsafe { f32_view(&t.to_kind(Kind::Double)) }.is_none());
        let empty = Tensor::zeros([0, 4], (Kind::Float, Device::Cpu));
        assert_eq!(unsafe { f32_view(&empty) }, Some(&[][..]));
    }

    #[test]
    fn reads_a_column_of_a_strided_int64_matrix() {
        let t = Tensor::arange(12, (Kind::Int64, Device::Cpu)).view([3, 4]);
        let mut out = vec![7];
        assert!(unsafe { i64_column_into(&t.narrow(1, 0, 3), 2, &mut out) });
        assert_eq!(out, [2, 6, 10]);
        assert!(unsafe { i64_column_into(&t.tr(), 1, &mut out) });
        assert_eq!(out, [4, 5, 6, 7]);
        assert!(!unsafe { i64_column_into(&t, 4, &mut out) });
        assert!(out.is_empty());
        assert!(!unsafe { i64_column_into(&t.to_kind(Kind::Float), 0, &mut out) });
    }
}
