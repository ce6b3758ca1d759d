//! Advancing libtorch's CPU generator exactly as fairseq's model construction does.
//!
//! fairseq-interactive seeds torch once at startup (`utils.set_torch_seed(cfg.common.seed)`),
//! then *builds* each model of the ensemble (random parameter initialization, which draws from
//! the same generator) before loading the checkpoint weights over it. `--sampling` draws come
//! after that, so reproducing fairseq's samples needs the same draws first. Each initializer's
//! consumption depends only on the op (`uniform_` / `normal_`), the dtype and the number of
//! elements, so we replay the same ops on scratch tensors of the same shapes, in fairseq's
//! construction order (`TransformerModelBase.build_model`).

use indexmap::IndexMap;
use tch::{Device, Kind, Tensor};

use super::GenerateError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Init {
    Uniform,
    Normal,
}

fn shape(sd: &IndexMap<String, Tensor>, key: &str) -> Option<Vec<i64>> {
    sd.get(key).map(|t| t.size())
}

/// `nn.Linear(..)`: kaiming_uniform_ on the weight, uniform_ on the bias.
fn linear(ops: &mut Vec<(Init, Vec<i64>)>, sd: &IndexMap<String, Tensor>, prefix: &str) -> Result<(), GenerateError> {
    let w = shape(sd, &format!("{prefix}.weight"))
        .ok_or_else(|| GenerateError::MissingWeight { key: format!("{prefix}.weight") })?;
    ops.push((Init::Uniform, w));
    if let Some(b) = shape(sd, &format!("{prefix}.bias")) {
        ops.push((Init::Uniform, b));
    }
    Ok(())
}

fn mha(ops: &mut Vec<(Init, Vec<i64>)>, sd: &IndexMap<String, Tensor>, prefix: &str) -> Result<(), GenerateError> {
    for p in ["k_proj", "v_proj", "q_proj", "out_proj"] {
        linear(ops, sd, &format!("{prefix}.{p}"))?;
    }
    // reset_parameters: xavier_uniform_ on k, v, q, out weights
    for p in ["k_proj", "v_proj", "q_proj", "out_proj"] {
        let w = shape(sd, &format!("{prefix}.{p}.weight"))
            .ok_or_else(|| GenerateError::MissingWeight { key: format!("{prefix}.{p}.weight") })?;
        ops.push((Init::Uniform, w));
    }
    Ok(())
}

fn count_layers(sd: &IndexMap<String, Tensor>, prefix: &str) -> usize {
    (0..).take_while(|i| sd.contains_key(&format!("{prefix}.layers.{i}.fc1.weight"))).count()
}

/// The random initializations `TransformerModelBase.build_model` performs, in order, as
/// (op, shape); for a language model (no `encoder.*` keys), those of
/// `TransformerLanguageModel.build_model`: its embedding, then the decoder. `sd` is the model's
/// state dict (post-upgrade names).
fn init_ops(
    sd: &IndexMap<String, Tensor>,
    share_all_embeddings: bool,
    share_decoder_input_output_embed: bool,
) -> Result<Vec<(Init, Vec<i64>)>, GenerateError> {
    let mut ops = Vec::new();
    let need = |key: &str| shape(sd, key).ok_or_else(|| GenerateError::MissingWeight { key: key.to_string() });
    // Embedding(): nn.Embedding's normal_ then fairseq's normal_
    let language_model = shape(sd, "encoder.embed_tokens.weight").is_none();
    if !language_model {
        let enc_emb = need("encoder.embed_tokens.weight")?;
        ops.push((Init::Normal, enc_emb.clone()));
        ops.push((Init::Normal, enc_emb));
    }
    if !share_all_embeddings || language_model {
        let dec_emb = need("decoder.embed_tokens.weight")?;
        ops.push((Init::Normal, dec_emb.clone()));
        ops.push((Init::Normal, dec_emb));
    }
    // encoder
    if let Some(p) = shape(sd, "encoder.embed_positions.weight") {
        ops.push((Init::Normal, p.clone()));
        ops.push((Init::Normal, p));
    }
    for i in 0..count_layers(sd, "encoder") {
        mha(&mut ops, sd, &format!("encoder.layers.{i}.self_attn"))?;
        linear(&mut ops, sd, &format!("encoder.layers.{i}.fc1"))?;
        linear(&mut ops, sd, &format!("encoder.layers.{i}.fc2"))?;
    }
    // decoder
    if let Some(w) = shape(sd, "decoder.project_in_dim.weight") {
        ops.push((Init::Uniform, w.clone()));
        ops.push((Init::Uniform, w));
    }
    if let Some(p) = shape(sd, "decoder.embed_positions.weight") {
        ops.push((Init::Normal, p.clone()));
        ops.push((Init::Normal, p));
    }
    for i in 0..count_layers(sd, "decoder") {
        mha(&mut ops, sd, &format!("decoder.layers.{i}.self_attn"))?;
        if sd.contains_key(&format!("decoder.layers.{i}.encoder_attn.k_proj.weight")) {
            mha(&mut ops, sd, &format!("decoder.layers.{i}.encoder_attn"))?;
        }
        linear(&mut ops, sd, &format!("decoder.layers.{i}.fc1"))?;
        linear(&mut ops, sd, &format!("decoder.layers.{i}.fc2"))?;
    }
    if let Some(w) = shape(sd, "decoder.project_out_dim.weight") {
        ops.push((Init::Uniform, w.clone()));
        ops.push((Init::Uniform, w));
    }
    let out = need("decoder.embed_tokens.weight")?;
    let (vocab, dim) = match out.as_slice() {
        &[v, d] => (v, d),
        _ => return Err(GenerateError::WeightDims { key: "decoder.embed_tokens.weight".into(), dims: 2 }),
    };
    if share_all_embeddings || share_decoder_input_output_embed {
        // nn.Linear(bias=False) is built (and initialized) before its weight is replaced
        ops.push((Init::Uniform, vec![vocab, dim]));
    } else {
        let w = need("decoder.output_projection.weight")?;
        ops.push((Init::Uniform, w.clone()));
        ops.push((Init::Normal, w));
    }
    Ok(ops)
}

/// Draws from libtorch's default CPU generator what building this model draws in fairseq.
pub fn replay_model_init(
    sd: &IndexMap<String, Tensor>,
    share_all_embeddings: bool,
    share_decoder_input_output_embed: bool,
) -> Result<(), GenerateError> {
    let _guard = tch::no_grad_guard();
    for (op, shape) in init_ops(sd, share_all_embeddings, share_decoder_input_output_embed)? {
        let mut t = Tensor::f_empty(shape.as_slice(), (Kind::Float, Device::Cpu))?;
        let _ = match op {
            Init::Uniform => t.f_uniform_(-1.0, 1.0)?,
            Init::Normal => t.f_normal_(0.0, 1.0)?,
        };
    }
    Ok(())
}

/// What creating a `torch.utils.data.DataLoader` iterator draws: fairseq-interactive builds a
/// new `EpochBatchIterator` for every buffer of lines, and `_BaseDataLoaderIter.__init__` takes
/// `torch.empty((), dtype=torch.int64).random_()` from the default generator for its base seed.
pub fn replay_dataloader_iter() -> Result<(), GenerateError> {
    let mut seed = Tensor::f_empty([], (Kind::Int64, Device::Cpu))?;
    let _ = seed.f_random_()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy_sd(learned: bool, share: bool) -> IndexMap<String, Tensor> {
        let mut sd = IndexMap::new();
        let z = |s: &[i64]| Tensor::zeros(s, (Kind::Float, Device::Cpu));
        sd.insert("encoder.embed_tokens.weight".into(), z(&[10, 4]));
        if learned {
            sd.insert("encoder.embed_positions.weight".into(), z(&[8, 4]));
        }
        for p in ["k_proj", "v_proj", "q_proj", "out_proj"] {
            sd.insert(format!("encoder.layers.0.self_attn.{p}.weight"), z(&[4, 4]));
            sd.insert(format!("encoder.layers.0.self_attn.{p}.bias"), z(&[4]));
            for a in ["self_attn", "encoder_attn"] {
                sd.insert(format!("decoder.layers.0.{a}.{p}.weight"), z(&[4, 4]));
                sd.insert(format!("decoder.layers.0.{a}.{p}.bias"), z(&[4]));
            }
        }
        for side in ["encoder", "decoder"] {
            sd.insert(format!("{side}.layers.0.fc1.weight"), z(&[8, 4]));
            sd.insert(format!("{side}.layers.0.fc1.bias"), z(&[8]));
            sd.insert(format!("{side}.layers.0.fc2.weight"), z(&[4, 8]));
            sd.insert(format!("{side}.layers.0.fc2.bias"), z(&[4]));
        }
        sd.insert("decoder.embed_tokens.weight".into(), z(&[10, 4]));
        if !share {
            sd.insert("decoder.output_projection.weight".into(), z(&[10, 4]));
        }
        sd
    }

    #[test]
    fn op_sequence_follows_fairseq_construction_order() {
        let ops = init_ops(&toy_sd(false, true), true, true).unwrap();
        // 2 embedding normals, encoder MHA (8 linear ops + 4 xavier) + 2 fc * 2,
        // decoder 2 MHA + 2 fc, shared output projection
        assert_eq!(ops.len(), 2 + (12 + 4) + (24 + 4) + 1);
        assert_eq!(ops[0].0, Init::Normal);
        assert_eq!(ops.last().unwrap(), &(Init::Uniform, vec![10, 4]));
        let ops = init_ops(&toy_sd(true, false), false, false).unwrap();
        assert_eq!(ops.len(), 4 + 2 + (12 + 4) + (24 + 4) + 2);
        assert_eq!(ops.last().unwrap().0, Init::Normal);
        // a language model: its embedding once, the decoder without encoder attention
        let mut lm = toy_sd(false, true);
        lm.retain(|k, _| k.starts_with("decoder.") && !k.contains("encoder_attn"));
        let ops = init_ops(&lm, false, true).unwrap();
        assert_eq!(ops.len(), 2 + (12 + 4) + 1);
    }

    #[test]
    fn replay_advances_the_generator() {
        let sd = toy_sd(false, true);
        let _rng = crate::testing::global_generator();
        tch::manual_seed(1);
        let fresh = Tensor::rand([3], (Kind::Float, Device::Cpu));
        tch::manual_seed(1);
        replay_model_init(&sd, true, true).unwrap();
        let after = Tensor::rand([3], (Kind::Float, Device::Cpu));
        assert!(!fresh.equal(&after));
        tch::manual_seed(1);
        replay_model_init(&sd, true, true).unwrap();
        assert!(Tensor::rand([3], (Kind::Float, Device::Cpu)).equal(&after));
    }
}
