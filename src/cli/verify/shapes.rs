//! What a reference says of the model it came from, before any tensor is compared: the sizes and
//! layer counts fairseq's config sets, read from the state-dict entries it holds (and the ids of
//! its inputs). A reference of another model differs here; verify then names the differences
//! and stops, instead of failing every tensor by shape or name.

use indexmap::IndexMap;
use serde::Serialize;
use tch::{Kind, Tensor};

use tchseq::model::TransformerModel;

/// One fact on which the model and the reference disagree.
#[derive(Debug, Serialize, PartialEq)]
pub struct ConfigRow {
    /// What differs, by fairseq's config name where it has one.
    pub field: String,
    /// The model's value.
    pub model: serde_json::Value,
    /// The reference's value.
    pub reference: serde_json::Value,
}

/// The architecture facts a set of state-dict entries shows: (field, value), in a fixed order.
/// Sizes come from the entries present; presence facts (learned positions, embedding and final
/// layer norms) only where the side's `embed_tokens` is there too, i.e. a whole state dict.
fn facts(names: &[&str], shape: &dyn Fn(&str) -> Option<Vec<i64>>) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for (side, dictionary) in [("encoder", "source"), ("decoder", "target")] {
        let embed = shape(&format!("{side}.embed_tokens.weight"));
        if let Some([rows, dim]) = embed.as_deref() {
            out.push((format!("{dictionary} dictionary size"), (*rows).into()));
            out.push((format!("{side}_embed_dim"), (*dim).into()));
        }
        let prefix = format!("{side}.layers.");
        let layers = names
            .iter()
            .filter_map(|n| n.strip_prefix(prefix.as_str()))
            .filter_map(|rest| rest.split('.').next()?.parse::<i64>().ok())
            .max();
        if let Some(last) = layers {
            out.push((format!("{side}_layers"), (last + 1).into()));
        }
        if let Some(ffn) = shape(&format!("{side}.layers.0.fc1.weight")).and_then(|s| s.first().copied()) {
            out.push((format!("{side}_ffn_embed_dim"), ffn.into()));
        }
        if embed.is_some() {
            let has = |name: &str| shape(&format!("{side}.{name}")).is_some();
            out.push((format!("{side}_learned_pos"), has("embed_positions.weight").into()));
            out.push((format!("{side} layernorm_embedding"), has("layernorm_embedding.weight").into()));
            out.push((format!("{side} final layer_norm (pre-norm)"), has("layer_norm.weight").into()));
        }
    }
    out
}

/// The facts on which `model` and the reference disagree (none: they are of one architecture,
/// as far as the reference shows). An input id past the model's dictionary counts too: the
/// model could not even embed it.
pub fn differences(model: &TransformerModel, reference: &IndexMap<String, Tensor>) -> Vec<ConfigRow> {
    let ref_names: Vec<&str> = reference.keys().map(String::as_str).collect();
    let our_names: Vec<&str> = model.named_tensors.keys().map(String::as_str).collect();
    let theirs = facts(&ref_names, &|name| reference.get(name).map(Tensor::size));
    let ours = facts(&our_names, &|name| model.named_tensors.get(name).map(Tensor::size));
    let mut rows: Vec<ConfigRow> = theirs
        .into_iter()
        .filter_map(|(field, value)| {
            let mine = ours.iter().find(|(f, _)| *f == field).map_or(serde_json::Value::Null, |(_, v)| v.clone());
            (mine != value).then_some(ConfigRow { field, model: mine, reference: value })
        })
        .collect();
    for (input, side, dictionary) in [("src_tokens", "encoder", "source"), ("prev_output_tokens", "decoder", "target")] {
        let field = format!("{dictionary} dictionary size");
        let Some(size) = model.named_tensors.get(&format!("{side}.embed_tokens.weight")).and_then(|t| t.size().first().copied()) else { continue };
        let Some(largest) = reference.get(input).and_then(largest_id) else { continue };
        if largest >= size && !rows.iter().any(|r| r.field == field) {
            rows.push(ConfigRow { field, model: size.into(), reference: format!("more than {largest} (`{input}` holds id {largest})").into() });
        }
    }
    rows
}

/// The report of a reference of another architecture: the facts that differ, no tensor compared
/// (`--json`: one object with `config` and an empty `tensors`).
pub fn print_stop(model: &str, reference: &str, rows: &[ConfigRow], json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let stopped = format!(
        "the reference is of another architecture ({} fact{} differ{}): no tensor compared",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        if rows.len() == 1 { "s" } else { "" }
    );
    let mut out = std::io::stdout().lock();
    if json {
        let report = serde_json::json!({
            "model": model, "reference": reference, "config": rows, "stopped": stopped,
            "tensors": [], "passed": 0, "failed": rows.len(), "skipped": 0,
        });
        writeln!(out, "{report}")?;
        return Ok(());
    }
    for r in rows {
        writeln!(out, "config {}: {} here, {} in the reference  FAIL", r.field, r.model, r.reference)?;
    }
    writeln!(out, "{stopped}")?;
    writeln!(out, "0 passed, {} failed", rows.len())?;
    Ok(())
}

/// The largest id of an integer input tensor (None: not one, or empty).
fn largest_id(t: &Tensor) -> Option<i64> {
    if !matches!(t.kind(), Kind::Int64 | Kind::Int | Kind::Int16 | Kind::Int8 | Kind::Uint8) || t.numel() == 0 {
        return None;
    }
    t.f_max().ok().map(|m| m.int64_value(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shapes(entries: &[(&str, &[i64])]) -> IndexMap<String, Vec<i64>> {
        entries.iter().map(|(n, s)| (n.to_string(), s.to_vec())).collect()
    }

    fn facts_of(map: &IndexMap<String, Vec<i64>>) -> Vec<(String, serde_json::Value)> {
        let names: Vec<&str> = map.keys().map(String::as_str).collect();
        facts(&names, &|n| map.get(n).cloned())
    }

    #[test]
    fn sizes_and_layers_come_from_the_state_dict() {
        let map = shapes(&[
            ("encoder.embed_tokens.weight", &[40, 32]),
            ("encoder.layers.0.fc1.weight", &[64, 32]),
            ("encoder.layers.1.fc1.weight", &[64, 32]),
            ("encoder.layer_norm.weight", &[32]),
        ]);
        let f = facts_of(&map);
        let get = |k: &str| f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("source dictionary size"), Some(40.into()));
        assert_eq!(get("encoder_embed_dim"), Some(32.into()));
        assert_eq!(get("encoder_layers"), Some(2.into()));
        assert_eq!(get("encoder_ffn_embed_dim"), Some(64.into()));
        assert_eq!(get("encoder final layer_norm (pre-norm)"), Some(true.into()));
        assert_eq!(get("encoder_learned_pos"), Some(false.into()));
        assert_eq!(get("decoder_layers"), None);
    }

    /// Activations alone (no state dict) show no architecture facts here.
    #[test]
    fn activations_alone_show_nothing() {
        let map = shapes(&[("encoder_out", &[18, 7, 32]), ("encoder_states.0", &[18, 7, 32]), ("logits", &[7, 18, 48])]);
        assert!(facts_of(&map).is_empty());
    }
}
