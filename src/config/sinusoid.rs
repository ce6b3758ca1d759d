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
    let half_dim = embedding_dim / 2;
    if half_dim < 2 {
        return Err(SinusoidError::TooNarrow(embedding_dim));
    }
    let options = (Kind::Float, Device::Cpu);
    let scale = 10000f64.ln() / (half_dim - 1) as f64;
    let freq = Tensor::f_arange(half_dim, options)?.f_mul_scalar(-scale)?.f_exp()?;
    let args = Tensor::f_arange(num_embeddings, options)?.f_unsqueeze(1)?.f_mul(&freq.f_unsqueeze(0)?)?;
    let mut emb = Tensor::f_cat(&[args.f_sin()?, args.f_cos()?], 1)?.f_view([num_embeddings, -1])?;
    if embedding_dim % 2 == 1 {
        emb = Tensor::f_cat(&[emb, Tensor::f_zeros([num_embeddings, 1], options)?], 1)?;
    }
    if (0..num_embeddings).contains(&padding_idx) {
        let _ = emb.f_select(0, padding_idx)?.f_fill_(0.0)?;
    }
    Ok(emb)
}
