//! `tchseq inspect`: what a checkpoint holds, after fairseq's upgrades.

use std::io::Write;

use anyhow::Result;
use tch::{Device, Kind};
use serde_json::json;

use tchseq::checkpoint::dtype_name;
use tchseq::hub::{LanguageReport, LoadOptions, ModelBundle, ModelSpec, Weights};

use super::args::{GlobalArgs, InspectArgs};
use super::common;
use super::Outcome;

/// Text lines longer than this are wrapped (the language lists of a 100-language model).
const WIDTH: usize = 100;
/// Where a value starts after its label.
const INDENT: usize = 15;

pub fn run(_global: &GlobalArgs, a: &InspectArgs) -> Result<Outcome> {
    let m = &a.model;
    // inspect is how one learns a multilingual model's pairs: without -s/-t it loads the first
    let spec = ModelSpec { any_pair: true, ..common::model_spec(m) };
    let options = LoadOptions {
        weights: Weights::Load { device: Device::Cpu, kind: Kind::Float, replay_init: false },
        ..LoadOptions::fp32(Device::Cpu)
    };
    let bundle = ModelBundle::load(&spec, &options).map_err(common::hub_error)?;
    let ModelBundle { files, src_dict, tgt_dict, checkpoints, report, .. } = &bundle;
    // a pair none chose: -s/-t not given, the checkpoint names none, the model has several
    let config = &checkpoints[0].config;
    let unchosen = m.source_lang.is_none()
        && m.target_lang.is_none()
        && (config.source_lang.is_none() || config.target_lang.is_none())
        && report.languages.as_ref().is_some_and(|l| l.lang_pairs.len() > 1);
    let (source_lang, target_lang) = match unchosen {
        true => (None, None),
        false => (Some(&files.source_lang), Some(&files.target_lang)),
    };
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
                "source_lang": source_lang,
                "target_lang": target_lang,
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
        match unchosen {
            true => writeln!(out, "languages      any pair below (-s SRC -t TGT choose; the files shown are {}'s)", pair_text(&files.source_lang, &files.target_lang))?,
            false => writeln!(out, "languages      {} -> {}", files.source_lang, files.target_lang)?,
        }
        if let Some(l) = &report.languages {
            write!(out, "{}", languages_text(l))?;
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

fn pair_text(source: &str, target: &str) -> String {
    format!("{source} -> {target}")
}

/// A multilingual model's task, languages, pairs and language tokens, every line at most
/// [`WIDTH`] wide where its items allow: a short list on one line as it is, a long one wrapped
/// under its label, and a long pair list as what it is (every pair of the languages) or grouped
/// by source language.
fn languages_text(l: &LanguageReport) -> String {
    let mut text = String::new();
    let task = format!("{} (languages {})", l.task, l.langs.join(", "));
    if INDENT + task.len() <= WIDTH {
        text += &format!("{:INDENT$}{task}\n", "task");
    } else {
        text += &format!("{:INDENT$}{}, {} languages:\n", "task", l.task, l.langs.len());
        text += &wrapped("", &l.langs, ", ", INDENT);
    }
    if !l.lang_pairs.is_empty() {
        text += &pairs_text(l);
    }
    let tokens: Vec<String> = l.tokens.iter().map(|(t, i)| format!("{t}={i}")).collect();
    text += &wrapped("language tokens ", &tokens, " ", INDENT);
    text
}

/// The `language pairs` lines: the list as it is when it fits on one line, else what it is.
fn pairs_text(l: &LanguageReport) -> String {
    let pairs = l.lang_pairs.join(", ");
    if INDENT + pairs.len() <= WIDTH {
        return format!("language pairs {pairs}\n");
    }
    if every_pair(l) {
        let n = l.langs.len();
        return format!("language pairs {}: every pair of two different languages of the {n} above\n", l.lang_pairs.len());
    }
    let mut text = format!("language pairs {}, by source language:\n", l.lang_pairs.len());
    let mut sources: Vec<(&str, Vec<String>)> = Vec::new();
    for pair in &l.lang_pairs {
        let (source, target) = pair.split_once('-').unwrap_or((pair, ""));
        match sources.iter_mut().find(|(s, _)| *s == source) {
            Some((_, targets)) => targets.push(target.to_string()),
            None => sources.push((source, vec![target.to_string()])),
        }
    }
    for (source, targets) in &sources {
        let head = format!("{source} -> ");
        text += &wrapped(&format!("{:INDENT$}{head}", ""), targets, ", ", INDENT + head.len());
    }
    text
}

/// Whether the pairs are every ordered pair of two different languages (M2M-100's and NLLB's
/// all-to-all), each once.
fn every_pair(l: &LanguageReport) -> bool {
    let n = l.langs.len();
    let mut seen = std::collections::HashSet::new();
    l.lang_pairs.len() == n * n.saturating_sub(1)
        && l.lang_pairs.iter().all(|p| {
            p.split_once('-').is_some_and(|(s, t)| s != t && l.langs.iter().any(|x| x == s) && l.langs.iter().any(|x| x == t))
                && seen.insert(p.as_str())
        })
}

/// `items` after `first` (the first line's start), joined by `sep` and broken into lines of at
/// most [`WIDTH`] characters (an item longer than that alone on its line); continuation lines
/// start with `indent` spaces. Ends with a newline.
fn wrapped(first: &str, items: &[String], sep: &str, indent: usize) -> String {
    let mut text = String::new();
    let mut line = first.to_string();
    let mut empty = true;
    for (k, item) in items.iter().enumerate() {
        let piece = if k + 1 < items.len() { format!("{item}{}", sep.trim_end()) } else { item.clone() };
        let gap = if empty { "" } else { " " };
        if !empty && line.chars().count() + gap.len() + piece.chars().count() > WIDTH {
            text += line.trim_end();
            text.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        line += if empty { "" } else { " " };
        line += &piece;
        empty = false;
    }
    text += line.trim_end();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(langs: &[&str], pairs: &[String]) -> LanguageReport {
        LanguageReport {
            task: "translation_multi_simple_epoch".into(),
            langs: langs.iter().map(|s| s.to_string()).collect(),
            lang_pairs: pairs.to_vec(),
            tokens: langs.iter().enumerate().map(|(i, l)| (format!("__{l}__"), 128_000 + i as i64)).collect(),
        }
    }

    /// 100 languages, all-to-all: 9,900 pairs. No line is long, and the pairs are said in one.
    #[test]
    fn a_hundred_languages_print_in_short_lines() {
        let langs: Vec<String> = (0..100).map(|i| format!("l{i:02}")).collect();
        let refs: Vec<&str> = langs.iter().map(String::as_str).collect();
        let pairs: Vec<String> = langs.iter().flat_map(|s| langs.iter().filter(move |t| *t != s).map(move |t| format!("{s}-{t}"))).collect();
        let text = languages_text(&report(&refs, &pairs));
        assert!(text.lines().all(|l| l.len() <= WIDTH), "{text}");
        assert!(text.contains("language pairs 9900: every pair of two different languages of the 100 above\n"), "{text}");
        assert!(text.contains("task           translation_multi_simple_epoch, 100 languages:\n"), "{text}");
        for l in &langs {
            assert!(text.contains(&format!("__{l}__=")), "{l}: {text}");
        }
        // a part of the pairs: grouped by source language, every target named once
        let some: Vec<String> = pairs.iter().filter(|p| p.starts_with("l0") || p.ends_with("-l00")).cloned().collect();
        let text = languages_text(&report(&refs, &some));
        assert!(text.lines().all(|l| l.len() <= WIDTH), "{text}");
        assert!(text.contains(&format!("language pairs {}, by source language:\n", some.len())), "{text}");
        assert!(text.contains("\n               l05 -> l00, l01, l02"), "{text}");
        assert!(text.contains("\n               l42 -> l00\n"), "{text}");
        let grouped: usize = text
            .lines()
            .skip_while(|l| !l.starts_with("language pairs"))
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .map(|l| l.split_once(" -> ").map_or(l, |(_, targets)| targets).split(',').filter(|t| !t.trim().is_empty()).count())
            .sum();
        assert_eq!(grouped, some.len(), "{text}");
    }

    /// A short list stays on one line, as before.
    #[test]
    fn three_languages_print_as_before() {
        let pairs: Vec<String> = ["en-de", "de-en", "en-fr", "fr-en", "de-fr", "fr-de"].iter().map(|s| s.to_string()).collect();
        let text = languages_text(&report(&["fr", "en", "de"], &pairs));
        assert_eq!(
            text,
            "task           translation_multi_simple_epoch (languages fr, en, de)\n\
             language pairs en-de, de-en, en-fr, fr-en, de-fr, fr-de\n\
             language tokens __fr__=128000 __en__=128001 __de__=128002\n"
        );
    }
}
