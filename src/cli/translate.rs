//! `tchseq translate`: fairseq-interactive, without Python.
//!
//! Lines are read `--buffer-size` at a time, encoded, ordered and batched as fairseq-interactive
//! does (`generate::batching`), decoded with `SequenceGenerator`, and printed in input order.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tch::{Device, Kind, Tensor};

use super::args::{DtypeArg, GlobalArgs, TranslateArgs, TranslateFormat};
use super::common;
use super::lines::{lines, BadLine, Failures, Newlines};
use super::output::{python_fixed4, python_float_repr};
use super::Outcome;
use tchseq::generate::batching::{batch_by_size, collate, ordered_indices};
use tchseq::generate::rng_replay::replay_dataloader_iter;
use tchseq::generate::workers::run_jobs;
use tchseq::generate::sequence_generator::Specials;
use tchseq::generate::{EnsembleModel, GenerateError, Hypothesis, SearchStrategy, SequenceGenerator};
use tchseq::hub::{ModelBundle, Weights};
use tchseq::model::TransformerModel;
use tchseq::text::dictionary::{is_py_space, Dictionary};
use tchseq::text::pipeline::TextPipeline;

/// What happened to one input line.
enum LineResult {
    Translated { src_tokens: Vec<i64>, hypos: Vec<Hypothesis>, seconds: f64 },
    TooLong { len: usize, max: usize },
    Unreadable(BadLine),
}

struct Session {
    pipeline: TextPipeline,
    src_dict: Dictionary,
    tgt_dict: Dictionary,
    models: Vec<TransformerModel>,
    generator: SequenceGenerator,
    device: Device,
    max_source_positions: usize,
    max_tokens: Option<usize>,
    batch_size: Option<usize>,
    nbest: usize,
    format: TranslateFormat,
    print_alignment: bool,
    inter_threads: usize,
}

pub fn run(global: &GlobalArgs, a: &TranslateArgs) -> Result<Outcome> {
    validate(a)?;
    let device = common::resolve_device(global.device)?;
    let kind = match a.dtype {
        DtypeArg::Fp32 => Kind::Float,
        DtypeArg::Fp16 => Kind::Half,
        DtypeArg::Bf16 => Kind::BFloat16,
    };
    // fairseq-interactive: utils.set_torch_seed(cfg.common.seed) before the models are built
    let seed = i64::try_from(a.seed).context("--seed is too large")?;
    tch::manual_seed(seed);
    if device.is_cuda() {
        tch::Cuda::manual_seed_all(a.seed);
    }

    let weights = Weights::Load { device, kind, replay_init: a.sampling };
    let mut bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights)?;
    let pipeline = bundle.pipeline().map_err(common::hub_error)?;
    common::print_warnings(&bundle.report);
    let max_source_positions = bundle.max_source_positions();
    let ModelBundle { models, src_dict, tgt_dict, .. } = bundle;

    let search = if a.sampling {
        SearchStrategy::Sampling { topk: a.sampling_topk, topp: a.sampling_topp }
    } else {
        SearchStrategy::Beam
    };
    let cfg = common::generator_config(&a.search, search, a.temperature, a.print_alignment)?;
    let specials = Specials { pad: tgt_dict.pad(), eos: tgt_dict.eos(), unk: tgt_dict.unk() };
    let generator = SequenceGenerator::new(cfg, tgt_dict.len(), specials)?;

    let (batch_size, buffer_size) = batching_sizes(a)?;
    let ctx = Session {
        pipeline,
        src_dict,
        tgt_dict,
        models,
        generator,
        device,
        max_source_positions,
        max_tokens: a.max_tokens,
        batch_size,
        nbest: a.nbest,
        format: a.format,
        print_alignment: a.print_alignment,
        // fairseq's random draws (sampling) happen in batch order
        inter_threads: if a.sampling { 1 } else { global.inter_threads },
    };

    let out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(File::create(p).with_context(|| format!("creating {}", p.display()))?)),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = out;
    let mut failures = Failures::default();
    let too_long = format!("longer than max_source_positions={max_source_positions} tokens (EOS included)");
    let mut next_id = 0usize;
    // Unreadable lines wait at their place but take no room: the buffers of readable lines, and
    // so their batches, are those of the same input without the unreadable lines.
    let mut buffer: Vec<Result<String, BadLine>> = Vec::with_capacity(buffer_size);
    let mut readable = 0usize;
    let mut flush = |buffer: &mut Vec<Result<String, BadLine>>, out: &mut Box<dyn Write>, next_id: &mut usize| -> Result<()> {
        if buffer.is_empty() {
            return Ok(());
        }
        let good: Vec<&str> = buffer.iter().filter_map(|l| l.as_deref().ok()).collect();
        // (an empty buffer must not reach translate_buffer: it draws from the generator)
        let translated = if good.is_empty() { Vec::new() } else { translate_buffer(&ctx, &good)? };
        let mut translated = translated.into_iter();
        let n = buffer.len();
        for (i, entry) in buffer.drain(..).enumerate() {
            let (line, result) = match entry {
                Ok(line) => {
                    let result = translated.next().context("internal error: a line was not translated")?;
                    (Some(line), result)
                }
                Err(bad) => (None, LineResult::Unreadable(bad)),
            };
            match &result {
                LineResult::TooLong { .. } => failures.add(&too_long),
                LineResult::Unreadable(bad) => failures.add(bad.kind),
                LineResult::Translated { .. } => {}
            }
            write_result(&ctx, out, *next_id + i, line.as_deref(), &result)?;
        }
        out.flush()?;
        *next_id += n;
        Ok(())
    };
    if !a.sentences.is_empty() {
        for s in &a.sentences {
            buffer.push(Ok(py_strip(s).to_string()));
            if buffer.len() >= buffer_size {
                flush(&mut buffer, &mut out, &mut next_id)?;
            }
        }
    } else {
        let (reader, newlines): (Box<dyn io::BufRead>, _) = match &a.input {
            Some(p) => (
                Box::new(BufReader::new(File::open(p).with_context(|| format!("opening {}", p.display()))?)),
                Newlines::Universal,
            ),
            None => (Box::new(io::stdin().lock()), Newlines::Lf),
        };
        for line in lines(reader, newlines) {
            match line.context("reading input")? {
                Ok(line) => {
                    buffer.push(Ok(py_strip(&line).to_string()));
                    readable += 1;
                }
                Err(bad) => buffer.push(Err(bad)),
            }
            // an unreadable line with no readable line before it is written at once
            if readable >= buffer_size || readable == 0 {
                flush(&mut buffer, &mut out, &mut next_id)?;
                readable = 0;
            }
        }
    }
    flush(&mut buffer, &mut out, &mut next_id)?;
    failures.finish("translated")?;
    Ok(Outcome::Ok)
}

fn validate(a: &TranslateArgs) -> Result<()> {
    let beam = a.search.beam;
    if beam == 0 {
        bail!("--beam must be at least 1");
    }
    if a.nbest == 0 || a.nbest > beam {
        bail!("--nbest must be between 1 and --beam ({beam})");
    }
    if a.sampling && a.nbest != beam {
        bail!("--sampling requires --nbest to be equal to --beam");
    }
    if !a.sampling && (a.sampling_topk > 0 || a.sampling_topp > 0.0) {
        bail!("--sampling-topk/--sampling-topp require --sampling");
    }
    if !(a.temperature > 0.0) {
        bail!("--temperature must be greater than 0");
    }
    if a.sampling_topp > 1.0 {
        bail!("--sampling-topp must be at most 1");
    }
    if a.batch_size == Some(0) || a.max_tokens == Some(0) {
        bail!("--batch-size and --max-tokens must be at least 1");
    }
    if !a.sentences.is_empty() && a.input.is_some() {
        bail!("give sentences as arguments or --input, not both");
    }
    Ok(())
}

/// fairseq-interactive: `--buffer-size` < 1 means 1; with neither `--batch-size` nor
/// `--max-tokens` the batch size is 1; `--batch-size` may not exceed `--buffer-size`. When
/// `--buffer-size` is not given, it defaults to the batch size here (fairseq refuses instead).
fn batching_sizes(a: &TranslateArgs) -> Result<(Option<usize>, usize)> {
    let batch_size = match (a.batch_size, a.max_tokens) {
        (None, None) => Some(1),
        (b, _) => b,
    };
    let buffer_size = if a.buffer_size == 0 { batch_size.unwrap_or(1).max(1) } else { a.buffer_size };
    if let Some(b) = batch_size {
        if b > buffer_size {
            bail!("--batch-size ({b}) cannot be larger than --buffer-size ({buffer_size})");
        }
    }
    Ok((batch_size, buffer_size))
}

/// The tokenizer + BPE of the checkpoint config and model directory, with the command line's
/// overrides; source text is tokenized in the source language, hypotheses detokenized in the
/// target language.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Encodes, orders, batches and translates one buffer of lines; results in input order.
fn translate_buffer(ctx: &Session, lines: &[&str]) -> Result<Vec<LineResult>> {
    let tokens: Vec<Vec<i64>> = lines.iter().map(|l| ctx.src_dict.encode_line(&ctx.pipeline.encode(l), true)).collect();
    let sizes: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let mut results: Vec<Option<LineResult>> = (0..lines.len()).map(|_| None).collect();
    // fairseq orders the whole buffer first and filters afterwards
    let order: Vec<usize> = ordered_indices(&sizes)
        .into_iter()
        .filter(|&i| {
            let ok = sizes[i] <= ctx.max_source_positions;
            if !ok {
                results[i] = Some(LineResult::TooLong { len: sizes[i], max: ctx.max_source_positions });
            }
            ok
        })
        .collect();
    // fairseq-interactive's get_batch_iterator keeps required_batch_size_multiple = 1
    let order_sizes: Vec<usize> = order.iter().map(|&i| sizes[i]).collect();
    let batches = batch_by_size(&order, &order_sizes, ctx.max_tokens, ctx.batch_size, 1);
    // fairseq-interactive's per-buffer DataLoader iterator draws from the generator
    replay_dataloader_iter()?;
    let (generator, device, pad) = (&ctx.generator, ctx.device, ctx.src_dict.pad());
    let (print_alignment, tgt_pad, tgt_eos) = (ctx.print_alignment, ctx.tgt_dict.pad(), ctx.tgt_dict.eos());
    let tokens = &tokens;
    let translated = run_jobs(&ctx.models, batches, ctx.inter_threads, |models, batch| {
        let samples: Vec<(usize, &[i64])> = batch.iter().map(|&i| (i, tokens[i].as_slice())).collect();
        let collated = collate(&samples, pad)?;
        let src_tokens = collated.src_tokens.f_to_device(device)?;
        let start = Instant::now();
        let mut hypos = generator.generate(&mut EnsembleModel::new(models)?, &src_tokens)?;
        let seconds = start.elapsed().as_secs_f64() / hypos.len().max(1) as f64;
        if print_alignment {
            for (row, hs) in hypos.iter_mut().enumerate() {
                let src_row = Vec::<i64>::try_from(collated.src_tokens.f_select(0, row as i64)?)?;
                for h in hs.iter_mut() {
                    h.alignment = Some(hard_alignment(h, &src_row, tgt_pad, tgt_eos));
                }
            }
        }
        Ok::<_, GenerateError>((collated.ids, hypos, seconds))
    })?;
    for (ids, hypos, seconds) in translated {
        for (id, hs) in ids.into_iter().zip(hypos) {
            results[id] = Some(LineResult::Translated { src_tokens: tokens[id].clone(), hypos: hs, seconds });
        }
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.with_context(|| format!("internal error: line {i} was neither translated nor rejected")))
        .collect()
}

/// `utils.extract_hard_alignment` over the attention kept during search (fairseq's
/// `SequenceGeneratorWithAlignment` without full-context alignment): for each target token
/// that is not EOS, the source word with the highest attention (pad/EOS excluded), as 0-based
/// (src, tgt) word pairs (BPE-free inputs: one token = one word).
fn hard_alignment(h: &Hypothesis, src: &[i64], pad: i64, eos: i64) -> Vec<(i64, i64)> {
    let Some(attn) = h.attention.as_ref() else { return Vec::new() };
    let src_valid: Vec<usize> = (0..src.len()).filter(|&j| src[j] != pad && src[j] != eos).collect();
    // token index -> word index (fairseq's get_token_to_word_mapping: 1-based over non-special tokens)
    let word_of =
        |toks: &[i64], idx: usize| -> i64 { toks[..=idx].iter().filter(|&&t| t != pad && t != eos).count() as i64 };
    let mut out = Vec::new();
    if src_valid.is_empty() {
        return out;
    }
    for (t, &tok) in h.tokens.iter().enumerate() {
        if tok == pad || tok == eos {
            continue;
        }
        let Some(row) = attn.get(t) else { continue };
        let mut best = src_valid[0];
        for &j in &src_valid {
            if row[j] > row[best] {
                best = j;
            }
        }
        out.push((word_of(src, best) - 1, word_of(&h.tokens, t) - 1));
    }
    out
}

/// The soft alignment behind the A- lines: rows are the hypothesis tokens (final EOS
/// included), columns the source tokens (EOS included, the batch's left padding dropped).
fn attention_json(ctx: &Session, attn: &[Vec<f32>], src_tokens: &[i64], tgt_tokens: &[i64]) -> serde_json::Value {
    let pad = attn.first().map_or(0, |r| r.len().saturating_sub(src_tokens.len()));
    let weights: Vec<&[f32]> = attn.iter().map(|r| r.get(pad..).unwrap_or(&[])).collect();
    let symbols = |d: &Dictionary, ids: &[i64]| -> Vec<String> { ids.iter().map(|&i| d.symbol(i).to_string()).collect() };
    serde_json::json!({
        "target": symbols(&ctx.tgt_dict, tgt_tokens),
        "source": symbols(&ctx.src_dict, src_tokens),
        "weights": weights,
    })
}

/// `hypo["score"] / math.log(2)` and the positional scores likewise, as libtorch computes them.
fn base2(values: &[f32], device: Device) -> Result<Vec<f32>> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    let t = Tensor::from_slice(values).f_to_device(device)?.f_div_scalar(std::f64::consts::LN_2)?;
    Ok(Vec::<f32>::try_from(t.f_to_device(Device::Cpu)?)?)
}

/// A line that was not translated: an `E-` line, a JSON object with an `error`, or an empty
/// line (and the error on stderr). `line` is `None` when the line could not be read.
fn write_error(ctx: &Session, out: &mut Box<dyn Write>, id: usize, line: Option<&str>, msg: &str) -> Result<()> {
    match ctx.format {
        TranslateFormat::Fairseq => writeln!(out, "E-{id}\t{msg}")?,
        TranslateFormat::Jsonl => {
            let v = serde_json::json!({ "id": id, "source": line, "error": msg });
            writeln!(out, "{v}")?;
        }
        TranslateFormat::Text => {
            writeln!(out)?;
            eprintln!("error: line {}: {msg}", id + 1);
        }
    }
    Ok(())
}

fn write_result(ctx: &Session, out: &mut Box<dyn Write>, id: usize, line: Option<&str>, result: &LineResult) -> Result<()> {
    match result {
        LineResult::TooLong { len, max } => {
            let msg = format!(
                "input is {len} tokens long (EOS included) but the model accepts at most {max}; not translated"
            );
            write_error(ctx, out, id, line, &msg)?;
        }
        LineResult::Unreadable(bad) => write_error(ctx, out, id, line, &format!("{}; not translated", bad.reason))?,
        LineResult::Translated { src_tokens, hypos, seconds } => {
            let src_str = ctx.src_dict.string(src_tokens, None, false, &[]);
            let eos = [ctx.tgt_dict.eos()];
            let top = &hypos[..hypos.len().min(ctx.nbest)];
            match ctx.format {
                TranslateFormat::Fairseq => {
                    writeln!(out, "S-{id}\t{src_str}")?;
                    writeln!(out, "W-{id}\t{seconds:.3}\tseconds")?;
                    for h in top {
                        let hypo_str = ctx.tgt_dict.string(&h.tokens, None, false, &eos);
                        let score = base2(&[h.score], ctx.device)?[0];
                        let score = python_float_repr(f64::from(score));
                        let detok = ctx.pipeline.decode(&hypo_str)?;
                        writeln!(out, "H-{id}\t{score}\t{hypo_str}")?;
                        writeln!(out, "D-{id}\t{score}\t{detok}")?;
                        let pos: Vec<String> = base2(&h.positional_scores, ctx.device)?
                            .into_iter()
                            .map(|p| python_fixed4(f64::from(p)))
                            .collect();
                        writeln!(out, "P-{id}\t{}", pos.join(" "))?;
                        if ctx.print_alignment {
                            let a: Vec<String> =
                                h.alignment.iter().flatten().map(|(s, t)| format!("{s}-{t}")).collect();
                            writeln!(out, "A-{id}\t{}", a.join(" "))?;
                        }
                    }
                }
                TranslateFormat::Jsonl => {
                    let mut hyps: Vec<serde_json::Value> = Vec::with_capacity(top.len());
                    for h in top {
                        let hypo_str = ctx.tgt_dict.string(&h.tokens, None, false, &eos);
                        let detok = ctx.pipeline.decode(&hypo_str)?;
                        let toks: Vec<&str> = hypo_str.split(' ').filter(|s| !s.is_empty()).collect();
                        let mut v = serde_json::json!({
                            "text": detok,
                            "tokens": toks,
                            "score": h.score,
                            "positional_scores": h.positional_scores,
                        });
                        if ctx.print_alignment {
                            v["alignment"] = serde_json::json!(h.alignment.clone().unwrap_or_default());
                            if let Some(attn) = &h.attention {
                                v["attention"] = attention_json(ctx, attn, src_tokens, &h.tokens);
                            }
                        }
                        hyps.push(v);
                    }
                    let src_toks: Vec<&str> = src_str.split(' ').filter(|s| !s.is_empty()).collect();
                    let v = serde_json::json!({
                        "id": id,
                        "source": line,
                        "source_tokens": src_toks,
                        "hypotheses": hyps,
                    });
                    writeln!(out, "{v}")?;
                }
                TranslateFormat::Text => {
                    let best = match top.first() {
                        Some(h) => ctx.pipeline.decode(&ctx.tgt_dict.string(&h.tokens, None, false, &eos))?,
                        None => String::new(),
                    };
                    writeln!(out, "{best}")?;
                }
            }
        }
    }
    Ok(())
}
