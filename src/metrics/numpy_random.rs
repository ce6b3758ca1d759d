//! NumPy 2's `np.random.default_rng(seed)` as far as sacreBLEU's resampling draws from it:
//! `SeedSequence` (numpy/random/bit_generator.pyx), `PCG64` (XSL-RR 128/64, numpy/random/src/pcg64)
//! and `Generator.choice(n, size, replace=True)` (`random_bounded_uint64_fill` with Lemire's
//! bounded 32-bit method, numpy/random/src/distributions/distributions.c). Bit for bit.

const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL_SIZE: usize = 4;

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut value = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    value = value.wrapping_mul(*hash_const);
    value ^ (value >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let result = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    result ^ (result >> XSHIFT)
}

/// `np.random.SeedSequence(entropy)` (no spawn key), its pool mixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

impl SeedSequence {
    /// `SeedSequence(n)` for a non-negative integer given as its 32-bit words, least significant
    /// first (`_int_to_uint32_array`: `[0]` for zero).
    pub fn from_words(entropy: &[u32]) -> Self {
        let entropy: &[u32] = if entropy.is_empty() { &[0] } else { entropy };
        let mut pool = [0u32; POOL_SIZE];
        let mut hash_const = INIT_A;
        for (i, slot) in pool.iter_mut().enumerate() {
            *slot = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hash_const);
        }
        for i_src in 0..POOL_SIZE {
            for i_dst in 0..POOL_SIZE {
                if i_src != i_dst {
                    pool[i_dst] = mix(pool[i_dst], hashmix(pool[i_src], &mut hash_const));
                }
            }
        }
        for &word in entropy.iter().skip(POOL_SIZE) {
            for slot in pool.iter_mut() {
                *slot = mix(*slot, hashmix(word, &mut hash_const));
            }
        }
        Self { pool }
    }

    pub fn new(seed: u128) -> Self {
        let mut words = Vec::new();
        let mut n = seed;
        while n > 0 {
            words.push(n as u32);
            n >>= 32;
        }
        Self::from_words(&words)
    }

    /// `generate_state(n_words, np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hash_const = INIT_B;
        (0..n_words)
            .map(|i| {
                let mut v = self.pool[i % POOL_SIZE] ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                v = v.wrapping_mul(hash_const);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n_words, np.uint64)`: pairs of 32-bit words, low word first.
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n_words).chunks_exact(2).map(|w| w[0] as u64 | (w[1] as u64) << 32).collect()
    }
}

const PCG_DEFAULT_MULTIPLIER_128: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// NumPy's `PCG64` bit generator, with its buffered 32-bit half.
#[derive(Clone, Debug)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    uinteger: Option<u32>,
}

impl Pcg64 {
    /// `PCG64(seed_seq)`: `pcg64_set_seed` on `generate_state(4, np.uint64)`.
    pub fn from_seed_sequence(seq: &SeedSequence) -> Self {
        let v = seq.generate_state_u64(4);
        let initstate = (v[0] as u128) << 64 | v[1] as u128;
        let initseq = (v[2] as u128) << 64 | v[3] as u128;
        let mut rng = Self { state: 0, inc: (initseq << 1) | 1, uinteger: None };
        rng.step();
        rng.state = rng.state.wrapping_add(initstate);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_DEFAULT_MULTIPLIER_128).wrapping_add(self.inc);
    }

    /// `next_uint64` (`random_raw`).
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let s = self.state;
        (((s >> 64) as u64) ^ (s as u64)).rotate_right((s >> 122) as u32)
    }

    /// `next_uint32`: the low half of a 64-bit draw, then its high half.
    pub fn next_u32(&mut self) -> u32 {
        if let Some(u) = self.uinteger.take() {
            return u;
        }
        let next = self.next_u64();
        self.uinteger = Some((next >> 32) as u32);
        next as u32
    }
}

/// `np.random.default_rng(seed)`, as far as `choice` goes.
#[derive(Clone, Debug)]
pub struct Generator {
    pub bit_generator: Pcg64,
}

impl Generator {
    pub fn default_rng(seed: &SeedSequence) -> Self {
        Self { bit_generator: Pcg64::from_seed_sequence(seed) }
    }

    /// `buffered_bounded_lemire_uint32`: a draw in `0..=rng`.
    fn bounded_lemire_u32(&mut self, rng: u32) -> u32 {
        let rng_excl = rng.wrapping_add(1);
        let mut m = self.bit_generator.next_u32() as u64 * rng_excl as u64;
        let mut leftover = m as u32;
        if leftover < rng_excl {
            let threshold = (u32::MAX - rng) % rng_excl;
            while leftover < threshold {
                m = self.bit_generator.next_u32() as u64 * rng_excl as u64;
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }

    /// `choice(n, size=count, replace=True)` (that is `integers(0, n, count)`), for
    /// `1 <= n <= 2**32`; the draws in C order.
    pub fn choice(&mut self, n: u64, count: usize) -> Vec<u32> {
        assert!((1..=1u64 << 32).contains(&n), "choice over {n} items");
        let rng = n - 1;
        if rng == 0 {
            vec![0; count]
        } else if rng == u32::MAX as u64 {
            (0..count).map(|_| self.bit_generator.next_u32()).collect()
        } else {
            (0..count).map(|_| self.bounded_lemire_u32(rng as u32)).collect()
        }
    }
}

impl Generator {
    /// `integers(2, size=count, dtype=bool)` (`buffered_bounded_bool`): 32 draws per 32-bit
    /// word, least significant bit first.
    pub fn integers_bool(&mut self, count: usize) -> Vec<bool> {
        let (mut buf, mut bcnt) = (0u32, 0u32);
        (0..count)
            .map(|_| {
                if bcnt == 0 {
                    buf = self.bit_generator.next_u32();
                    bcnt = 31;
                } else {
                    buf >>= 1;
                    bcnt -= 1;
                }
                buf & 1 == 1
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng(seed: u128) -> Generator {
        Generator::default_rng(&SeedSequence::new(seed))
    }

    // Produced by numpy 2.4.6 (.venv/bin/python):
    //   np.random.SeedSequence(12345).generate_state(4, np.uint64)
    //   np.random.default_rng(12345).bit_generator.random_raw(4)
    //   np.random.default_rng(12345).choice(1000, size=20, replace=True)
    //   np.random.default_rng(7).choice(40, size=(2, 10), replace=True)
    //   np.random.default_rng(0).choice(3, size=12, replace=True)
    //   np.random.SeedSequence(2**70 + 5).generate_state(4, np.uint64)
    //   np.random.default_rng(2**70 + 5).choice(100, size=8, replace=True)
    #[test]
    fn seed_sequence_like_numpy() {
        assert_eq!(
            SeedSequence::new(12345).generate_state_u64(4),
            [13091511679009522556, 13538552136045918767, 7269824232120749972, 4520223790601600371]
        );
        assert_eq!(
            SeedSequence::new((1 << 70) + 5).generate_state_u64(4),
            [726263078096862806, 7809400558599790184, 11174137857383931066, 8975618194489585486]
        );
    }

    #[test]
    fn pcg64_raw_like_numpy() {
        let mut g = rng(12345);
        let raw: Vec<u64> = (0..4).map(|_| g.bit_generator.next_u64()).collect();
        assert_eq!(raw, [4193609425186963869, 5843160025838961886, 14708796524633321433, 12474696839993944336]);
    }

    #[test]
    fn choice_like_numpy() {
        assert_eq!(
            rng(12345).choice(1000, 20),
            [699, 227, 788, 316, 204, 797, 642, 676, 988, 391, 839, 332, 567, 598, 213, 186, 229, 672, 613, 941]
        );
        assert_eq!(
            rng(7).choice(40, 20),
            [37, 25, 27, 35, 23, 31, 33, 9, 2, 12, 11, 34, 36, 0, 19, 32, 5, 31, 4, 18]
        );
        assert_eq!(rng(0).choice(3, 12), [2, 1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 2]);
        assert_eq!(rng((1 << 70) + 5).choice(100, 8), [43, 19, 44, 27, 29, 59, 95, 15]);
        assert_eq!(rng(5).choice(1, 3), [0, 0, 0]);
    }

    // np.random.default_rng(7).integers(2, size=70, dtype=bool).astype(int)
    #[test]
    fn bools_like_numpy() {
        let want = "1101000101010010101001111000111110010101100000100110000000000101101010";
        let got: String = rng(7).integers_bool(70).iter().map(|&b| if b { '1' } else { '0' }).collect();
        assert_eq!(got, want);
    }
}
