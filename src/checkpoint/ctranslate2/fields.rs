//! The fields of a CTranslate2 directory that decide what CTranslate2 computes, against the
//! fairseq model it was converted from: `config.json` (`SequenceToSequenceModelConfig`,
//! `TransformerConfig`: the source's added tokens, the decoder's first token, the layer norms'
//! epsilon) and the spec's flags in `model.bin`, each as CTranslate2 takes it (its default
//! where the file holds none). A `config.json` field CTranslate2 does not define is an error, as
//! is a `model.bin` scalar that is not one of the spec's flags (`Ct2Model::fairseq_args`).
//!
//! `reference/ct2_plants.py` measures which fields change CTranslate2's output
//! (`tests/fixtures/ct2/plants.json`).

use serde_json::{json, Value};

use super::{Activation, Ct2Error, Ct2Model, SideFlags};
use crate::checkpoint::hf_fields::{FairseqModel, FieldDiff};

pub const CONFIG: &str = "config.json";
pub const MODEL_BIN: &str = "model.bin";

/// The spec flags compared (`<side>/` and the flag); a scalar the spec stores that is no flag is
/// an error (`Ct2Model::fairseq_args`).
#[cfg(test)]
const COMPARED_FLAGS: [&str; 7] = ["num_heads", "pre_norm", "activation", "scale_embeddings", "alibi", "start_from_zero_embedding", "multi_query_attention"];

/// The flags CTranslate2 4.8.5 reads but that leave its translations and scores unchanged for a
/// fairseq model (measured): the attention returned, several source features merged, ALiBi's
/// options without ALiBi.
#[cfg(test)]
const INERT_FLAGS: [&str; 5] = ["alignment_layer", "alignment_heads", "embeddings_merge", "alibi_use_positive_positions", "scale_alibi"];

/// A `config.json` field: the values a faithful conversion holds, and CTranslate2's default.
struct ConfigField {
    field: &'static str,
    faithful: Vec<Value>,
    default: Value,
}

fn config_fields(m: &FairseqModel) -> [ConfigField; 8] {
    let f = |field, faithful: Value, default: Value| ConfigField { field, faithful: vec![faithful], default };
    [
        // fairseq's source is the symbols and </s>; its decoder starts from </s>
        f("add_source_bos", json!(false), json!(false)),
        f("add_source_eos", json!(true), json!(false)),
        f("bos_token", json!(m.bos_word), json!("<s>")),
        f("eos_token", json!(m.eos_word), json!("</s>")),
        f("unk_token", json!(m.unk_word), json!("<unk>")),
        f("decoder_start_token", json!(m.eos_word), json!("<s>")),
        // fairseq's LayerNorm: eps 1e-5, CTranslate2's own when none is given
        ConfigField { field: "layer_norm_epsilon", faithful: vec![Value::Null, json!(1e-5)], default: Value::Null },
        f("multi_query_attention", json!(false), json!(false)),
    ]
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn one_or_all(v: Vec<Value>) -> Value {
    if v.len() == 1 {
        v.into_iter().next().unwrap_or_default()
    } else {
        Value::Array(v)
    }
}

/// Every field of `model`'s `config.json` and spec flags that differs from what a faithful
/// conversion of `m` holds; an error for a `config.json` field CTranslate2 does not define.
pub fn check(model: &Ct2Model, m: &FairseqModel) -> Result<Vec<FieldDiff>, Ct2Error> {
    let path = model.dir.join(CONFIG);
    let empty = serde_json::Map::new();
    let config = match &model.config {
        Value::Object(map) => map,
        Value::Null => &empty,
        _ => return Err(Ct2Error::Invalid { path, msg: "not a JSON object, as CTranslate2 writes it".into() }),
    };
    let fields = config_fields(m);
    if let Some(unknown) = config.keys().find(|k| !fields.iter().any(|f| f.field == k.as_str())) {
        return Err(Ct2Error::Invalid { path, msg: format!("field {unknown:?} is not one of CTranslate2's TransformerConfig: tchseq cannot say what it does to the conversion") });
    }
    let mut out = Vec::new();
    for f in fields {
        let found = config.get(f.field).unwrap_or(&f.default);
        if !f.faithful.iter().any(|v| same(v, found)) {
            out.push(FieldDiff { file: CONFIG, field: f.field.to_string(), faithful: one_or_all(f.faithful), found: found.clone() });
        }
    }
    let c = m.config;
    let sides = [("encoder", model.flags.encoder.as_ref(), c.encoder_attention_heads, c.encoder_normalize_before), ("decoder", Some(&model.flags.decoder), c.decoder_attention_heads, c.decoder_normalize_before)];
    for (side, flags, heads, pre_norm) in sides {
        let Some(flags) = flags else { continue };
        let activations: Vec<Value> = (0..7).filter(|&id| Activation::from_id(id).and_then(Activation::fairseq_name) == Some(c.activation_fn.as_str())).map(|id| json!(id)).collect();
        let scale = if c.no_scale_embedding { 1.0 } else { (flags.embed_dim as f32).sqrt() };
        for (flag, faithful, found) in [
            ("num_heads", vec![json!(heads)], json!(flags.num_heads)),
            ("pre_norm", vec![json!(pre_norm)], json!(flags.pre_norm)),
            ("activation", activations, json!(activation_id(flags))),
            ("scale_embeddings", vec![json!(scale)], json!(flags.embed_scale)),
        ] {
            if !faithful.iter().any(|v| same(v, &found)) {
                out.push(FieldDiff { file: MODEL_BIN, field: format!("{side}/{flag}"), faithful: one_or_all(faithful), found });
            }
        }
    }
    for flag in ["decoder/alibi", "decoder/start_from_zero_embedding", "encoder/multi_query_attention"] {
        if let Some(s) = model.scalars.get(flag).filter(|s| s.value != 0.0) {
            out.push(FieldDiff { file: MODEL_BIN, field: flag.to_string(), faithful: json!(0), found: json!(s.value) });
        }
    }
    Ok(out)
}

fn activation_id(flags: &SideFlags) -> i64 {
    (0..7).find(|&id| Activation::from_id(id) == Some(flags.activation)).unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag the reader accepts is either compared or known to change nothing.
    #[test]
    fn every_flag_is_compared_or_inert() {
        let mut decided: Vec<&str> = COMPARED_FLAGS.iter().chain(&INERT_FLAGS).copied().collect();
        let mut read: Vec<&str> = super::super::names::FLAGS.to_vec();
        decided.sort_unstable();
        read.sort_unstable();
        assert_eq!(decided, read);
    }
}
