//! The arch functions of fairseq 0.12.2's `transformer_lm` (`fairseq/models/transformer_lm.py`):
//! `base_lm_architecture` and the registered variants, onto the same JSON map as the
//! translation archs, then the dataclass defaults. `transformer_lm` itself runs no arch
//! function (so it is post-norm unless configured otherwise); every variant goes through
//! `base_lm_architecture`, which forces pre-norm. A language model is a decoder without
//! encoder attention.

use serde_json::{Map, Value};

use super::{copy_default, set_default, set_defaults};

/// `transformer_lm` and its registered variants.
pub const LM_ARCHS: &[&str] = &[
    "transformer_lm",
    "transformer_lm_big",
    "transformer_lm_wiki103",
    "transformer_lm_baevski_wiki103",
    "transformer_lm_gbw",
    "transformer_lm_baevski_gbw",
    "transformer_lm_gpt",
    "transformer_lm_gpt2_small",
    "transformer_lm_gpt2_tiny",
    "transformer_lm_gpt2_medium",
    "transformer_lm_gpt2_big",
    "transformer_lm_gpt2_big_wide",
    "transformer_lm_gpt2_bigger",
    "transformer_lm_gpt3_small",
    "transformer_lm_gpt3_medium",
    "transformer_lm_gpt3_large",
    "transformer_lm_gpt3_xl",
    "transformer_lm_gpt3_2_7",
    "transformer_lm_gpt3_6_7",
    "transformer_lm_gpt3_13",
    "transformer_lm_gpt3_175",
];

fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(s.as_str(), "True" | "true" | "1"),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
        _ => false,
    }
}

fn base_lm_architecture(m: &mut Map<String, Value>) {
    // older checkpoints: --no-tie-adaptive-proj existed, and those models had no final norm
    if m.contains_key("no_tie_adaptive_proj") {
        m.insert("no_decoder_final_norm".into(), true.into());
        if !truthy(m.get("no_tie_adaptive_proj")) {
            m.insert("tie_adaptive_proj".into(), true.into());
        }
    }
    if m.contains_key("decoder_final_norm") {
        let v = !truthy(m.get("decoder_final_norm"));
        m.insert("no_decoder_final_norm".into(), v.into());
    }
    set_defaults(m, &[("decoder_embed_dim", 512), ("decoder_ffn_embed_dim", 2048), ("decoder_layers", 6)]);
    set_default(m, "decoder_attention_heads", 8);
    set_default(m, "adaptive_softmax_cutoff", Value::Null);
    set_default(m, "decoder_learned_pos", false);
    set_default(m, "activation_fn", "relu");
    set_default(m, "decoder_layers_to_keep", Value::Null);
    set_default(m, "quant_noise_pq", 0);
    set_default(m, "add_bos_token", false);
    set_default(m, "no_token_positional_embeddings", false);
    set_default(m, "share_decoder_input_output_embed", false);
    set_default(m, "character_embeddings", false);
    copy_default(m, "decoder_output_dim", "decoder_embed_dim");
    copy_default(m, "decoder_input_dim", "decoder_embed_dim");
    // "Model training is not stable without this": whatever the config says
    m.insert("decoder_normalize_before".into(), true.into());
    set_default(m, "no_decoder_final_norm", false);
    set_default(m, "adaptive_input", false);
    set_default(m, "tie_adaptive_weights", false);
    set_default(m, "tie_adaptive_proj", false);
    set_default(m, "no_scale_embedding", false);
    set_default(m, "layernorm_embedding", false);
}

fn gpt(m: &mut Map<String, Value>, [embed, ffn, layers, heads]: [i64; 4]) {
    set_defaults(m, &[("decoder_embed_dim", embed), ("decoder_ffn_embed_dim", ffn), ("decoder_layers", layers)]);
    set_default(m, "decoder_attention_heads", heads);
    set_default(m, "activation_fn", "gelu");
    base_lm_architecture(m);
}

fn big(m: &mut Map<String, Value>) {
    set_defaults(m, &[("decoder_layers", 12), ("decoder_embed_dim", 1024), ("decoder_ffn_embed_dim", 4096)]);
    set_default(m, "decoder_attention_heads", 16);
    base_lm_architecture(m);
}

fn gpt3(m: &mut Map<String, Value>, [layers, embed, heads]: [i64; 3]) {
    set_defaults(m, &[("decoder_layers", layers), ("decoder_embed_dim", embed), ("decoder_attention_heads", heads)]);
    let embed = m.get("decoder_embed_dim").cloned().unwrap_or(Value::Null);
    m.insert("decoder_input_dim".into(), embed.clone());
    m.insert("decoder_output_dim".into(), embed.clone());
    if !m.contains_key("decoder_ffn_embed_dim") {
        let ffn = embed.as_i64().map_or(Value::Null, |e| Value::from(e * 4));
        m.insert("decoder_ffn_embed_dim".into(), ffn);
    }
    set_default(m, "decoder_learned_pos", true);
    set_default(m, "activation_fn", "gelu");
    m.insert("share_decoder_input_output_embed".into(), true.into());
    base_lm_architecture(m);
}

/// `TransformerLanguageModelConfig`'s defaults for what the stored config lacks (fairseq
/// merges the dataclass before the arch function runs).
fn dataclass_defaults(m: &mut Map<String, Value>) {
    set_defaults(m, &[("decoder_embed_dim", 512), ("decoder_output_dim", 512), ("decoder_input_dim", 512)]);
    set_defaults(m, &[("decoder_ffn_embed_dim", 2048), ("decoder_layers", 6), ("decoder_attention_heads", 8)]);
    set_default(m, "activation_fn", "relu");
    for key in [
        "decoder_normalize_before",
        "no_decoder_final_norm",
        "decoder_learned_pos",
        "share_decoder_input_output_embed",
        "no_token_positional_embeddings",
        "no_scale_embedding",
        "layernorm_embedding",
        "add_bos_token",
        "character_embeddings",
        "adaptive_input",
    ] {
        set_default(m, key, false);
    }
}

/// Applies the `transformer_lm` arch function registered for `arch`; false when `arch` is not
/// one of them.
pub fn apply_lm_arch_defaults(arch: &str, m: &mut Map<String, Value>) -> bool {
    match arch {
        // a dataclass model: its own name's arch function is a no-op
        "transformer_lm" => {}
        "transformer_lm_big" => big(m),
        "transformer_lm_wiki103" | "transformer_lm_baevski_wiki103" => {
            set_defaults(m, &[("decoder_layers", 16), ("decoder_attention_heads", 8)]);
            set_default(m, "adaptive_input", true);
            set_default(m, "tie_adaptive_weights", true);
            set_default(m, "adaptive_input_cutoff", "20000,60000");
            set_default(m, "adaptive_softmax_cutoff", "20000,60000");
            set_default(m, "no_decoder_final_norm", true);
            set_default(m, "tie_adaptive_proj", true);
            big(m);
        }
        "transformer_lm_gbw" | "transformer_lm_baevski_gbw" => {
            set_default(m, "decoder_embed_dim", 512);
            set_default(m, "no_decoder_final_norm", true);
            big(m);
        }
        "transformer_lm_gpt" => gpt(m, [768, 3072, 12, 12]),
        "transformer_lm_gpt2_small" => gpt(m, [1024, 4096, 24, 16]),
        "transformer_lm_gpt2_tiny" => gpt(m, [64, 64, 2, 1]),
        "transformer_lm_gpt2_medium" => gpt(m, [1280, 5120, 36, 20]),
        "transformer_lm_gpt2_big" => gpt(m, [1600, 6400, 48, 25]),
        "transformer_lm_gpt2_big_wide" => gpt(m, [2048, 8192, 24, 32]),
        "transformer_lm_gpt2_bigger" => gpt(m, [2048, 8192, 48, 32]),
        "transformer_lm_gpt3_small" => gpt3(m, [12, 768, 12]),
        "transformer_lm_gpt3_medium" => gpt3(m, [24, 1024, 16]),
        "transformer_lm_gpt3_large" => gpt3(m, [24, 1536, 16]),
        "transformer_lm_gpt3_xl" => gpt3(m, [24, 2048, 32]),
        "transformer_lm_gpt3_2_7" => gpt3(m, [32, 2560, 32]),
        "transformer_lm_gpt3_6_7" => gpt3(m, [32, 4096, 32]),
        "transformer_lm_gpt3_13" => gpt3(m, [40, 5120, 40]),
        "transformer_lm_gpt3_175" => gpt3(m, [96, 12288, 96]),
        _ => return false,
    }
    dataclass_defaults(m);
    // the translation fields the shared config struct holds: a decoder-only model has no
    // encoder, so mirror the decoder's sizes there
    for (enc, dec) in [
        ("encoder_embed_dim", "decoder_embed_dim"),
        ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim"),
        ("encoder_attention_heads", "decoder_attention_heads"),
    ] {
        copy_default(m, enc, dec);
    }
    set_default(m, "encoder_layers", 0);
    true
}
