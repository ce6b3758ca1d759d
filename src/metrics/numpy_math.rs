//! The floating-point arithmetic of sacreBLEU's resampling as Python and NumPy 2 do it: a score
//! computed from `float32` statistics is a `np.float32` or a Python `float` depending on the
//! branch taken (NEP 50: a Python scalar mixed with a `np.float32` is cast to `float32`), arrays
//! of them are `float32` or `float64`, `ndarray.mean` sums pairwise, `statistics.mean` exactly.

use std::cmp::Ordering;

/// A Python `float` or a `np.float32` scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NpFloat {
    Py(f64),
    F32(f32),
}

impl NpFloat {
    pub fn value(self) -> f64 {
        match self {
            Self::Py(x) => x,
            Self::F32(x) => x as f64,
        }
    }

    pub fn is_f32(self) -> bool {
        matches!(self, Self::F32(_))
    }

    fn binary(self, other: Self, f64_op: fn(f64, f64) -> f64, f32_op: fn(f32, f32) -> f32) -> Self {
        match (self, other) {
            (Self::Py(a), Self::Py(b)) => Self::Py(f64_op(a, b)),
            (Self::F32(a), Self::F32(b)) => Self::F32(f32_op(a, b)),
            (Self::F32(a), Self::Py(b)) => Self::F32(f32_op(a, b as f32)),
            (Self::Py(a), Self::F32(b)) => Self::F32(f32_op(a as f32, b)),
        }
    }

    pub fn add(self, o: Self) -> Self {
        self.binary(o, |a, b| a + b, |a, b| a + b)
    }

    pub fn sub(self, o: Self) -> Self {
        self.binary(o, |a, b| a - b, |a, b| a - b)
    }

    pub fn mul(self, o: Self) -> Self {
        self.binary(o, |a, b| a * b, |a, b| a * b)
    }

    pub fn div(self, o: Self) -> Self {
        self.binary(o, |a, b| a / b, |a, b| a / b)
    }

    pub fn is_truthy(self) -> bool {
        self.value() != 0.0
    }
}

/// A NumPy array built from a list of [`NpFloat`]: `float32` when all are, else `float64`.
#[derive(Clone, Debug, PartialEq)]
pub enum NpArray {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

impl NpArray {
    pub fn from_scalars(xs: &[NpFloat]) -> Self {
        if !xs.is_empty() && xs.iter().all(|x| x.is_f32()) {
            Self::F32(xs.iter().map(|x| x.value() as f32).collect())
        } else {
            Self::F64(xs.iter().map(|x| x.value()).collect())
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::F64(v) => v.len(),
            Self::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> NpFloat {
        match self {
            Self::F64(v) => NpFloat::Py(v[i]),
            Self::F32(v) => NpFloat::F32(v[i]),
        }
    }

    /// `np.sort` (no NaNs here).
    pub fn sorted(&self) -> Self {
        match self {
            Self::F64(v) => {
                let mut v = v.clone();
                v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
                Self::F64(v)
            }
            Self::F32(v) => {
                let mut v = v.clone();
                v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(Ordering::Equal));
                Self::F32(v)
            }
        }
    }

    /// `ndarray.mean()`: the pairwise sum in the array's type, divided by the count as float64
    /// and cast back.
    pub fn mean(&self) -> NpFloat {
        match self {
            Self::F64(v) => NpFloat::Py(add_reduce(v) / v.len() as f64),
            Self::F32(v) => NpFloat::F32((add_reduce(v) as f64 / v.len() as f64) as f32),
        }
    }

    /// Elementwise `self - other` (same lengths), with NumPy's promotion.
    pub fn sub(&self, other: &Self) -> Self {
        match (self, other) {
            (Self::F32(a), Self::F32(b)) => Self::F32(a.iter().zip(b).map(|(x, y)| x - y).collect()),
            _ => Self::F64((0..self.len()).map(|i| self.get(i).value() - other.get(i).value()).collect()),
        }
    }

    /// `self - scalar`, the scalar a NumPy scalar of the array's kind or a Python float.
    pub fn sub_scalar(&self, s: NpFloat) -> Self {
        match self {
            Self::F32(a) => Self::F32(a.iter().map(|&x| x - s.value() as f32).collect()),
            Self::F64(a) => Self::F64(a.iter().map(|&x| x - s.value()).collect()),
        }
    }

    pub fn abs(&self) -> Self {
        match self {
            Self::F32(a) => Self::F32(a.iter().map(|x| x.abs()).collect()),
            Self::F64(a) => Self::F64(a.iter().map(|x| x.abs()).collect()),
        }
    }

    /// `np.sum(self > x)` for a Python float `x` (cast to `float32` for a `float32` array).
    pub fn count_greater(&self, x: f64) -> usize {
        match self {
            Self::F32(a) => a.iter().filter(|&&v| v > x as f32).count(),
            Self::F64(a) => a.iter().filter(|&&v| v > x).count(),
        }
    }
}

/// A float type NumPy sums pairwise.
pub trait PairwiseFloat: Copy + std::ops::Add<Output = Self> {
    const ZERO: Self;
}

impl PairwiseFloat for f32 {
    const ZERO: Self = 0.0;
}

impl PairwiseFloat for f64 {
    const ZERO: Self = 0.0;
}

const PW_BLOCKSIZE: usize = 128;
const BUFSIZE: usize = 8192;

/// NumPy's `pairwise_sum` (numpy/_core/src/umath/loops_utils.h.src).
pub fn pairwise_sum<T: PairwiseFloat>(a: &[T]) -> T {
    let n = a.len();
    if n < 8 {
        let mut res = T::ZERO;
        for &x in a {
            res = res + x;
        }
        res
    } else if n <= PW_BLOCKSIZE {
        let mut r = [T::ZERO; 8];
        r.copy_from_slice(&a[..8]);
        let mut i = 8;
        while i < n - (n % 8) {
            for j in 0..8 {
                r[j] = r[j] + a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &a[i..] {
            res = res + x;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `np.add.reduce` of a contiguous 1-D array: pairwise within each buffer of 8192 items.
pub fn add_reduce<T: PairwiseFloat>(a: &[T]) -> T {
    let mut total = T::ZERO;
    for chunk in a.chunks(BUFSIZE) {
        total = total + pairwise_sum(chunk);
    }
    total
}

/// An exact sum of non-negative doubles, as an integer count of 2**-1074.
struct ExactSum {
    limbs: Vec<u64>,
}

const LIMBS: usize = 36;

impl ExactSum {
    fn new() -> Self {
        Self { limbs: vec![0; LIMBS] }
    }

    fn add(&mut self, x: f64) {
        let bits = x.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as usize;
        let frac = bits & ((1 << 52) - 1);
        let (mant, shift) = if exp == 0 { (frac, 0) } else { (frac | 1 << 52, exp - 1) };
        let (limb, off) = (shift / 64, shift % 64);
        let wide = (mant as u128) << off;
        let mut carry = 0u128;
        for (k, part) in [wide as u64, (wide >> 64) as u64].into_iter().enumerate() {
            let s = self.limbs[limb + k] as u128 + part as u128 + carry;
            self.limbs[limb + k] = s as u64;
            carry = s >> 64;
        }
        let mut k = limb + 2;
        while carry > 0 {
            let s = self.limbs[k] as u128 + carry;
            self.limbs[k] = s as u64;
            carry = s >> 64;
            k += 1;
        }
    }

    /// `self / n` (times 2**-1074), correctly rounded to a double, half to even.
    fn div_round(&self, n: u64) -> f64 {
        // (self << 128) / n, with a sticky remainder
        let mut num = vec![0u64; 2];
        num.extend_from_slice(&self.limbs);
        let mut q = vec![0u64; num.len()];
        let mut rem = 0u128;
        for k in (0..num.len()).rev() {
            let cur = (rem << 64) | num[k] as u128;
            q[k] = (cur / n as u128) as u64;
            rem = cur % n as u128;
        }
        let Some(top) = q.iter().rposition(|&l| l != 0) else { return 0.0 };
        let bitlen = top * 64 + 64 - q[top].leading_zeros() as usize;
        // value = q * 2**(-1074 - 128); keep 53 bits (fewer for subnormals)
        let lsb_exp = (bitlen as i64 - 53 - 1202).max(-1074);
        let drop = (lsb_exp + 1202) as usize;
        let bit = |i: usize| (q[i / 64] >> (i % 64)) & 1;
        let mut mant = 0u64;
        for i in (drop..bitlen).rev() {
            mant = (mant << 1) | bit(i);
        }
        if drop > 0 {
            let half = bit(drop - 1) == 1;
            let sticky = rem != 0 || (0..drop - 1).any(|i| bit(i) == 1);
            if half && (sticky || mant & 1 == 1) {
                mant += 1;
            }
        }
        // mant < 2**54 and lsb_exp >= -1074: two exact scalings by powers of two
        let pow2 = |e: i64| f64::from_bits(((e + 1023) as u64) << 52);
        if lsb_exp < -1000 {
            mant as f64 * pow2(lsb_exp + 200) * pow2(-200)
        } else {
            mant as f64 * pow2(lsb_exp)
        }
    }
}

/// Python's `statistics.mean` of Python floats (or of `np.float32`s, the mean then cast to
/// `float32` through a double): the exact mean, rounded once.
pub fn statistics_mean(xs: &[NpFloat]) -> NpFloat {
    let mut sum = ExactSum::new();
    for x in xs {
        sum.add(x.value());
    }
    let m = sum.div_round(xs.len() as u64);
    if xs.iter().all(|x| x.is_f32()) {
        NpFloat::F32(m as f32)
    } else {
        NpFloat::Py(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_mean() {
        let xs: Vec<NpFloat> = [0.1, 0.2, 0.3].iter().map(|&x| NpFloat::Py(x)).collect();
        // statistics.mean([0.1, 0.2, 0.3]) == 0.2 while sum(...)/3 == 0.20000000000000004
        assert_eq!(statistics_mean(&xs).value(), 0.2);
        let ys: Vec<NpFloat> = [1e-300, 3.0, 5e-324].iter().map(|&x| NpFloat::Py(x)).collect();
        assert_eq!(statistics_mean(&ys).value(), 1.0);
        assert_eq!(statistics_mean(&[NpFloat::Py(5e-324), NpFloat::Py(0.0)]).value(), 0.0);
        assert_eq!(statistics_mean(&[NpFloat::Py(5e-324), NpFloat::Py(5e-324)]).value(), 5e-324);
        assert_eq!(statistics_mean(&[NpFloat::Py(1e308), NpFloat::Py(1e308)]).value(), 1e308);
    }

    #[test]
    fn pairwise_like_numpy() {
        // a = ((np.arange(1, 1001) * 0.61803398875) % 1 * 100); numpy 2.4.6 gives
        // np.add.reduce(a.astype(np.float32)).view(np.uint32) == 1195594019 (a sequential sum
        // gives ...018), a.astype(np.float32).mean().view(np.uint32) == 1112015146 and
        // a.mean().view(np.uint64) == 4632233851736994251
        let a: Vec<f64> = (1..=1000).map(|i| (i as f64 * 0.61803398875) % 1.0 * 100.0).collect();
        let a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
        assert_eq!(add_reduce(&a32).to_bits(), 1195594019);
        assert_eq!(NpArray::F32(a32).mean(), NpFloat::F32(f32::from_bits(1112015146)));
        assert_eq!(NpArray::F64(a).mean(), NpFloat::Py(f64::from_bits(4632233851736994251)));
    }
}
