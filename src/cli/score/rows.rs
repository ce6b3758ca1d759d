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

/// Inside a chunk, a checkpoint is kept after a round of batches when this long has passed since
/// the last one (a chunk's end always keeps one): after every batch of the default batching,
/// every few of small fast ones, whose checkpoint (a write and a rename) would cost more than the
/// batch. (None in the unit tests, which check each batch's checkpoint.)
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(if cfg!(test) { 0 } else { 200 });


/// Scores every row of `input` and writes the output; the heart of `tchseq score`.
pub fn score_input(
    mut input: Input,
    opts: &Options,
    backend: &mut dyn Backend,
    progress: bool,
) -> Result<Summary> {
    let started = Instant::now();
    let mut summary = Summary::default();
    // stdin has no size or time to hold a resume to (and --resume refuses it)
    let (input_len, input_modified_ns) = if is_stdin(&opts.input) { (0, 0) } else { input_stamp(&opts.input)? };
    // What a checkpoint of the output file records: where the next unwritten row starts, the
    // chunk it is in (None between chunks), and what was written.
    let progress_at = |pos: &Position, chunk: Option<ChunkProgress>, output_bytes: u64, summary: &Summary| Progress {
        format: PROGRESS_FORMAT.to_string(),
        settings: opts.settings.clone(),
        input_len,
        input_modified_ns,
        input_byte: pos.byte(),
        input_line: pos.line(),
        input_record: pos.record(),
        output_bytes,
        summary: summary.clone(),
        chunk,
    };
    // With --resume into a chunk under way: its rows already written and those scored ahead.
    let mut resumed: Option<(Progress, Vec<(usize, Finished)>)> = None;
    // Where the first chunk starts after a resume's seek (the reader then reports a byte before
    // it: see `seek_to_row`).
    let mut resumed_at: Option<Position> = None;
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
            // a chunk under way is read again from its start, so that its batches are the same
            let (byte, line, record) = match &prev.chunk {
                Some(c) => (c.byte, c.line, c.record),
                None => (prev.input_byte, prev.input_line, prev.input_record),
            };
            let mut pos = Position::new();
            pos.set_byte(byte).set_line(line.max(1)).set_record(record);
            seek_to_row(&mut input.reader, &pos).context("--resume: cannot seek in the input")?;
            resumed_at = Some(pos);
            summary = prev.summary.clone();
            if prev.chunk.is_some() {
                resumed = Some((prev, sink.read_pending()?));
            }
            Sink::File(sink)
        }
        Some(OutputPath::Atomic(path)) => {
            let mut sink = FileSink::create(&path)?;
            sink.write(&header_bytes(&input, opts)?)?;
            // its first checkpoint is written once the handler is armed, below
            Sink::File(sink)
        }
    };

    // rows written, or scored ahead and kept, by the interrupted run (not counted as this run's)
    let mut rows_before = summary.rows;
    let total = if progress && !is_stdin(&opts.input) { count_records(&opts.input, opts.delimiter).ok() } else { None };
    let bar = crate::cli::progress::bar(progress, total, "rows");
    bar.set_position(summary.rows);
    bar.reset_eta();
    if let Sink::File(f) = &mut sink {
        use std::os::fd::AsRawFd;
        let note = vec![
            Piece::Text(format!("interrupted: {} holds the first ", f.partial_path.display())),
            Piece::Done,
            Piece::Text(" rows, complete; run the same command with --resume to go on".to_string()),
        ];
        crate::cli::interrupt::progress(summary.rows, f.bytes);
        crate::cli::interrupt::arm(note, f.file.as_raw_fd(), Some(&f.progress_path));
        if !opts.resume {
            f.checkpoint(&progress_at(input.reader.position(), None, f.bytes, &summary))?;
        }
    }

    let mut chunk: Vec<ByteRecord> = Vec::with_capacity(opts.buffer_size.min(1 << 16));
    let (mut chunk_index, mut first_row) = (0usize, 0u64);
    let mut last_checkpoint = Instant::now();
    loop {
        chunk.clear();
        let chunk_start = resumed_at.take().unwrap_or_else(|| input.reader.position().clone());
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
        let mut rows = ChunkRows::new(chunk.len());
        if let Some((prev, pending)) = resumed.take() {
            rows_before += rows.resume(&prev, pending, &chunk, &chunk_start)?;
        }
        let plan = plan_chunk(&input, opts, &*backend, &chunk, &rows.unfinished());
        // rows that fail before any batch (unreadable, too long) are finished at once
        let failed: Vec<(usize, RowResult)> = plan.failed.iter().map(|(k, reason)| (*k, Err(reason.clone()))).collect();
        let mut keep = |rows: &mut ChunkRows, done: Vec<(usize, RowResult)>, backend: &dyn Backend, summary: &mut Summary| -> Result<()> {
            let (data, pending) = rows.finish(done, |k, result| {
                let mut bytes = Vec::new();
                format_row(&mut bytes, &input, opts, &chunk[k], result, backend, opts.shard.map(|_| row + k as u64))?;
                Ok(Finished { bytes, totals: RowTotals::of(result) })
            }, summary)?;
            if data.is_empty() && pending.is_empty() {
                return Ok(());
            }
            sink.write(&data)?;
            if let Sink::File(f) = &mut sink {
                f.append_pending(&pending)?;
                if rows.next < chunk.len() && last_checkpoint.elapsed() < CHECKPOINT_EVERY {
                    // kept at the next checkpoint; till then a Ctrl-C cuts the rows back off
                    return Ok(());
                }
                last_checkpoint = Instant::now();
                // the handler's cut first: a checkpoint never claims more than a Ctrl-C keeps
                crate::cli::interrupt::progress(summary.rows, f.bytes);
                if rows.next < chunk.len() {
                    let start = row_start(&chunk, &chunk_start, rows.next).context("a row without its place in the input")?;
                    let progress = ChunkProgress {
                        byte: chunk_start.byte(),
                        line: chunk_start.line(),
                        record: chunk_start.record(),
                        rows_written: rows.next as u64,
                        pending_bytes: f.pending_bytes,
                    };
                    f.checkpoint(&progress_at(start, Some(progress), f.bytes, summary))?;
                } else {
                    f.checkpoint(&progress_at(input.reader.position(), None, f.bytes, summary))?;
                    f.clear_pending()?;
                }
            }
            Ok(())
        };
        keep(&mut rows, failed, &*backend, &mut summary)?;
        // a round of batches at a time (as many as run side by side), so that progress is kept per batch
        for part in plan.rounds(backend.parallel_batches()) {
            let done = plan.score(backend, part);
            bar.inc(done.iter().filter(|(k, _)| *k >= rows.next).count() as u64);
            keep(&mut rows, done, &*backend, &mut summary)?;
        }
        if rows.next < chunk.len() {
            bail!("internal error: row {} of a chunk was not scored", row + rows.next as u64 + 1);
        }
        // rows that failed before any batch move the bar here
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


/// Where row `k` of `chunk` starts in the input: the chunk's start for its first row (which, read
/// after a resume's seek, reports a byte before it), else where the reader was when it read it.
fn row_start<'a>(chunk: &'a [ByteRecord], chunk_start: &'a Position, k: usize) -> Option<&'a Position> {
    if k == 0 { Some(chunk_start) } else { chunk.get(k)?.position() }
}

/// The rows of one chunk on their way out: each is written when it and every row before it are
/// finished; those finished ahead of their turn wait here (and in the pending file).
pub(super) struct ChunkRows {
    /// The first row not yet written.
    pub(super) next: usize,
    finished: Vec<Option<Finished>>,
}

impl ChunkRows {
    pub(super) fn new(len: usize) -> Self {
        Self { next: 0, finished: vec![None; len] }
    }

    /// A resume into this chunk: its first rows are written, `pending` are scored. Returns how
    /// many rows `pending` gave back.
    pub(super) fn resume(&mut self, prev: &Progress, pending: Vec<(usize, Finished)>, chunk: &[ByteRecord], chunk_start: &Position) -> Result<u64> {
        let written = prev.chunk.as_ref().map_or(0, |c| c.rows_written);
        let written = usize::try_from(written).ok().filter(|&w| w < chunk.len());
        // the row the progress file says comes next must be where this chunk has it
        let next_byte = written.and_then(|w| row_start(chunk, chunk_start, w)).map(Position::byte);
        let Some(written) = written.filter(|_| next_byte == Some(prev.input_byte)) else {
            bail!("--resume: the progress file does not match the input; run without --resume to start over");
        };
        self.next = written;
        let mut restored = 0;
        for (k, row) in pending {
            if k >= written && k < chunk.len() && self.finished[k].is_none() {
                self.finished[k] = Some(row);
                restored += 1;
            }
        }
        Ok(restored)
    }

    /// Per row: whether it still has to be scored.
    pub(super) fn unfinished(&self) -> Vec<bool> {
        self.finished.iter().enumerate().map(|(k, f)| k >= self.next && f.is_none()).collect()
    }

    /// Takes finished rows (`format` makes each one's output): returns the bytes now due, in
    /// input order, and the pending-file records of the rows that must still wait. `summary`
    /// counts the rows written.
    pub(super) fn finish(
        &mut self,
        done: Vec<(usize, RowResult)>,
        mut format: impl FnMut(usize, &RowResult) -> Result<Finished>,
        summary: &mut Summary,
    ) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut fresh = Vec::new();
        for (k, result) in done {
            if k >= self.next && self.finished[k].is_none() {
                self.finished[k] = Some(format(k, &result)?);
                fresh.push(k);
            }
        }
        let mut data = Vec::new();
        while let Some(row) = self.finished.get_mut(self.next).and_then(Option::take) {
            data.extend(row.bytes);
            summary.add(&row.totals);
            self.next += 1;
        }
        let mut pending = Vec::new();
        for k in fresh.into_iter().filter(|&k| k >= self.next) {
            if let Some(row) = &self.finished[k] {
                super::pending::encode(&mut pending, k, row);
            }
        }
        Ok((data, pending))
    }
}

/// One chunk encoded and batched as fairseq-generate batches it (ordered by length).
pub(super) struct ChunkPlan {
    /// (row in the chunk, its encoding)
    encoded: Vec<(usize, Encoded)>,
    /// Rows that cannot be scored, and why.
    pub(super) failed: Vec<(usize, String)>,
    /// The batches still to score (indices into `encoded`), in fairseq's order.
    batches: Vec<Vec<usize>>,
}

/// Encodes and batches the rows of `chunk`. Every row takes its place in the batches, so that
/// they are the same whatever was scored before; a batch none of whose rows is `unfinished` is
/// left out.
pub(super) fn plan_chunk(input: &Input, opts: &Options, backend: &dyn Backend, chunk: &[ByteRecord], unfinished: &[bool]) -> ChunkPlan {
    let mut encoded: Vec<(usize, Encoded)> = Vec::new();
    let mut failed = Vec::new();
    for (row, rec) in chunk.iter().enumerate() {
        let prepared = input
            .columns
            .fields(rec, &opts.source_column, &opts.target_column)
            .and_then(|(source, target)| Ok((source, target, input.columns.languages(rec)?)))
            .and_then(|(source, target, langs)| backend.encode_in(source, target, langs));
        match prepared {
            Ok(e) => encoded.push((row, e)),
            Err(reason) if unfinished[row] => failed.push((row, reason)),
            Err(_) => {}
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
    let batches: Vec<Vec<usize>> = batches
        .iter()
        .map(|b| b.iter().map(|&k| indices[k]).collect::<Vec<usize>>())
        .filter(|members| members.iter().any(|&i| unfinished[encoded[i].0]))
        .collect();
    ChunkPlan { encoded, failed, batches }
}

impl ChunkPlan {
    /// The batches in rounds of `n` to run side by side: neighbours in fairseq's order (alike in
    /// length, so that they take alike times), the round that holds the earliest row first, so
    /// that rows are written from the first round on. The order batches run in changes none of
    /// their bits.
    pub(super) fn rounds(&self, n: usize) -> Vec<&[Vec<usize>]> {
        let mut rounds: Vec<&[Vec<usize>]> = self.batches.chunks(n.max(1)).collect();
        rounds.sort_by_key(|round| round.iter().flatten().map(|&i| self.encoded[i].0).min());
        rounds
    }

    /// Scores `batches` (side by side where the backend can): each member's row and result.
    pub(super) fn score(&self, backend: &mut dyn Backend, batches: &[Vec<usize>]) -> Vec<(usize, RowResult)> {
        let encoded = &self.encoded;
        let items: Vec<Vec<&Encoded>> = batches.iter().map(|m| m.iter().map(|&i| &encoded[i].1).collect()).collect();
        let outcomes = backend.score_batches(&items);
        let mut results = Vec::with_capacity(items.iter().map(Vec::len).sum());
        for ((members, items), scored) in batches.iter().zip(&items).zip(outcomes) {
            match scored {
                Ok(scored) if scored.len() == items.len() => {
                    for (&i, s) in members.iter().zip(scored) {
                        let (row, e) = &encoded[i];
                        results.push((*row, Ok(ScoredRow { scored: s, target: e.target.clone() })));
                    }
                }
                // a failing batch: score its rows one by one so only the culprits get an error
                _ => {
                    for &i in members {
                        let (row, e) = &encoded[i];
                        results.push((*row, match backend.score(&[e]) {
                            Ok(mut s) if s.len() == 1 => {
                                Ok(ScoredRow { scored: s.remove(0), target: e.target.clone() })
                            }
                            Ok(_) => Err("scoring failed: wrong number of results".to_string()),
                            Err(err) => Err(format!("scoring failed: {}", crate::cli::common::one_line(&err))),
                        }));
                    }
                }
            }
        }
        results
    }
}
