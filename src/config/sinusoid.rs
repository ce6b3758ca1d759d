//! fairseq's `SinusoidalPositionalEmbedding.get_embedding`: the position table a model computes
//! rather than learns. It sits beneath both `model/`, which computes positions with it, and
//! `checkpoint/`, which tells a stored copy of it (CTranslate2's) from a learned table.

use tch::{Device, Kind, Tensor};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinusoidError {
    #[error("sinusoidal positions need an embedding dim of at least 4, not {0}")]
    TooNarrow(i64),
    #[error("a position table is a matrix, not of shape {0:?}")]
    NotATable(Vec<i64>),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

/// `get_embedding(num_embeddings, embedding_dim, padding_idx)`, op for op (f32, CPU): the halves
/// are concatenated `[sin | cos]`, frequencies use `half_dim - 1` in the denominator, an odd
/// dimension gets a zero column, and the padding row is zero.
pub fn get_embedding(num_embeddings: i64, embedding_dim: i64, padding_idx: i64) -> Result<Tensor, SinusoidError> {
    let args = arguments(num_embeddings, embedding_dim)?;
    let mut emb = Tensor::f_cat(&[args.f_sin()?, args.f_cos()?], 1)?.f_view([num_embeddings, -1])?;
    if embedding_dim % 2 == 1 {
        emb = Tensor::f_cat(&[emb, Tensor::f_zeros([num_embeddings, 1], OPTIONS)?], 1)?;
    }
    if (0..num_embeddings).contains(&padding_idx) {
        let _ = emb.f_select(0, padding_idx)?.f_fill_(0.0)?;
    }
    Ok(emb)
}

/// How far each entry of [`get_embedding`]'s table may move on another CPU through its
/// argument alone (sin and cos of one argument differ far less): libtorch's `exp` is MKL's,
/// whose last bit differs between CPUs, so a frequency may round to a neighbouring float and
/// move its arguments by up to 2^-23 of themselves, and each side rounds an argument once more.
/// sin and cos change by at most what their argument does. `2^-21 |argument|` bounds it, with
/// room.
pub fn argument_rounding(num_embeddings: i64, embedding_dim: i64) -> Result<Tensor, SinusoidError> {
    let args = arguments(num_embeddings, embedding_dim)?.f_abs()?.f_mul_scalar(2f64.powi(-21))?;
    let mut bound = Tensor::f_cat(&[&args, &args], 1)?;
    if embedding_dim % 2 == 1 {
        bound = Tensor::f_cat(&[bound, Tensor::f_zeros([num_embeddings, 1], OPTIONS)?], 1)?;
    }
    Ok(bound)
}

const OPTIONS: (Kind, Device) = (Kind::Float, Device::Cpu);

/// How a 16-bit float rounds what it stores: half a unit in its last place, relative (`u`), and
/// half its smallest subnormal step below the normal numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SixteenBit {
    pub kind: Kind,
    pub u: f64,
    pub subnormal: f64,
}

/// bfloat16 before float16: every bfloat16 sinusoid is a float16 as well.
fn sixteen_bit() -> [SixteenBit; 2] {
    [
        SixteenBit { kind: Kind::BFloat16, u: 2f64.powi(-8), subnormal: 2f64.powi(-134) },
        SixteenBit { kind: Kind::Half, u: 2f64.powi(-11), subnormal: 2f64.powi(-25) },
    ]
}

/// A table stored as positions `first ..` of fairseq's sinusoids (a conversion's copy of them),
/// beside [`get_embedding`]'s rows for the same positions, from the one after `padding_idx` on
/// (the padding row and those before it are not compared).
#[derive(Debug)]
pub struct StoredTable {
    /// `get_embedding`'s rows, on this CPU.
    pub fairseq: Tensor,
    /// `|fairseq - stored|`, entry by entry.
    pub abs_diff: Tensor,
    /// [`argument_rounding`] of each entry: what the CPU that made the table may have moved it by.
    pub argument_rounding: Tensor,
    /// The 16-bit float every stored entry is, where one is: the table is the sinusoids rounded to it.
    pub stored_as: Option<SixteenBit>,
}

impl StoredTable {
    /// `table` `[rows, dim]`, f32.
    pub fn compare(table: &Tensor, first: i64, padding_idx: i64) -> Result<Self, SinusoidError> {
        let (rows, dim) = match table.size().as_slice() {
            &[rows, dim] => (rows, dim),
            _ => return Err(SinusoidError::NotATable(table.size())),
        };
        let from = (padding_idx + 1 - first).clamp(0, rows);
        let ours = |t: Tensor| t.f_narrow(0, first + from, rows - from);
        let fairseq = ours(get_embedding(first + rows, dim, padding_idx)?)?;
        let argument_rounding = ours(argument_rounding(first + rows, dim)?)?;
        let table = table.f_narrow(0, from, rows - from)?;
        let abs_diff = fairseq.f_sub(&table)?.f_abs()?;
        let mut stored_as = None;
        for sixteen in sixteen_bit() {
            if table.numel() > 0 && table.f_to_kind(sixteen.kind)?.f_to_kind(Kind::Float)?.f_equal(&table)? {
                stored_as = Some(sixteen);
                break;
            }
        }
        Ok(Self { fairseq, abs_diff, argument_rounding, stored_as })
    }

    /// `abs_diff` less the argument rounding, clamped at 0.
    pub fn beyond_arguments(&self) -> Result<Tensor, tch::TchError> {
        self.abs_diff.f_sub(&self.argument_rounding)?.f_clamp_min(0.0)
    }

    /// [`Self::beyond_arguments`] less the 16-bit rounding of each entry where the table was
    /// stored so, clamped at 0: what the table differs by beyond what a conversion of fairseq's
    /// sinusoids may.
    pub fn excess(&self) -> Result<Tensor, SinusoidError> {
        let mut excess = self.beyond_arguments()?;
        if let Some(s) = self.stored_as {
            let rounding = self.fairseq.f_abs()?.f_mul_scalar(s.u)?.f_add_scalar(s.subnormal)?;
            excess = excess.f_sub(&rounding)?.f_clamp_min(0.0)?;
        }
        Ok(excess)
    }
}

/// Position `p`'s arguments, `p · e^(-i ln(10000) / (half_dim - 1))`, `[num_embeddings, half_dim]`.
fn arguments(num_embeddings: i64, embedding_dim: i64) -> Result<Tensor, SinusoidError> {
    let half_dim = embedding_dim / 2;
    if half_dim < 2 {
        return Err(SinusoidError::TooNarrow(embedding_dim));
    }
    let scale = 10000f64.ln() / (half_dim - 1) as f64;
    let freq = Tensor::f_arange(half_dim, OPTIONS)?.f_mul_scalar(-scale)?.f_exp()?;
    Ok(Tensor::f_arange(num_embeddings, OPTIONS)?.f_unsqueeze(1)?.f_mul(&freq.f_unsqueeze(0)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table made where `exp` rounds every frequency to the next float up stays within
    /// [`argument_rounding`] (and float32's own rounding of sin and cos) of this CPU's.
    #[test]
    fn another_cpu_s_frequencies_stay_within_the_argument_rounding() {
        let (rows, dim) = (1026, 64);
        let ours = get_embedding(rows, dim, -1).unwrap();
        let scale = 10000f64.ln() / (dim / 2 - 1) as f64;
        let freq = Tensor::f_arange(dim / 2, OPTIONS).unwrap().f_mul_scalar(-scale).unwrap().f_exp().unwrap();
        let up = freq.nextafter(&Tensor::full([dim / 2], 1e9, OPTIONS));
        let args = Tensor::arange(rows, OPTIONS).unsqueeze(1) * up.unsqueeze(0);
        let theirs = Tensor::cat(&[args.sin(), args.cos()], 1);
        let diff = (&ours - &theirs).abs();
        assert!(diff.max().double_value(&[]) > 1e-5, "the frequencies' last bit moves the far positions");
        let beyond = (diff - argument_rounding(rows, dim).unwrap()).max().double_value(&[]);
        assert!(beyond <= 2.4e-7, "{beyond}");
        // an odd width's zero column has nothing to allow for
        let odd = argument_rounding(5, 9).unwrap();
        assert_eq!(odd.size(), [5, 9]);
        assert_eq!(odd.select(1, 8).abs().sum(Kind::Float).double_value(&[]), 0.0);
    }

    /// A stored table is compared from the position after the padding row on, and a 16-bit one
    /// is taken as the float it fits first: bfloat16 before float16, as every bfloat16 sinusoid
    /// is a float16 too.
    #[test]
    fn stored_tables_are_fairseq_s_rows_within_their_rounding() {
        let (rows, dim, pad) = (300, 32, 1);
        let full = get_embedding(rows, dim, pad).unwrap();
        let exact = StoredTable::compare(&full.narrow(0, pad + 1, rows - pad - 1), pad + 1, pad).unwrap();
        assert_eq!((exact.stored_as, exact.excess().unwrap().max().double_value(&[])), (None, 0.0));
        // from position 0, the padding row and the one before it are left out
        let padded = full.copy();
        let _ = padded.narrow(0, 0, pad + 1).fill_(7.0);
        let from_zero = StoredTable::compare(&padded, 0, pad).unwrap();
        assert_eq!((from_zero.fairseq.size(), from_zero.excess().unwrap().max().double_value(&[])), (vec![rows - pad - 1, dim], 0.0));
        for sixteen in sixteen_bit() {
            let rounded = full.to_kind(sixteen.kind).to_kind(Kind::Float);
            let stored = StoredTable::compare(&rounded, 0, pad).unwrap();
            assert_eq!(stored.stored_as.map(|s| s.kind), Some(sixteen.kind));
            assert_eq!(stored.excess().unwrap().max().double_value(&[]), 0.0, "{:?}", sixteen.kind);
            let unrounded = StoredTable { stored_as: None, ..stored };
            assert!(unrounded.excess().unwrap().max().double_value(&[]) > 1e-5, "{:?}'s rounding counts", sixteen.kind);
        }
        let bf16 = full.to_kind(Kind::BFloat16).to_kind(Kind::Float);
        let as_half = StoredTable { stored_as: Some(sixteen_bit()[1]), ..StoredTable::compare(&bf16, 0, pad).unwrap() };
        assert!(as_half.excess().unwrap().max().double_value(&[]) > 1e-4, "float16's rounding is too small for a bfloat16 table");
        let shifted = StoredTable::compare(&full.roll([1], [0]), 0, pad).unwrap();
        assert!(shifted.excess().unwrap().max().double_value(&[]) > 1e-2);
        assert!(matches!(StoredTable::compare(&full.flatten(0, -1), 0, pad), Err(SinusoidError::NotATable(_))));
        assert!(matches!(StoredTable::compare(&Tensor::zeros([4, 3], OPTIONS), 0, pad), Err(SinusoidError::TooNarrow(3))));
    }
}
