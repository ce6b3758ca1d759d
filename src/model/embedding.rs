//! Token and positional embeddings (`nn.Embedding`, `SinusoidalPositionalEmbedding`,
//! `LearnedPositionalEmbedding`) and `utils.make_positions`.

use tch::{Device, Kind, Tensor};

use std::sync::Arc;

use crate::kernels::gemm::PackedWeight;
use crate::kernels::gemm_i8::PackedInt8;
use super::nn::{LayerNorm, Linear};
use super::options::EncDecOptions;
use super::weights::Weights;
use super::{ModelError, PADDING_IDX};

/// `nn.Embedding` with a padding index: `F.embedding(ids, weight, padding_idx)`, or rows of a
/// `SharedTable` in place of libtorch's table.
#[derive(Debug)]
pub struct Embedding {
    pub weight: Tensor,
    pub padding_idx: i64,
    rows: i64,
    dim: i64,
    packed: Option<SharedTable>,
}

/// Where an embedding looks its rows up once libtorch's table is let go of: the packed or
/// quantized copy of the output projection it is tied to (one copy of the table), or, in int8,
/// a quantized copy of its own.
#[derive(Debug, Clone)]
pub enum SharedTable {
    /// Panels in float32 or bfloat16: the table's own values (bfloat16's were rounded first).
    Packed(Arc<PackedWeight>),
    /// int8 columns with their scales: the table quantized per row, as CTranslate2's int8
    /// embeddings are.
    Int8(Arc<PackedInt8>),
}

impl SharedTable {
    fn shape(&self) -> (usize, usize) {
        match self {
            Self::Packed(p) => (p.out_features(), p.in_features()),
            Self::Int8(q) => (q.out_features(), q.in_features()),
        }
    }

    fn row_into(&self, id: usize, out: &mut [f32]) {
        match self {
            Self::Packed(p) => p.row_into(id, out),
            Self::Int8(q) => q.row_into(id, out),
        }
    }
}

impl Embedding {
    /// Any number of rows; `embedding_dim` columns.
    pub fn load(w: &Weights, embedding_dim: i64, padding_idx: i64) -> Result<Self, ModelError> {
        let weight = w.get("weight", &[-1, embedding_dim])?;
        let (rows, dim) = weight.size2()?;
        Ok(Self { weight, padding_idx, rows, dim, packed: None })
    }

    pub fn num_embeddings(&self) -> i64 {
        self.rows
    }

    pub fn embedding_dim(&self) -> i64 {
        self.dim
    }

    /// Looks rows up in `packed` (a packed or quantized copy of this very table) and lets go of
    /// the libtorch table.
    pub fn share_packed(&mut self, packed: SharedTable) -> Result<(), ModelError> {
        if packed.shape() != (self.rows as usize, self.dim as usize) {
            return Err(ModelError::Input("an embedding table shared with a projection of another shape".into()));
        }
        self.packed = Some(packed);
        self.weight = Tensor::new();
        Ok(())
    }

    /// Row `id` into `out` (`embedding_dim` floats), from the table or the panels it shares, as
    /// [`Embedding::forward`] looks it up; false (nothing written) when `id` is outside the
    /// table or the table is not a float32 CPU matrix.
    pub fn row_into(&self, id: i64, out: &mut [f32]) -> bool {
        let dim = self.dim as usize;
        if !(0..self.rows).contains(&id) || out.len() != dim {
            return false;
        }
        if let Some(packed) = &self.packed {
            packed.row_into(id as usize, out);
            return true;
        }
        // SAFETY: nothing writes the table while the model runs.
        match unsafe { crate::libtorch::host::f32_view(&self.weight) } {
            Some(table) if table.len() == self.rows as usize * dim => {
                out.copy_from_slice(&table[id as usize * dim..][..dim]);
                true
            }
            _ => false,
        }
    }

    pub fn forward(&self, ids: &Tensor) -> Result<Tensor, ModelError> {
        let rows = self.num_embeddings();
        // libtorch checks the range too, but with an unhelpful message
        if ids.numel() > 0 {
            let (min, max) = (ids.f_min()?.f_int64_value(&[])?, ids.f_max()?.f_int64_value(&[])?);
            if min < 0 || max >= rows {
                return Err(ModelError::Input(format!(
                    "token id {} is outside the embedding table of {rows} rows",
                    if min < 0 { min } else { max }
                )));
            }
        }
        match &self.packed {
            Some(packed) => {
                let ids_host = Vec::<i64>::try_from(ids.f_flatten(0, -1)?.f_to_device(Device::Cpu)?)?;
                let mut size = ids.size();
                size.push(self.dim);
                let mut out = Tensor::f_empty(size.as_slice(), (Kind::Float, Device::Cpu))?;
                // SAFETY: `out` is new and not shared.
                if let Some(data) = unsafe { crate::libtorch::host::f32_view_mut(&mut out) } {
                    for (row, &id) in data.chunks_mut(self.dim.max(1) as usize).zip(&ids_host) {
                        packed.row_into(id as usize, row);
                    }
                }
                Ok(out)
            }
            None => Ok(Tensor::f_embedding(&self.weight, ids, self.padding_idx, false, false)?),
        }
    }
}

/// `utils.make_positions`: non-pad tokens get `padding_idx + 1, + 2, …` counted from the first
/// non-pad token of the row, pads get `padding_idx`; right for left- and right-padded rows.
pub fn make_positions(tokens: &Tensor, padding_idx: i64) -> Result<Tensor, ModelError> {
    let mask = tokens.f_ne(padding_idx)?.f_to_kind(Kind::Int)?;
    let positions = mask.f_cumsum(1, None::<Kind>)?.f_to_kind(Kind::Int)?.f_mul(&mask)?;
    Ok(positions.f_to_kind(Kind::Int64)?.f_add_scalar(padding_idx)?)
}

/// Sinusoidal positions: a table fairseq builds in f32 on the CPU and casts to the model
/// dtype/device; positions past the table rebuild it at the needed size (rows do not depend
/// on the table size).
#[derive(Debug)]
pub struct SinusoidalPositionalEmbedding {
    pub embedding_dim: i64,
    pub padding_idx: i64,
    pub weights: Tensor,
    kind: Kind,
    device: Device,
}

impl SinusoidalPositionalEmbedding {
    /// `max_positions` is fairseq's `SinusoidalPositionalEmbedding.max_positions`.
    pub const MAX_POSITIONS: usize = 100_000;

    /// `init_size = max_source/target_positions + padding_idx + 1`, as `PositionalEmbedding`
    /// builds it. Consumes the `_float_tensor` buffer old checkpoints carry.
    pub fn load(w: &Weights, num_embeddings: i64, embedding_dim: i64, padding_idx: i64) -> Result<Self, ModelError> {
        w.consume("_float_tensor");
        let (kind, device) = (w.kind(), w.device());
        let weights = Self::get_embedding(num_embeddings + padding_idx + 1, embedding_dim, padding_idx)?
            .f_to_device(device)?
            .f_to_kind(kind)?;
        Ok(Self { embedding_dim, padding_idx, weights, kind, device })
    }

    /// `SinusoidalPositionalEmbedding.get_embedding` ([`crate::config::sinusoid`]).
    pub fn get_embedding(num_embeddings: i64, embedding_dim: i64, padding_idx: i64) -> Result<Tensor, ModelError> {
        crate::config::sinusoid::get_embedding(num_embeddings, embedding_dim, padding_idx).map_err(|e| match e {
            crate::config::sinusoid::SinusoidError::Torch(e) => ModelError::Torch(e),
            e => ModelError::Sinusoid(e),
        })
    }

    fn table(&self, seq_len: i64) -> Result<Tensor, ModelError> {
        let max_pos = self.padding_idx + 1 + seq_len;
        if max_pos > self.weights.size()[0] {
            let table = Self::get_embedding(max_pos, self.embedding_dim, self.padding_idx)?;
            Ok(table.f_to_device(self.device)?.f_to_kind(self.kind)?)
        } else {
            Ok(self.weights.shallow_clone())
        }
    }

    /// `[B, L]` tokens -> `[B, L, C]`; incremental: `[B, 1, C]` for position `L`.
    pub fn forward(&self, input: &Tensor, incremental: bool) -> Result<Tensor, ModelError> {
        let (bsz, seq_len) = input.size2()?;
        let weights = self.table(seq_len)?;
        if incremental {
            return Ok(weights.f_select(0, self.padding_idx + seq_len)?.f_expand([bsz, 1, -1], false)?);
        }
        let positions = make_positions(input, self.padding_idx)?;
        Ok(weights.f_index_select(0, &positions.f_view([-1])?)?.f_view([bsz, seq_len, -1])?)
    }
}

/// Learned positions: an `nn.Embedding` of `max_positions + padding_idx + 1` rows.
#[derive(Debug)]
pub struct LearnedPositionalEmbedding {
    pub embedding: Embedding,
}

impl LearnedPositionalEmbedding {
    pub fn load(w: &Weights, num_embeddings: i64, embedding_dim: i64, padding_idx: i64) -> Result<Self, ModelError> {
        let weight = w.get("weight", &[num_embeddings + padding_idx + 1, embedding_dim])?;
        let (rows, dim) = weight.size2()?;
        Ok(Self { embedding: Embedding { weight, padding_idx, rows, dim, packed: None } })
    }

    pub fn max_positions(&self) -> i64 {
        self.embedding.num_embeddings() - self.embedding.padding_idx - 1
    }

    pub fn forward(&self, input: &Tensor, incremental: bool) -> Result<Tensor, ModelError> {
        let positions = if incremental {
            let (_, len) = input.size2()?;
            Tensor::f_full([1, 1], self.embedding.padding_idx + len, (input.kind(), input.device()))?
        } else {
            make_positions(input, self.embedding.padding_idx)?
        };
        self.embedding.forward(&positions).map_err(|e| match e {
            ModelError::Input(_) => ModelError::Input(format!(
                "a sequence is longer than the {} learned positions",
                self.max_positions()
            )),
            other => other,
        })
    }
}

/// `PositionalEmbedding(...)`: learned or sinusoidal.
#[derive(Debug)]
pub enum PositionalEmbedding {
    Sinusoidal(SinusoidalPositionalEmbedding),
    Learned(LearnedPositionalEmbedding),
}

impl PositionalEmbedding {
    pub fn load(w: &Weights, learned: bool, num_embeddings: i64, embedding_dim: i64, padding_idx: i64) -> Result<Self, ModelError> {
        Ok(if learned {
            Self::Learned(LearnedPositionalEmbedding::load(w, num_embeddings, embedding_dim, padding_idx)?)
        } else {
            Self::Sinusoidal(SinusoidalPositionalEmbedding::load(w, num_embeddings, embedding_dim, padding_idx)?)
        })
    }

    /// fairseq's `embed_positions.max_positions`.
    pub fn max_positions(&self) -> usize {
        match self {
            Self::Sinusoidal(_) => SinusoidalPositionalEmbedding::MAX_POSITIONS,
            Self::Learned(l) => usize::try_from(l.max_positions()).unwrap_or(0),
        }
    }

    /// The row an incremental step at `prefix_len` tokens adds for every sentence (position
    /// `padding_idx + prefix_len`), as [`PositionalEmbedding::forward`] takes it; None where
    /// the table does not hold it as a float32 CPU matrix (`forward` then grows the table or
    /// reports the error).
    pub fn incremental_row(&self, prefix_len: usize) -> Option<&[f32]> {
        let (table, padding_idx) = match self {
            Self::Sinusoidal(s) => (&s.weights, s.padding_idx),
            Self::Learned(l) => (&l.embedding.weight, l.embedding.padding_idx),
        };
        let (rows, dim) = table.size2().ok()?;
        let at = padding_idx.checked_add(i64::try_from(prefix_len).ok()?)?;
        if !(0..rows).contains(&at) {
            return None;
        }
        // SAFETY: nothing writes the table while the model runs.
        let data = unsafe { crate::libtorch::host::f32_view(table) }?;
        data.get(at as usize * dim as usize..(at as usize + 1) * dim as usize)
    }

    pub fn forward(&self, input: &Tensor, incremental: bool) -> Result<Tensor, ModelError> {
        match self {
            Self::Sinusoidal(s) => s.forward(input, incremental),
            Self::Learned(l) => l.forward(input, incremental),
        }
    }
}

/// What `TransformerEncoderBase.forward_embedding` and the start of
/// `TransformerDecoderBase.extract_features_scriptable` compute alike: `embed_scale *
/// embed_tokens(tokens)`, then `project_in_dim` (decoder only, when the table is narrower than
/// the decoder), `+ embed_positions` and `layernorm_embedding` (dropout is off at inference).
#[derive(Debug)]
pub struct EmbeddingFrontEnd {
    pub embed_tokens: Embedding,
    pub embed_scale: f64,
    pub project_in_dim: Option<Linear>,
    pub embed_positions: Option<PositionalEmbedding>,
    pub layernorm_embedding: Option<LayerNorm>,
}

impl EmbeddingFrontEnd {
    /// `w` is the encoder's or decoder's weights. With `project_in`, the table may be narrower
    /// than `embed_dim` (fairseq then adds `project_in_dim`); else it must be `embed_dim` wide.
    pub(crate) fn load(w: &Weights, o: &EncDecOptions, project_in: bool) -> Result<Self, ModelError> {
        let c = o.embed_dim;
        let embed_tokens = Embedding::load(&w.sub("embed_tokens"), if project_in { -1 } else { c }, PADDING_IDX)?;
        let input_embed_dim = embed_tokens.embedding_dim();
        let project_in_dim = if input_embed_dim != c {
            Some(Linear::load(&w.sub("project_in_dim"), input_embed_dim, c, false)?)
        } else {
            None
        };
        let max_pos = i64::try_from(o.max_positions)
            .map_err(|_| ModelError::TooManyPositions(o.max_positions))?;
        let embed_positions = if o.no_token_positional_embeddings {
            None
        } else {
            Some(PositionalEmbedding::load(&w.sub("embed_positions"), o.learned_pos, max_pos, c, PADDING_IDX)?)
        };
        let layernorm_embedding =
            if o.layernorm_embedding { Some(LayerNorm::load(&w.sub("layernorm_embedding"), c)?) } else { None };
        let embed_scale = if o.no_scale_embedding { 1.0 } else { (c as f64).sqrt() };
        Ok(Self { embed_tokens, embed_scale, project_in_dim, embed_positions, layernorm_embedding })
    }

    /// The positions `input` `[B, T]` takes (only the next one when `incremental`), if any.
    pub fn positions(&self, input: &Tensor, incremental: bool) -> Result<Option<Tensor>, ModelError> {
        self.embed_positions.as_ref().map(|p| p.forward(input, incremental)).transpose()
    }

    /// `max_positions()`: the configured limit, capped by the positional table.
    pub fn max_positions(&self, configured: usize) -> usize {
        match &self.embed_positions {
            Some(p) => configured.min(p.max_positions()),
            None => configured,
        }
    }

    /// `tokens` `[B, T]` and their `positions`: (the layers' input `[B, T, C]`, the scaled token
    /// embedding, fairseq's `encoder_embedding`).
    pub fn forward(&self, tokens: &Tensor, positions: Option<&Tensor>) -> Result<(Tensor, Tensor), ModelError> {
        let embed = self.embed_tokens.forward(tokens)?.f_mul(&super::nn::python_float(self.embed_scale)?)?;
        let mut x = match &self.project_in_dim {
            Some(proj) => proj.forward(&embed)?,
            None => embed.shallow_clone(),
        };
        if let Some(p) = positions {
            x = x.f_add(p)?;
        }
        if let Some(ln) = &self.layernorm_embedding {
            x = ln.forward(&x)?;
        }
        Ok((x, embed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(rows: &[&[i64]]) -> Tensor {
        let width = rows[0].len() as i64;
        Tensor::from_slice(&rows.concat()).view([rows.len() as i64, width])
    }

    fn values(t: &Tensor) -> Vec<i64> {
        Vec::<i64>::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn make_positions_counts_from_the_first_token_on_either_padding_side() {
        let left = tokens(&[&[1, 1, 7, 8, 2], &[5, 6, 7, 8, 2]]);
        assert_eq!(values(&make_positions(&left, 1).unwrap()), [1, 1, 2, 3, 4, 2, 3, 4, 5, 6]);
        let right = tokens(&[&[7, 8, 2, 1, 1]]);
        assert_eq!(values(&make_positions(&right, 1).unwrap()), [2, 3, 4, 1, 1]);
    }

    #[test]
    fn sinusoidal_rows_do_not_depend_on_the_table_size() {
        let small = SinusoidalPositionalEmbedding::get_embedding(12, 10, 1).unwrap();
        let large = SinusoidalPositionalEmbedding::get_embedding(1030, 10, 1).unwrap();
        assert!(small.equal(&large.narrow(0, 0, 12)));
        assert_eq!(small.get(1).abs().sum(Kind::Double).double_value(&[]), 0.0, "pad row");
        // [sin | cos]: position 0 is sin 0 = 0 in the first half and cos 0 = 1 in the second
        assert_eq!(Vec::<f32>::try_from(small.get(0)).unwrap(), [0., 0., 0., 0., 0., 1., 1., 1., 1., 1.]);
        let odd = SinusoidalPositionalEmbedding::get_embedding(4, 9, 1).unwrap();
        assert_eq!(odd.size(), [4, 9]);
        assert_eq!(odd.select(1, 8).abs().sum(Kind::Double).double_value(&[]), 0.0);
        assert!(SinusoidalPositionalEmbedding::get_embedding(4, 3, 1).is_err());
    }
}

