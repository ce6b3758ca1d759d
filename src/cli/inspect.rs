//! `tchseq inspect`: what a checkpoint holds, after fairseq's upgrades.

use std::io::Write;

use anyhow::Result;
use tch::{Device, Kind};
use serde_json::json;

use tchseq::checkpoint::dtype_name;
use tchseq::hub::{ModelBundle, Weights};

use super::args::{GlobalArgs, InspectArgs};
use super::common;
use super::Outcome;

pub fn run(_global: &GlobalArgs, a: &InspectArgs) -> Result<Outcome> {
    let m = &a.model;
    let bundle = common::load_bundle(m, None, Weights::Load { device: Device::Cpu, kind: Kind::Float, replay_init: false }, tchseq::kernels::ComputeType::Exact)?;
    let ModelBundle { files, src_dict, tgt_dict, checkpoints, report, .. } = &bundle;
    let mut out = std::io::stdout().lock();
    let mut objects = Vec::new();
    for (ckpt, loaded) in checkpoints.iter().zip(&report.checkpoints) {
        let path = &ckpt.path;
        let parameters: i64 = ckpt.state_dict.values().map(|t| t.numel() as i64).sum();
        let tensors: Vec<_> = ckpt.state_dict.iter().map(|(name, t)| json!({"name": name, "shape": t.size(), "dtype": dtype_name(t.kind())})).collect();
        if a.json {
            objects.push(json!({
                "path": path,
                "format": ckpt.format,
                "config_source": ckpt.config_source,
                "arch": ckpt.config.arch,
                "config": ckpt.config,
                "source_lang": files.source_lang,
                "target_lang": files.target_lang,
                "dictionaries": {
                    "source": {"path": files.src_dict, "size": src_dict.len()},
                    "target": {"path": files.tgt_dict, "size": tgt_dict.len()},
                },
                "bpe_codes": files.bpe_codes,
                "sentencepiece_model": files.sentencepiece_model,
                "languages": report.languages,
                "parameters": parameters,
                "tensors": tensors,
                "unused_keys": loaded.unused_keys,
                "warnings": report.warnings,
            }));
            continue;
        }
        let c = &ckpt.config;
        writeln!(out, "checkpoint     {}", path.display())?;
        writeln!(out, "format         {} (config from {})", ckpt.format.as_str(), ckpt.config_source.as_str())?;
        writeln!(out, "arch           {}", c.arch)?;
        writeln!(out, "encoder        {} layers, dim {}, ffn {}, {} heads, {}{}", c.encoder_layers, c.encoder_embed_dim, c.encoder_ffn_embed_dim, c.encoder_attention_heads, if c.encoder_normalize_before { "pre-norm" } else { "post-norm" }, if c.encoder_learned_pos { ", learned positions" } else { "" })?;
        writeln!(out, "decoder        {} layers, dim {}, ffn {}, {} heads, {}{}", c.decoder_layers, c.decoder_embed_dim, c.decoder_ffn_embed_dim, c.decoder_attention_heads, if c.decoder_normalize_before { "pre-norm" } else { "post-norm" }, if c.decoder_learned_pos { ", learned positions" } else { "" })?;
        writeln!(out, "embeddings     share_all={} share_decoder_input_output={} activation={}", c.share_all_embeddings, c.share_decoder_input_output_embed, c.activation_fn)?;
        writeln!(out, "languages      {} -> {}", files.source_lang, files.target_lang)?;
        if let Some(l) = &report.languages {
            writeln!(out, "task           {} (languages {})", l.task, l.langs.join(", "))?;
            if !l.lang_pairs.is_empty() {
                writeln!(out, "language pairs {}", l.lang_pairs.join(", "))?;
            }
            let tokens: Vec<String> = l.tokens.iter().map(|(t, i)| format!("{t}={i}")).collect();
            writeln!(out, "language tokens {}", tokens.join(" "))?;
        }
        writeln!(out, "dictionaries   {} ({}), {} ({})", files.src_dict.display(), src_dict.len(), files.tgt_dict.display(), tgt_dict.len())?;
        writeln!(out, "text pipeline  tokenizer={} bpe={}", c.tokenizer.as_deref().unwrap_or("none"), c.bpe.as_deref().unwrap_or("none"))?;
        writeln!(out, "parameters     {parameters} numbers in {} tensors", ckpt.state_dict.len())?;
        writeln!(out)?;
        let width = ckpt.state_dict.keys().map(String::len).max().unwrap_or(4);
        writeln!(out, "{:width$}  {:8}  shape", "name", "dtype")?;
        for (name, t) in &ckpt.state_dict {
            writeln!(out, "{name:width$}  {:8}  {:?}", dtype_name(t.kind()), t.size())?;
        }
    }
    if a.json {
        let v = if objects.len() == 1 { objects.remove(0) } else { json!({"ensemble": objects}) };
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    }
    out.flush()?;
    Ok(Outcome::Ok)
}
