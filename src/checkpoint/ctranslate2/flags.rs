//! The flags a CTranslate2 spec stores (`<side>/num_heads`, `pre_norm`, `activation`, the
//! embedding scale, which layer norms exist) and the defaults its layers take when one is absent.

use std::collections::BTreeSet;

use indexmap::IndexMap;
use tch::Tensor;

use super::{names, scalar, Ct2Error, Ctx, DataType, ModelBin};

/// `<side>/activation`. Id 1 was called GELU before `TransformerSpec` revision 7, and the
/// converter then stored fairseq's `gelu` as it too; CTranslate2 has always computed it as the
/// tanh approximation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Relu,
    GeluTanh,
    Swish,
    Gelu,
    GeluSigmoid,
    Tanh,
    Sigmoid,
}

impl Activation {
    pub fn from_id(id: i64) -> Option<Self> {
        Some(match id {
            0 => Self::Relu,
            1 => Self::GeluTanh,
            2 => Self::Swish,
            3 => Self::Gelu,
            4 => Self::GeluSigmoid,
            5 => Self::Tanh,
            6 => Self::Sigmoid,
            _ => return None,
        })
    }

    /// fairseq's `--activation-fn` that computes the same (`_SUPPORTED_ACTIVATIONS` inverted;
    /// `gelu_fast` is fairseq's other name for `gelu_accurate`).
    pub fn fairseq_name(self) -> Option<&'static str> {
        match self {
            Self::Relu => Some("relu"),
            Self::GeluTanh => Some("gelu_accurate"),
            Self::Swish => Some("swish"),
            Self::Gelu => Some("gelu"),
            Self::Tanh => Some("tanh"),
            Self::GeluSigmoid | Self::Sigmoid => None,
        }
    }
}

/// What the spec says about one side (defaults as CTranslate2's layers read them).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SideFlags {
    pub layers: usize,
    /// Columns of the embedding table.
    pub embed_dim: i64,
    /// Rows of `layer_0/ffn/linear_0/weight` (0 without layers).
    pub ffn_embed_dim: i64,
    /// `num_heads` (default 8).
    pub num_heads: i64,
    /// `pre_norm` (default true).
    pub pre_norm: bool,
    pub activation: Activation,
    /// What the embeddings are multiplied by (`build_embeddings_scale`: `scale_embeddings` as a
    /// float, or sqrt(embed_dim) for a true int8 flag or none stored): fairseq's `embed_scale`.
    pub embed_scale: f32,
    pub layernorm_embedding: bool,
    /// The side's final `layer_norm` (fairseq's `encoder.layer_norm` / `decoder.layer_norm`).
    pub final_layer_norm: bool,
    /// Rows of `position_encodings/encodings` (the converter stores `max_*_positions` of them).
    pub max_positions: Option<i64>,
}

/// The flags of the spec as a whole.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Ct2Flags {
    /// None for `TransformerDecoderSpec` (a language model).
    pub encoder: Option<SideFlags>,
    pub decoder: SideFlags,
    /// The decoder layers have `attention/` (fairseq's `encoder_attn`).
    pub with_encoder_attention: bool,
    /// `decoder/alignment_layer` (default -1), `decoder/alignment_heads` (default 1).
    pub alignment_layer: i64,
    pub alignment_heads: i64,
    /// `encoder/embeddings_0/weight` is an alias of `decoder/embeddings/weight`.
    pub shared_embeddings: bool,
    /// `decoder/projection/weight` is an alias of `decoder/embeddings/weight`.
    pub tied_projection: bool,
}

fn side_flags(ctx: &Ctx, bin: &ModelBin, side: &str, positions: &IndexMap<String, Tensor>) -> Result<SideFlags, Ct2Error> {
    let prefix = format!("{side}/");
    let mut layers = BTreeSet::new();
    for name in bin.variables.keys().chain(bin.aliases.keys()) {
        if let Some(rest) = name.strip_prefix(&prefix) {
            if let Some(i) = rest.split('/').next().and_then(names::layer_index) {
                layers.insert(i);
            }
        }
    }
    if layers.iter().enumerate().any(|(i, &l)| i != l) {
        return Err(ctx.var(&format!("{side}/layer_*"), format!("layers {layers:?} are not numbered 0 to {}", layers.len().saturating_sub(1))));
    }
    let table = names::embeddings(side);
    let embed = bin.get(table).ok_or_else(|| ctx.var(table, "missing"))?;
    let embed_dim = embed.shape.get(1).map(|&d| i64::from(d)).ok_or_else(|| ctx.var(table, format!("shape {:?}, not [vocabulary, dim]", embed.shape)))?;
    let ffn_embed_dim = bin.get(&format!("{side}/layer_0/ffn/linear_0/weight")).and_then(|v| v.shape.first()).map_or(0, |&d| i64::from(d));
    let get = |name: &str| scalar(ctx, bin, &format!("{side}/{name}"));
    let num_heads = get("num_heads")?.map_or(8, |v| v as i64);
    let pre_norm = get("pre_norm")?.is_none_or(|v| v != 0.0);
    let activation_id = get("activation")?.unwrap_or(0.0) as i64;
    let activation = Activation::from_id(activation_id).ok_or_else(|| ctx.var(&format!("{side}/activation"), format!("activation id {activation_id}, not one of common_spec.Activation")))?;
    let sqrt_depth = (embed_dim as f32).sqrt();
    let scale_var = [format!("{side}/scale_embeddings"), format!("{side}/embeddings/multiply_by_sqrt_depth"), format!("{side}/embeddings_0/multiply_by_sqrt_depth")]
        .into_iter()
        .find(|n| bin.variables.contains_key(n));
    let embed_scale = match scale_var {
        None => sqrt_depth,
        Some(n) => {
            let v = scalar(ctx, bin, &n)?.unwrap_or(1.0);
            match bin.variables.get(&n).map(|v| v.dtype) {
                Some(DataType::Int8) if v != 0.0 => sqrt_depth,
                Some(DataType::Int8) => 1.0,
                _ => v as f32,
            }
        }
    };
    let present = |module: &str| bin.get(&format!("{side}/{module}/gamma")).is_some();
    Ok(SideFlags {
        layers: layers.len(),
        embed_dim,
        ffn_embed_dim,
        num_heads,
        pre_norm,
        activation,
        embed_scale,
        layernorm_embedding: present("layernorm_embedding"),
        final_layer_norm: present("layer_norm"),
        max_positions: positions.get(&format!("{side}.embed_positions")).and_then(|t| t.size().first().copied()),
    })
}

pub(super) fn flags(ctx: &Ctx, bin: &ModelBin, with_encoder: bool, positions: &IndexMap<String, Tensor>) -> Result<Ct2Flags, Ct2Error> {
    let encoder = if with_encoder { Some(side_flags(ctx, bin, "encoder", positions)?) } else { None };
    let decoder = side_flags(ctx, bin, "decoder", positions)?;
    let embeddings = names::embeddings("decoder");
    Ok(Ct2Flags {
        encoder,
        decoder,
        with_encoder_attention: bin.variables.keys().chain(bin.aliases.keys()).any(|n| n.starts_with("decoder/layer_") && n.contains("/attention/")),
        alignment_layer: scalar(ctx, bin, "decoder/alignment_layer")?.map_or(-1, |v| v as i64),
        alignment_heads: scalar(ctx, bin, "decoder/alignment_heads")?.map_or(1, |v| v as i64),
        shared_embeddings: with_encoder && bin.resolve(names::embeddings("encoder")) == embeddings,
        tied_projection: bin.resolve("decoder/projection/weight") == embeddings,
    })
}
