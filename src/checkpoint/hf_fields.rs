//! The fields of a Hugging Face directory's `config.json` and `generation_config.json` as
//! transformers 4.57.6 reads them (`M2M100Config`, `FSMTConfig`, `PretrainedConfig`,
//! `GenerationConfig`, and what `modeling_m2m_100.py` / `modeling_fsmt.py` and `generate()` read
//! of them), each either compared with the value a faithful conversion of a fairseq model holds,
//! or known to leave what transformers computes unchanged. A field in neither list is an error:
//! tchseq cannot say what it does to the conversion.
//!
//! `reference/hf_plants.py` measures which fields change transformers' output
//! (`tests/fixtures/hf/plants.json`).

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use super::hf_dir::{read_config_json, HfArchitecture, HfDirError};
use crate::config::TransformerConfig;

/// The two files read.
pub const CONFIG: &str = "config.json";
pub const GENERATION_CONFIG: &str = "generation_config.json";

/// What the fairseq model a conversion came from fixes of its fields.
#[derive(Debug, Clone)]
pub struct FairseqModel<'a> {
    pub config: &'a TransformerConfig,
    /// The target dictionary's `<s>`, `<pad>`, `</s>`, and the symbols of `<s>`, `</s>`, `<unk>`.
    pub bos: i64,
    pub pad: i64,
    pub eos: i64,
    pub bos_word: &'a str,
    pub eos_word: &'a str,
    pub unk_word: &'a str,
    /// Rows of the encoder's and the decoder's embedding tables.
    pub source_rows: i64,
    pub target_rows: i64,
}

/// One field whose value is not what a faithful conversion holds.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDiff {
    /// `config.json` or `generation_config.json`.
    pub file: &'static str,
    /// transformers' name of the field.
    pub field: String,
    /// What a faithful conversion holds (the values allowed, when more than one is).
    pub faithful: Value,
    /// What the file holds (transformers' default where it holds nothing).
    pub found: Value,
}

/// `config.json` fields that leave transformers' output unchanged at inference, for both
/// classes: training-only settings, bookkeeping `PretrainedConfig` writes, output switches, and
/// decoding options (which `generate()` reads from `generation_config.json` when it is there;
/// tchseq's are its command line's).
const CONFIG_INERT: [&str; 55] = [
    // training only: eval() disables dropout and LayerDrop; init_std initialises missing weights
    "dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop", "init_std", "gradient_checkpointing",
    // what PretrainedConfig writes about itself
    "architectures", "dtype", "torch_dtype", "transformers_version", "_name_or_path", "_commit_hash", "model_type", "id2label", "label2id",
    "num_labels", "finetuning_task", "problem_type", "prefix", "task_specific_params", "tokenizer_class", "tf_legacy_loss", "use_bfloat16",
    // what the forward returns, not what it computes
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_cache",
    // never read by these two classes
    "chunk_size_feed_forward", "add_cross_attention", "cross_attention_hidden_size", "sep_token_id",
    // decoding options
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k",
    "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "remove_invalid_values", "exponential_decay_length_penalty",
    "max_new_tokens", "min_new_tokens",
];

/// `FSMTConfig` fields the model never reads: `langs` (FSMTTokenizer reads its own from
/// `tokenizer_config.json`), `decoder` (rebuilt from the top-level fields), `vocab_size` (the
/// training loss only).
const FSMT_INERT: [&str; 3] = ["langs", "decoder", "vocab_size"];

/// `generation_config.json` fields that are decoding options (tchseq's come from its command
/// line) or bookkeeping.
const GENERATION_INERT: [&str; 30] = [
    "transformers_version", "_from_model_config", "max_length", "max_new_tokens", "min_length", "min_new_tokens", "early_stopping",
    "max_time", "stop_strings", "do_sample", "num_beams", "num_beam_groups", "penalty_alpha", "use_cache", "temperature", "top_k", "top_p",
    "typical_p", "epsilon_cutoff", "eta_cutoff", "diversity_penalty", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "num_return_sequences", "output_scores", "return_dict_in_generate", "output_attentions", "output_hidden_states",
];

/// A compared field: its name, the values a faithful conversion may hold, and transformers'
/// default when the file does not hold it (None: only compared when present).
struct Compared {
    field: &'static str,
    faithful: Vec<Value>,
    default: Option<Value>,
}

fn compared(field: &'static str, faithful: Value, default: Option<Value>) -> Compared {
    Compared { field, faithful: vec![faithful], default }
}

/// The `config.json` fields compared, with what a faithful conversion of `m` holds (as
/// transformers' converters write it) and the class's default.
fn config_fields(arch: HfArchitecture, m: &FairseqModel) -> Vec<Compared> {
    let c = m.config;
    let m2m = arch == HfArchitecture::M2m100;
    let mut v = vec![
        compared("d_model", json!(c.encoder_embed_dim), Some(json!(1024))),
        compared("hidden_size", json!(c.encoder_embed_dim), None),
        compared("encoder_layers", json!(c.encoder_layers), Some(json!(12))),
        compared("decoder_layers", json!(c.decoder_layers), Some(json!(12))),
        compared("num_hidden_layers", json!(c.encoder_layers), None),
        compared("encoder_attention_heads", json!(c.encoder_attention_heads), Some(json!(16))),
        compared("num_attention_heads", json!(c.encoder_attention_heads), None),
        compared("decoder_attention_heads", json!(c.decoder_attention_heads), Some(json!(16))),
        compared("encoder_ffn_dim", json!(c.encoder_ffn_embed_dim), Some(json!(4096))),
        compared("decoder_ffn_dim", json!(c.decoder_ffn_embed_dim), Some(json!(4096))),
        compared("activation_function", json!(c.activation_fn), Some(json!("relu"))),
        compared("scale_embedding", json!(!c.no_scale_embedding), Some(json!(true))),
        compared("max_position_embeddings", json!(c.max_source_positions), Some(json!(1024))),
        compared("pad_token_id", json!(m.pad), Some(json!(1))),
        compared("bos_token_id", json!(m.bos), Some(json!(0))),
        compared("eos_token_id", json!(m.eos), Some(json!(2))),
        compared("decoder_start_token_id", json!(m.eos), Some(json!(2))),
        compared("forced_bos_token_id", Value::Null, Some(Value::Null)),
        Compared { field: "forced_eos_token_id", faithful: vec![json!(m.eos), Value::Null], default: Some(if m2m { Value::Null } else { json!(2) }) },
        compared("is_encoder_decoder", json!(true), Some(json!(true))),
        compared("is_decoder", json!(false), Some(json!(false))),
        compared("tie_encoder_decoder", json!(false), Some(json!(false))),
        compared("pruned_heads", json!({}), Some(json!({}))),
    ];
    match arch {
        HfArchitecture::M2m100 => {
            v.push(compared("vocab_size", json!(m.source_rows), Some(json!(128112))));
            v.push(compared("tie_word_embeddings", json!(true), Some(json!(true))));
        }
        HfArchitecture::Fsmt => {
            v.push(compared("src_vocab_size", json!(m.source_rows), Some(json!(42024))));
            v.push(compared("tgt_vocab_size", json!(m.target_rows), Some(json!(42024))));
            v.push(compared("tie_word_embeddings", json!(c.share_all_embeddings), Some(json!(false))));
        }
    }
    v
}

/// The `generation_config.json` fields compared: the token ids `generate()` reads, as fairseq's
/// search uses them (it starts from `</s>`, never emits `<pad>`, forces nothing).
fn generation_fields(m: &FairseqModel) -> Vec<Compared> {
    vec![
        compared("bos_token_id", json!(m.bos), None),
        compared("eos_token_id", json!(m.eos), None),
        compared("pad_token_id", json!(m.pad), None),
        compared("decoder_start_token_id", json!(m.eos), None),
        compared("forced_bos_token_id", Value::Null, None),
        Compared { field: "forced_eos_token_id", faithful: vec![json!(m.eos), Value::Null], default: None },
        Compared { field: "suppress_tokens", faithful: vec![json!([m.pad]), json!([]), Value::Null], default: None },
        Compared { field: "begin_suppress_tokens", faithful: vec![json!([]), Value::Null], default: None },
        compared("forced_decoder_ids", Value::Null, None),
        compared("bad_words_ids", Value::Null, None),
    ]
}

/// Two JSON values equal as transformers reads them (`2` and `2.0` alike).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn check_file(path: &Path, file: &'static str, fields: &[Compared], not_compared: &dyn Fn(&str) -> bool, class: &'static str) -> Result<Vec<FieldDiff>, HfDirError> {
    let value = read_config_json(path)?;
    let Value::Object(map) = value else {
        return Err(HfDirError::NotAnObject { path: path.to_path_buf() });
    };
    if let Some(unknown) = map.keys().find(|k| !not_compared(k) && !fields.iter().any(|f| f.field == k.as_str())) {
        return Err(HfDirError::UnknownField { path: path.to_path_buf(), field: unknown.clone(), class });
    }
    Ok(diffs(file, &map, fields))
}

fn diffs(file: &'static str, map: &Map<String, Value>, fields: &[Compared]) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    for f in fields {
        let Some(found) = map.get(f.field).or(f.default.as_ref()) else { continue };
        if !f.faithful.iter().any(|v| same(v, found)) {
            let faithful = if f.faithful.len() == 1 { f.faithful[0].clone() } else { Value::Array(f.faithful.clone()) };
            out.push(FieldDiff { file, field: f.field.to_string(), faithful, found: found.clone() });
        }
    }
    out
}

/// Every field of `dir`'s `config.json` and `generation_config.json` (where there is one) that
/// differs from what a faithful conversion of `m` holds; an error for a field neither compared
/// nor known to be inert.
pub fn check(dir: &Path, arch: HfArchitecture, m: &FairseqModel) -> Result<Vec<FieldDiff>, HfDirError> {
    let class = match arch {
        HfArchitecture::M2m100 => "M2M100Config",
        HfArchitecture::Fsmt => "FSMTConfig",
    };
    let fields = config_fields(arch, m);
    // the token fields only generate() reads (suppress_tokens, ...): in generation_config.json
    // where there is one, else in config.json (GenerationConfig.from_model_config)
    let generation_only: Vec<Compared> = generation_fields(m).into_iter().filter(|g| !fields.iter().any(|f| f.field == g.field)).collect();
    let config_not_compared = |k: &str| {
        CONFIG_INERT.contains(&k) || (arch == HfArchitecture::Fsmt && FSMT_INERT.contains(&k)) || generation_only.iter().any(|g| g.field == k)
    };
    let mut out = check_file(&dir.join(CONFIG), CONFIG, &fields, &config_not_compared, class)?;
    let generation: PathBuf = dir.join(GENERATION_CONFIG);
    if generation.is_file() {
        let generation_inert = |k: &str| GENERATION_INERT.contains(&k);
        out.extend(check_file(&generation, GENERATION_CONFIG, &generation_fields(m), &generation_inert, "GenerationConfig")?);
    } else if let Value::Object(map) = read_config_json(&dir.join(CONFIG))? {
        out.extend(diffs(CONFIG, &map, &generation_only));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compared_once(file: &str) -> Vec<&'static str> {
        let ns = serde_json::from_value(json!({"arch": "transformer"})).unwrap_or_default();
        let c = TransformerConfig::from_namespace(&ns, None, None, None).unwrap();
        let m = FairseqModel { config: &c, bos: 0, pad: 1, eos: 2, bos_word: "<s>", eos_word: "</s>", unk_word: "<unk>", source_rows: 8, target_rows: 8 };
        match file {
            CONFIG => [HfArchitecture::M2m100, HfArchitecture::Fsmt].iter().flat_map(|a| config_fields(*a, &m)).map(|f| f.field).collect(),
            _ => generation_fields(&m).into_iter().map(|f| f.field).collect(),
        }
    }

    fn fields_of(dir: &Path, config: Value, generation: Option<Value>) -> Vec<(&'static str, String)> {
        std::fs::write(dir.join(CONFIG), config.to_string()).unwrap();
        if let Some(g) = generation {
            std::fs::write(dir.join(GENERATION_CONFIG), g.to_string()).unwrap();
        }
        let ns = serde_json::from_value(json!({"arch": "transformer", "encoder_embed_dim": 8, "encoder_layers": 1, "decoder_layers": 1})).unwrap_or_default();
        let c = TransformerConfig::from_namespace(&ns, None, None, None).unwrap();
        let m = FairseqModel { config: &c, bos: 0, pad: 1, eos: 2, bos_word: "<s>", eos_word: "</s>", unk_word: "<unk>", source_rows: 8, target_rows: 8 };
        check(dir, HfArchitecture::M2m100, &m).unwrap().into_iter().map(|d| (d.file, d.field)).collect()
    }

    /// Absent fields are transformers' defaults; the token fields generate() reads are compared
    /// in generation_config.json, or in config.json when there is none.
    #[test]
    fn defaults_and_the_generation_fields_are_compared_where_transformers_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let base = json!({"d_model": 8, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 8, "decoder_attention_heads": 8,
            "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048, "vocab_size": 8, "suppress_tokens": [5], "forced_decoder_ids": [[1, 5]]});
        let mut without_scale = fields_of(dir.path(), base.clone(), None);
        without_scale.sort();
        assert_eq!(without_scale, vec![(CONFIG, "forced_decoder_ids".to_string()), (CONFIG, "suppress_tokens".to_string())]);
        let mut unscaled = base;
        unscaled["scale_embedding"] = json!(false);
        let with_generation = fields_of(dir.path(), unscaled, Some(json!({"decoder_start_token_id": 0, "num_beams": 4})));
        assert_eq!(with_generation, vec![(CONFIG, "scale_embedding".to_string()), (GENERATION_CONFIG, "decoder_start_token_id".to_string())]);
    }

    /// No field is both compared and inert: each has one meaning.
    #[test]
    fn no_field_is_both_compared_and_inert() {
        for f in compared_once(CONFIG) {
            assert!(!CONFIG_INERT.contains(&f), "{f}");
        }
        for f in compared_once(GENERATION_CONFIG) {
            assert!(!GENERATION_INERT.contains(&f), "{f}");
        }
    }
}
