//! The typed model configuration resolved from a checkpoint's `args` or `cfg`.
//!
//! fairseq fills missing hyper-parameters with the registered arch function
//! (`ARCH_CONFIG_REGISTRY[arch]`, `fairseq/models/transformer/transformer_legacy.py`), which only
//! sets attributes that are absent (`getattr(args, name, default)`), then `base_architecture`.
//! [`apply_arch_defaults`] ports those functions onto a JSON map, in fairseq's order.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod bart;
mod compute_type;
mod lm;
pub mod sinusoid;
mod task;
pub use bart::BART_ARCHS;
pub use compute_type::{ComputeType, UnknownComputeType};
pub use lm::LM_ARCHS;
pub use task::{lang_tok, parse_lang_dict, parse_lang_pairs, LangTokStyle, LanguageTask, MultilingualTask, TaskOverrides, MULTILINGUAL_TASK, PRETRAINED_BART_TASK};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("checkpoint config has no `{0}`")]
    Missing(String),
    #[error("checkpoint config: `{key}` = {value} is not a valid {expected}")]
    Invalid { key: String, value: String, expected: &'static str },
    #[error("unsupported architecture `{0}` (supported: {list}, {bart}, and transformer_lm with its variants)", list = SUPPORTED_ARCHS.join(", "), bart = BART_ARCHS.join(", "))]
    UnsupportedArch(String),
    #[error("unsupported model options: {0}")]
    UnsupportedOptions(String),
    #[error("config interpolation {0}")]
    Interpolation(String),
}

/// Architectures whose defaults are known (fairseq 0.12.2 `transformer_legacy.py`).
pub const SUPPORTED_ARCHS: &[&str] = &[
    "transformer",
    "transformer_tiny",
    "transformer_iwslt_de_en",
    "transformer_wmt_en_de",
    "transformer_vaswani_wmt_en_de_big",
    "transformer_vaswani_wmt_en_fr_big",
    "transformer_wmt_en_de_big",
    "transformer_wmt_en_de_big_t2t",
];

const ACTIVATIONS: &[&str] = &["relu", "relu_squared", "gelu", "gelu_fast", "gelu_accurate", "tanh", "linear"];

/// Every forward-relevant option of a fairseq `transformer` (fairseq-spec §3.2) with arch
/// defaults applied, plus the task/pipeline options the text pipeline needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransformerConfig {
    pub arch: String,
    pub encoder_embed_dim: i64,
    pub encoder_ffn_embed_dim: i64,
    pub encoder_layers: i64,
    pub encoder_attention_heads: i64,
    pub encoder_normalize_before: bool,
    pub encoder_learned_pos: bool,
    pub decoder_embed_dim: i64,
    pub decoder_ffn_embed_dim: i64,
    pub decoder_layers: i64,
    pub decoder_attention_heads: i64,
    pub decoder_normalize_before: bool,
    pub decoder_learned_pos: bool,
    pub no_decoder_final_norm: bool,
    pub decoder_output_dim: i64,
    pub decoder_input_dim: i64,
    pub activation_fn: String,
    pub share_decoder_input_output_embed: bool,
    pub share_all_embeddings: bool,
    pub merge_src_tgt_embed: bool,
    pub no_token_positional_embeddings: bool,
    pub no_scale_embedding: bool,
    pub layernorm_embedding: bool,
    pub max_source_positions: i64,
    pub max_target_positions: i64,
    /// `language_modeling`: a BOS starts every sample (else EOS does).
    #[serde(default)]
    pub add_bos_token: bool,
    /// `language_modeling`: the sample length the model was trained with.
    #[serde(default)]
    pub tokens_per_sample: Option<i64>,
    // Task and text pipeline.
    pub task: Option<String>,
    /// The language tokens of the multilingual tasks.
    #[serde(default)]
    pub language_task: LanguageTask,
    pub source_lang: Option<String>,
    pub target_lang: Option<String>,
    pub left_pad_source: bool,
    pub left_pad_target: bool,
    /// `moses`, `space`, ... (None: text is fed as is).
    pub tokenizer: Option<String>,
    /// `subword_nmt`, `fastbpe`, `sentencepiece`, ... (None: no subword step).
    pub bpe: Option<String>,
    /// The BPE's file as training named it (`--sentencepiece-model`, `--bpe-codes`): a path on
    /// the training machine, whose file name a model directory may hold.
    #[serde(default)]
    pub bpe_file: Option<String>,
    pub moses_source_lang: Option<String>,
    pub moses_target_lang: Option<String>,
    pub moses_no_dash_splits: bool,
    pub moses_no_escape: bool,
    /// The dictionaries' file names where the checkpoint decides them (a Hugging Face
    /// directory's vocabulary files), source then target; else fairseq's `dict.<lang>.txt`.
    #[serde(default)]
    pub dictionary_files: Option<(String, String)>,
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: impl Into<Value>) {
    if !m.contains_key(key) {
        m.insert(key.to_string(), v.into());
    }
}

/// [`set_default`] for each pair, in order (as fairseq's arch functions list them).
fn set_defaults(m: &mut Map<String, Value>, defaults: &[(&str, i64)]) {
    for &(key, value) in defaults {
        set_default(m, key, value);
    }
}

fn copy_default(m: &mut Map<String, Value>, key: &str, from: &str) {
    if !m.contains_key(key) {
        let v = m.get(from).cloned().unwrap_or(Value::Null);
        m.insert(key.to_string(), v);
    }
}

fn base_architecture(m: &mut Map<String, Value>) {
    set_default(m, "encoder_embed_dim", 512);
    set_default(m, "encoder_ffn_embed_dim", 2048);
    set_default(m, "encoder_layers", 6);
    set_default(m, "encoder_attention_heads", 8);
    set_default(m, "encoder_normalize_before", false);
    set_default(m, "encoder_learned_pos", false);
    copy_default(m, "decoder_embed_dim", "encoder_embed_dim");
    copy_default(m, "decoder_ffn_embed_dim", "encoder_ffn_embed_dim");
    set_default(m, "decoder_layers", 6);
    set_default(m, "decoder_attention_heads", 8);
    set_default(m, "decoder_normalize_before", false);
    set_default(m, "decoder_learned_pos", false);
    set_default(m, "attention_dropout", 0.0);
    set_default(m, "activation_dropout", 0.0);
    set_default(m, "activation_fn", "relu");
    set_default(m, "dropout", 0.1);
    set_default(m, "adaptive_softmax_cutoff", Value::Null);
    set_default(m, "share_decoder_input_output_embed", false);
    set_default(m, "share_all_embeddings", false);
    set_default(m, "no_token_positional_embeddings", false);
    set_default(m, "adaptive_input", false);
    set_default(m, "no_cross_attention", false);
    set_default(m, "cross_self_attention", false);
    copy_default(m, "decoder_output_dim", "decoder_embed_dim");
    copy_default(m, "decoder_input_dim", "decoder_embed_dim");
    set_default(m, "no_scale_embedding", false);
    set_default(m, "layernorm_embedding", false);
    set_default(m, "encoder_layers_to_keep", Value::Null);
    set_default(m, "decoder_layers_to_keep", Value::Null);
    set_default(m, "quant_noise_pq", 0);
}

fn vaswani_big(m: &mut Map<String, Value>) {
    set_default(m, "encoder_embed_dim", 1024);
    set_default(m, "encoder_ffn_embed_dim", 4096);
    set_default(m, "encoder_attention_heads", 16);
    set_default(m, "encoder_normalize_before", false);
    set_default(m, "decoder_embed_dim", 1024);
    set_default(m, "decoder_ffn_embed_dim", 4096);
    set_default(m, "decoder_attention_heads", 16);
    set_default(m, "dropout", 0.3);
    base_architecture(m);
}

/// Applies the arch function registered for `arch` (fairseq's order).
pub fn apply_arch_defaults(arch: &str, m: &mut Map<String, Value>) -> Result<(), ConfigError> {
    match arch {
        "transformer" | "transformer_wmt_en_de" => base_architecture(m),
        "transformer_tiny" => {
            let sizes = [("encoder_embed_dim", 64), ("encoder_ffn_embed_dim", 64), ("encoder_layers", 2)];
            set_defaults(m, &sizes);
            set_defaults(m, &[("encoder_attention_heads", 2), ("decoder_layers", 2), ("decoder_attention_heads", 2)]);
            base_architecture(m);
        }
        "transformer_iwslt_de_en" => {
            let encoder = [("encoder_embed_dim", 512), ("encoder_ffn_embed_dim", 1024), ("encoder_attention_heads", 4)];
            set_defaults(m, &encoder);
            set_defaults(m, &[("encoder_layers", 6), ("decoder_embed_dim", 512), ("decoder_ffn_embed_dim", 1024)]);
            set_defaults(m, &[("decoder_attention_heads", 4), ("decoder_layers", 6)]);
            base_architecture(m);
        }
        "transformer_vaswani_wmt_en_de_big" => vaswani_big(m),
        "transformer_vaswani_wmt_en_fr_big" => {
            set_default(m, "dropout", 0.1);
            vaswani_big(m);
        }
        "transformer_wmt_en_de_big" => {
            set_default(m, "attention_dropout", 0.1);
            vaswani_big(m);
        }
        "transformer_wmt_en_de_big_t2t" => {
            set_default(m, "encoder_normalize_before", true);
            set_default(m, "decoder_normalize_before", true);
            set_default(m, "attention_dropout", 0.1);
            set_default(m, "activation_dropout", 0.1);
            vaswani_big(m);
        }
        other => return Err(ConfigError::UnsupportedArch(other.to_string())),
    }
    Ok(())
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..s.char_indices().nth(57).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

/// Python truthiness of a stored option; old checkpoints store booleans as strings.
fn as_bool(key: &str, v: &Value) -> Result<bool, ConfigError> {
    match v {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        Value::Number(n) => Ok(n.as_f64().is_some_and(|x| x != 0.0)),
        Value::String(s) => match s.trim() {
            "True" | "true" | "1" => Ok(true),
            "False" | "false" | "0" | "" | "None" => Ok(false),
            _ => Err(ConfigError::Invalid { key: key.into(), value: show(v), expected: "boolean" }),
        },
        _ => Err(ConfigError::Invalid { key: key.into(), value: show(v), expected: "boolean" }),
    }
}

fn as_int(key: &str, v: &Value) -> Result<i64, ConfigError> {
    let bad = || ConfigError::Invalid { key: key.into(), value: show(v), expected: "integer" };
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9e15).map(|f| f as i64)).ok_or_else(bad),
        Value::String(s) => s.trim().parse().map_err(|_| bad()),
        Value::Bool(b) => Ok(i64::from(*b)),
        _ => Err(bad()),
    }
}

fn as_opt_str(key: &str, v: Option<&Value>) -> Result<Option<String>, ConfigError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s == "None" || s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ConfigError::Invalid { key: key.into(), value: show(other), expected: "string" }),
    }
}

/// A component entry (`tokenizer`/`bpe`): a name string (args era) or a dict with `_name`.
fn component_name(key: &str, v: Option<&Value>) -> Result<Option<String>, ConfigError> {
    match v {
        Some(Value::Object(m)) => as_opt_str(key, m.get("_name")),
        other => as_opt_str(key, other),
    }
}

impl TransformerConfig {
    /// Builds the config from fairseq's flat model namespace (`args`, or `cfg.model`), the task
    /// config (`cfg.task`; None in the args era, where task options sit in the same namespace)
    /// and the `tokenizer`/`bpe` components (`cfg.tokenizer`/`cfg.bpe`; args era: in `model`).
    pub fn from_namespace(model: &Map<String, Value>, task: Option<&Map<String, Value>>, tokenizer: Option<&Value>, bpe: Option<&Value>) -> Result<Self, ConfigError> {
        let mut m = model.clone();
        // A None stored for a dimension means "not set" (getattr would return None and the
        // dataclass would then use its default); drop those so the arch defaults apply.
        m.retain(|_, v| !v.is_null());
        let arch = match (m.get("arch"), m.get("_name")) {
            (Some(Value::String(a)), _) => a.clone(),
            (_, Some(Value::String(a))) => a.clone(),
            _ => return Err(ConfigError::Missing("arch".into())),
        };
        // fairseq `_upgrade_state_dict`: `max_positions` predates source/target positions.
        if let Some(mp) = m.get("max_positions").cloned() {
            set_default(&mut m, "max_source_positions", mp.clone());
            set_default(&mut m, "max_target_positions", mp);
        }
        let task_get = |m: &Map<String, Value>, k: &str| task.and_then(|t| t.get(k)).filter(|v| !v.is_null()).or_else(|| m.get(k)).cloned();
        let tokens_per_sample = task_get(&m, "tokens_per_sample").map(|v| as_int("tokens_per_sample", &v)).transpose()?;
        if lm::apply_lm_arch_defaults(&arch, &mut m) {
            // TransformerLanguageModel.build_model: max_target_positions, else tokens_per_sample
            if let Some(t) = task_get(&m, "max_target_positions").or_else(|| tokens_per_sample.map(Value::from)) {
                set_default(&mut m, "max_target_positions", t);
            }
            set_default(&mut m, "max_target_positions", 1024);
            copy_default(&mut m, "max_source_positions", "max_target_positions");
        } else if !bart::apply_bart_arch_defaults(&arch, &mut m) {
            apply_arch_defaults(&arch, &mut m)?;
        }
        set_default(&mut m, "max_source_positions", 1024);
        set_default(&mut m, "max_target_positions", 1024);

        let mut unsupported = Vec::new();
        for key in ["adaptive_softmax_cutoff", "encoder_layers_to_keep", "decoder_layers_to_keep"] {
            if let Some(v) = m.get(key) {
                if !v.is_null() && v.as_str().is_none_or(|s| !s.is_empty() && s != "None") {
                    unsupported.push(format!("{key}={}", show(v)));
                }
            }
        }
        for key in ["adaptive_input", "character_embeddings", "cross_self_attention", "no_cross_attention", "tie_adaptive_weights", "scale_attn", "scale_fc", "scale_heads", "scale_resids", "add_bias_kv", "add_zero_attn"] {
            if let Some(v) = m.get(key) {
                if as_bool(key, v)? {
                    unsupported.push(key.to_string());
                }
            }
        }
        // MoE layers (fairseq's moe branch) and quantization noise
        for key in ["quant_noise_pq", "quant_noise_scalar", "moe_freq", "encoder_moe_freq", "decoder_moe_freq", "moe_expert_count"] {
            if let Some(v) = m.get(key) {
                if v.as_f64().is_some_and(|x| x != 0.0) || v.as_str().and_then(|s| s.parse::<f64>().ok()).is_some_and(|x| x != 0.0) {
                    unsupported.push(format!("{key}={}", show(v)));
                }
            }
        }
        if !unsupported.is_empty() {
            return Err(ConfigError::UnsupportedOptions(unsupported.join(", ")));
        }

        let get = |k: &str| m.get(k).ok_or_else(|| ConfigError::Missing(k.to_string()));
        let int = |k: &str| as_int(k, get(k)?);
        let flag = |k: &str| match m.get(k) {
            Some(v) => as_bool(k, v),
            None => Ok(false),
        };
        let activation_fn = as_opt_str("activation_fn", m.get("activation_fn"))?.unwrap_or_else(|| "relu".into());
        if !ACTIVATIONS.contains(&activation_fn.as_str()) {
            return Err(ConfigError::UnsupportedOptions(format!("activation_fn={activation_fn}")));
        }
        // Task options: `cfg.task` first, then the flat namespace (args era).
        let task_get = |k: &str| task.and_then(|t| t.get(k)).or_else(|| m.get(k));
        let task_flag = |k: &str, default: bool| match task_get(k) {
            Some(v) if !v.is_null() => as_bool(k, v),
            _ => Ok(default),
        };
        let tokenizer_v = tokenizer.or_else(|| m.get("tokenizer"));
        let bpe_v = bpe.or_else(|| m.get("bpe"));
        let tok_opt = |k: &str| -> Option<&Value> {
            match tokenizer_v {
                Some(Value::Object(t)) => t.get(k),
                _ => m.get(k),
            }
        };
        let share_all = flag("share_all_embeddings")?;
        let task_name = as_opt_str("task", task.and_then(|t| t.get("_name")).or_else(|| m.get("task")))?;
        let language_task = LanguageTask::from_namespace(task_name.as_deref(), |k| task_get(k).filter(|v| !v.is_null()))?;
        let cfg = TransformerConfig {
            arch: arch.clone(),
            encoder_embed_dim: int("encoder_embed_dim")?,
            encoder_ffn_embed_dim: int("encoder_ffn_embed_dim")?,
            encoder_layers: int("encoder_layers")?,
            encoder_attention_heads: int("encoder_attention_heads")?,
            encoder_normalize_before: flag("encoder_normalize_before")?,
            encoder_learned_pos: flag("encoder_learned_pos")?,
            decoder_embed_dim: int("decoder_embed_dim")?,
            decoder_ffn_embed_dim: int("decoder_ffn_embed_dim")?,
            decoder_layers: int("decoder_layers")?,
            decoder_attention_heads: int("decoder_attention_heads")?,
            decoder_normalize_before: flag("decoder_normalize_before")?,
            decoder_learned_pos: flag("decoder_learned_pos")?,
            no_decoder_final_norm: flag("no_decoder_final_norm")?,
            decoder_output_dim: int("decoder_output_dim")?,
            decoder_input_dim: int("decoder_input_dim")?,
            activation_fn,
            // fairseq: share_all_embeddings implies share_decoder_input_output_embed.
            share_decoder_input_output_embed: share_all || flag("share_decoder_input_output_embed")?,
            share_all_embeddings: share_all,
            merge_src_tgt_embed: flag("merge_src_tgt_embed")?,
            no_token_positional_embeddings: flag("no_token_positional_embeddings")?,
            no_scale_embedding: flag("no_scale_embedding")?,
            layernorm_embedding: flag("layernorm_embedding")?,
            max_source_positions: int("max_source_positions")?,
            max_target_positions: int("max_target_positions")?,
            add_bos_token: task_flag("add_bos_token", false)?,
            tokens_per_sample,
            task: task_name,
            language_task,
            source_lang: as_opt_str("source_lang", task_get("source_lang"))?,
            target_lang: as_opt_str("target_lang", task_get("target_lang"))?,
            left_pad_source: task_flag("left_pad_source", true)?,
            left_pad_target: task_flag("left_pad_target", false)?,
            tokenizer: component_name("tokenizer", tokenizer_v)?,
            bpe: component_name("bpe", bpe_v)?,
            bpe_file: {
                let bpe_opt = |k: &str| match bpe_v {
                    Some(Value::Object(b)) => b.get(k),
                    _ => m.get(k),
                };
                match as_opt_str("sentencepiece_model", bpe_opt("sentencepiece_model"))? {
                    Some(f) => Some(f),
                    None => as_opt_str("bpe_codes", bpe_opt("bpe_codes"))?,
                }
            },
            moses_source_lang: as_opt_str("moses_source_lang", tok_opt("source_lang").filter(|_| tokenizer_v.is_some_and(|t| t.is_object())).or_else(|| m.get("moses_source_lang")))?,
            moses_target_lang: as_opt_str("moses_target_lang", tok_opt("target_lang").filter(|_| tokenizer_v.is_some_and(|t| t.is_object())).or_else(|| m.get("moses_target_lang")))?,
            moses_no_dash_splits: tok_opt("moses_no_dash_splits").map(|v| as_bool("moses_no_dash_splits", v)).transpose()?.unwrap_or(false),
            moses_no_escape: tok_opt("moses_no_escape").map(|v| as_bool("moses_no_escape", v)).transpose()?.unwrap_or(false),
            dictionary_files: None,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// A `transformer_lm`: a decoder without encoder attention, over one dictionary.
    pub fn is_language_model(&self) -> bool {
        LM_ARCHS.contains(&self.arch.as_str())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&str, i64); 10] = [
            ("encoder_embed_dim", self.encoder_embed_dim),
            ("encoder_ffn_embed_dim", self.encoder_ffn_embed_dim),
            ("encoder_attention_heads", self.encoder_attention_heads),
            ("decoder_embed_dim", self.decoder_embed_dim),
            ("decoder_ffn_embed_dim", self.decoder_ffn_embed_dim),
            ("decoder_attention_heads", self.decoder_attention_heads),
            ("decoder_output_dim", self.decoder_output_dim),
            ("decoder_input_dim", self.decoder_input_dim),
            ("max_source_positions", self.max_source_positions),
            ("max_target_positions", self.max_target_positions),
        ];
        for (k, v) in checks {
            if v <= 0 {
                return Err(ConfigError::Invalid { key: k.into(), value: v.to_string(), expected: "positive integer" });
            }
        }
        for (k, v) in [("encoder_layers", self.encoder_layers), ("decoder_layers", self.decoder_layers)] {
            if !(0..=10_000).contains(&v) {
                return Err(ConfigError::Invalid { key: k.into(), value: v.to_string(), expected: "layer count" });
            }
        }
        if self.encoder_embed_dim % self.encoder_attention_heads != 0 {
            return Err(ConfigError::Invalid { key: "encoder_attention_heads".into(), value: self.encoder_attention_heads.to_string(), expected: "divisor of encoder_embed_dim" });
        }
        if self.decoder_embed_dim % self.decoder_attention_heads != 0 {
            return Err(ConfigError::Invalid { key: "decoder_attention_heads".into(), value: self.decoder_attention_heads.to_string(), expected: "divisor of decoder_embed_dim" });
        }
        Ok(())
    }
}

/// Resolves omegaconf `${a.b.c}` interpolations (absolute from the root, or relative with
/// leading dots) left in string values of a `cfg` tree.
pub fn resolve_interpolations(root: &mut Value) -> Result<(), ConfigError> {
    let snapshot = root.clone();
    resolve_node(root, &snapshot, &mut Vec::new(), 0)
}

const MAX_DEPTH: usize = 64;

fn resolve_node(v: &mut Value, root: &Value, path: &mut Vec<String>, depth: usize) -> Result<(), ConfigError> {
    if depth > MAX_DEPTH {
        return Err(ConfigError::Interpolation(format!("nesting deeper than {MAX_DEPTH}")));
    }
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                path.push(k.clone());
                resolve_node(child, root, path, depth + 1)?;
                path.pop();
            }
        }
        Value::Array(a) => {
            for child in a.iter_mut() {
                resolve_node(child, root, path, depth + 1)?;
            }
        }
        Value::String(s) if s.contains("${") => {
            *v = interpolate(s, root, &path[..path.len().saturating_sub(1)], 0)?;
        }
        _ => {}
    }
    Ok(())
}

fn lookup<'a>(root: &'a Value, parent: &[String], reference: &str) -> Option<&'a Value> {
    let (mut node_path, rest): (Vec<&str>, &str) = if let Some(rel) = reference.strip_prefix('.') {
        let ups = rel.chars().take_while(|&c| c == '.').count();
        let keep = parent.len().checked_sub(ups)?;
        (parent[..keep].iter().map(String::as_str).collect(), &rel[ups..])
    } else {
        (Vec::new(), reference)
    };
    node_path.extend(rest.split('.').filter(|s| !s.is_empty()));
    let mut cur = root;
    for part in node_path {
        cur = match cur {
            Value::Object(m) => m.get(part)?,
            Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn interpolate(s: &str, root: &Value, parent: &[String], depth: usize) -> Result<Value, ConfigError> {
    if depth > MAX_DEPTH {
        return Err(ConfigError::Interpolation(format!("{s:?} does not terminate (cycle?)")));
    }
    let resolve_ref = |r: &str| -> Result<Value, ConfigError> {
        if r.contains(':') {
            return Err(ConfigError::Interpolation(format!("resolver `${{{r}}}` is not supported")));
        }
        let target = lookup(root, parent, r).ok_or_else(|| ConfigError::Interpolation(format!("`${{{r}}}` names no config key")))?;
        match target {
            Value::String(t) if t.contains("${") => interpolate(t, root, parent, depth + 1),
            other => Ok(other.clone()),
        }
    };
    let trimmed = s.trim();
    if let Some(inner) = trimmed.strip_prefix("${").and_then(|x| x.strip_suffix('}')) {
        if !inner.contains("${") && !inner.contains('}') {
            return resolve_ref(inner);
        }
    }
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or_else(|| ConfigError::Interpolation(format!("unterminated in {s:?}")))?;
        match resolve_ref(&after[..end])? {
            Value::String(t) => out.push_str(&t),
            Value::Null => out.push_str("None"),
            other => out.push_str(&other.to_string()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(Value::String(out))
}

#[cfg(test)]
mod tests;
