//! `tchseq score`: per-row log-probabilities of (source, target) pairs from a CSV file, computed
//! as `fairseq-generate --score-reference` does (fairseq's SequenceScorer).
//!
//! The CSV/row machinery here does not know about models: it reads rows in chunks of
//! `--buffer-size`, asks a [`Backend`] to encode each row and to score batches built with
//! fairseq's ordering and batching, and writes exactly one output row per input row, in input
//! order.

use anyhow::{bail, Context, Result};
use csv::{ByteRecord, Position};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{IsTerminal, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use tchseq::generate::batching::batch_by_size;
use tchseq::generate::scorer::ordered_indices;

use super::args::{GlobalArgs, ScoreArgs, ScoreFormat};
use super::Outcome;

/// fairseq's `--required-batch-size-multiple` default.
const REQUIRED_BATCH_SIZE_MULTIPLE: usize = 8;
/// fairseq-generate's `--max-tokens` when neither it nor `--batch-size` is given.
const DEFAULT_MAX_TOKENS: usize = 12000;
const ADDED_COLUMNS: [&str; 5] = ["logprob", "tokens", "avg_logprob", "ppl", "error"];
const PER_TOKEN_COLUMN: &str = "token_logprobs";

pub fn run(global: &GlobalArgs, a: &ScoreArgs) -> Result<Outcome> {
    let opts = Options::new(a)?;
    let input = Input::open(&opts)?;
    let mut backend = model_backend::ModelBackend::load(global, a)?;
    let progress = !a.quiet && std::io::stderr().is_terminal();
    let summary = score_input(input, &opts, &mut backend, progress)?;
    if !a.quiet {
        eprintln!("{}", summary.line());
    }
    if summary.scored < summary.rows {
        anyhow::bail!(
            "{} of {} rows could not be scored (see the `error` column)",
            summary.rows - summary.scored,
            summary.rows
        );
    }
    Ok(Outcome::Ok)
}

/// Token ids of one row, both ending with EOS.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    pub source: Vec<i64>,
    pub target: Vec<i64>,
}

/// The scores of one row (natural log).
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// Sum of the target tokens' log-probabilities, EOS included.
    pub logprob: f32,
    /// fairseq's `--score-reference` score: `logprob / tokens`.
    pub avg_logprob: f32,
    /// One log-probability per target token, EOS included.
    pub positional_scores: Vec<f32>,
}

/// The model side of `score`.
pub trait Backend {
    /// Text of the source and target fields to token ids, or why the row cannot be scored.
    fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String>;
    /// Scores one batch; one result per item, in the order given.
    fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>>;
    /// Scores several batches, possibly at the same time; one result per batch, in order.
    fn score_batches(&mut self, batches: &[Vec<&Encoded>]) -> Vec<Result<Vec<Scored>>> {
        batches.iter().map(|b| self.score(b)).collect()
    }
    /// The target dictionary's symbol for `id`.
    fn target_symbol(&self, id: i64) -> String;
}

#[derive(Debug, Clone)]
pub struct Options {
    pub input: PathBuf,
    pub output: Option<PathBuf>,
    pub source_column: String,
    pub target_column: String,
    pub delimiter: u8,
    pub format: ScoreFormat,
    pub per_token: bool,
    pub max_tokens: Option<usize>,
    pub batch_size: Option<usize>,
    pub buffer_size: usize,
    pub resume: bool,
    /// Everything that must be unchanged for `--resume` to continue a run.
    pub fingerprint: String,
}

impl Options {
    pub fn new(a: &ScoreArgs) -> Result<Self> {
        let delimiter = parse_delimiter(&a.delimiter)?;
        if a.buffer_size == 0 {
            bail!("--buffer-size must be at least 1");
        }
        if a.batch_size == Some(0) {
            bail!("--batch-size must be at least 1");
        }
        if a.max_tokens == Some(0) {
            bail!("--max-tokens must be at least 1");
        }
        if a.resume && a.output.is_none() {
            bail!("--resume needs --output (a run to stdout cannot be resumed)");
        }
        let (max_tokens, batch_size) = match (a.max_tokens, a.batch_size) {
            (None, None) => (Some(DEFAULT_MAX_TOKENS), None),
            other => other,
        };
        let input_abs = fs::canonicalize(&a.input).unwrap_or_else(|_| a.input.clone());
        let fingerprint = format!(
            "{:?}",
            (
                input_abs,
                &a.source_column,
                &a.target_column,
                delimiter,
                a.format,
                a.per_token,
                a.tokenized,
                &a.model,
                &a.pipeline,
            )
        );
        Ok(Self {
            input: a.input.clone(),
            output: a.output.clone(),
            source_column: a.source_column.clone(),
            target_column: a.target_column.clone(),
            delimiter,
            format: a.format,
            per_token: a.per_token,
            max_tokens,
            batch_size,
            buffer_size: a.buffer_size,
            resume: a.resume,
            fingerprint,
        })
    }
}

/// `,`, `;`, `|`, a literal tab, or the two characters `\t` (or the word `tab`).
fn parse_delimiter(text: &str) -> Result<u8> {
    match text {
        "\\t" | "tab" | "TAB" => Ok(b'\t'),
        _ => match text.as_bytes() {
            [b] if b.is_ascii() && *b != b'"' && *b != b'\n' && *b != b'\r' => Ok(*b),
            _ => bail!("--delimiter must be one ASCII character (or '\\t' for tab), got {text:?}"),
        },
    }
}

/// The opened input with its header checked.
pub struct Input {
    reader: csv::Reader<File>,
    header: ByteRecord,
    header_names: Vec<String>,
    source_idx: usize,
    target_idx: usize,
}

impl Input {
    pub fn open(opts: &Options) -> Result<Self> {
        let file = File::open(&opts.input)
            .with_context(|| format!("cannot open --input {}", opts.input.display()))?;
        let mut reader = csv_reader(opts.delimiter, file);
        let header = reader
            .byte_headers()
            .with_context(|| format!("cannot read the header of {}", opts.input.display()))?
            .clone();
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            bail!("{} has no header row (the first line must name the columns)", opts.input.display());
        }
        let mut header_names = Vec::with_capacity(header.len());
        for field in header.iter() {
            let name = std::str::from_utf8(field).map_err(|_| {
                anyhow::anyhow!("the header of {} is not valid UTF-8", opts.input.display())
            })?;
            header_names.push(name.to_string());
        }
        let find = |name: &str, flag: &str| -> Result<usize> {
            header_names.iter().position(|h| h == name).ok_or_else(|| {
                anyhow::anyhow!(
                    "{flag} '{name}' is not a column of {}; its columns are: {}",
                    opts.input.display(),
                    header_names.iter().map(|h| format!("'{h}'")).collect::<Vec<_>>().join(", ")
                )
            })
        };
        let source_idx = find(&opts.source_column, "--source-column")?;
        let target_idx = find(&opts.target_column, "--target-column")?;
        for added in output_columns(opts.per_token) {
            if header_names.iter().any(|h| h == added) {
                bail!(
                    "{} already has a column named '{added}', which `score` adds; rename it first",
                    opts.input.display()
                );
            }
        }
        Ok(Self { reader, header, header_names, source_idx, target_idx })
    }
}

fn csv_reader(delimiter: u8, file: File) -> csv::Reader<File> {
    csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).has_headers(true).from_reader(file)
}

fn output_columns(per_token: bool) -> Vec<&'static str> {
    let mut cols = ADDED_COLUMNS.to_vec();
    if per_token {
        cols.push(PER_TOKEN_COLUMN);
    }
    cols
}

/// Totals over every row written (also across `--resume`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub rows: u64,
    pub errors: u64,
    pub scored: u64,
    pub sum_avg_logprob: f64,
    pub sum_logprob: f64,
    pub sum_tokens: u64,
    #[serde(skip)]
    pub elapsed_s: f64,
    /// Rows written by this run (less than `rows` after `--resume`).
    #[serde(skip)]
    pub rows_this_run: u64,
}

impl Summary {
    fn add(&mut self, result: &RowResult) {
        self.rows += 1;
        match result {
            Ok(row) => {
                self.scored += 1;
                self.sum_avg_logprob += f64::from(row.scored.avg_logprob);
                self.sum_logprob += f64::from(row.scored.logprob);
                self.sum_tokens += row.target.len() as u64;
            }
            Err(_) => self.errors += 1,
        }
    }

    pub fn line(&self) -> String {
        let (mean, ppl) = if self.scored > 0 && self.sum_tokens > 0 {
            let mean = self.sum_avg_logprob / self.scored as f64;
            let ppl = (-self.sum_logprob / self.sum_tokens as f64).exp();
            (format!("{mean:.4}"), format!("{ppl:.4}"))
        } else {
            ("n/a".into(), "n/a".into())
        };
        format!(
            "scored {} rows ({} errors): mean avg_logprob {mean}, corpus perplexity {ppl}, {:.1}s ({:.1} rows/s)",
            self.rows,
            self.errors,
            self.elapsed_s,
            if self.elapsed_s > 0.0 { self.rows_this_run as f64 / self.elapsed_s } else { 0.0 }
        )
    }
}

/// What `--resume` needs to continue: where the input and the partial output stood after the
/// last complete chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Progress {
    fingerprint: String,
    input_len: u64,
    input_modified_ns: u128,
    input_byte: u64,
    input_line: u64,
    input_record: u64,
    output_bytes: u64,
    summary: Summary,
}

fn input_stamp(path: &Path) -> Result<(u64, u128)> {
    let meta = fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok((meta.len(), modified))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// The partial output `<output>.partial` and its sidecar `<output>.partial.progress`; renamed to
/// `<output>` only when every row is written.
struct FileSink {
    final_path: PathBuf,
    partial_path: PathBuf,
    progress_path: PathBuf,
    file: File,
    bytes: u64,
}

impl FileSink {
    fn paths(output: &Path) -> (PathBuf, PathBuf) {
        let partial = with_suffix(output, ".partial");
        let progress = with_suffix(output, ".partial.progress");
        (partial, progress)
    }

    fn create(output: &Path) -> Result<Self> {
        let (partial_path, progress_path) = Self::paths(output);
        match fs::remove_file(&progress_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", progress_path.display())),
        }
        let file = File::create(&partial_path)
            .with_context(|| format!("cannot create {}", partial_path.display()))?;
        Ok(Self { final_path: output.to_path_buf(), partial_path, progress_path, file, bytes: 0 })
    }

    fn reopen(output: &Path) -> Result<(Self, Progress)> {
        let (partial_path, progress_path) = Self::paths(output);
        let text = fs::read_to_string(&progress_path).map_err(|_| {
            anyhow::anyhow!(
                "--resume: no interrupted run to continue ({} does not exist)",
                progress_path.display()
            )
        })?;
        let progress: Progress = serde_json::from_str(&text)
            .with_context(|| format!("--resume: {} is not a progress file", progress_path.display()))?;
        let mut file = OpenOptions::new().write(true).open(&partial_path).with_context(|| {
            format!("--resume: cannot open the partial output {}", partial_path.display())
        })?;
        let len = file.metadata()?.len();
        if len < progress.output_bytes {
            bail!(
                "--resume: {} is shorter ({len} bytes) than its progress file says ({} bytes)",
                partial_path.display(),
                progress.output_bytes
            );
        }
        file.set_len(progress.output_bytes)?;
        file.seek(SeekFrom::End(0))?;
        let sink = Self {
            final_path: output.to_path_buf(),
            partial_path,
            progress_path,
            file,
            bytes: progress.output_bytes,
        };
        Ok((sink, progress))
    }

    fn write(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .with_context(|| format!("cannot write {}", self.partial_path.display()))?;
        self.bytes += data.len() as u64;
        Ok(())
    }

    fn checkpoint(&mut self, progress: &Progress) -> Result<()> {
        self.file.flush()?;
        let tmp = with_suffix(&self.progress_path, ".tmp");
        fs::write(&tmp, serde_json::to_vec(progress)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &self.progress_path)
            .with_context(|| format!("cannot write {}", self.progress_path.display()))?;
        Ok(())
    }

    fn finish(self) -> Result<()> {
        self.file.sync_all()?;
        drop(self.file);
        fs::rename(&self.partial_path, &self.final_path).with_context(|| {
            format!("cannot rename {} to {}", self.partial_path.display(), self.final_path.display())
        })?;
        let _ = fs::remove_file(&self.progress_path);
        Ok(())
    }
}

enum Sink {
    Stdout(std::io::Stdout),
    File(FileSink),
}

impl Sink {
    fn write(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Sink::Stdout(out) => {
                let mut lock = out.lock();
                lock.write_all(data)?;
                lock.flush()?;
                Ok(())
            }
            Sink::File(f) => f.write(data),
        }
    }
}

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
            fingerprint: opts.fingerprint.clone(),
            input_len,
            input_modified_ns,
            input_byte: pos.byte(),
            input_line: pos.line(),
            input_record: pos.record(),
            output_bytes,
            summary: summary.clone(),
        }
    };
    let mut sink = match &opts.output {
        None => {
            let mut s = Sink::Stdout(std::io::stdout());
            s.write(&header_bytes(&input, opts)?)?;
            s
        }
        Some(path) if opts.resume => {
            let (sink, prev) = FileSink::reopen(path)?;
            if prev.fingerprint != opts.fingerprint {
                bail!("--resume: the options or input differ from the interrupted run; run without --resume to start over");
            }
            if (prev.input_len, prev.input_modified_ns) != (input_len, input_modified_ns) {
                bail!("--resume: {} changed since the interrupted run; run without --resume to start over", opts.input.display());
            }
            let mut pos = Position::new();
            pos.set_byte(prev.input_byte).set_line(prev.input_line).set_record(prev.input_record);
            input.reader.seek(pos).context("--resume: cannot seek in the input")?;
            summary = prev.summary;
            Sink::File(sink)
        }
        Some(path) => {
            let mut sink = FileSink::create(path)?;
            sink.write(&header_bytes(&input, opts)?)?;
            sink.checkpoint(&progress_at(&input, sink.bytes, &summary))?;
            Sink::File(sink)
        }
    };

    let rows_before = summary.rows;
    let bar = if progress {
        let total = count_records(&opts.input, opts.delimiter).unwrap_or(0);
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{wide_bar}] {human_pos}/{human_len} rows  {per_sec}  ETA {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_position(summary.rows);
        bar.reset_eta();
        bar
    } else {
        ProgressBar::hidden()
    };

    let mut chunk: Vec<ByteRecord> = Vec::with_capacity(opts.buffer_size.min(1 << 16));
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
        let results = score_chunk(&input, opts, backend, &chunk);
        let mut data = Vec::new();
        for (rec, result) in chunk.iter().zip(&results) {
            summary.add(result);
            format_row(&mut data, &input, opts, rec, result, backend)?;
        }
        sink.write(&data)?;
        if let Sink::File(f) = &mut sink {
            f.checkpoint(&progress_at(&input, f.bytes, &summary))?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if let Sink::File(f) = sink {
        f.finish()?;
    }
    summary.elapsed_s = started.elapsed().as_secs_f64();
    summary.rows_this_run = summary.rows - rows_before;
    Ok(summary)
}

fn count_records(path: &Path, delimiter: u8) -> Result<u64> {
    let mut reader = csv_reader(delimiter, File::open(path)?);
    let mut record = ByteRecord::new();
    let mut n = 0;
    while reader.read_byte_record(&mut record)? {
        n += 1;
    }
    Ok(n)
}

/// A scored row: its scores and its target token ids (EOS included).
#[derive(Debug, Clone)]
struct ScoredRow {
    scored: Scored,
    target: Vec<i64>,
}

type RowResult = std::result::Result<ScoredRow, String>;

/// One field as text, or why the row cannot be scored.
fn field<'r>(rec: &'r ByteRecord, idx: usize, name: &str) -> std::result::Result<&'r str, String> {
    let bytes = rec.get(idx).ok_or_else(|| format!("missing field '{name}'"))?;
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("invalid UTF-8 in '{name}' at byte {}", e.valid_up_to()))?;
    if text.trim().is_empty() {
        return Err(format!("empty '{name}'"));
    }
    Ok(text)
}

/// Scores the rows of one chunk; one result per row, in row order. Rows are batched as
/// fairseq-generate batches them (ordered by length), so the order is restored here.
fn score_chunk(input: &Input, opts: &Options, backend: &mut dyn Backend, chunk: &[ByteRecord]) -> Vec<RowResult> {
    let mut results: Vec<Option<RowResult>> = vec![None; chunk.len()];
    let mut encoded: Vec<(usize, Encoded)> = Vec::new();
    let columns = input.header.len();
    for (row, rec) in chunk.iter().enumerate() {
        let prepared = if rec.len() != columns {
            Err(format!("ragged row: {} fields, the header has {columns}", rec.len()))
        } else {
            field(rec, input.source_idx, &opts.source_column).and_then(|source| {
                let target = field(rec, input.target_idx, &opts.target_column)?;
                backend.encode(source, target)
            })
        };
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
    let scored = backend.score_batches(&items);
    for ((members, items), scored) in members.iter().zip(&items).zip(scored) {
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
                        Err(err) => Err(format!("scoring failed: {}", super::common::one_line(&err))),
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

fn header_bytes(input: &Input, opts: &Options) -> Result<Vec<u8>> {
    match opts.format {
        ScoreFormat::Jsonl => Ok(Vec::new()),
        ScoreFormat::Csv => {
            let mut w = csv::WriterBuilder::new().delimiter(opts.delimiter).from_writer(Vec::new());
            let mut header = input.header.clone();
            for col in output_columns(opts.per_token) {
                header.push_field(col.as_bytes());
            }
            w.write_byte_record(&header)?;
            Ok(w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?)
        }
    }
}

/// Shortest text that reads back as the same f32.
fn f32_text(x: f32) -> String {
    format!("{x}")
}

/// f32 values in JSON as their shortest f32 text (not the widened f64 digits).
fn f32_json(x: f32) -> serde_json::Value {
    f32_text(x)
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(serde_json::Value::Null, serde_json::Value::Number)
}

fn format_row(
    out: &mut Vec<u8>,
    input: &Input,
    opts: &Options,
    rec: &ByteRecord,
    result: &RowResult,
    backend: &dyn Backend,
) -> Result<()> {
    let per_token = |s: &Scored, tokens: &[i64]| -> serde_json::Value {
        serde_json::Value::Array(
            tokens
                .iter()
                .zip(&s.positional_scores)
                .map(|(&t, &p)| serde_json::json!([backend.target_symbol(t), f32_json(p)]))
                .collect(),
        )
    };
    match opts.format {
        ScoreFormat::Csv => {
            let columns = input.header.len();
            let mut fields: Vec<Vec<u8>> = (0..columns).map(|i| rec.get(i).unwrap_or(b"").to_vec()).collect();
            match result {
                Ok(ScoredRow { scored: s, target }) => {
                    let ppl = (-f64::from(s.avg_logprob)).exp();
                    fields.push(f32_text(s.logprob).into_bytes());
                    fields.push(target.len().to_string().into_bytes());
                    fields.push(f32_text(s.avg_logprob).into_bytes());
                    fields.push(format!("{ppl}").into_bytes());
                    fields.push(Vec::new());
                    if opts.per_token {
                        fields.push(per_token(s, target).to_string().into_bytes());
                    }
                }
                Err(reason) => {
                    fields.extend([Vec::new(), Vec::new(), Vec::new(), Vec::new()]);
                    fields.push(reason.replace(['\n', '\r'], " ").into_bytes());
                    if opts.per_token {
                        fields.push(Vec::new());
                    }
                }
            }
            let mut w = csv::WriterBuilder::new().delimiter(opts.delimiter).from_writer(Vec::new());
            w.write_record(&fields)?;
            out.extend(w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?);
        }
        ScoreFormat::Jsonl => {
            let mut obj = serde_json::Map::new();
            for (i, name) in input.header_names.iter().enumerate() {
                let value = rec
                    .get(i)
                    .map_or(serde_json::Value::Null, |b| String::from_utf8_lossy(b).into_owned().into());
                obj.insert(name.clone(), value);
            }
            match result {
                Ok(ScoredRow { scored: s, target }) => {
                    obj.insert("logprob".into(), f32_json(s.logprob));
                    obj.insert("tokens".into(), (target.len() as u64).into());
                    obj.insert("avg_logprob".into(), f32_json(s.avg_logprob));
                    let ppl = (-f64::from(s.avg_logprob)).exp();
                    obj.insert(
                        "ppl".into(),
                        serde_json::Number::from_f64(ppl).map_or(serde_json::Value::Null, serde_json::Value::Number),
                    );
                    obj.insert("error".into(), serde_json::Value::Null);
                    if opts.per_token {
                        obj.insert(PER_TOKEN_COLUMN.into(), per_token(s, target));
                    }
                }
                Err(reason) => {
                    for key in ["logprob", "tokens", "avg_logprob", "ppl"] {
                        obj.insert(key.into(), serde_json::Value::Null);
                    }
                    obj.insert("error".into(), reason.replace(['\n', '\r'], " ").into());
                    if opts.per_token {
                        obj.insert(PER_TOKEN_COLUMN.into(), serde_json::Value::Null);
                    }
                }
            }
            serde_json::to_writer(&mut *out, &obj)?;
            out.push(b'\n');
        }
    }
    Ok(())
}

/// The real backend: fairseq checkpoints, their dictionaries and text pipeline.
mod model_backend {
    use anyhow::{Context, Result};
    use tch::Kind;

    use tchseq::generate::scorer::{collate, SequenceScorer};
    use tchseq::generate::workers::run_jobs;
    use tchseq::generate::GenerateError;
    use tchseq::model::TransformerModel;
    use tchseq::text::dictionary::Dictionary;
    use tchseq::hub::{ModelBundle, Weights};
    use tchseq::text::pipeline::TextPipeline;

    use super::{Backend, Encoded, Scored};
    use crate::cli::args::{GlobalArgs, ScoreArgs};
    use crate::cli::common;

    pub struct ModelBackend {
        models: Vec<TransformerModel>,
        batch_scorer: BatchScorer,
        src_dict: Dictionary,
        tgt_dict: Dictionary,
        max_source_positions: usize,
        max_target_positions: usize,
        inter_threads: usize,
        /// Tokenizer + BPE for (source, target) unless `--tokenized`; each side's text is
        /// tokenized with its own language.
        pipelines: Option<(TextPipeline, TextPipeline)>,
    }

    impl ModelBackend {
        pub fn load(global: &GlobalArgs, a: &ScoreArgs) -> Result<Self> {
            let device = common::resolve_device(global.device)?;
            // fairseq builds the model in fp32 and load_state_dict casts fp16/bf16 weights
            let weights = Weights::Load { device, kind: Kind::Float, replay_init: false };
            let mut bundle = common::load_bundle(&a.model, Some(&a.pipeline), weights)?;
            let (left_pad_source, left_pad_target) = (bundle.config.left_pad_source, bundle.config.left_pad_target);
            // fairseq: utils.resolve_max_positions over the task and every model (the minimum)
            let max_source_positions = bundle.models.iter().map(|m| m.max_source_positions()).min().unwrap_or(0);
            let max_target_positions = bundle.models.iter().map(|m| m.max_decoder_positions()).min().unwrap_or(0);
            let pipelines = if a.tokenized {
                None
            } else {
                let target_lang = bundle.pipeline_options.target_lang.clone();
                Some((bundle.pipeline()?, bundle.side_pipeline(&target_lang)?))
            };
            common::print_warnings(&bundle.report);
            let ModelBundle { models, src_dict, tgt_dict, .. } = bundle;
            let scorer = SequenceScorer::new(tgt_dict.pad(), tgt_dict.eos());
            let batch_scorer =
                BatchScorer { scorer, pad: src_dict.pad(), eos: src_dict.eos(), left_pad_source, left_pad_target };
            Ok(Self {
                pipelines,
                models,
                batch_scorer,
                src_dict,
                tgt_dict,
                max_source_positions,
                max_target_positions,
                inter_threads: global.inter_threads,
            })
        }
    }

    /// What scoring a batch needs besides the models (kept apart from them so that worker
    /// threads can share it).
    #[derive(Clone, Copy)]
    struct BatchScorer {
        scorer: SequenceScorer,
        pad: i64,
        eos: i64,
        left_pad_source: bool,
        left_pad_target: bool,
    }

    impl BatchScorer {
        fn score(&self, models: &[TransformerModel], batch: &[&Encoded]) -> Result<Vec<Scored>> {
            let pairs: Vec<(&[i64], &[i64])> =
                batch.iter().map(|e| (e.source.as_slice(), e.target.as_slice())).collect();
            let sample = collate(&pairs, self.pad, self.eos, self.left_pad_source, self.left_pad_target)?;
            let hypos = self.scorer.generate(models, &sample)?;
            let mut out: Vec<Option<Scored>> = vec![None; batch.len()];
            for (hypo, &k) in hypos.into_iter().zip(&sample.order) {
                out[k] = Some(Scored {
                    logprob: hypo.sum,
                    avg_logprob: hypo.score,
                    positional_scores: hypo.positional_scores,
                });
            }
            out.into_iter().map(|s| s.context("the scorer lost a sentence of the batch")).collect()
        }
    }

    fn check_len(ids: &[i64], side: &str, max: usize, what: &str) -> std::result::Result<(), String> {
        if ids.len() <= 1 {
            return Err(format!("empty '{side}' after tokenization"));
        }
        if ids.len() > max {
            return Err(format!(
                "'{side}' has {} tokens (with EOS), more than the model's {what} {max}",
                ids.len()
            ));
        }
        Ok(())
    }

    impl Backend for ModelBackend {
        fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String> {
            let (source_ids, target_ids) = match &self.pipelines {
                Some((src, tgt)) => (
                    self.src_dict.encode_line(&src.encode(source), true),
                    self.tgt_dict.encode_line(&tgt.encode(target), true),
                ),
                None => (self.src_dict.encode_line(source, true), self.tgt_dict.encode_line(target, true)),
            };
            check_len(&source_ids, "source", self.max_source_positions, "max_source_positions")?;
            check_len(&target_ids, "target", self.max_target_positions, "max_target_positions")?;
            Ok(Encoded { source: source_ids, target: target_ids })
        }

        fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>> {
            self.batch_scorer.score(&self.models, batch)
        }

        fn score_batches(&mut self, batches: &[Vec<&Encoded>]) -> Vec<Result<Vec<Scored>>> {
            let jobs: Vec<&[&Encoded]> = batches.iter().map(Vec::as_slice).collect();
            let scorer = self.batch_scorer;
            // a failing batch is a result here, not an error that stops the other workers
            let run = run_jobs(&self.models, jobs, self.inter_threads, |models, batch| {
                Ok::<_, GenerateError>(scorer.score(models, batch))
            });
            match run {
                Ok(results) => results,
                Err(e) => batches.iter().map(|_| Err(anyhow::anyhow!("{e}"))).collect(),
            }
        }

        fn target_symbol(&self, id: i64) -> String {
            self.tgt_dict.symbol(id).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Scores every token id `t` with `-t / 100`, whatever the batch, so any row mix-up shows.
    #[derive(Default)]
    struct FakeBackend {
        max_positions: usize,
        batches: Rc<RefCell<Vec<usize>>>,
        /// Panic after this many `score` calls (to simulate an interrupted run).
        panic_after: Option<usize>,
        calls: usize,
    }

    fn ids(text: &str) -> Vec<i64> {
        text.split_whitespace().map(|w| 4 + w.chars().count() as i64).chain([2]).collect()
    }

    fn expected(target: &str) -> (f32, usize) {
        let t = ids(target);
        let sum: f32 = t.iter().map(|&x| -(x as f32) / 100.0).sum();
        (sum, t.len())
    }

    impl Backend for FakeBackend {
        fn encode(&self, source: &str, target: &str) -> std::result::Result<Encoded, String> {
            let (source, target) = (ids(source), ids(target));
            if target.len() > self.max_positions {
                return Err(format!("target has {} tokens, more than {}", target.len(), self.max_positions));
            }
            Ok(Encoded { source, target })
        }
        fn score(&mut self, batch: &[&Encoded]) -> Result<Vec<Scored>> {
            self.calls += 1;
            if self.panic_after.is_some_and(|n| self.calls > n) {
                panic!("simulated crash");
            }
            self.batches.borrow_mut().push(batch.len());
            if batch.iter().any(|e| e.target.contains(&(4 + 6))) {
                bail!("six-letter words break this batch");
            }
            Ok(batch
                .iter()
                .map(|e| {
                    let p: Vec<f32> = e.target.iter().map(|&x| -(x as f32) / 100.0).collect();
                    let sum: f32 = p.iter().sum();
                    Scored { logprob: sum, avg_logprob: sum / p.len() as f32, positional_scores: p }
                })
                .collect())
        }
        fn target_symbol(&self, id: i64) -> String {
            format!("w{id}")
        }
    }

    fn options(dir: &Path, input: &str, output: Option<&str>) -> Options {
        Options {
            input: dir.join(input),
            output: output.map(|o| dir.join(o)),
            source_column: "source".into(),
            target_column: "target".into(),
            delimiter: b',',
            format: ScoreFormat::Csv,
            per_token: false,
            max_tokens: None,
            batch_size: Some(3),
            buffer_size: 7,
            resume: false,
            fingerprint: "test".into(),
        }
    }

    fn run_fake(opts: &Options, backend: &mut FakeBackend) -> Result<Summary> {
        let input = Input::open(opts)?;
        score_input(input, opts, backend, false)
    }

    fn backend() -> FakeBackend {
        FakeBackend { max_positions: 50, ..Default::default() }
    }

    fn read_output(path: &Path) -> Vec<csv::StringRecord> {
        let mut r = csv::ReaderBuilder::new().flexible(true).has_headers(true).from_path(path).unwrap();
        r.byte_records().map(|x| csv::StringRecord::from_byte_record_lossy(x.unwrap())).collect()
    }

    /// Sentences of shuffled lengths so that fairseq's length ordering moves every row.
    fn shuffled_rows(n: usize) -> Vec<(String, String)> {
        (0..n)
            .map(|i| {
                let len = (i * 7919) % 23 + 1;
                let src = (0..len).map(|k| "s".repeat(k % 5 + 1)).collect::<Vec<_>>().join(" ");
                let tlen = (i * 104729) % 17 + 1;
                let tgt = (0..tlen).map(|k| "t".repeat((k + i) % 4 + 1)).collect::<Vec<_>>().join(" ");
                (src, tgt)
            })
            .collect()
    }

    fn write_pairs(path: &Path, rows: &[(String, String)]) {
        let mut w = csv::Writer::from_path(path).unwrap();
        w.write_record(["id", "source", "target"]).unwrap();
        for (i, (s, t)) in rows.iter().enumerate() {
            w.write_record([i.to_string().as_str(), s, t]).unwrap();
        }
        w.flush().unwrap();
    }

    #[test]
    fn order_is_kept_whatever_the_batching() {
        let dir = tempfile::tempdir().unwrap();
        let rows = shuffled_rows(101);
        write_pairs(&dir.path().join("in.csv"), &rows);
        for (batch_size, max_tokens, buffer) in [(Some(1), None, 1), (Some(3), None, 7), (None, Some(40), 13), (Some(16), None, 1000)] {
            let mut opts = options(dir.path(), "in.csv", Some("out.csv"));
            opts.batch_size = batch_size;
            opts.max_tokens = max_tokens;
            opts.buffer_size = buffer;
            let mut b = backend();
            let summary = run_fake(&opts, &mut b).unwrap();
            assert_eq!((summary.rows, summary.errors), (101, 0));
            let batches = b.batches.borrow();
            assert!(batches.iter().all(|&n| batch_size.is_none_or(|m| n <= m)), "{batches:?}");
            assert!(batches.len() > 101 / buffer.max(16), "batching happened: {batches:?}");
            let out = read_output(&dir.path().join("out.csv"));
            assert_eq!(out.len(), rows.len());
            for (i, (rec, (src, tgt))) in out.iter().zip(&rows).enumerate() {
                assert_eq!(&rec[0], i.to_string().as_str());
                assert_eq!((&rec[1], &rec[2]), (src.as_str(), tgt.as_str()));
                let (sum, len) = expected(tgt);
                assert_eq!(rec[3].parse::<f32>().unwrap(), sum, "row {i}");
                assert_eq!(rec[4].parse::<usize>().unwrap(), len);
                assert_eq!(rec[5].parse::<f32>().unwrap(), sum / len as f32);
                assert_eq!(&rec[7], "");
            }
        }
    }

    #[test]
    fn bad_rows_keep_their_place_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let long = vec!["x"; 10_000].join(" ");
        let mut data: Vec<u8> = b"id,source,target\n".to_vec();
        data.extend(b"0,a b,c d\n");
        data.extend(b"1,a b\n"); // ragged: too few
        data.extend(b"2,a,b,c\n"); // ragged: too many
        data.extend(b"3,a b,\n"); // empty target
        data.extend(b"4,,c\n"); // empty source
        data.extend(b"5,a \xff b,c\n"); // invalid UTF-8 in source
        data.extend(format!("6,a,{long}\n").as_bytes()); // too long
        data.extend(b"7,\"a\nb\",\"c, d\"\n"); // quoted newline and delimiter
        data.extend(b"8,a,  \n"); // blank target
        data.extend(b"9,a,sixsix\n"); // its batch fails: scored alone, fails alone
        data.extend(b"10,a,ok\n");
        fs::write(dir.path().join("in.csv"), &data).unwrap();
        let mut opts = options(dir.path(), "in.csv", Some("out.csv"));
        opts.batch_size = Some(8);
        let summary = run_fake(&opts, &mut backend()).unwrap();
        assert_eq!((summary.rows, summary.errors, summary.scored), (11, 8, 3));
        let out = read_output(&dir.path().join("out.csv"));
        assert_eq!(out.len(), 11);
        let errors: Vec<&str> = out.iter().map(|r| r.get(7).unwrap()).collect();
        assert_eq!(errors[0], "");
        assert_eq!(errors[1], "ragged row: 2 fields, the header has 3");
        assert_eq!(errors[2], "ragged row: 4 fields, the header has 3");
        assert_eq!(errors[3], "empty 'target'");
        assert_eq!(errors[4], "empty 'source'");
        assert_eq!(errors[5], "invalid UTF-8 in 'source' at byte 2");
        assert_eq!(errors[6], "target has 10001 tokens, more than 50");
        assert_eq!(errors[7], "");
        assert_eq!(errors[8], "empty 'target'");
        assert_eq!(errors[9], "scoring failed: six-letter words break this batch");
        assert_eq!(errors[10], "");
        assert_eq!(&out[7][1], "a\nb");
        assert_eq!(out[7][3].parse::<f32>().unwrap(), expected("c, d").0);
        // every row has the full width; ids kept
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r.len(), 8, "row {i}");
            assert_eq!(&r[0], i.to_string().as_str());
            if !errors[i].is_empty() {
                assert!((3..7).all(|c| r[c].is_empty()), "row {i}: {r:?}");
            }
        }
        // the invalid bytes are copied through untouched
        let raw = fs::read(dir.path().join("out.csv")).unwrap();
        assert!(raw.windows(5).any(|w| w == b"a \xff b"));
    }

    #[test]
    fn missing_column_names_the_columns_and_added_columns_clash() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("in.csv"), "src,target\nx,y\n").unwrap();
        let opts = options(dir.path(), "in.csv", None);
        let err = Input::open(&opts).err().unwrap().to_string();
        assert!(err.contains("--source-column 'source' is not a column"), "{err}");
        assert!(err.contains("'src', 'target'"), "{err}");
        fs::write(dir.path().join("in.csv"), "source,target,ppl\nx,y,1\n").unwrap();
        let err = Input::open(&opts).err().unwrap().to_string();
        assert!(err.contains("already has a column named 'ppl'"), "{err}");
        fs::write(dir.path().join("in.csv"), "").unwrap();
        let err = Input::open(&opts).err().unwrap().to_string();
        assert!(err.contains("no header row"), "{err}");
    }

    #[test]
    fn tsv_jsonl_and_per_token() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("in.tsv"), "target\tsource\nab c\tx\n\tx\n").unwrap();
        let mut opts = options(dir.path(), "in.tsv", Some("out.jsonl"));
        opts.delimiter = parse_delimiter("\\t").unwrap();
        opts.format = ScoreFormat::Jsonl;
        opts.per_token = true;
        run_fake(&opts, &mut backend()).unwrap();
        let text = fs::read_to_string(dir.path().join("out.jsonl")).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        let keys: Vec<&String> = lines[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["target", "source", "logprob", "tokens", "avg_logprob", "ppl", "error", "token_logprobs"]);
        assert_eq!(lines[0]["tokens"], 3);
        assert_eq!(lines[0]["logprob"].as_f64().unwrap() as f32, expected("ab c").0);
        assert_eq!(lines[0]["token_logprobs"], serde_json::json!([["w6", -0.06], ["w5", -0.05], ["w2", -0.02]]));
        assert!(lines[0]["error"].is_null());
        assert_eq!(lines[1]["error"], "empty 'target'");
        assert!(lines[1]["logprob"].is_null());
        let ppl = lines[0]["ppl"].as_f64().unwrap();
        assert!((ppl - (0.13f64 / 3.0).exp()).abs() < 1e-6);

        opts.format = ScoreFormat::Csv;
        opts.output = Some(dir.path().join("out.tsv"));
        run_fake(&opts, &mut backend()).unwrap();
        let text = fs::read_to_string(dir.path().join("out.tsv")).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), "target\tsource\tlogprob\ttokens\tavg_logprob\tppl\terror\ttoken_logprobs");
        let first: Vec<&str> = lines.next().unwrap().split('\t').collect();
        assert_eq!(first[..4], ["ab c", "x", "-0.13", "3"]);
        assert_eq!(first[7], r#""[[""w6"",-0.06],[""w5"",-0.05],[""w2"",-0.02]]""#);
    }

    #[test]
    fn delimiters() {
        assert_eq!(parse_delimiter(",").unwrap(), b',');
        assert_eq!(parse_delimiter("\t").unwrap(), b'\t');
        assert_eq!(parse_delimiter("\\t").unwrap(), b'\t');
        assert_eq!(parse_delimiter(";").unwrap(), b';');
        assert!(parse_delimiter("ab").is_err());
        assert!(parse_delimiter("é").is_err());
        assert!(parse_delimiter("").is_err());
    }

    #[test]
    fn output_appears_only_when_complete_and_resume_continues() {
        let dir = tempfile::tempdir().unwrap();
        let rows = shuffled_rows(40);
        write_pairs(&dir.path().join("in.csv"), &rows);
        let mut opts = options(dir.path(), "in.csv", Some("ref.csv"));
        opts.buffer_size = 6;
        run_fake(&opts, &mut backend()).unwrap();
        let reference = fs::read(dir.path().join("ref.csv")).unwrap();
        assert!(!dir.path().join("ref.csv.partial").exists());
        assert!(!dir.path().join("ref.csv.partial.progress").exists());

        opts.output = Some(dir.path().join("out.csv"));
        // crash in the middle of the third chunk
        let crashed = std::panic::catch_unwind(|| {
            let mut b = backend();
            b.panic_after = Some(5);
            let _ = run_fake(&opts, &mut b);
        });
        assert!(crashed.is_err());
        assert!(!dir.path().join("out.csv").exists(), "no half-written output");
        assert!(dir.path().join("out.csv.partial").exists());
        let progress: Progress =
            serde_json::from_slice(&fs::read(dir.path().join("out.csv.partial.progress")).unwrap()).unwrap();
        assert!(progress.summary.rows > 0 && progress.summary.rows < 40, "{progress:?}");

        // a resume with other options is refused
        let mut other = opts.clone();
        other.resume = true;
        other.fingerprint = "something else".into();
        let err = run_fake(&other, &mut backend()).err().unwrap().to_string();
        assert!(err.contains("options or input differ"), "{err}");

        opts.resume = true;
        let summary = run_fake(&opts, &mut backend()).unwrap();
        assert_eq!(summary.rows, 40);
        assert_eq!(summary.rows_this_run, 40 - progress.summary.rows);
        assert_eq!(fs::read(dir.path().join("out.csv")).unwrap(), reference);
        assert!(!dir.path().join("out.csv.partial").exists());
        assert!(!dir.path().join("out.csv.partial.progress").exists());

        // nothing left to resume
        let err = run_fake(&opts, &mut backend()).err().unwrap().to_string();
        assert!(err.contains("no interrupted run"), "{err}");
    }
}
