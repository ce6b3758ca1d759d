//! fairseq's state-dict upgrades, in the order `BaseFairseqModel.load_state_dict` applies them
//! (parent module before children), then the exact key set and order of fairseq 0.12.2's
//! `model.state_dict()`:
//!
//! * `TransformerEncoderBase`/`TransformerDecoderBase.upgrade_state_dict_named`: drop stored
//!   sinusoidal tables and add `embed_positions._float_tensor`; `layers.N.layer_norms.K` ->
//!   named layer norms; `decoder.output_projection.weight` from `embed_tokens` (tied) or
//!   `embed_out`; a missing/old `version` (encoder < 2, decoder <= 2) means no final layer norm
//!   and is set to 1;
//! * `MultiheadAttention.upgrade_state_dict_named`: split `in_proj_weight`/`in_proj_bias` into
//!   `q_proj`/`k_proj`/`v_proj`;
//! * `TransformerEncoderLayerBase._load_from_state_dict` (fairseq 0.12.2's BetterTransformer
//!   copies): `encoder.layers.N.{in_proj,out_proj,fc1,fc2}_{weight,bias}` from the layer's
//!   q/k/v, out_proj, fc1 and fc2 (these are parameters of the layer, so `state_dict()` lists
//!   them first).

use indexmap::IndexMap;
use tch::{Kind, Tensor};

use crate::config::TransformerConfig;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpgradeError {
    #[error("state dict is missing {count} key(s) this config needs, e.g. {first}")]
    Missing { count: usize, first: String },
    #[error("state dict has {count} unexpected key(s), e.g. {first} (config and weights disagree, or an unsupported option)")]
    Unexpected { count: usize, first: String },
    #[error("{name}: shape {actual:?}, expected {expected:?}")]
    Shape { name: String, actual: Vec<i64>, expected: Vec<i64> },
    #[error("{name}: {msg}")]
    Tensor { name: String, msg: String },
    #[error("{name}: {source}")]
    Torch { name: String, source: tch::TchError },
}

type StateDict = IndexMap<String, Tensor>;

fn terr(name: &str, e: tch::TchError) -> UpgradeError {
    UpgradeError::Torch { name: name.to_string(), source: e }
}

/// `MultiheadAttention.upgrade_state_dict_named`: fused `in_proj_*` -> q/k/v.
fn split_in_proj(sd: &mut StateDict) -> Result<(), UpgradeError> {
    let fused: Vec<String> = sd.keys().filter(|k| k.ends_with(".in_proj_weight") || k.ends_with(".in_proj_bias")).filter(|k| k.contains("attn.")).cloned().collect();
    for key in fused {
        let (prefix, suffix) = match key.strip_suffix("in_proj_weight") {
            Some(p) => (p.to_string(), "weight"),
            None => (key.strip_suffix("in_proj_bias").unwrap_or_default().to_string(), "bias"),
        };
        let Some(t) = sd.shift_remove(&key) else { continue };
        let rows = t.size().first().copied().unwrap_or(0);
        if rows % 3 != 0 {
            return Err(UpgradeError::Tensor { name: key, msg: format!("first dimension {rows} is not divisible by 3") });
        }
        let dim = rows / 3;
        for (i, part) in ["q_proj", "k_proj", "v_proj"].iter().enumerate() {
            let piece = t.f_narrow(0, dim * i as i64, dim).map_err(|e| terr(&key, e))?;
            sd.insert(format!("{prefix}{part}.{suffix}"), piece);
        }
    }
    Ok(())
}

fn rename(sd: &mut StateDict, from: &str, to: &str) {
    if let Some(t) = sd.shift_remove(from) {
        sd.insert(to.to_string(), t);
    }
}

fn version_at_least(sd: &StateDict, key: &str, min_exclusive: f64) -> Result<bool, UpgradeError> {
    match sd.get(key) {
        None => Ok(false),
        Some(t) => {
            let v = t.f_to_kind(Kind::Double).and_then(|t| t.f_flatten(0, -1)).map_err(|e| terr(key, e))?;
            if v.size().first().copied().unwrap_or(0) < 1 {
                return Err(UpgradeError::Tensor { name: key.to_string(), msg: "empty version tensor".into() });
            }
            let x = v.f_double_value(&[0]).map_err(|e| terr(key, e))?;
            Ok(x > min_exclusive)
        }
    }
}

/// The keys fairseq 0.12.2's `model.state_dict()` lists for `cfg`, in order.
fn expected_keys(cfg: &TransformerConfig, sd: &StateDict, encoder_final_norm: bool, decoder_final_norm: bool) -> Vec<String> {
    let mut keys = Vec::new();
    let lw = |keys: &mut Vec<String>, p: &str| {
        keys.push(format!("{p}.weight"));
        keys.push(format!("{p}.bias"));
    };
    let mha = |keys: &mut Vec<String>, p: &str| {
        for proj in ["k_proj", "v_proj", "q_proj", "out_proj"] {
            keys.push(format!("{p}.{proj}.weight"));
            keys.push(format!("{p}.{proj}.bias"));
        }
    };
    // Encoder (a language model has none).
    let lm = cfg.is_language_model();
    if !lm {
        keys.push("encoder.version".into());
        keys.push("encoder.embed_tokens.weight".into());
        if !cfg.no_token_positional_embeddings {
            keys.push(if cfg.encoder_learned_pos { "encoder.embed_positions.weight" } else { "encoder.embed_positions._float_tensor" }.into());
        }
        if cfg.layernorm_embedding {
            lw(&mut keys, "encoder.layernorm_embedding");
        }
    }
    for i in 0..cfg.encoder_layers {
        let p = format!("encoder.layers.{i}");
        for n in ["in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"] {
            keys.push(format!("{p}.{n}"));
        }
        mha(&mut keys, &format!("{p}.self_attn"));
        lw(&mut keys, &format!("{p}.self_attn_layer_norm"));
        lw(&mut keys, &format!("{p}.fc1"));
        lw(&mut keys, &format!("{p}.fc2"));
        lw(&mut keys, &format!("{p}.final_layer_norm"));
    }
    if encoder_final_norm {
        lw(&mut keys, "encoder.layer_norm");
    }
    // Decoder.
    keys.push("decoder.version".into());
    keys.push("decoder.embed_tokens.weight".into());
    // project_in_dim exists when the embedding width differs from decoder_embed_dim; fairseq
    // derives it from the embedding matrix, so do we.
    if sd.contains_key("decoder.project_in_dim.weight") {
        keys.push("decoder.project_in_dim.weight".into());
    }
    if !cfg.no_token_positional_embeddings {
        keys.push(if cfg.decoder_learned_pos { "decoder.embed_positions.weight" } else { "decoder.embed_positions._float_tensor" }.into());
    }
    if cfg.layernorm_embedding {
        lw(&mut keys, "decoder.layernorm_embedding");
    }
    for i in 0..cfg.decoder_layers {
        let p = format!("decoder.layers.{i}");
        mha(&mut keys, &format!("{p}.self_attn"));
        lw(&mut keys, &format!("{p}.self_attn_layer_norm"));
        if !lm {
            mha(&mut keys, &format!("{p}.encoder_attn"));
            lw(&mut keys, &format!("{p}.encoder_attn_layer_norm"));
        }
        lw(&mut keys, &format!("{p}.fc1"));
        lw(&mut keys, &format!("{p}.fc2"));
        lw(&mut keys, &format!("{p}.final_layer_norm"));
    }
    if decoder_final_norm {
        lw(&mut keys, "decoder.layer_norm");
    }
    if cfg.decoder_embed_dim != cfg.decoder_output_dim {
        keys.push("decoder.project_out_dim.weight".into());
    }
    keys.push("decoder.output_projection.weight".into());
    keys
}

/// Applies fairseq's upgrades and returns the state dict in fairseq's `model.state_dict()` order.
pub fn upgrade_state_dict(cfg: &TransformerConfig, mut sd: StateDict) -> Result<StateDict, UpgradeError> {
    let float_one = |v: f64| Tensor::f_from_slice(&[v as f32]).map_err(|e| terr("version", e));
    let mut final_norm = [false, false];
    let sides: &[(&str, i64)] = match cfg.is_language_model() {
        true => &[("decoder", cfg.decoder_layers)],
        false => &[("encoder", cfg.encoder_layers), ("decoder", cfg.decoder_layers)],
    };
    for &(side, layers) in sides {
        // Sinusoidal positions: stored tables are dropped, `_float_tensor` re-created
        // (uninitialised `torch.FloatTensor(1)` in fairseq; zero here).
        if !(if side == "encoder" { cfg.encoder_learned_pos } else { cfg.decoder_learned_pos }) {
            sd.shift_remove(&format!("{side}.embed_positions.weights"));
            if !cfg.no_token_positional_embeddings {
                sd.insert(format!("{side}.embed_positions._float_tensor"), Tensor::f_zeros([1], (Kind::Float, tch::Device::Cpu)).map_err(|e| terr("_float_tensor", e))?);
            }
        }
        if side == "decoder" && !sd.contains_key("decoder.output_projection.weight") {
            if cfg.share_decoder_input_output_embed {
                if let Some(t) = sd.get("decoder.embed_tokens.weight") {
                    let t = t.shallow_clone();
                    sd.insert("decoder.output_projection.weight".into(), t);
                }
            } else if let Some(t) = sd.shift_remove("decoder.embed_out") {
                sd.insert("decoder.output_projection.weight".into(), t);
            }
        }
        let names: &[&str] = if side == "encoder" { &["self_attn_layer_norm", "final_layer_norm"] } else { &["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"] };
        for i in 0..layers {
            for (k, new) in names.iter().enumerate() {
                for m in ["weight", "bias"] {
                    rename(&mut sd, &format!("{side}.layers.{i}.layer_norms.{k}.{m}"), &format!("{side}.layers.{i}.{new}.{m}"));
                }
            }
        }
        let version_key = format!("{side}.version");
        // encoder: `version < 2` is old; decoder: `version <= 2` is old.
        let threshold = if side == "encoder" { 1.999_999 } else { 2.0 };
        let normalize_before = if side == "encoder" { cfg.encoder_normalize_before } else { cfg.decoder_normalize_before && !cfg.no_decoder_final_norm };
        if version_at_least(&sd, &version_key, threshold)? {
            final_norm[usize::from(side == "decoder")] = normalize_before;
        } else {
            sd.insert(version_key, float_one(1.0)?);
        }
    }
    split_in_proj(&mut sd)?;
    // BetterTransformer copies on every encoder layer (fairseq 0.12.2), derived here as
    // `_load_from_state_dict` derives them; stored ones are not even read (`is_derived_copy`).
    for i in 0..cfg.encoder_layers {
        let p = format!("encoder.layers.{i}");
        let get = |sd: &StateDict, k: &str| -> Result<Tensor, UpgradeError> {
            sd.get(&format!("{p}.{k}")).map(Tensor::shallow_clone).ok_or_else(|| UpgradeError::Missing { count: 1, first: format!("{p}.{k}") })
        };
        for (n, parts) in [("in_proj_weight", "weight"), ("in_proj_bias", "bias")] {
            let q = get(&sd, &format!("self_attn.q_proj.{parts}"))?;
            let k = get(&sd, &format!("self_attn.k_proj.{parts}"))?;
            let v = get(&sd, &format!("self_attn.v_proj.{parts}"))?;
            let cat = Tensor::f_cat(&[q, k, v], 0).map_err(|e| terr(&format!("{p}.{n}"), e))?;
            sd.insert(format!("{p}.{n}"), cat);
        }
        for (n, src) in [("out_proj_weight", "self_attn.out_proj.weight"), ("out_proj_bias", "self_attn.out_proj.bias"), ("fc1_weight", "fc1.weight"), ("fc1_bias", "fc1.bias"), ("fc2_weight", "fc2.weight"), ("fc2_bias", "fc2.bias")] {
            let t = get(&sd, src)?;
            sd.insert(format!("{p}.{n}"), t);
        }
    }
    let expected = expected_keys(cfg, &sd, final_norm[0], final_norm[1]);
    let missing: Vec<&String> = expected.iter().filter(|k| !sd.contains_key(k.as_str())).collect();
    if let Some(first) = missing.first() {
        return Err(UpgradeError::Missing { count: missing.len(), first: (*first).clone() });
    }
    let mut out = IndexMap::with_capacity(expected.len());
    for k in &expected {
        if let Some(t) = sd.shift_remove(k) {
            out.insert(k.clone(), t);
        }
    }
    if let Some(first) = sd.keys().next() {
        return Err(UpgradeError::Unexpected { count: sd.len(), first: first.clone() });
    }
    check_shapes(cfg, &out)?;
    Ok(out)
}

/// Shapes that the config pins down (fairseq's strict `load_state_dict` would refuse others).
fn check_shapes(cfg: &TransformerConfig, sd: &StateDict) -> Result<(), UpgradeError> {
    let want = |name: &str, expected: Vec<i64>| -> Result<(), UpgradeError> {
        match sd.get(name) {
            Some(t) if t.size() != expected => Err(UpgradeError::Shape { name: name.to_string(), actual: t.size(), expected }),
            _ => Ok(()),
        }
    };
    let (ce, fe, cd, fd) = (cfg.encoder_embed_dim, cfg.encoder_ffn_embed_dim, cfg.decoder_embed_dim, cfg.decoder_ffn_embed_dim);
    if let Some(t) = sd.get("encoder.embed_tokens.weight") {
        if t.dim() != 2 || t.size()[1] != ce {
            return Err(UpgradeError::Shape { name: "encoder.embed_tokens.weight".into(), actual: t.size(), expected: vec![-1, ce] });
        }
    }
    for i in 0..cfg.encoder_layers {
        let p = format!("encoder.layers.{i}");
        for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            want(&format!("{p}.self_attn.{proj}.weight"), vec![ce, ce])?;
        }
        want(&format!("{p}.fc1.weight"), vec![fe, ce])?;
        want(&format!("{p}.fc2.weight"), vec![ce, fe])?;
    }
    for i in 0..cfg.decoder_layers {
        let p = format!("decoder.layers.{i}");
        for proj in ["q_proj", "k_proj", "v_proj", "out_proj"] {
            want(&format!("{p}.self_attn.{proj}.weight"), vec![cd, cd])?;
        }
        want(&format!("{p}.encoder_attn.q_proj.weight"), vec![cd, cd])?;
        want(&format!("{p}.encoder_attn.k_proj.weight"), vec![cd, ce])?;
        want(&format!("{p}.encoder_attn.v_proj.weight"), vec![cd, ce])?;
        want(&format!("{p}.fc1.weight"), vec![fd, cd])?;
        want(&format!("{p}.fc2.weight"), vec![cd, fd])?;
    }
    if let Some(t) = sd.get("decoder.output_projection.weight") {
        if t.dim() != 2 || t.size()[1] != cfg.decoder_output_dim {
            return Err(UpgradeError::Shape { name: "decoder.output_projection.weight".into(), actual: t.size(), expected: vec![-1, cfg.decoder_output_dim] });
        }
    }
    Ok(())
}

/// The encoder fast-path copies (`encoder.layers.N.in_proj_weight`, `fc1_bias`, ...) that the
/// upgrade derives from each layer's own weights, whatever the checkpoint stored under them.
pub fn is_derived_copy(key: &str) -> bool {
    const COPIES: [&str; 8] = ["in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"];
    let Some((index, name)) = key.strip_prefix("encoder.layers.").and_then(|rest| rest.split_once('.')) else {
        return false;
    };
    !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) && COPIES.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::is_derived_copy;

    #[test]
    fn only_the_encoder_fast_path_copies_are_derived() {
        assert!(is_derived_copy("encoder.layers.0.in_proj_weight"));
        assert!(is_derived_copy("encoder.layers.11.fc2_bias"));
        for key in ["encoder.layers.0.self_attn.in_proj_weight", "decoder.layers.0.in_proj_weight", "encoder.layers.x.fc1_bias", "encoder.layers.0.fc1.weight", "encoder.layers..fc1_bias"] {
            assert!(!is_derived_copy(key), "{key}");
        }
    }
}
