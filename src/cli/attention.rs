//! `tchseq attention`: translate one sentence (or take a given target) and draw its attention.

use std::io::{self, Write};

use anyhow::{bail, Result};
use tch::Tensor;

use super::args::{AttentionArgs, AttentionKindArg, GlobalArgs};
use super::common;
use super::Outcome;
use tchseq::hub::{TextMode, Translation, Translator};
use tchseq::plot::capture::{capture_attention, select};
use tchseq::plot::render::{render, Axis, Figure, Heatmap, ImageFormat, Scale};
use tchseq::plot::AttentionKind;
use tchseq::text::dictionary::{is_py_space, Dictionary};

pub fn run(global: &GlobalArgs, a: &AttentionArgs) -> Result<Outcome> {
    let format = ImageFormat::from_path(&a.output)?;
    let head = match a.head.as_str() {
        "mean" => None,
        h => Some(h.parse::<usize>().map_err(|_| anyhow::anyhow!("--head must be a head number or `mean`, not `{h}`"))?),
    };
    if a.grid && head.is_some() {
        bail!("--grid draws every head; leave out --head");
    }
    let bundle = common::load_single(global, &a.model, Some(&a.pipeline), tch::Kind::Float)?;
    common::print_warnings(&bundle.report);
    let device = bundle.models[0].device;
    // each side's text in its own language, the language tokens of a multilingual task: as
    // translate and score have them
    let translator = Translator::new(bundle, device, TextMode::Raw).map_err(common::hub_error)?;
    let (model, src_dict, tgt_dict) = (&translator.models[0], &translator.src_dict, &translator.tgt_dict);
    let langs = &translator.language_tokens;
    let kind = match a.kind {
        AttentionKindArg::Cross => AttentionKind::Cross,
        AttentionKindArg::EncoderSelf => AttentionKind::EncoderSelf,
        AttentionKindArg::DecoderSelf => AttentionKind::DecoderSelf,
    };
    let (num_layers, num_heads) = match kind {
        AttentionKind::EncoderSelf => {
            (model.encoder.layers.len(), model.encoder.layers.first().map_or(0, |l| l.self_attn.num_heads))
        }
        AttentionKind::Cross => (model.decoder.layers.len(), model.decoder.layers.first().and_then(|l| l.encoder_attn.as_ref()).map_or(0, |a| a.num_heads)),
        AttentionKind::DecoderSelf => {
            (model.decoder.layers.len(), model.decoder.layers.first().map_or(0, |l| l.self_attn.num_heads))
        }
    };
    if num_layers == 0 {
        bail!("the {} has no layers", side_name(kind));
    }
    let layer = a.layer.unwrap_or(num_layers - 1);
    if layer >= num_layers {
        bail!("--layer {layer}: the {} has {num_layers} layers (0..{})", side_name(kind), num_layers - 1);
    }
    if let Some(h) = head {
        if h as i64 >= num_heads {
            bail!("--head {h}: layer {layer} has {num_heads} heads (0..{})", num_heads - 1);
        }
    }
    let sentence = a.sentence.trim_matches(is_py_space);
    let src = translator.encode(sentence);
    let max_src = model.max_source_positions();
    if src.len() > max_src {
        bail!("the sentence is {} tokens long (EOS included) but the model accepts at most {max_src}", src.len());
    }
    let src_tokens = Tensor::from_slice(&src).f_view([1, -1])?.f_to_device(model.device)?;
    let eos = translator.generator_eos();
    let target: Vec<i64> = match &a.target {
        Some(t) => translator.encode_target(t.trim_matches(is_py_space)),
        None => best_translation(&translator, &src, a)?,
    };
    // the decoder input: the generator's EOS first, the target shifted right
    let prev: Vec<i64> = std::iter::once(eos).chain(target[..target.len() - 1].iter().copied()).collect();
    let prev_output_tokens = Tensor::from_slice(&prev).f_view([1, -1])?.f_to_device(model.device)?;
    let maps = capture_attention(model, &src_tokens, &prev_output_tokens)?;
    let weights = maps
        .layers(kind)
        .get(layer)
        .ok_or_else(|| anyhow::anyhow!("internal error: no attention captured for layer {layer}"))?;

    let sym = |d: &Dictionary, ids: &[i64]| -> Vec<String> { ids.iter().map(|&i| d.symbol(i).to_string()).collect() };
    let (src_labels, tgt_labels, prev_labels) = (sym(src_dict, &src), sym(tgt_dict, &target), sym(tgt_dict, &prev));
    let (rows, cols, row_title, col_title) = match kind {
        AttentionKind::Cross => (tgt_labels, src_labels, "target (predicted token)", "source"),
        AttentionKind::EncoderSelf => (src_labels.clone(), src_labels, "source (query)", "source (key)"),
        AttentionKind::DecoderSelf => (tgt_labels, prev_labels, "target (predicted token)", "decoder input (key)"),
    };
    let heads: Vec<Option<usize>> = if a.grid { (0..num_heads as usize).map(Some).chain([None]).collect() } else { vec![head] };
    let mut panels = Vec::new();
    for h in &heads {
        let values = select(weights, 0, h.map(|h| h as i64))?;
        let title = match h {
            Some(h) => format!("head {h}"),
            None => format!("mean of {num_heads} heads"),
        };
        panels.push(Heatmap {
            title,
            values,
            rows: Axis::Tokens(rows.clone()),
            cols: Axis::Tokens(cols.clone()),
            row_title: row_title.into(),
            col_title: col_title.into(),
        });
    }
    let max = panels.iter().flat_map(|p| p.values.iter().flatten()).fold(0f32, |m, &v| if v > m { v } else { m });
    let figure = Figure {
        title: format!("{}, {} layer {layer} of {num_layers}", kind.describe(), side_name(kind)),
        columns: (panels.len() as f64).sqrt().ceil() as usize,
        panels,
        scale: Scale { min: 0.0, max: if max > 0.0 { max } else { 1.0 }, label: "attention weight".into() },
    };
    let (w, h) = render(&figure, &a.output, format, a.font.as_deref())?;
    let mut out = io::stdout().lock();
    writeln!(out, "{}", tgt_dict.string(&target, None, false, &langs.output_strip(tgt_dict.eos())))?;
    writeln!(out, "wrote {} ({w}x{h} px)", a.output.display())?;
    Ok(Outcome::Ok)
}

fn side_name(kind: AttentionKind) -> &'static str {
    match kind {
        AttentionKind::EncoderSelf => "encoder",
        AttentionKind::Cross | AttentionKind::DecoderSelf => "decoder",
    }
}

/// The best beam-search hypothesis (final EOS included), as `translate` finds it.
fn best_translation(translator: &Translator, src: &[i64], a: &AttentionArgs) -> Result<Vec<i64>> {
    common::refuse_unsupported(&a.search)?;
    let options = common::translate_options(&a.search);
    let (generator, batching) = translator.search(&options, common::batching(None, Some(1), 1)?)?;
    let done = translator.translate_tokens(&generator, vec![src.to_vec()], &batching, &Default::default())?;
    match done.into_iter().next() {
        Some(Translation::Done { hypos, .. }) if hypos.first().is_some_and(|h| !h.tokens.is_empty()) => Ok(hypos[0].tokens.clone()),
        Some(t @ (Translation::TooLong { .. } | Translation::Failed { .. })) => bail!("{}", t.error().unwrap_or_default()),
        _ => bail!("beam search returned no hypothesis"),
    }
}
