//! What the unit tests share: random tensors from a generator each test owns, so that tests run in
//! parallel never draw from one another's sequence, and the lock that the few tests of libtorch's
//! own global generator (fairseq's sampling replays it) hold while they seed and draw.

use std::sync::{Mutex, MutexGuard};

use tch::{Device, Kind, Tensor};

/// SplitMix64: a seeded sequence of its own for one test.
pub(crate) struct TestRng(u64);

impl TestRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1]`.
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal float32 values on the CPU, as `Tensor::randn(shape, (Float, Cpu))` draws
    /// them from libtorch's generator (Box–Muller).
    pub(crate) fn randn(&mut self, shape: impl AsRef<[i64]>) -> Tensor {
        let shape = shape.as_ref();
        let n: i64 = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                let (u, v) = (self.uniform(), self.uniform());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect();
        Tensor::from_slice(&values).reshape(shape)
    }

    /// Integers in `0..high` (int64, CPU), as `Tensor::randint(high, shape, ..)`.
    pub(crate) fn randint(&mut self, high: i64, shape: impl AsRef<[i64]>) -> Tensor {
        let shape = shape.as_ref();
        let n: i64 = shape.iter().product();
        let values: Vec<i64> = (0..n).map(|_| (self.next_u64() % high as u64) as i64).collect();
        Tensor::from_slice(&values).reshape(shape).to_kind(Kind::Int64).to_device(Device::Cpu)
    }
}

/// Held by every unit test that seeds libtorch's global generator and draws from it.
pub(crate) fn global_generator() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_draws_one_sequence_of_standard_normals() {
        let a = TestRng::new(3).randn([4000]);
        assert!(a.equal(&TestRng::new(3).randn([4000])));
        assert!(!a.equal(&TestRng::new(4).randn([4000])));
        let (mean, std) = (a.mean(Kind::Double).double_value(&[]), a.std(true).double_value(&[]));
        assert!(mean.abs() < 0.06 && (std - 1.0).abs() < 0.05, "mean {mean} std {std}");
        let i = TestRng::new(3).randint(7, [2000]);
        assert_eq!((i.min().int64_value(&[]), i.max().int64_value(&[])), (0, 6));
    }
}
