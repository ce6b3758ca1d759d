//! `tchseq verify`: run the model on the inputs of a reference file and compare every
//! activation and weight it holds with ours.
//!
//! Reference format (a torch.save'd dict of tensors or .safetensors): inputs `src_tokens`
//! `[B,S]` (either padding side), `src_lengths` `[B]`, `prev_output_tokens` `[B,T]`; encoder
//! `encoder_out` `[S,B,C]`, `encoder_padding_mask` `[B,S]`, `encoder_embedding` `[B,S,C]`,
//! `encoder_states.{i}` `[S,B,C]`; decoder `decoder_inner_states.{i}` `[T,B,C]`, `attn`
//! `[B,T,S]`, `logits` and `lprobs` `[B,T,V]`, optionally `incremental_logits` `[B,T,V]` (the
//! decoder run one step at a time with an incremental state); any other name is a fairseq
//! state-dict entry.
//! `encoder_states.{i}` may also be batch-first `[B,S,C]`, dense or nested: fairseq's encoder
//! fast path returns them so. The layout is read from the shape; when B == S the shape fits
//! both, and the tensor is read time-major if its values match that way, else batch-first if
//! they match that way (the report says which).
//! Padded positions are not compared (source positions of encoder tensors and the source
//! axis of `attn`; target positions of decoder tensors).
//! What "close" means is in `tolerance`.

pub(super) mod against;
mod compare;
mod converted;
mod shapes;
mod tolerance;

use std::io::Write;

use anyhow::{bail, Context, Result};
use indexmap::IndexMap;
use serde::Serialize;
use tch::{Device, Kind, Tensor};

use tchseq::checkpoint::read_tensor_dict;
use tchseq::model::{
    get_normalized_probs, DecoderOut, EncoderOut, EncoderPath, IncrementalState, TransformerModel, PADDING_IDX,
};

use super::args::{GlobalArgs, VerifyArgs};
use super::common;
use super::Outcome;
use compare::{compare, Diff};
use tolerance::{Bound, Tolerance};

const INPUTS: [&str; 3] = ["src_tokens", "src_lengths", "prev_output_tokens"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Fail,
    Skip,
}

/// How a reference activation's leading axes were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Layout {
    /// `[S|T, B, ...]`
    TimeMajor,
    /// `[B, ...]`
    BatchFirst,
}

impl Layout {
    fn text(self) -> &'static str {
        match self {
            Layout::TimeMajor => "time-major",
            Layout::BatchFirst => "batch-first",
        }
    }
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    /// The reference's shape (a nested tensor's: after padding).
    shape: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<Layout>,
    /// Our shape, when it differs from the reference's.
    #[serde(skip_serializing_if = "Option::is_none")]
    our_shape: Option<Vec<i64>>,
    max_abs_diff: Option<f64>,
    max_rel_diff: Option<f64>,
    /// The largest finite |reference| over the compared elements.
    #[serde(skip_serializing_if = "Option::is_none")]
    scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    depth: Option<usize>,
    /// The least-squares `s` in ours ≈ (1 + s) · reference, and its standard error.
    #[serde(skip_serializing_if = "Option::is_none")]
    rescale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rescale_se: Option<f64>,
    /// What bounded |ours - reference| element-wise.
    #[serde(skip_serializing_if = "Option::is_none")]
    bound: Option<Bound>,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl Row {
    fn new(name: &str, shape: Vec<i64>, layout: Option<Layout>) -> Self {
        Row {
            name: name.to_string(),
            shape,
            layout,
            our_shape: None,
            max_abs_diff: None,
            max_rel_diff: None,
            scale: None,
            depth: None,
            rescale: None,
            rescale_se: None,
            bound: None,
            status: Status::Fail,
            note: None,
        }
    }

    fn with_diff(mut self, d: &Diff) -> Self {
        self.max_abs_diff = Some(d.max_abs);
        self.max_rel_diff = Some(d.max_rel);
        self.scale = Some(d.scale);
        self.bound = Some(d.bound);
        self.rescale = d.rescale.map(|r| r.s);
        self.rescale_se = d.rescale.map(|r| r.se);
        self.status = if d.ok() { Status::Ok } else { Status::Fail };
        self
    }

    fn with_note(mut self, status: Status, note: impl Into<String>) -> Self {
        self.status = status;
        self.note = Some(note.into());
        self
    }
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    reference: String,
    tolerance: Tolerance,
    threads: i32,
    device: String,
    encoder_path: Option<EncoderPath>,
    unused_keys: Vec<String>,
    warnings: Vec<String>,
    tensors: Vec<Row>,
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// Which positions of a reference tensor count.
#[derive(Clone, Copy)]
enum Axes {
    /// `[S, B, ...]` encoder time-major.
    SourceTimeMajor,
    /// `[B, S, ...]`.
    SourceBatchMajor,
    /// `[T, B, ...]` decoder time-major.
    TargetTimeMajor,
    /// `[B, T, ...]`.
    TargetBatchMajor,
    /// `[B, T, S]`.
    Attention,
}

impl Axes {
    fn layout(self) -> Layout {
        match self {
            Axes::SourceTimeMajor | Axes::TargetTimeMajor => Layout::TimeMajor,
            _ => Layout::BatchFirst,
        }
    }
}

/// The layouts a reference activation may have, preferred first; ours is in the first.
enum Kind2 {
    Encoder(&'static [Axes]),
    Decoder(&'static [Axes]),
    Weight,
}

fn classify(name: &str) -> Kind2 {
    use Axes::*;
    match name {
        "encoder_out" => Kind2::Encoder(&[SourceTimeMajor]),
        "encoder_padding_mask" | "encoder_embedding" => Kind2::Encoder(&[SourceBatchMajor]),
        "logits" | "lprobs" | "incremental_logits" => Kind2::Decoder(&[TargetBatchMajor]),
        "attn" => Kind2::Decoder(&[Attention]),
        // fairseq's encoder fast path returns these batch-first
        n if n.starts_with("encoder_states.") => Kind2::Encoder(&[SourceTimeMajor, SourceBatchMajor]),
        n if n.starts_with("decoder_inner_states.") => Kind2::Decoder(&[TargetTimeMajor]),
        _ => Kind2::Weight,
    }
}

struct Computed {
    encoder: Option<(EncoderOut, EncoderPath)>,
    decoder: Option<(DecoderOut, Tensor)>,
    /// Logits of step-by-step (incremental) decoding `[B, T, V]`, when the reference has them.
    incremental_logits: Option<Tensor>,
    /// `[B, S]` / `[B, T]` true at real tokens.
    src_keep: Option<Tensor>,
    tgt_keep: Option<Tensor>,
    /// Logits and log-probs computed from the reference's own last decoder state, and its name.
    head: Option<(Tensor, Tensor, String)>,
}

impl Computed {
    fn activation(&self, name: &str) -> Option<Tensor> {
        let indexed = |prefix: &str, list: &[Tensor]| {
            name.strip_prefix(prefix).and_then(|i| i.parse::<usize>().ok()).and_then(|i| list.get(i)).map(Tensor::shallow_clone)
        };
        if let Some((enc, _)) = &self.encoder {
            match name {
                "encoder_out" => return Some(enc.encoder_out.shallow_clone()),
                "encoder_padding_mask" => return Some(enc.encoder_padding_mask.shallow_clone()),
                "encoder_embedding" => return Some(enc.encoder_embedding.shallow_clone()),
                _ => {}
            }
            if let Some(t) = indexed("encoder_states.", &enc.encoder_states) {
                return Some(t);
            }
        }
        if let Some((dec, lprobs)) = &self.decoder {
            match name {
                "logits" => return Some(self.head.as_ref().map_or(&dec.logits, |h| &h.0).shallow_clone()),
                "lprobs" => return Some(self.head.as_ref().map_or(lprobs, |h| &h.1).shallow_clone()),
                "attn" => return dec.attn.as_ref().map(Tensor::shallow_clone),
                "incremental_logits" => return self.incremental_logits.as_ref().map(Tensor::shallow_clone),
                _ => {}
            }
            return indexed("decoder_inner_states.", &dec.inner_states);
        }
        None
    }

    /// A bool mask broadcastable to a tensor of `axes` with `rank` dims: true where compared.
    fn keep(&self, axes: &Axes, rank: usize) -> Option<Tensor> {
        let expand = |m: Tensor, lead: usize| {
            let mut m = m;
            for _ in lead..rank {
                m = m.unsqueeze(-1);
            }
            m
        };
        let src = self.src_keep.as_ref();
        let tgt = self.tgt_keep.as_ref();
        match axes {
            Axes::SourceBatchMajor => src.map(|m| expand(m.shallow_clone(), 2)),
            Axes::SourceTimeMajor => src.map(|m| expand(m.transpose(0, 1), 2)),
            Axes::TargetBatchMajor => tgt.map(|m| expand(m.shallow_clone(), 2)),
            Axes::TargetTimeMajor => tgt.map(|m| expand(m.transpose(0, 1), 2)),
            Axes::Attention => match (src, tgt) {
                (Some(s), Some(t)) => Some(t.unsqueeze(-1).logical_and(&s.unsqueeze(1))),
                _ => None,
            },
        }
    }
}

fn input(reference: &IndexMap<String, Tensor>, name: &str, needed_by: &str) -> Result<Tensor> {
    let t = reference
        .get(name)
        .with_context(|| format!("the reference has {needed_by} tensors but no `{name}` input"))?;
    if t.dim() != 2 || !matches!(t.kind(), Kind::Int64 | Kind::Int | Kind::Int16 | Kind::Int8 | Kind::Uint8) {
        bail!("reference `{name}` must be a [batch, len] integer tensor, got {:?} {:?}", t.kind(), t.size());
    }
    Ok(t.f_to_kind(Kind::Int64)?)
}

fn compute(model: &TransformerModel, reference: &IndexMap<String, Tensor>, device: Device) -> Result<Computed> {
    let wants = |enc: bool| {
        reference.keys().find(|k| match classify(k) {
            Kind2::Encoder(_) => enc,
            Kind2::Decoder(_) => !enc,
            Kind2::Weight => false,
        } && !INPUTS.contains(&k.as_str()))
    };
    let needs_decoder = wants(false).is_some();
    let needs_encoder = needs_decoder || wants(true).is_some();
    let mut out =
        Computed { encoder: None, decoder: None, incremental_logits: None, src_keep: None, tgt_keep: None, head: None };
    if !needs_encoder {
        return Ok(out);
    }
    let what = if needs_decoder { "decoder" } else { "encoder" };
    let src_tokens = input(reference, "src_tokens", what)?;
    out.src_keep = Some(src_tokens.f_ne(PADDING_IDX)?);
    let (enc, path) = model
        .encoder
        .forward_with_path(&src_tokens.f_to_device(device)?, true)
        .context("running the encoder")?;
    if needs_decoder {
        let prev = input(reference, "prev_output_tokens", "decoder")?;
        if prev.size()[0] != src_tokens.size()[0] {
            bail!("`prev_output_tokens` has {} rows, `src_tokens` {}", prev.size()[0], src_tokens.size()[0]);
        }
        out.tgt_keep = Some(prev.f_ne(PADDING_IDX)?);
        let dec = model
            .decoder
            .forward(&prev.f_to_device(device)?, Some(&enc), None, true, true)
            .context("running the decoder")?;
        let lprobs = get_normalized_probs(&dec.logits, true);
        out.head = head_from_reference(model, reference, &dec)?;
        out.decoder = Some((dec, lprobs));
        if reference.contains_key("incremental_logits") {
            let prev = prev.f_to_device(device)?;
            let mut state = IncrementalState::new();
            let mut steps = Vec::new();
            for t in 0..prev.size()[1] {
                let prefix = prev.f_narrow(1, 0, t + 1)?;
                steps.push(model.decoder.forward(&prefix, Some(&enc), Some(&mut state), false, false)?.logits);
            }
            out.incremental_logits = Some(Tensor::f_cat(&steps, 1)?);
        }
    }
    out.encoder = Some((enc, path));
    Ok(out)
}

/// The output layer run on the reference's last decoder state, when it has one of our shape:
/// the logits then carry only the output layer's own rounding, not what the layers before it
/// compound on another CPU (those states are compared themselves).
fn head_from_reference(
    model: &TransformerModel,
    reference: &IndexMap<String, Tensor>,
    dec: &DecoderOut,
) -> Result<Option<(Tensor, Tensor, String)>> {
    let (Some(ours), name) = (dec.inner_states.last(), format!("decoder_inner_states.{}", model.decoder.layers.len())) else {
        return Ok(None);
    };
    let Some(theirs) = reference.get(&name).filter(|t| t.size() == ours.size()) else { return Ok(None) };
    let features = theirs.f_to_device(ours.device())?.f_to_kind(ours.kind())?;
    let logits = model.decoder.output_layer(&features).context("running the output layer")?;
    let lprobs = get_normalized_probs(&logits, true);
    Ok(Some((logits, lprobs, name)))
}

/// One comparison of ours (in one layout) with the reference.
struct Compared {
    layout: Layout,
    diff: Diff,
}

fn shape_text(shape: &[i64]) -> String {
    format!("{shape:?}")
}

/// Compares an activation in the first of `layouts` whose shape fits the reference's; when
/// several fit (B == S), the first whose values match, else the closest.
fn activation_row(
    computed: &Computed,
    name: &str,
    theirs: &Tensor,
    layouts: &[Axes],
    nested: bool,
    tol: &Tolerance,
    depth: usize,
) -> Result<Row> {
    let shape = theirs.size();
    let Some(ours) = computed.activation(name) else {
        return Ok(Row::new(name, shape, None).with_note(Status::Fail, "the model has no such activation"));
    };
    let natural = layouts.first().map_or(Layout::TimeMajor, |a| a.layout());
    let in_layout = |a: &Axes| -> Result<Tensor> {
        Ok(if a.layout() == natural { ours.shallow_clone() } else { ours.f_transpose(0, 1)? })
    };
    // a nested tensor holds one component per sentence: batch-first by construction
    let allowed: Vec<&Axes> = layouts.iter().filter(|a| !nested || a.layout() == Layout::BatchFirst).collect();
    let mut fitting = Vec::new();
    let mut ours_shapes = Vec::new();
    for a in &allowed {
        let t = in_layout(a)?;
        ours_shapes.push((a.layout(), t.size()));
        if t.size() == shape {
            fitting.push((*a, t));
        }
    }
    if fitting.is_empty() {
        let ours_text: Vec<String> = if ours_shapes.is_empty() {
            vec![format!("{} ({})", shape_text(&ours.size()), natural.text())]
        } else if ours_shapes.len() == 1 {
            vec![shape_text(&ours_shapes[0].1)]
        } else {
            ours_shapes.iter().map(|(l, s)| format!("{} ({})", shape_text(s), l.text())).collect()
        };
        let what = if nested { "nested tensor, padded" } else { "reference" };
        let note = format!("shape mismatch: ours {}, {what} {}", ours_text.join(" or "), shape_text(&shape));
        let mut row = Row::new(name, shape, None).with_note(Status::Fail, note);
        row.our_shape = Some(ours.size());
        return Ok(row);
    }
    let mut tried: Vec<Compared> = Vec::new();
    for (axes, t) in &fitting {
        let keep = computed.keep(axes, shape.len());
        let diff = compare(t, theirs, keep.as_ref(), |scale| tol.activation(scale, depth), tol.systematic(depth))
            .with_context(|| format!("comparing `{name}`"))?;
        let ok = diff.ok();
        tried.push(Compared { layout: axes.layout(), diff });
        if ok {
            break;
        }
    }
    // tried is not empty: fitting was not
    let key = |c: &Compared| if c.diff.max_abs.is_nan() { f64::INFINITY } else { c.diff.max_abs };
    let chosen = match tried.iter().position(|c| c.diff.ok()) {
        Some(i) => i,
        None => (0..tried.len()).min_by(|&a, &b| key(&tried[a]).total_cmp(&key(&tried[b]))).unwrap_or(0),
    };
    let c = &tried[chosen];
    let mut notes = Vec::new();
    if fitting.len() > 1 {
        let others: Vec<String> = tried
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != chosen)
            .map(|(_, o)| format!("{} max_abs_diff {:.3e}", o.layout.text(), o.diff.max_abs))
            .collect();
        let side = shape.first().copied().unwrap_or(0);
        notes.push(if c.diff.ok() {
            let also = if others.is_empty() { String::new() } else { format!("; {}", others.join(", ")) };
            format!("B = S = {side}: the shape fits both layouts; read {}, whose values match{also}", c.layout.text())
        } else {
            format!("B = S = {side}: the shape fits both layouts and neither matches; closest {}, {}", c.layout.text(), others.join(", "))
        });
    }
    if let (true, Some(r), Some(limit)) = (c.diff.systematic, c.diff.rescale, tol.systematic(depth)) {
        notes.push(format!(
            "rescaled: ours = (1 {} {:.2} eps) * reference, {:.0} standard errors from none",
            if r.s < 0.0 { '-' } else { '+' },
            r.s.abs() / limit.eps,
            r.standard_errors()
        ));
    }
    if nested {
        notes.push("nested tensor, read as to_padded_tensor(0.0)".to_string());
    }
    if let Some((_, _, state)) = computed.head.as_ref().filter(|_| matches!(name, "logits" | "lprobs")) {
        notes.push(format!("computed from the reference's {state}"));
    }
    let mut row = Row::new(name, shape, Some(c.layout)).with_diff(&c.diff);
    row.depth = Some(depth);
    row.note = (!notes.is_empty()).then(|| notes.join("; "));
    Ok(row)
}

fn weight_row(model: &TransformerModel, name: &str, theirs: &Tensor, tol: &Tolerance) -> Result<Row> {
    let shape = theirs.size();
    if name.ends_with("._float_tensor") {
        return Ok(Row::new(name, shape, None).with_note(Status::Skip, "uninitialised buffer fairseq never reads"));
    }
    let Some(ours) = model.named_tensors.get(name) else {
        return Ok(Row::new(name, shape, None).with_note(Status::Fail, "the model has no such weight"));
    };
    if ours.size() != shape {
        let note = format!("shape mismatch: ours {}, reference {}", shape_text(&ours.size()), shape_text(&shape));
        let mut row = Row::new(name, shape, None).with_note(Status::Fail, note);
        row.our_shape = Some(ours.size());
        return Ok(row);
    }
    let diff = compare(ours, theirs, None, |_| tol.weight(), None).with_context(|| format!("comparing `{name}`"))?;
    Ok(Row::new(name, shape, None).with_diff(&diff))
}

pub fn run(global: &GlobalArgs, args: &VerifyArgs) -> Result<Outcome> {
    let reference_path = args.reference.as_deref().context("give --reference FILE (tensors saved from fairseq) or --against DIR|FILE (a conversion of the model)")?;
    let bundle = common::load_single(global, &args.model, None, common::dtype_kind(args.dtype))?;
    let (model, device) = (&bundle.models[0], bundle.models[0].device);
    let checkpoint_path = &bundle.files.checkpoints[0];
    let reference = read_tensor_dict(reference_path)?;
    // another architecture's reference would fail every tensor by shape or name: say so, once
    let differences = shapes::differences(model, &reference.tensors);
    if !differences.is_empty() {
        shapes::print_stop(&checkpoint_path.display().to_string(), &reference_path.display().to_string(), &differences, args.json)?;
        return Ok(Outcome::CheckFailed);
    }
    let computed = compute(model, &reference.tensors, device)?;
    let mut warnings = bundle.report.warnings.clone();
    for (name, type_name) in &reference.skipped {
        warnings.push(format!("reference entry `{name}` is a {type_name}, not a tensor: not compared"));
    }

    for (flag, v) in [("--atol", args.atol), ("--rtol", args.rtol)] {
        if v.is_some_and(|v| !(v >= 0.0)) {
            bail!("{flag} must be a number >= 0");
        }
    }
    let tol = Tolerance::new(args.atol, args.rtol, common::dtype_kind(args.dtype));
    let (encoder_layers, decoder_layers) = (model.encoder.layers.len(), model.decoder.layers.len());
    let mut rows = Vec::new();
    for (name, theirs) in &reference.tensors {
        if INPUTS.contains(&name.as_str()) {
            continue;
        }
        let row = match classify(name) {
            Kind2::Encoder(layouts) | Kind2::Decoder(layouts) => {
                let nested = reference.nested.contains(name);
                // classify() and depth() know the same activation names
                let depth = tolerance::depth(name, encoder_layers, decoder_layers).unwrap_or(encoder_layers + decoder_layers + 2);
                activation_row(&computed, name, theirs, layouts, nested, &tol, depth)?
            }
            Kind2::Weight => weight_row(model, name, theirs, &tol)?,
        };
        rows.push(row);
    }

    let count = |s: Status| rows.iter().filter(|r| r.status == s).count();
    let report = Report {
        model: checkpoint_path.display().to_string(),
        reference: reference_path.display().to_string(),
        tolerance: tol,
        threads: tch::get_num_threads(),
        device: format!("{device:?}"),
        encoder_path: computed.encoder.as_ref().map(|(_, p)| *p),
        unused_keys: bundle.report.checkpoints[0].unused_keys.clone(),
        warnings,
        passed: count(Status::Ok),
        failed: count(Status::Fail),
        skipped: count(Status::Skip),
        tensors: rows,
    };
    print_report(&report, args.json)?;
    Ok(if report.failed == 0 { Outcome::Ok } else { Outcome::CheckFailed })
}

fn print_report(report: &Report, json: bool) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(report)?)?;
        return Ok(());
    }
    for w in &report.warnings {
        writeln!(out, "warning: {w}")?;
    }
    if !report.unused_keys.is_empty() {
        writeln!(out, "unused state-dict keys: {}", report.unused_keys.join(", "))?;
    }
    if let Some(path) = report.encoder_path {
        writeln!(out, "encoder path: {}", serde_json::to_value(path)?.as_str().unwrap_or("?"))?;
    }
    writeln!(out, "tolerance: {}", report.tolerance.text())?;
    let width = report.tensors.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    writeln!(
        out,
        "{:<width$}  {:<16}  {:<11}  {:>12}  {:>12}  {:>14}  status",
        "name", "shape", "layout", "max_abs_diff", "max_rel_diff", "bound"
    )?;
    let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3e}"));
    for r in &report.tensors {
        let status = match r.status {
            Status::Ok => "ok",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        };
        let shape = shape_text(&r.shape);
        let layout = r.layout.map_or("-", Layout::text);
        let note = r.note.as_ref().map(|n| format!("  ({n})")).unwrap_or_default();
        let bound = r.bound.map_or_else(|| "-".to_string(), |b| b.text());
        writeln!(
            out,
            "{:<width$}  {:<16}  {:<11}  {:>12}  {:>12}  {bound:>14}  {status}{note}",
            r.name,
            shape,
            layout,
            fmt(r.max_abs_diff),
            fmt(r.max_rel_diff)
        )?;
    }
    writeln!(out, "{} passed, {} failed", report.passed, report.failed)?;
    Ok(())
}
