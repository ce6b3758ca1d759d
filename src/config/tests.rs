//! The config's unit tests.
use super::*;
use serde_json::json;

fn ns(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn arch_defaults_fill_only_missing_keys() {
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "transformer_wmt_en_de_big_t2t", "decoder_layers": 3})), None, None, None).unwrap();
    assert_eq!((c.encoder_embed_dim, c.decoder_ffn_embed_dim, c.decoder_attention_heads, c.decoder_layers), (1024, 4096, 16, 3));
    assert!(c.encoder_normalize_before && c.decoder_normalize_before);
    let c = TransformerConfig::from_namespace(&ns(json!({"_name": "transformer_tiny", "encoder_embed_dim": 16})), None, None, None).unwrap();
    assert_eq!((c.encoder_embed_dim, c.decoder_embed_dim, c.decoder_ffn_embed_dim, c.encoder_layers), (16, 16, 64, 2));
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "transformer_iwslt_de_en"})), None, None, None).unwrap();
    assert_eq!((c.encoder_ffn_embed_dim, c.encoder_attention_heads, c.decoder_output_dim), (1024, 4, 512));
}

#[test]
fn language_model_archs_follow_fairseq_0_12_2() {
    let lm = |v: Value, task: Option<Value>| {
        let task = task.map(ns);
        TransformerConfig::from_namespace(&ns(v), task.as_ref(), None, None)
    };
    // transformer_lm runs no arch function: the dataclass defaults, post-norm as stored
    let c = lm(json!({"_name": "transformer_lm", "decoder_embed_dim": 64}), Some(json!({"tokens_per_sample": 128}))).unwrap();
    assert!(c.is_language_model() && !c.decoder_normalize_before);
    assert_eq!((c.decoder_input_dim, c.decoder_output_dim, c.max_target_positions), (512, 512, 128));
    // every variant forces pre-norm; gpt3 also ties the embeddings, learns positions and
    // sizes the FFN at 4x
    let c = lm(json!({"_name": "transformer_lm_gpt3_small", "decoder_normalize_before": false}), None).unwrap();
    assert!(c.decoder_normalize_before && c.decoder_learned_pos && c.share_decoder_input_output_embed);
    assert_eq!((c.decoder_embed_dim, c.decoder_ffn_embed_dim, c.decoder_layers, c.decoder_attention_heads), (768, 3072, 12, 12));
    let c = lm(json!({"arch": "transformer_lm_gpt2_tiny", "decoder_final_norm": false}), None).unwrap();
    assert_eq!((c.decoder_embed_dim, c.decoder_attention_heads, c.activation_fn.as_str()), (64, 1, "gelu"));
    assert!(c.no_decoder_final_norm);
    // adaptive input/softmax (wiki103) are named, not run
    let e = lm(json!({"_name": "transformer_lm_wiki103"}), None).unwrap_err().to_string();
    assert!(e.contains("adaptive_softmax_cutoff") && e.contains("adaptive_input"), "{e}");
}

#[test]
fn bart_archs_then_base_architecture() {
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "mbart_large", "encoder_layers": 2})), None, None, None).unwrap();
    assert_eq!((c.encoder_embed_dim, c.encoder_ffn_embed_dim, c.encoder_layers, c.decoder_layers), (1024, 4096, 2, 12));
    assert!(c.encoder_learned_pos && c.layernorm_embedding && c.share_all_embeddings && !c.no_scale_embedding);
    assert_eq!(c.activation_fn, "gelu");
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "bart_base"})), None, None, None).unwrap();
    assert_eq!((c.encoder_embed_dim, c.encoder_attention_heads, c.decoder_layers), (768, 12, 6));
    assert!(c.no_scale_embedding && !c.encoder_normalize_before);
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "mbart_base_wmt20"})), None, None, None).unwrap();
    assert!(!c.layernorm_embedding && !c.no_scale_embedding);
}

#[test]
fn string_booleans_and_max_positions_from_old_checkpoints() {
    let c = TransformerConfig::from_namespace(&ns(json!({"arch": "transformer", "share_all_embeddings": "True", "left_pad_source": "False", "max_positions": 256})), None, None, None).unwrap();
    assert!(c.share_all_embeddings && c.share_decoder_input_output_embed && !c.left_pad_source);
    assert_eq!((c.max_source_positions, c.max_target_positions), (256, 256));
}

#[test]
fn unsupported_options_are_named() {
    let e = TransformerConfig::from_namespace(&ns(json!({"arch": "transformer", "adaptive_softmax_cutoff": "10,20", "cross_self_attention": true})), None, None, None).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("adaptive_softmax_cutoff") && msg.contains("cross_self_attention"), "{msg}");
    let e = TransformerConfig::from_namespace(&ns(json!({"arch": "transformer", "moe_freq": 2, "moe_expert_count": 8})), None, None, None).unwrap_err();
    assert!(e.to_string().contains("moe_freq=2"), "{e}");
    let e = TransformerConfig::from_namespace(&ns(json!({"arch": "lstm"})), None, None, None).unwrap_err();
    assert!(e.to_string().contains("unsupported architecture `lstm`"));
}

#[test]
fn interpolations_resolve_absolute_and_relative() {
    let mut v = json!({"task": {"max_source_positions": 300, "dir": "${.name}/x", "name": "t"}, "model": {"max_source_positions": "${task.max_source_positions}"}});
    resolve_interpolations(&mut v).unwrap();
    assert_eq!(v["model"]["max_source_positions"], json!(300));
    assert_eq!(v["task"]["dir"], json!("t/x"));
    let mut cyc = json!({"a": "${b}", "b": "${a}"});
    assert!(resolve_interpolations(&mut cyc).is_err());
}
