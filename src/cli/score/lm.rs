//! `tchseq score --lm`: fairseq-eval-lm over a text file, one record per sample in id order:
//! the log-probability of every token (natural log, `</s>` included, the BOS of
//! `--add-bos-token` models not), their sum, average and perplexity; and eval-lm's summary
//! (`Loss (base 2)`, `Perplexity`) on stderr.

use std::fs::File;
use std::io::{BufReader, Write};

use anyhow::{bail, Context, Result};

use super::format::{f32_json, f32_text};
use crate::cli::args::{GlobalArgs, LmBreakMode, ScoreArgs, ScoreFormat};
use crate::cli::common;
use crate::cli::lines::{lines, Newlines};
use crate::cli::partial::OutputSink;
use crate::cli::Outcome;
use tchseq::generate::lm_samples::{BreakMode, LmRow, LmSamples};
use tchseq::hub::{LanguageModel, LmScored, LoadOptions, Weights};

/// One output record: a scored sample, or a line or sample that could not be scored.
enum Record {
    Scored { scored: LmScored, text: Option<String> },
    Failed { id: usize, text: Option<String>, error: String },
}

struct Totals {
    samples: usize,
    failed: usize,
    tokens: usize,
    logprob: f64,
}

pub fn run(global: &GlobalArgs, a: &ScoreArgs) -> Result<Outcome> {
    if a.resume || a.shard.num_shards.is_some() {
        bail!("--resume and --num-shards are not supported with --lm");
    }
    // fairseq 0.12.2 takes the continuation marker as the value with trailing spaces removed;
    // its bare --remove-bpe ("subword_nmt") then matches no token: here it means `@@`
    let bpe_cont = match a.remove_bpe.as_deref() {
        None => None,
        Some("@@ " | "@@" | "subword_nmt") => Some("@@"),
        Some(other) => bail!("--remove-bpe {other:?} is not supported (fairseq-eval-lm implements \"@@ \" only)"),
    };
    let device = common::resolve_device(global.device)?;
    let overrides = common::pipeline_overrides(&a.pipeline);
    let options = LoadOptions { weights: Weights::Load { device, kind: tch::Kind::Float, replay_init: false }, pipeline: overrides, compute_type: a.compute_type };
    let lm = LanguageModel::load(&common::model_spec(&a.model), &options).map_err(common::hub_error)?;
    for w in &lm.warnings {
        eprintln!("warning: {w}");
    }
    let mode = match a.sample_break_mode {
        LmBreakMode::None => BreakMode::None,
        LmBreakMode::Complete => BreakMode::Complete,
        LmBreakMode::Eos => BreakMode::Eos,
    };
    let tokens_per_sample = match a.tokens_per_sample {
        Some(t) => t,
        None => lm.config.tokens_per_sample.and_then(|t| usize::try_from(t).ok()).unwrap_or(1024),
    };
    let add_bos = a.add_bos_token || lm.config.add_bos_token;
    let mut samples = LmSamples::new(mode, tokens_per_sample, a.context_window, add_bos, lm.specials())
        .map_err(|e| anyhow::anyhow!("--tokens-per-sample ({}) must be larger than --context-window ({})", e.tokens_per_sample, e.context_window))?;
    let batch_size = a.batching.batch_size.unwrap_or(LanguageModel::SCORE_BATCH_SIZE);
    if batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }

    // `--input -` is stdin, read as fairseq reads it (`\n` ends a line); a file with universal newlines
    let (reader, newlines): (Box<dyn std::io::BufRead>, Newlines) = if super::table::is_stdin(&a.input) {
        (Box::new(std::io::stdin().lock()), Newlines::Lf)
    } else {
        (Box::new(BufReader::new(File::open(&a.input).with_context(|| format!("opening {}", a.input.display()))?)), Newlines::Universal)
    };
    let mut out = OutputSink::open(a.output.as_deref())?;
    let mut totals = Totals { samples: 0, failed: 0, tokens: 0, logprob: 0.0 };
    let mut pending: Vec<(LmRow, Option<String>)> = Vec::new();
    let max_positions = lm.max_positions();
    let flush = |pending: &mut Vec<(LmRow, Option<String>)>, out: &mut OutputSink, totals: &mut Totals| -> Result<()> {
        let (fit, long): (Vec<_>, Vec<_>) = std::mem::take(pending).into_iter().partition(|(r, _)| r.size <= max_positions);
        let mut records: Vec<Record> = long
            .into_iter()
            .map(|(r, text)| Record::Failed {
                id: r.id,
                text,
                error: format!("{} tokens, longer than the model's {max_positions} positions; skipped, as fairseq-eval-lm skips it", r.size),
            })
            .collect();
        for chunk in fit.chunks(batch_size) {
            let rows: Vec<&LmRow> = chunk.iter().map(|(r, _)| r).collect();
            let scored = lm.score(&rows, add_bos)?;
            records.extend(scored.into_iter().zip(chunk).map(|(scored, (_, text))| Record::Scored { scored, text: text.clone() }));
        }
        records.sort_by_key(|r| match r {
            Record::Scored { scored, .. } => scored.id,
            Record::Failed { id, .. } => *id,
        });
        for r in &records {
            write_record(out, a, &lm, r, totals, bpe_cont)?;
        }
        Ok(())
    };
    for (line_no, line) in lines(reader, newlines).enumerate() {
        let line = line.context("reading input")?;
        let text = match line {
            Ok(text) => text,
            Err(bad) if mode == BreakMode::Eos => {
                // the sample of this line is its error; ids stay line numbers
                let id = samples.skip();
                let r = Record::Failed { id, text: None, error: format!("line {}: {}", line_no + 1, bad.reason) };
                flush(&mut pending, &mut out, &mut totals)?;
                write_record(&mut out, a, &lm, &r, &mut totals, bpe_cont)?;
                continue;
            }
            Err(bad) => {
                eprintln!("error: line {}: {}; left out of the text", line_no + 1, bad.reason);
                totals.failed += 1;
                continue;
            }
        };
        let tokens = if a.tokenized { lm.dict.encode_line(&text, true) } else { lm.encode(&text) };
        let text = (mode == BreakMode::Eos).then_some(text);
        pending.extend(samples.push(&tokens).into_iter().map(|r| (r, text.clone())));
        if pending.len() >= 64 * batch_size {
            flush(&mut pending, &mut out, &mut totals)?;
        }
    }
    pending.extend(samples.finish().into_iter().map(|r| (r, None)));
    flush(&mut pending, &mut out, &mut totals)?;
    out.flush()?;
    out.commit()?;
    if !a.quiet {
        let loss = if totals.tokens > 0 { -totals.logprob / totals.tokens as f64 / std::f64::consts::LN_2 } else { 0.0 };
        eprintln!(
            "scored {} samples, {} tokens: Loss (base 2): {loss:.4}, Perplexity: {:.2}",
            totals.samples,
            totals.tokens,
            loss.exp2()
        );
    }
    if totals.failed > 0 {
        bail!("{} lines or samples could not be scored (see their `error`)", totals.failed);
    }
    Ok(Outcome::Ok)
}

/// eval-lm's `--remove-bpe`: a piece ending in `cont` passes its score on to the next token
/// and its text, without `cont`, to the word being built (the last token keeps its own).
fn merge_pieces(symbols: &[String], scores: &[f32], cont: &str) -> (Vec<String>, Vec<f32>) {
    let mut scores = scores.to_vec();
    let (mut words, mut word_scores, mut w) = (Vec::new(), Vec::new(), String::new());
    for i in 0..symbols.len() {
        match symbols[i].strip_suffix(cont) {
            Some(piece) if i + 1 < symbols.len() => {
                w.push_str(piece);
                scores[i + 1] += scores[i];
            }
            _ => {
                w.push_str(&symbols[i]);
                words.push(std::mem::take(&mut w));
                word_scores.push(scores[i]);
            }
        }
    }
    (words, word_scores)
}

fn write_record(
    out: &mut dyn Write,
    a: &ScoreArgs,
    lm: &LanguageModel,
    r: &Record,
    totals: &mut Totals,
    bpe_cont: Option<&str>,
) -> Result<()> {
    let mut obj = serde_json::Map::new();
    match r {
        Record::Scored { scored, text } => {
            let symbols: Vec<String> = scored.tokens.iter().map(|&t| lm.dict.symbol(t).to_string()).collect();
            let (symbols, scores) = match bpe_cont {
                Some(cont) => merge_pieces(&symbols, &scored.scores, cont),
                None => (symbols, scored.scores.clone()),
            };
            let sum: f32 = scores.iter().sum();
            let n = scores.len();
            let avg = if n > 0 { sum / n as f32 } else { 0.0 };
            totals.samples += 1;
            totals.tokens += n;
            totals.logprob += scores.iter().map(|&s| f64::from(s)).sum::<f64>();
            obj.insert("id".into(), scored.id.into());
            obj.insert("text".into(), text.clone().map_or(serde_json::Value::Null, Into::into));
            obj.insert("logprob".into(), f32_json(sum));
            obj.insert("tokens".into(), n.into());
            obj.insert("avg_logprob".into(), f32_json(avg));
            let ppl = (-f64::from(avg)).exp();
            obj.insert("ppl".into(), serde_json::Number::from_f64(ppl).map_or(serde_json::Value::Null, Into::into));
            obj.insert("error".into(), serde_json::Value::Null);
            if a.per_token {
                let pairs: Vec<serde_json::Value> =
                    symbols.iter().zip(&scores).map(|(t, &s)| serde_json::json!([t, f32_json(s)])).collect();
                obj.insert("token_logprobs".into(), pairs.into());
            }
        }
        Record::Failed { id, text, error } => {
            totals.failed += 1;
            obj.insert("id".into(), (*id).into());
            obj.insert("text".into(), text.clone().map_or(serde_json::Value::Null, Into::into));
            for key in ["logprob", "tokens", "avg_logprob", "ppl"] {
                obj.insert(key.into(), serde_json::Value::Null);
            }
            obj.insert("error".into(), error.clone().into());
            if a.per_token {
                obj.insert("token_logprobs".into(), serde_json::Value::Null);
            }
        }
    }
    match a.format {
        ScoreFormat::Jsonl => {
            serde_json::to_writer(&mut *out, &obj)?;
            out.write_all(b"\n")?;
        }
        ScoreFormat::Csv => {
            let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
            let field = |v: &serde_json::Value| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.as_f64().filter(|_| n.is_f64()).map_or_else(|| n.to_string(), |x| f32_text(x as f32)),
                other => other.to_string(),
            };
            if totals.samples + totals.failed == 1 {
                let header: Vec<&str> = obj.keys().map(String::as_str).collect();
                w.write_record(&header)?;
            }
            w.write_record(obj.values().map(field))?;
            out.write_all(&w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?)?;
        }
    }
    Ok(())
}
