//! fairseq's `SinusoidalPositionalEmbedding.get_embedding`: the position table a model computes
//! rather than learns. It sits beneath both `model/`, which computes positions with it, and
//! `checkpoint/`, which tells a stored copy of it (CTranslate2's) from a learned table.

use tch::{Device, Kind, Tensor};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinusoidError {
    #[error("sinusoidal positions need an embedding dim of at least 4, not {0}")]
    TooNarrow(i64),
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
}
