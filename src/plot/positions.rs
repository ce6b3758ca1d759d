//! The positional-embedding table as the model adds it to the token embeddings.

use tch::{Kind, Tensor};

use super::PlotError;
use crate::model::{PositionalEmbedding, TransformerModel};

/// Encoder or decoder table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Encoder,
    Decoder,
}

/// Rows `0..length` of the positions a sequence of `length` tokens gets (fairseq numbers them
/// from `padding_idx + 1`), `[length][embed_dim]`, computed by the model's own
/// `embed_positions` (sinusoidal: as fairseq computes it; learned: the trained rows). Also
/// says whether the table is learned.
pub fn positional_table(model: &TransformerModel, side: Side, length: usize) -> Result<(Vec<Vec<f32>>, bool), PlotError> {
    let _guard = tch::no_grad_guard();
    let embed = match side {
        Side::Encoder => model.encoder.embedding.embed_positions.as_ref(),
        Side::Decoder => model.decoder.embedding.embed_positions.as_ref(),
    };
    let Some(embed) = embed else {
        return Err(PlotError::Input("the model has no positional embeddings (no_token_positional_embeddings)".into()));
    };
    if length == 0 {
        return Err(PlotError::Input("the length must be at least 1".into()));
    }
    let max = embed.max_positions();
    if length > max {
        return Err(PlotError::Input(format!("length {length} exceeds the model's {max} positions")));
    }
    let length = i64::try_from(length).map_err(|_| PlotError::Input("the length is too large".into()))?;
    // any non-pad token: positions only depend on where the padding is
    let tokens = Tensor::f_full([1, length], crate::model::PADDING_IDX + 1, (Kind::Int64, model.device))?;
    let table = embed.forward(&tokens, false)?.f_select(0, 0)?;
    let table = table.f_to_kind(Kind::Float)?.f_to_device(tch::Device::Cpu)?.f_contiguous()?;
    Ok((Vec::<Vec<f32>>::try_from(table)?, matches!(embed, PositionalEmbedding::Learned(_))))
}
