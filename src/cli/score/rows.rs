//! Chunks of rows through the backend: encode, order and batch as fairseq-generate does,
//! score, and keep every row in its place.

use super::*;
use anyhow::{bail, Context, Result};
use csv::{ByteRecord, Position};
use crate::cli::interrupt::Piece;

use std::time::Instant;

use crate::cli::partial::{open_in_place, OutputPath};

use tchseq::generate::batching::batch_by_size;
use tchseq::generate::scorer::ordered_indices;


/// Scores every row of `input` and writes the output; the heart of `tchseq score`.
pub fn score_input(
    mut input: Input,
    opts: &Options,
    backend: &mut dyn Backend,
    progress: bool,
) -> Result<Summary> {
    let started = Instant::now();
    let mut summary = Summary::default();
    let (input_len, input_modified_ns) = input_stamp(&opts.input)?;
    // What a checkpoint of the output file records: where the input stands and what was written.
    let progress_at = |input: &Input, output_bytes: u64, summary: &Summary| {
        let pos = input.reader.position();
        Progress {
            format: PROGRESS_FORMAT.to_string(),
            settings: opts.settings.clone(),
            input_len,
            input_modified_ns,
            input_byte: pos.byte(),
            input_line: pos.line(),
            input_record: pos.record(),
            output_bytes,
            summary: summary.clone(),
        }
    };
    let output = opts.output.as_deref().map(OutputPath::resolve).transpose()?;
    let mut sink = match output {
        None | Some(OutputPath::Stdout) if opts.resume => bail!("--resume needs --output FILE (a run to stdout cannot be resumed)"),
        None | Some(OutputPath::Stdout) => {
            let mut s = Sink::Stdout(std::io::stdout());
            s.write(&header_bytes(&input, opts)?)?;
            s
        }
        Some(OutputPath::InPlace(path)) if opts.resume => {
            bail!("--resume: {} is not a regular file, so no run into it can be continued", path.display())
        }
        Some(OutputPath::InPlace(path)) => {
            let file = open_in_place(&path)?;
            let mut s = Sink::InPlace(path, file);
            s.write(&header_bytes(&input, opts)?)?;
            s
        }
        Some(OutputPath::Atomic(path)) if opts.resume => {
            let prev = resumable(opts, &path)?;
            let sink = FileSink::reopen(&path, &prev)?;
            let mut pos = Position::new();
            pos.set_byte(prev.input_byte).set_line(prev.input_line.max(1)).set_record(prev.input_record);
            seek_to_row(&mut input.reader, &pos).context("--resume: cannot seek in the input")?;
            summary = prev.summary;
            Sink::File(sink)
        }
        Some(OutputPath::Atomic(path)) => {
            let mut sink = FileSink::create(&path)?;
            sink.write(&header_bytes(&input, opts)?)?;
            sink.checkpoint(&progress_at(&input, sink.bytes, &summary))?;
            Sink::File(sink)
        }
    };

    let rows_before = summary.rows;
    let total = if progress { count_records(&opts.input, opts.delimiter).ok() } else { None };
    let bar = crate::cli::progress::bar(progress, total, "rows");
    bar.set_position(summary.rows);
    bar.reset_eta();
    if let Sink::File(f) = &sink {
        use std::os::fd::AsRawFd;
        let note = vec![
            Piece::Text(format!("interrupted: {} holds the first ", f.partial_path.display())),
            Piece::Done,
            Piece::Text(" rows, complete; run the same command with --resume to go on".to_string()),
        ];
        crate::cli::interrupt::progress(summary.rows, f.bytes);
        crate::cli::interrupt::arm(note, f.file.as_raw_fd());
    }

    let mut chunk: Vec<ByteRecord> = Vec::with_capacity(opts.buffer_size.min(1 << 16));
    let (mut chunk_index, mut first_row) = (0usize, 0u64);
    loop {
        chunk.clear();
        let mut record = ByteRecord::new();
        while chunk.len() < opts.buffer_size
            && input.reader.read_byte_record(&mut record).context("cannot read the input")?
        {
            chunk.push(std::mem::take(&mut record));
        }
        if chunk.is_empty() {
            break;
        }
        let (index, row) = (chunk_index, first_row);
        chunk_index += 1;
        first_row += chunk.len() as u64;
        if !crate::cli::shard::takes(opts.shard, index) {
            continue;
        }
        let results = score_chunk(&input, opts, backend, &chunk, &|rows| bar.inc(rows));
        let mut data = Vec::new();
        for (k, (rec, result)) in chunk.iter().zip(&results).enumerate() {
            summary.add(result);
            let row = opts.shard.map(|_| row + k as u64);
            format_row(&mut data, &input, opts, rec, result, backend, row)?;
        }
        sink.write(&data)?;
        if let Sink::File(f) = &mut sink {
            f.checkpoint(&progress_at(&input, f.bytes, &summary))?;
            crate::cli::interrupt::progress(summary.rows, f.bytes);
        }
        // rows that failed before any batch (unreadable, too long) move the bar here
        bar.set_position(summary.rows);
    }
    bar.finish_and_clear();
    if let Sink::File(f) = sink {
        f.finish()?;
    }
    summary.elapsed_s = started.elapsed().as_secs_f64();
    summary.rows_this_run = summary.rows - rows_before;
    Ok(summary)
}


/// The interrupted run's progress, when `--resume` may continue it into `path`: the same settings
/// and the same input file. Otherwise a one-line error, and the partial output is not touched.
pub(super) fn resumable(opts: &Options, path: &std::path::Path) -> Result<Progress> {
    let prev = FileSink::progress(path)?;
    let partial = FileSink::paths(path).0;
    super::resume::check(&prev.settings, &opts.settings, &partial)?;
    if (prev.input_len, prev.input_modified_ns) != input_stamp(&opts.input)? {
        bail!(
            "--resume: {} changed since the interrupted run; run without --resume to start over ({} is left as it was)",
            opts.input.display(),
            partial.display()
        );
    }
    Ok(prev)
}

/// A scored row: its scores and its target token ids (EOS included).
#[derive(Debug, Clone)]
pub(super) struct ScoredRow {
    pub(super) scored: Scored,
    pub(super) target: Vec<i64>,
}

pub(super) type RowResult = std::result::Result<ScoredRow, String>;


/// Scores the rows of one chunk; one result per row, in row order. Rows are batched as
/// fairseq-generate batches them (ordered by length), so the order is restored here.
/// `scored(rows)` is told after each round of batches.
pub(super) fn score_chunk(
    input: &Input,
    opts: &Options,
    backend: &mut dyn Backend,
    chunk: &[ByteRecord],
    scored: &dyn Fn(u64),
) -> Vec<RowResult> {
    let mut results: Vec<Option<RowResult>> = vec![None; chunk.len()];
    let mut encoded: Vec<(usize, Encoded)> = Vec::new();
    for (row, rec) in chunk.iter().enumerate() {
        let prepared = input
            .columns
            .fields(rec, &opts.source_column, &opts.target_column)
            .and_then(|(source, target)| Ok((source, target, input.columns.languages(rec)?)))
            .and_then(|(source, target, langs)| backend.encode_in(source, target, langs));
        match prepared {
            Ok(e) => encoded.push((row, e)),
            Err(reason) => results[row] = Some(Err(reason)),
        }
    }

    let src_sizes: Vec<usize> = encoded.iter().map(|(_, e)| e.source.len()).collect();
    let tgt_sizes: Vec<usize> = encoded.iter().map(|(_, e)| e.target.len()).collect();
    let indices = ordered_indices(&src_sizes, &tgt_sizes);
    let num_tokens: Vec<usize> = indices.iter().map(|&i| src_sizes[i].max(tgt_sizes[i])).collect();
    let positions: Vec<usize> = (0..indices.len()).collect();
    let batches = batch_by_size(
        &positions,
        &num_tokens,
        opts.max_tokens,
        opts.batch_size,
        REQUIRED_BATCH_SIZE_MULTIPLE,
    );
    let members: Vec<Vec<usize>> = batches.iter().map(|b| b.iter().map(|&k| indices[k]).collect()).collect();
    let items: Vec<Vec<&Encoded>> = members.iter().map(|m| m.iter().map(|&i| &encoded[i].1).collect()).collect();
    // a round of batches at a time (as many as run side by side), so that progress shows per batch
    let round = backend.parallel_batches().max(1);
    let mut outcomes = Vec::with_capacity(items.len());
    for part in items.chunks(round) {
        outcomes.extend(backend.score_batches(part));
        scored(part.iter().map(|b| b.len() as u64).sum());
    }
    for ((members, items), scored) in members.iter().zip(&items).zip(outcomes) {
        match scored {
            Ok(scored) if scored.len() == items.len() => {
                for (&i, s) in members.iter().zip(scored) {
                    let (row, e) = &encoded[i];
                    results[*row] = Some(Ok(ScoredRow { scored: s, target: e.target.clone() }));
                }
            }
            // a failing batch: score its rows one by one so only the culprits get an error
            _ => {
                for &i in members {
                    let (row, e) = &encoded[i];
                    results[*row] = Some(match backend.score(&[e]) {
                        Ok(mut s) if s.len() == 1 => {
                            Ok(ScoredRow { scored: s.remove(0), target: e.target.clone() })
                        }
                        Ok(_) => Err("scoring failed: wrong number of results".to_string()),
                        Err(err) => Err(format!("scoring failed: {}", crate::cli::common::one_line(&err))),
                    });
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("internal error: row was not scored".to_string())))
        .collect()
}
