//! `--compute-type float32`'s large linear layers: oneDNN's matrix product with the weight
//! reordered once into its blocked layout (csrc/onednn_linear.cpp), where MKL's sgemm, which
//! `F.linear` calls, copies the weight into its own layout on every call. Worth it only for large
//! weights: measured on one thread, a 7,944 × 128 output projection takes 0.46× the time at 5
//! rows and 0.82× at 160, a 32,000 × 512 one 0.27× and 0.71×, while a 128 × 128 projection
//! takes 2.6× at 5 rows (oneDNN's fixed cost per call).

use tch::Tensor;

use super::int8::shim_error;
use super::ModelError;

/// The smallest weight (`out × in` elements) worth reordering: 512 × 512.
pub const MIN_ELEMENTS: i64 = 512 * 512;

mod ffi {
    use std::ffi::c_char;
    use torch_sys::C_tensor;

    extern "C" {
        pub fn tchseq_onednn_reorder_weight(weight: *const C_tensor, error: *mut *mut c_char) -> *mut C_tensor;
        pub fn tchseq_onednn_linear(
            x: *const C_tensor,
            packed: *const C_tensor,
            bias: *const C_tensor,
            relu: bool,
            error: *mut *mut c_char,
        ) -> *mut C_tensor;
    }
}

/// A linear layer's f32 weight in oneDNN's layout.
#[derive(Debug)]
pub struct OneDnnWeight {
    packed: Tensor,
}

impl OneDnnWeight {
    pub fn reorder(weight: &Tensor) -> Result<Self, ModelError> {
        let weight = weight.f_contiguous()?;
        let mut error = std::ptr::null_mut();
        // SAFETY: a valid tensor for the call; a non-null result is a new at::Tensor we own.
        let packed = unsafe { ffi::tchseq_onednn_reorder_weight(weight.as_ptr(), &mut error) };
        if packed.is_null() {
            return Err(shim_error("oneDNN weight reorder", error));
        }
        Ok(Self { packed: unsafe { Tensor::from_ptr(packed) } })
    }

    /// `F.linear(x, weight, bias)`, then ReLU with `relu`.
    pub fn linear(&self, x: &Tensor, bias: Option<&Tensor>, relu: bool) -> Result<Tensor, ModelError> {
        let x = x.f_contiguous()?;
        let mut error = std::ptr::null_mut();
        // SAFETY: the tensors outlive the call; a non-null result is a new at::Tensor we own.
        let y = unsafe {
            let bias = bias.map_or(std::ptr::null(), Tensor::as_ptr);
            ffi::tchseq_onednn_linear(x.as_ptr(), self.packed.as_ptr(), bias, relu, &mut error)
        };
        if y.is_null() {
            return Err(shim_error("oneDNN linear", error));
        }
        Ok(unsafe { Tensor::from_ptr(y) })
    }
}
