//! CTranslate2 variable names -> fairseq 0.12.2 state-dict names: the inverse of
//! `python/ctranslate2/converters/fairseq.py` (`set_transformer_encoder`/`_decoder`,
//! `set_multi_head_attention`, `set_ffn`, `set_layer_norm`, `set_linear`) writing the layout of
//! `python/ctranslate2/specs/transformer_spec.py` and `attention_spec.py`.

/// The scalars a fairseq conversion stores (`TransformerEncoderSpec`/`TransformerDecoderSpec`
/// attributes), and `embeddings/multiply_by_sqrt_depth` of older models.
pub(super) const FLAGS: [&str; 12] = [
    "num_heads",
    "pre_norm",
    "activation",
    "scale_embeddings",
    "embeddings_merge",
    "multi_query_attention",
    "alignment_layer",
    "alignment_heads",
    "alibi",
    "alibi_use_positive_positions",
    "scale_alibi",
    "start_from_zero_embedding",
];

/// `encoder` or `decoder`, and the rest of the name.
fn side_of(ct2: &str) -> Option<(&str, &str)> {
    let (side, rest) = ct2.split_once('/')?;
    matches!(side, "encoder" | "decoder").then_some((side, rest))
}

/// `layer_N` with N as `"%d"` writes it.
pub fn layer_index(part: &str) -> Option<usize> {
    let n = part.strip_prefix("layer_")?;
    let i: usize = n.parse().ok()?;
    (i.to_string() == n).then_some(i)
}

/// A scalar the spec stores as a flag of `encoder/` or `decoder/`.
pub fn is_flag(ct2: &str) -> bool {
    side_of(ct2).is_some_and(|(_, rest)| {
        FLAGS.contains(&rest) || matches!(rest, "embeddings/multiply_by_sqrt_depth" | "embeddings_0/multiply_by_sqrt_depth")
    })
}

/// `encoder.embed_positions` / `decoder.embed_positions` for `<side>/position_encodings/encodings`.
pub fn position_module(ct2: &str) -> Option<String> {
    let (side, rest) = side_of(ct2)?;
    (rest == "position_encodings/encodings").then(|| format!("{side}.embed_positions"))
}

/// The embedding table of a side (the encoder's is the first of a list: `embeddings_0`).
pub fn embeddings(side: &str) -> &'static str {
    if side == "encoder" {
        "encoder/embeddings_0/weight"
    } else {
        "decoder/embeddings/weight"
    }
}

/// The fairseq names a CTranslate2 variable holds, in the order of its rows: q, k, v of a fused
/// self-attention `linear_0`, k, v of a fused encoder-attention `linear_1`, else one name. None
/// for a variable with no fairseq counterpart.
pub fn fairseq_names(ct2: &str) -> Option<Vec<String>> {
    let (side, rest) = side_of(ct2)?;
    let decoder = side == "decoder";
    let parts: Vec<&str> = rest.split('/').collect();
    let norm_param = |p: &str| match p {
        "gamma" => Some("weight"),
        "beta" => Some("bias"),
        _ => None,
    };
    let linear_param = |p: &str| matches!(p, "weight" | "bias").then(|| p.to_string());
    match parts.as_slice() {
        ["embeddings_0", "weight"] if !decoder => Some(vec!["encoder.embed_tokens.weight".into()]),
        ["embeddings", "weight"] if decoder => Some(vec!["decoder.embed_tokens.weight".into()]),
        [norm @ ("layer_norm" | "layernorm_embedding"), p] => Some(vec![format!("{side}.{norm}.{}", norm_param(p)?)]),
        ["projection", "weight"] if decoder => Some(vec!["decoder.output_projection.weight".into()]),
        [proj @ ("project_in" | "project_out"), p] if decoder => Some(vec![format!("decoder.{proj}_dim.{}", linear_param(p)?)]),
        [layer, block, sub, p] => {
            let n = layer_index(layer)?;
            let modules: &[&str] = match (*block, *sub) {
                ("self_attention", "linear_0") => &["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                ("self_attention", "linear_1") => &["self_attn.out_proj"],
                ("self_attention", "layer_norm") => &["self_attn_layer_norm"],
                ("attention", "linear_0") if decoder => &["encoder_attn.q_proj"],
                ("attention", "linear_1") if decoder => &["encoder_attn.k_proj", "encoder_attn.v_proj"],
                ("attention", "linear_2") if decoder => &["encoder_attn.out_proj"],
                ("attention", "layer_norm") if decoder => &["encoder_attn_layer_norm"],
                ("ffn", "linear_0") => &["fc1"],
                ("ffn", "linear_1") => &["fc2"],
                ("ffn", "layer_norm") => &["final_layer_norm"],
                _ => return None,
            };
            let p = if *sub == "layer_norm" { norm_param(p)?.to_string() } else { linear_param(p)? };
            Some(modules.iter().map(|m| format!("{side}.layers.{n}.{m}.{p}")).collect())
        }
        _ => None,
    }
}

/// Where fairseq 0.12.2's `model.state_dict()` lists a name: modules in the order their
/// `__init__` registers them (`TransformerEncoderBase`, `TransformerDecoderBase`, the layers,
/// `MultiheadAttention`: k, v, q, out), weight before bias.
pub fn fairseq_order(name: &str) -> (u8, u8, usize, u8, u8, u8) {
    let mut parts = name.split('.');
    let side = match parts.next() {
        Some("encoder") => 0,
        Some("decoder") => 1,
        _ => 2,
    };
    let module = parts.next().unwrap_or_default();
    let top = match module {
        "embed_tokens" => 0,
        "project_in_dim" => 1,
        "embed_positions" => 2,
        "layernorm_embedding" => 3,
        "layers" => 4,
        "layer_norm" => 5,
        "project_out_dim" => 6,
        "output_projection" => 7,
        _ => 8,
    };
    let param = |p: Option<&str>| match p {
        Some("weight") => 0,
        Some("bias") => 1,
        _ => 2,
    };
    if top != 4 {
        return (side, top, 0, 0, 0, param(parts.next()));
    }
    let layer = parts.next().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
    let sub = match parts.next() {
        Some("self_attn") => 0,
        Some("self_attn_layer_norm") => 1,
        Some("encoder_attn") => 2,
        Some("encoder_attn_layer_norm") => 3,
        Some("fc1") => 4,
        Some("fc2") => 5,
        Some("final_layer_norm") => 6,
        _ => 7,
    };
    let (proj, p) = if sub == 0 || sub == 2 {
        let proj = match parts.next() {
            Some("k_proj") => 0,
            Some("v_proj") => 1,
            Some("q_proj") => 2,
            Some("out_proj") => 3,
            _ => 4,
        };
        (proj, param(parts.next()))
    } else {
        (0, param(parts.next()))
    };
    (side, top, layer, sub, proj, p)
}
