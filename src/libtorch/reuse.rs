//! Large step buffers kept for the next step, as CTranslate2 reuses its buffers: a
//! `[rows, vocab]` logits tensor is tens of MB at transformer-base size, and a fresh one each step
//! costs page faults (the heap's top given back and zeroed again) as much as its arithmetic.

use std::sync::Mutex;

use tch::{Device, Kind, Tensor};

mod ffi {
    use torch_sys::C_tensor;

    extern "C" {
        pub fn tchseq_storage_use_count(t: *const C_tensor) -> i64;
    }
}

/// How many tensors (views included) share `t`'s storage.
pub fn storage_use_count(t: &Tensor) -> i64 {
    // SAFETY: a valid tensor for the call.
    unsafe { ffi::tchseq_storage_use_count(t.as_ptr()) }
}

/// Buffers handed out again once nothing but the pool holds them; one per concurrent user
/// (an `--inter-threads` worker), at most [`BufferPool::MAX`].
#[derive(Debug, Default)]
pub struct BufferPool {
    buffers: Mutex<Vec<Tensor>>,
}

impl BufferPool {
    pub const MAX: usize = 8;

    /// An f32 CPU tensor of `size`, uninitialized: a free pooled one when there is one.
    pub fn take(&self, size: &[i64]) -> Result<Tensor, tch::TchError> {
        let numel: i64 = size.iter().product();
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let free = buffers.iter().position(|b| storage_use_count(b) == 1 && b.numel() as i64 >= numel);
        let buffer = match free {
            Some(i) => buffers[i].shallow_clone(),
            None => {
                let fresh = Tensor::f_empty([numel], (Kind::Float, Device::Cpu))?;
                // the pool keeps the largest it has seen
                if buffers.len() >= Self::MAX {
                    if let Some(i) = buffers.iter().position(|b| storage_use_count(b) == 1) {
                        drop(buffers.swap_remove(i));
                    }
                }
                if buffers.len() < Self::MAX {
                    buffers.push(fresh.shallow_clone());
                }
                fresh
            }
        };
        buffer.f_narrow(0, 0, numel)?.f_view(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_only_when_nothing_else_holds_it() {
        let pool = BufferPool::default();
        let a = pool.take(&[4, 8]).unwrap();
        assert_eq!(a.size(), [4, 8]);
        let first = a.data_ptr();
        drop(a);
        let b = pool.take(&[2, 8]).unwrap();
        assert_eq!((b.data_ptr(), b.size()), (first, vec![2, 8]), "a free buffer is handed out again");
        let c = pool.take(&[4, 8]).unwrap();
        assert_ne!(c.data_ptr(), first, "a buffer in use is not handed out twice");
        let second = c.data_ptr();
        let view = c.narrow(0, 0, 1);
        drop(c);
        let d = pool.take(&[4, 8]).unwrap();
        assert!(d.data_ptr() != first && d.data_ptr() != second, "a view still holds the second");
        drop((b, view));
        assert_eq!(pool.take(&[1, 8]).unwrap().data_ptr(), first);
        assert_eq!(pool.take(&[100, 8]).unwrap().numel(), 800, "too small a free buffer is not used");
    }
}
