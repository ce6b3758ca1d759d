//! The arch functions of fairseq 0.12.2's `bart` model (`fairseq/models/bart/model.py`):
//! `bart_large` and the variants that call it. `BARTModel` is a legacy `TransformerModel`, whose
//! `build_model` then runs the transformer's `base_architecture` for whatever is still unset.

use serde_json::{Map, Value};

use super::{base_architecture, copy_default, set_default, set_defaults};

/// The registered `bart` architectures.
pub const BART_ARCHS: &[&str] = &["bart_large", "bart_base", "mbart_large", "mbart_base", "mbart_base_wmt20"];

fn bart_large(m: &mut Map<String, Value>) {
    set_defaults(m, &[("encoder_embed_dim", 1024), ("encoder_ffn_embed_dim", 4 * 1024), ("encoder_layers", 12)]);
    set_default(m, "encoder_attention_heads", 16);
    set_default(m, "encoder_normalize_before", false);
    set_default(m, "encoder_learned_pos", true);
    copy_default(m, "decoder_embed_dim", "encoder_embed_dim");
    copy_default(m, "decoder_ffn_embed_dim", "encoder_ffn_embed_dim");
    set_defaults(m, &[("decoder_layers", 12), ("decoder_attention_heads", 16)]);
    set_default(m, "decoder_normalize_before", false);
    set_default(m, "decoder_learned_pos", true);
    set_defaults(m, &[("max_target_positions", 1024), ("max_source_positions", 1024)]);
    set_default(m, "adaptive_softmax_cutoff", Value::Null);
    set_default(m, "share_decoder_input_output_embed", true);
    set_default(m, "share_all_embeddings", true);
    copy_default(m, "decoder_output_dim", "decoder_embed_dim");
    copy_default(m, "decoder_input_dim", "decoder_embed_dim");
    set_default(m, "no_scale_embedding", true);
    set_default(m, "layernorm_embedding", true);
    set_default(m, "activation_fn", "gelu");
}

fn bart_base(m: &mut Map<String, Value>) {
    set_defaults(m, &[("encoder_embed_dim", 768), ("encoder_ffn_embed_dim", 4 * 768), ("encoder_layers", 6)]);
    set_defaults(m, &[("encoder_attention_heads", 12), ("decoder_layers", 6), ("decoder_attention_heads", 12)]);
    bart_large(m);
}

/// Applies `arch`'s function and then `base_architecture`; false when `arch` is not a `bart` one.
pub(super) fn apply_bart_arch_defaults(arch: &str, m: &mut Map<String, Value>) -> bool {
    match arch {
        "bart_large" => bart_large(m),
        "bart_base" => bart_base(m),
        "mbart_large" => {
            set_default(m, "no_scale_embedding", false);
            bart_large(m);
        }
        "mbart_base" => {
            set_default(m, "no_scale_embedding", false);
            bart_base(m);
        }
        "mbart_base_wmt20" => {
            set_default(m, "layernorm_embedding", false);
            set_default(m, "no_scale_embedding", false);
            bart_base(m);
        }
        _ => return false,
    }
    base_architecture(m);
    true
}
