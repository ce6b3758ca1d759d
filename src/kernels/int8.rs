//! `--compute-type int8`: dynamic quantization of the linear layers through fbgemm, as torch.ao's
//! dynamic `Linear` calls it (csrc/quantized_linear.cpp). Each weight is quantized once, per
//! output row; each input is quantized on the fly, multiplied in int8 with int32 accumulation and
//! scaled back to f32. fbgemm quantizes an input per tensor; we scale each row to the same range
//! first, and back after, so that in effect each row (token) gets its own scale, as CTranslate2's
//! int8 does: on test_2016_flickr 89 of 1,000 hypotheses changed instead of 125, for 1.23× the
//! time at the bundled size. Not fairseq's arithmetic: its fidelity is measured, not exact.
//! On CPUs with AVX2 the same quantization runs on the host instead (`gemm_i8.rs`), with
//! 8-bit inputs (no `reduce_range`); fbgemm is left for CPUs without it.

use tch::{Kind, Tensor};

use super::gemm_i8::PackedInt8;
use super::KernelError;

mod ffi {
    use std::ffi::{c_char, c_void};
    use torch_sys::C_tensor;

    extern "C" {
        pub fn tchseq_linear_prepack(
            weight: *const C_tensor,
            scales: *const C_tensor,
            zero_points: *const C_tensor,
            bias: *const C_tensor,
            error: *mut *mut c_char,
        ) -> *mut c_void;
        pub fn tchseq_linear_dynamic(
            x: *const C_tensor,
            packed: *const c_void,
            reduce_range: bool,
            error: *mut *mut c_char,
        ) -> *mut C_tensor;
        pub fn tchseq_linear_packed_free(packed: *mut c_void);
        pub fn tchseq_error_free(error: *mut c_char);
    }
}

/// A csrc/ shim's error message (`what` names the op), freed.
pub(super) fn shim_error(what: &str, error: *mut std::ffi::c_char) -> KernelError {
    if error.is_null() {
        return KernelError::Shim { op: what.to_string(), message: "failed without a message".into() };
    }
    // SAFETY: a NUL-terminated string the shim malloc'ed, freed once here.
    let text = unsafe { std::ffi::CStr::from_ptr(error) }.to_string_lossy().lines().next().unwrap_or("").to_string();
    unsafe { ffi::tchseq_error_free(error) };
    KernelError::Shim { op: what.to_string(), message: text }
}

/// A linear layer's weight and bias in int8: on the host's VNNI kernel (`gemm_i8.rs`), or
/// packed by fbgemm (`quantized::linear_prepack`: the weight quantized per output row, qint8,
/// symmetric; the bias kept in f32).
#[derive(Debug)]
pub enum Int8Weight {
    Host(std::sync::Arc<PackedInt8>),
    Fbgemm { packed: std::ptr::NonNull<std::ffi::c_void>, bias: Option<Tensor> },
}

// SAFETY: the packed parameters are never changed after packing; `linear_dynamic` only reads
// them, from any thread (torch.ao shares them across inference threads the same way).
unsafe impl Send for Int8Weight {}
unsafe impl Sync for Int8Weight {}

impl Int8Weight {
    pub fn quantize(weight: &Tensor, bias: Option<&Tensor>) -> Result<Self, KernelError> {
        let _guard = tch::no_grad_guard();
        if weight.device() == tch::Device::Cpu && PackedInt8::available() {
            return Ok(Self::Host(std::sync::Arc::new(PackedInt8::quantize(weight, bias)?)));
        }
        let weight = weight.f_to_kind(Kind::Float)?.f_contiguous()?;
        let out = weight.size()[0];
        let scale = weight.f_abs()?.f_amax([1i64].as_slice(), false)?.f_clamp_min(1e-8)?.f_div_scalar(127.0)?;
        let zero = Tensor::f_zeros([out], (Kind::Int64, weight.device()))?;
        let bias = bias.map(|b| b.f_to_kind(Kind::Float)).transpose()?;
        let mut error = std::ptr::null_mut();
        // SAFETY: valid tensors for the call's duration; the result is owned by the returned value.
        let packed = unsafe { ffi::tchseq_linear_prepack(weight.as_ptr(), scale.as_ptr(), zero.as_ptr(), std::ptr::null(), &mut error) };
        match std::ptr::NonNull::new(packed) {
            Some(packed) => Ok(Self::Fbgemm { packed, bias }),
            None => Err(shim_error("int8 linear", error)),
        }
    }

    /// `F.linear(x, weight, bias)` in int8, result in `x`'s kind. Activations are quantized per
    /// row (see the module docs), to 7 bits (torch.ao's `reduce_range`) unless the CPU has VNNI:
    /// without it fbgemm sums byte products in 16 bits, which 8-bit activations can overflow.
    pub fn linear(&self, x: &Tensor) -> Result<Tensor, KernelError> {
        let y = match self {
            Self::Host(host) => {
                let y = host.linear(&x.f_to_kind(Kind::Float)?, false)?;
                y.ok_or_else(|| KernelError::Operand { kernel: "int8 linear", operand: format!("{} outputs on an input of {:?}", host.out_features(), x.size()) })?
            }
            Self::Fbgemm { packed, bias } => {
                let input = x.f_to_kind(Kind::Float)?;
                let row_scale = input.f_abs()?.f_amax([-1i64].as_slice(), true)?.f_clamp_min(1e-12)?;
                let input = input.f_div(&row_scale)?.f_contiguous()?;
                let mut error = std::ptr::null_mut();
                // SAFETY: `input` and the packed parameters outlive the call; a non-null result
                // is a new at::Tensor that `from_ptr` takes ownership of.
                let y = unsafe { ffi::tchseq_linear_dynamic(input.as_ptr(), packed.as_ptr(), !has_vnni(), &mut error) };
                if y.is_null() {
                    return Err(shim_error("int8 linear", error));
                }
                let mut y = unsafe { Tensor::from_ptr(y) };
                let _ = y.f_mul_(&row_scale)?;
                if let Some(b) = bias {
                    let _ = y.f_add_(b)?;
                }
                y
            }
        };
        Ok(if x.kind() == Kind::Float { y } else { y.f_to_kind(x.kind())? })
    }
}

/// fbgemm decides by the real CPU, whatever `TCHSEQ_CPU_FEATURES_OFF` hides.
fn has_vnni() -> bool {
    static VNNI: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *VNNI.get_or_init(|| super::isa::cpu_detected("avx512vnni"))
}

impl Drop for Int8Weight {
    fn drop(&mut self) {
        if let Self::Fbgemm { packed, .. } = self {
            // SAFETY: packed by `quantize`, freed once.
            unsafe { ffi::tchseq_linear_packed_free(packed.as_ptr()) };
        }
    }
}
