//! `tchseq translate`: fairseq-interactive, without Python.
//!
//! Lines are read `--buffer-size` at a time, encoded, ordered and batched as fairseq-interactive
//! does (`generate::batching`), decoded with `SequenceGenerator`, and printed in input order.


use anyhow::{bail, Result};

use super::args::{GlobalArgs, TranslateArgs, TranslateFormat};
use super::common;
use super::lines::{BadLine, Failures};
use super::partial::OutputSink;
use super::shard::{self, Shard};
use super::translate_input::{batching_flags, for_each_buffer, options, reads_a_terminal, resolve_buffer_size, Sentence};
use super::translate_resume::{self, ProgressFile};
use super::translate_output::{refuse_what_text_cannot_show, InOrder, Output, SharedStrings};
use super::interrupt::Piece;
use super::Outcome;
use std::io::IsTerminal;
use tchseq::generate::SequenceGenerator;
use std::sync::Mutex;
use tchseq::hub::{Batching, TargetGuide, TextMode, Translation, TranslateRequest, Translator, Weights};

struct Session {
    translator: Translator,
    generator: SequenceGenerator,
    batching: Batching,
    nbest: usize,
    format: TranslateFormat,
    print_alignment: bool,
    post_process: Option<String>,
    /// `--prefix-size`: the first tokens of a line's reference target (`tgt`) are forced.
    prefix_size: usize,
}

pub fn run(global: &GlobalArgs, a: &TranslateArgs) -> Result<Outcome> {
    refuse_what_text_cannot_show(a)?;
    validate(a)?;
    let shard = Shard::from_args(&a.shard)?;
    if shard.is_some() {
        if a.format == TranslateFormat::Text {
            bail!("--num-shards needs --format jsonl or fairseq (text output has no line ids to merge by)");
        }
        if a.sampling {
            bail!("--num-shards cannot be combined with --sampling (its random draws run through every buffer)");
        }
    }
    let device = common::resolve_device(global.device)?;
    let kind = common::dtype_kind(a.dtype);
    // fairseq-interactive: utils.set_torch_seed(cfg.common.seed) before the models are built
    common::seed_torch(a.seed, device)?;

    let weights = Weights::Load { device, kind, replay_init: a.sampling };
    let bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights, a.compute_type)?;
    let translator = Translator::new(bundle, device, TextMode::Raw).map_err(common::hub_error)?;
    common::print_warnings(&translator.report);
    let max_source_positions = translator.max_source_positions;

    let generator = translator.generator(common::generator_config(&options(a))?)?;

    // fairseq's random draws (sampling) happen in batch order
    let inter_threads = if a.sampling { 1 } else { global.inter_threads };
    let (max_tokens, batch_size, buffer_size) = batching_flags(a, reads_a_terminal(a));
    let batching = common::batching(max_tokens, batch_size, inter_threads)?;
    let buffer_size = resolve_buffer_size(buffer_size, &batching)?;
    let ctx = Session {
        translator,
        generator,
        batching,
        nbest: a.nbest,
        format: a.format,
        print_alignment: a.print_alignment.is_some(),
        post_process: a.post_process.clone(),
        prefix_size: a.search.prefix_size,
    };

    // a file is written complete or not at all (an interrupted run keeps its finished lines
    // for --resume); stdout as it goes
    let settings = translate_resume::settings(global, a, (max_tokens, batch_size, buffer_size));
    let (mut out, skip, earlier_failures) = if a.resume {
        let resumed = translate_resume::resume(a, &settings)?;
        (OutputSink::File(resumed.file), resumed.lines as usize, resumed.failed)
    } else {
        (OutputSink::open(a.output.as_deref())?, 0, 0)
    };
    let file = match &out {
        OutputSink::File(f) if shard.is_none() => f.partial().map(|(p, fd)| (p.to_path_buf(), fd)),
        _ => None,
    };
    let progress_file = file.as_ref().map(|(partial, _)| ProgressFile::new(partial, settings));
    let mut failures = Failures::default();
    for _ in 0..earlier_failures {
        failures.add("in the interrupted run");
    }
    let record = |lines: usize, out: &OutputSink, failures: &Failures| -> Result<()> {
        let OutputSink::File(f) = out else { return Ok(()) };
        crate::cli::interrupt::progress(lines as u64, f.written());
        match &progress_file {
            Some(p) => p.record(lines as u64, f.written(), failures.count() as u64),
            None => Ok(()),
        }
    };
    if let Some((partial, fd)) = &file {
        crate::cli::interrupt::arm(interrupted_note(partial, a), *fd, progress_file.as_ref().map(ProgressFile::path));
    }
    record(skip, &out, &failures)?;
    let shown = !a.quiet && file.is_some() && std::io::stderr().is_terminal();
    let total = if shown { a.input.as_deref().and_then(|p| count_lines(p).ok()) } else { None };
    let bar = super::progress::bar(shown, total, "lines");
    let started = std::time::Instant::now();
    let mut buffer_index = 0usize;
    let too_long = format!("longer than max_source_positions={max_source_positions} tokens (EOS included)");
    let mut next_id = 0usize;
    for_each_buffer(a, a.constraints.is_some(), buffer_size, |buffer| {
        buffer_index += 1;
        if next_id + buffer.len() <= skip {
            // written by the interrupted run
            next_id += buffer.len();
            bar.inc(buffer.len() as u64);
            buffer.clear();
            return Ok(());
        }
        if !shard::takes(shard, buffer_index - 1) {
            next_id += buffer.len();
            buffer.clear();
            return Ok(());
        }
        let mut guides: Vec<TargetGuide> = Vec::new();
        for entry in buffer.iter_mut() {
            let Ok(s) = entry else { continue };
            match guide(&ctx.translator, s, ctx.prefix_size) {
                Ok(g) => {
                    s.constraint_ids.clone_from(&g.constraints);
                    guides.push(g);
                }
                Err(bad) => *entry = Err(bad),
            }
        }
        if guides.iter().all(|g| g == &TargetGuide::default()) {
            guides.clear();
        }
        let tokens: Vec<Vec<i64>> = buffer.iter().filter_map(|l| l.as_ref().ok()).map(|s| ctx.translator.encode(&s.src)).collect();
        // each batch is written as soon as every line before it is (and the partial file's
        // progress recorded), so an interruption keeps every finished batch
        let mut lines = InOrder::new(buffer, next_id);
        lines.skip(skip.saturating_sub(next_id));
        let writer = Mutex::new(Writer { lines, out: &mut out, failures: &mut failures, error: None });
        let strings = SharedStrings(&ctx.translator);
        let output = ctx.output(&strings);
        let on_batch = |done: &[(usize, Translation)]| {
            let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
            if w.error.is_some() {
                return;
            }
            let Writer { lines, out, failures, .. } = &mut *w;
            let written = lines.add(&output, &mut **out, failures, &too_long, done).and_then(|n| {
                bar.inc(n as u64);
                if n > 0 {
                    record(lines.first_id() + lines.written(), out, failures)?;
                }
                Ok(())
            });
            if let Err(e) = written {
                w.error = Some(e);
            }
        };
        let t = &ctx.translator;
        let request = TranslateRequest { guides: &guides, alignment: ctx.print_alignment, on_token: None, on_batch: Some(&on_batch) };
        // (an empty buffer must not reach translate_buffer: it draws from the generator)
        let translated = t.translate_tokens(&ctx.generator, tokens, &ctx.batching, &request);
        let Writer { lines, error, .. } = writer.into_inner().unwrap_or_else(|e| e.into_inner());
        translated?;
        if let Some(e) = error {
            return Err(e);
        }
        // a buffer of unreadable lines only has no batch: its lines go out here
        let empty: Vec<(usize, Translation)> = Vec::new();
        let mut lines = lines;
        let n = lines.add(&output, &mut out, &mut failures, &too_long, &empty)?;
        bar.inc(n as u64);
        next_id += lines.written();
        lines.finish()?;
        record(next_id, &out, &failures)?;
        Ok(())
    })?;
    out.commit()?;
    drop(progress_file);
    bar.finish_and_clear();
    // what the GPU check's switch did (it prints nothing else)
    let fixed_steps: usize = ctx.translator.models.iter().map(|m| m.decoder.fixed_steps()).sum();
    if fixed_steps > 0 {
        eprintln!("{}=fixed: {fixed_steps} decoder steps kept their keys and values at a fixed capacity", tchseq::hub::KV_CACHE_ENV);
    }
    if shown {
        let secs = started.elapsed().as_secs_f64();
        let rate = super::progress::rate(if secs > 0.0 { next_id as f64 / secs } else { 0.0 });
        eprintln!("translated {next_id} lines ({} not translated), {secs:.1}s ({rate} lines/s)", failures.count());
    }
    failures.finish("translated")?;
    Ok(Outcome::Ok)
}

/// What Ctrl-C says about `translate --output`'s partial file: what it holds and how to go on.
fn interrupted_note(partial: &std::path::Path, a: &TranslateArgs) -> Vec<Piece> {
    let rest = match &a.input {
        Some(input) => format!("`tail -n +N {}`", input.display()),
        None => "the input from that line".to_string(),
    };
    let (before, after) = rest.split_once('N').unwrap_or((&rest, ""));
    let held = Piece::Text(format!("interrupted: {} holds the output of the first ", partial.display()));
    if !a.sampling {
        return vec![held, Piece::Done, Piece::Text(" input lines; run the same command with --resume to go on".to_string())];
    }
    vec![
        held,
        Piece::Done,
        Piece::Text(format!(" input lines; sampling cannot resume: translate the rest ({before}")),
        Piece::Next,
        Piece::Text(format!("{after}) into another file and append it, or run the command again")),
    ]
}

/// Lines of a file (a last line without its newline counts), for the bar's total.
fn count_lines(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let (mut buf, mut lines, mut last) = (vec![0u8; 1 << 16], 0u64, b'\n');
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(lines + u64::from(last != b'\n'));
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
}

/// Where a buffer's finished batches go, shared by the threads that finish them.
struct Writer<'a> {
    lines: InOrder,
    out: &'a mut OutputSink,
    failures: &'a mut Failures,
    /// The first write error: later batches are not written, and the run ends with it.
    error: Option<anyhow::Error>,
}

impl Session {
    fn output<'a>(&'a self, strings: &'a SharedStrings<'a, Translator>) -> Output<'a> {
        Output { strings, format: self.format, nbest: self.nbest, print_alignment: self.print_alignment, post_process: self.post_process.as_deref() }
    }
}


fn validate(a: &TranslateArgs) -> Result<()> {
    // the search options are checked by the library (once, for every door)
    common::refuse_unsupported(&a.search)?;
    common::generator_config(&options(a))?;
    common::batching(a.batching.max_tokens, a.batching.batch_size, 1)?;
    if !a.sentences.is_empty() && a.input.is_some() {
        bail!("give sentences as arguments or --input, not both");
    }
    Ok(())
}

/// The sentence's prefix and constraints as target token ids (`Translator::guide`: its refusal
/// is this line's error). With `--prefix-size N` and a reference target, the prefix is the
/// reference's first N tokens, as fairseq-generate takes them.
fn guide(t: &Translator, s: &Sentence, prefix_size: usize) -> Result<TargetGuide, BadLine> {
    let prefix = match (&s.prefix, &s.tgt) {
        (Some(_), Some(_)) if prefix_size > 0 => {
            let reason = "give `prefix` or `tgt` with --prefix-size, not both".to_string();
            return Err(BadLine { kind: "both `prefix` and `tgt`", reason });
        }
        (None, Some(tgt)) if prefix_size > 0 => {
            let mut ids = t.encode_target_prefix(tgt);
            if ids.len() < prefix_size {
                let reason = format!("the reference `tgt` has {} tokens, fewer than --prefix-size {prefix_size}", ids.len());
                return Err(BadLine { kind: "a reference shorter than --prefix-size", reason });
            }
            ids.truncate(prefix_size);
            ids
        }
        (p, _) => p.as_deref().map_or_else(Vec::new, |p| t.encode_target_prefix(p)),
    };
    t.guide(prefix, &s.constraints).map_err(|e| BadLine { kind: e.kind(), reason: e.to_string() })
}

