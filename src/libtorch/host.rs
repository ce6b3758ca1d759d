//! A contiguous float32 CPU tensor's elements as a Rust slice, for the kernels that run on the
//! host (`model/one_query.rs`, `model/host_gemm.rs`, `generate/beam_topk.rs`).

use tch::{Device, Kind, Tensor};

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
}
