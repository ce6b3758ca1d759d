//! `tchseq verify -m MODEL --against CONVERSION`: a model against a conversion of it, in any two
//! formats tchseq reads. The configs field by field, the weights name by name (`converted.rs`),
//! then, on `--input`'s sentences, both models' activations (teacher-forced on the model's own
//! translations) and their translations.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use tch::{Kind, Tensor};

use crate::cli::args::{GlobalArgs, VerifyArgs};
use crate::cli::common;
use crate::cli::Outcome;
use super::converted::{compare_config, compare_fields, compare_weights, read_converted, ConfigRow, Format, Status, WeightRow};
use tchseq::hub::{Batching, TextMode, TranslateOptions, Translation, Translator};
use tchseq::libtorch::host::largest;
use tchseq::model::{get_normalized_probs, TransformerModel, PADDING_IDX};

/// Sentences whose activations are compared (all of `--input` are translated).
const ACTIVATION_SENTENCES: usize = 8;

#[derive(Debug, Serialize)]
struct ActivationRow {
    name: String,
    shape: Vec<i64>,
    max_abs_diff: f64,
    /// None where not judged (a quantized conversion).
    status: Option<Status>,
}

#[derive(Debug, Serialize)]
struct Hypotheses {
    sentences: usize,
    identical: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    model: String,
    against: String,
    format: Format,
    config: Vec<ConfigRow>,
    weights: Vec<WeightRow>,
    /// Why the conversion's model could not be built, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_error: Option<String>,
    /// Judged only where every weight is stored exactly: the same weights through the same
    /// code give the same bits. A quantized conversion's are shown.
    judged: bool,
    activations: Vec<ActivationRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hypotheses: Option<Hypotheses>,
    /// Why the comparison stopped before the weights: the architectures differ, so every weight
    /// would fail by shape or name and say nothing the config rows do not.
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<String>,
    failed: usize,
    verdict: Status,
}

pub fn run(global: &GlobalArgs, args: &VerifyArgs, against: &Path) -> Result<Outcome> {
    let device = common::resolve_device(global.device)?;
    let bundle = common::load_single(global, &args.model, None, Kind::Float)?;
    let converted = read_converted(against).map_err(common::hub_error)?;
    let checkpoint = bundle.checkpoints.first().context("the model has no checkpoint")?;
    let mut config = compare_config(&checkpoint.config, &converted.config);
    config.extend(compare_fields(checkpoint, &bundle.tgt_dict, &converted)?);
    let judged = converted.weights.iter().all(|w| w.bound.is_none());
    if !config.is_empty() {
        let report = Report {
            model: bundle.files.checkpoints[0].display().to_string(),
            against: converted.path.display().to_string(),
            format: converted.format,
            failed: config.len(),
            stopped: Some(format!(
                "the configs differ in {} field{}: weights, activations and translations not compared",
                config.len(),
                if config.len() == 1 { "" } else { "s" }
            )),
            config,
            weights: Vec::new(),
            model_error: None,
            judged,
            activations: Vec::new(),
            hypotheses: None,
            verdict: Status::Fail,
        };
        print(&report, args.json)?;
        return Ok(Outcome::CheckFailed);
    }
    let weights = compare_weights(checkpoint, &converted).map_err(common::hub_error)?;
    let built = TransformerModel::from_state_dict(&converted.config, &converted.state_dict, device, Kind::Float).map(|(m, _)| m);
    let model_error = built.as_ref().err().map(|e| e.to_string());
    let mut report = Report {
        model: bundle.files.checkpoints[0].display().to_string(),
        against: converted.path.display().to_string(),
        format: converted.format,
        config,
        weights,
        model_error,
        judged,
        activations: Vec::new(),
        hypotheses: None,
        stopped: None,
        failed: 0,
        verdict: Status::Ok,
    };
    if let (Some(input), Ok(theirs)) = (&args.input, built) {
        let text = std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut translator = Translator::new(bundle, device, TextMode::Raw).map_err(common::hub_error)?;
        let (generator, batching) = translator.search(&TranslateOptions::default(), Batching::for_list(None, None, 1)?)?;
        let ours = translator.translate(&generator, &lines, &batching, false)?;
        report.activations = activations(&translator, &theirs, &lines, &ours, judged)?;
        translator.models = vec![theirs];
        let converted_out = translator.translate(&generator, &lines, &batching, false)?;
        let best = |t: &Translation| match t {
            Translation::Done { hypos, .. } => hypos.first().map(|h| h.tokens.clone()),
            _ => None,
        };
        let identical = ours.iter().zip(&converted_out).filter(|(a, b)| best(a).is_some() && best(a) == best(b)).count();
        report.hypotheses = Some(Hypotheses { sentences: lines.len(), identical });
    }
    report.failed = report.config.len()
        + report.weights.iter().filter(|r| r.status == Status::Fail).count()
        + report.activations.iter().filter(|r| r.status == Some(Status::Fail)).count()
        + usize::from(report.model_error.is_some())
        + usize::from(judged && report.hypotheses.as_ref().is_some_and(|h| h.identical != h.sentences));
    report.verdict = if report.failed == 0 { Status::Ok } else { Status::Fail };
    print(&report, args.json)?;
    Ok(if report.failed == 0 { Outcome::Ok } else { Outcome::CheckFailed })
}

/// Both models teacher-forced on the first sentences and the model's own best translations:
/// the encoder's output and states, the decoder's states and log-probabilities, real tokens only.
fn activations(translator: &Translator, theirs: &TransformerModel, lines: &[&str], ours: &[Translation], judged: bool) -> Result<Vec<ActivationRow>> {
    let _guard = tch::no_grad_guard();
    let mut sources = Vec::new();
    let mut targets = Vec::new();
    for (line, t) in lines.iter().zip(ours).take(ACTIVATION_SENTENCES) {
        if let Translation::Done { hypos, .. } = t {
            if let Some(h) = hypos.first() {
                sources.push(translator.encode(line));
                targets.push(h.tokens.clone());
            }
        }
    }
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let eos = translator.tgt_dict.eos();
    let prev: Vec<Vec<i64>> = targets.iter().map(|t| std::iter::once(eos).chain(t[..t.len().saturating_sub(1)].iter().copied()).collect()).collect();
    let (src, prev) = (padded(&sources, true)?, padded(&prev, false)?);
    let device = translator.device;
    let run = |model: &TransformerModel| -> Result<(Vec<(String, Tensor)>, Vec<(String, Tensor)>)> {
        let (enc, _) = model.encoder.forward_with_path(&src.f_to_device(device)?, true)?;
        let dec = model.decoder.forward(&prev.f_to_device(device)?, Some(&enc), None, false, true)?;
        let mut encoder = vec![("encoder_out".to_string(), enc.encoder_out.shallow_clone())];
        encoder.extend(enc.encoder_states.iter().enumerate().map(|(i, t)| (format!("encoder_states.{i}"), t.shallow_clone())));
        let mut decoder: Vec<(String, Tensor)> = dec.inner_states.iter().enumerate().map(|(i, t)| (format!("decoder_inner_states.{i}"), t.shallow_clone())).collect();
        decoder.push(("lprobs".into(), get_normalized_probs(&dec.logits, true).f_transpose(0, 1)?));
        Ok((encoder, decoder))
    };
    let (a, b) = (run(&translator.models[0])?, run(theirs)?);
    // time-major `[len, B, ...]` kept at real tokens
    let src_keep = src.f_ne(PADDING_IDX)?.f_transpose(0, 1)?.f_to_device(device)?;
    let tgt_keep = prev.f_ne(PADDING_IDX)?.f_transpose(0, 1)?.f_to_device(device)?;
    let mut rows = Vec::new();
    for ((ours, theirs), keep) in [(&a.0, &b.0, &src_keep), (&a.1, &b.1, &tgt_keep)].map(|(x, y, k)| ((x, y), k)) {
        for ((name, x), (_, y)) in ours.iter().zip(theirs.iter()) {
            let max_abs_diff = if x.size() == y.size() {
                let diff = x.f_sub(y)?.f_abs()?.f_to_kind(Kind::Float)?;
                let mask = keep.f_view([keep.size()[0], keep.size()[1], 1])?.f_expand_as(&diff)?;
                let kept = diff.f_masked_select(&mask)?;
                largest(&kept)?
            } else {
                f64::INFINITY
            };
            let status = judged.then_some(if max_abs_diff == 0.0 { Status::Ok } else { Status::Fail });
            rows.push(ActivationRow { name: name.clone(), shape: x.size(), max_abs_diff, status });
        }
    }
    Ok(rows)
}

/// Rows of token ids as one `[B, len]` tensor, padded on the left (sources, as fairseq's
/// `left_pad_source`) or on the right (targets).
fn padded(rows: &[Vec<i64>], left: bool) -> Result<Tensor> {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut flat = Vec::with_capacity(rows.len() * width);
    for r in rows {
        let pad = std::iter::repeat_n(PADDING_IDX, width - r.len());
        match left {
            true => flat.extend(pad.chain(r.iter().copied())),
            false => flat.extend(r.iter().copied().chain(pad)),
        }
    }
    Ok(Tensor::f_from_slice(&flat)?.f_view([rows.len() as i64, width as i64])?)
}

fn print(r: &Report, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, r)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "{} against {} ({})", r.model, r.against, r.format.name())?;
    for c in &r.config {
        let field = c.file.map_or(c.field.clone(), |f| format!("{f} {}", c.field));
        writeln!(out, "config {field}: {} here, {} in the conversion  FAIL", c.reference, c.converted)?;
    }
    if let Some(why) = &r.stopped {
        writeln!(out, "{why}")?;
        writeln!(out, "FAIL: {} failed", r.failed)?;
        return Ok(());
    }
    // every weight is in --json; here the failing ones and a summary
    for w in r.weights.iter().filter(|w| w.status == Status::Fail) {
        let diff = w.max_abs_diff.map_or("-".to_string(), |d| format!("{d:.3e}"));
        let note = w.note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
        writeln!(out, "weight {} (stored as {}): max_abs_diff {diff}, bound {:.3e}  FAIL{note}", w.fairseq, w.stored_as.as_deref().unwrap_or("-"), w.bound)?;
    }
    let within = r.weights.iter().filter(|w| w.status == Status::Ok).count();
    let largest = r.weights.iter().filter_map(|w| w.max_abs_diff).fold(0.0, f64::max);
    let bound = r.weights.iter().map(|w| w.bound).fold(0.0, f64::max);
    writeln!(out, "weights: {within} of {} within their storage's bound (largest difference {largest:.3e}, largest bound {bound:.3e})", r.weights.len())?;
    if let Some(e) = &r.model_error {
        writeln!(out, "the conversion's model does not build: {e}  FAIL")?;
    }
    if !r.activations.is_empty() {
        let how = if r.judged { "equal bit for bit, as the weights are" } else { "shown, not judged: the conversion is quantized" };
        writeln!(out, "activations ({how}):")?;
        for a in &r.activations {
            let status = match a.status {
                Some(Status::Ok) => "ok",
                Some(Status::Fail) => "FAIL",
                None => "",
            };
            writeln!(out, "  {:<26} {:>12.3e}  {status}", a.name, a.max_abs_diff)?;
        }
    }
    if let Some(h) = &r.hypotheses {
        writeln!(out, "hypotheses: {} of {} best translations identical", h.identical, h.sentences)?;
    }
    let verdict = if r.verdict == Status::Ok { "PASS" } else { "FAIL" };
    writeln!(out, "{verdict}: {} failed", r.failed)?;
    Ok(())
}
