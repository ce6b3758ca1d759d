//! Where scored rows go: stdout, or `<output>.partial` renamed into place when complete,
//! with `--resume`, progress and the run summary.

use super::*;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};



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
    pub(super) fn add(&mut self, totals: &RowTotals) {
        self.rows += 1;
        match totals.0 {
            Some((logprob, avg_logprob, tokens)) => {
                self.scored += 1;
                self.sum_avg_logprob += f64::from(avg_logprob);
                self.sum_logprob += f64::from(logprob);
                self.sum_tokens += tokens;
            }
            None => self.errors += 1,
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
            "scored {} rows ({} errors): mean avg_logprob {mean}, corpus perplexity {ppl}, {:.1}s ({} rows/s)",
            self.rows,
            self.errors,
            self.elapsed_s,
            crate::cli::progress::rate(if self.elapsed_s > 0.0 { self.rows_this_run as f64 / self.elapsed_s } else { 0.0 })
        )
    }
}

/// What `--resume` needs to continue: the run's settings, and where the input and the partial
/// output stood after the last finished batch (or chunk). Written as JSON beside the partial
/// output (`<output>.partial.progress`; docs/score.md describes it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct Progress {
    /// Always [`PROGRESS_FORMAT`].
    pub(super) format: String,
    pub(super) settings: super::resume::Settings,
    pub(super) input_len: u64,
    pub(super) input_modified_ns: u128,
    pub(super) input_byte: u64,
    pub(super) input_line: u64,
    pub(super) input_record: u64,
    pub(super) output_bytes: u64,
    pub(super) summary: Summary,
    /// Set while a chunk is under way (absent in the files of earlier versions, which
    /// checkpointed only between chunks).
    #[serde(default)]
    pub(super) chunk: Option<ChunkProgress>,
}

/// The chunk of `--buffer-size` rows that holds the next unwritten row: where it starts in the
/// input (a resume reads it again whole, so that its batches are the interrupted run's), how many
/// of its rows the partial output holds, and how many bytes of the pending file are complete.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(super) struct ChunkProgress {
    pub(super) byte: u64,
    pub(super) line: u64,
    pub(super) record: u64,
    pub(super) rows_written: u64,
    pub(super) pending_bytes: u64,
}

/// The progress file's `format`: its name and version.
pub(super) const PROGRESS_FORMAT: &str = "tchseq-score-progress/1";

pub(super) fn input_stamp(path: &Path) -> Result<(u64, u128)> {
    let meta = fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok((meta.len(), modified))
}

pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// The partial output `<output>.partial` and its sidecars `<output>.partial.progress` and
/// `<output>.partial.pending` (rows scored ahead of their turn: see [`super::pending`]); renamed
/// to `<output>` only when every row is written.
pub(super) struct FileSink {
    pub(super) final_path: PathBuf,
    pub(super) partial_path: PathBuf,
    pub(super) progress_path: PathBuf,
    pub(super) file: File,
    pub(super) bytes: u64,
    pub(super) pending_path: PathBuf,
    /// Opened at the first append (cut to `pending_bytes` then).
    pending: Option<File>,
    /// The pending file's complete bytes: what a checkpoint records.
    pub(super) pending_bytes: u64,
}

fn remove_if_there(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

impl FileSink {
    pub(super) fn paths(output: &Path) -> (PathBuf, PathBuf) {
        let partial = with_suffix(output, ".partial");
        let progress = with_suffix(output, ".partial.progress");
        (partial, progress)
    }

    pub(super) fn pending_path(output: &Path) -> PathBuf {
        with_suffix(output, ".partial.pending")
    }

    pub(super) fn create(output: &Path) -> Result<Self> {
        let (partial_path, progress_path) = Self::paths(output);
        remove_if_there(&progress_path)?;
        let pending_path = Self::pending_path(output);
        remove_if_there(&pending_path)?;
        let file = File::create(&partial_path)
            .with_context(|| format!("cannot create {}", partial_path.display()))?;
        Ok(Self { final_path: output.to_path_buf(), partial_path, progress_path, file, bytes: 0, pending_path, pending: None, pending_bytes: 0 })
    }

    /// The interrupted run's progress, read without touching its partial output.
    pub(super) fn progress(output: &Path) -> Result<Progress> {
        let (_, progress_path) = Self::paths(output);
        let text = fs::read_to_string(&progress_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => anyhow::anyhow!(
                "--resume: no interrupted run to continue ({} does not exist)",
                progress_path.display()
            ),
            _ => anyhow::Error::new(e).context(format!("--resume: cannot read {}", progress_path.display())),
        })?;
        let progress: Progress = serde_json::from_str(&text).ok().filter(|p: &Progress| p.format == PROGRESS_FORMAT).ok_or_else(|| {
            anyhow::anyhow!(
                "--resume: {} is not a progress file of this version ({PROGRESS_FORMAT}); run without --resume to start over",
                progress_path.display()
            )
        })?;
        Ok(progress)
    }

    /// Opens the partial output to continue after the last checkpoint: what was written after
    /// it is cut off.
    pub(super) fn reopen(output: &Path, progress: &Progress) -> Result<Self> {
        let (partial_path, progress_path) = Self::paths(output);
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
        let pending_path = Self::pending_path(output);
        let pending_bytes = progress.chunk.as_ref().map_or(0, |c| c.pending_bytes);
        if pending_bytes > 0 {
            let len = fs::metadata(&pending_path).map_or(0, |m| m.len());
            if len < pending_bytes {
                bail!(
                    "--resume: {} is shorter ({len} bytes) than its progress file says ({pending_bytes} bytes)",
                    pending_path.display()
                );
            }
        }
        file.set_len(progress.output_bytes)?;
        file.seek(SeekFrom::End(0))?;
        Ok(Self {
            final_path: output.to_path_buf(),
            partial_path,
            progress_path,
            file,
            bytes: progress.output_bytes,
            pending_path,
            pending: None,
            pending_bytes,
        })
    }

    /// The rows of the pending file's complete bytes, with their places in the chunk.
    pub(super) fn read_pending(&self) -> Result<Vec<(usize, Finished)>> {
        if self.pending_bytes == 0 {
            return Ok(Vec::new());
        }
        let data = fs::read(&self.pending_path).with_context(|| format!("--resume: cannot read {}", self.pending_path.display()))?;
        let complete = data.get(..usize::try_from(self.pending_bytes)?).unwrap_or(&data);
        super::pending::decode(complete).map_err(|e| {
            anyhow::anyhow!("--resume: {} is damaged ({e}); run without --resume to start over", self.pending_path.display())
        })
    }

    /// Appends rows scored ahead of their turn (bytes from [`super::pending::encode`]).
    pub(super) fn append_pending(&mut self, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let path = &self.pending_path;
        let file = match &mut self.pending {
            Some(file) => file,
            None => {
                let mut file = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                file.set_len(self.pending_bytes)?;
                file.seek(SeekFrom::End(0))?;
                self.pending.insert(file)
            }
        };
        file.write_all(data).with_context(|| format!("cannot write {}", path.display()))?;
        self.pending_bytes += data.len() as u64;
        Ok(())
    }

    /// The chunk is written: its pending rows are no longer needed. Call after the checkpoint
    /// that says so.
    pub(super) fn clear_pending(&mut self) -> Result<()> {
        if self.pending_bytes == 0 {
            return Ok(());
        }
        if let Some(file) = &mut self.pending {
            file.set_len(0).with_context(|| format!("cannot write {}", self.pending_path.display()))?;
            file.seek(SeekFrom::Start(0))?;
        }
        self.pending_bytes = 0;
        Ok(())
    }

    pub(super) fn write(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .with_context(|| format!("cannot write {}", self.partial_path.display()))?;
        self.bytes += data.len() as u64;
        Ok(())
    }

    pub(super) fn checkpoint(&mut self, progress: &Progress) -> Result<()> {
        self.file.flush()?;
        let tmp = with_suffix(&self.progress_path, ".tmp");
        fs::write(&tmp, serde_json::to_vec(progress)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::rename(&tmp, &self.progress_path)
            .with_context(|| format!("cannot write {}", self.progress_path.display()))?;
        Ok(())
    }

    pub(super) fn finish(self) -> Result<()> {
        self.file.sync_all()?;
        drop(self.file);
        fs::rename(&self.partial_path, &self.final_path).with_context(|| {
            format!("cannot rename {} to {}", self.partial_path.display(), self.final_path.display())
        })?;
        let _ = fs::remove_file(&self.progress_path);
        drop(self.pending);
        let _ = fs::remove_file(&self.pending_path);
        Ok(())
    }
}

pub(super) enum Sink {
    Stdout(std::io::Stdout),
    File(FileSink),
    /// A device, FIFO or socket, written in place (no partial file, no progress, no resume).
    InPlace(PathBuf, File),
}

impl Sink {
    pub(super) fn write(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Sink::Stdout(out) => {
                let mut lock = out.lock();
                lock.write_all(data)?;
                lock.flush()?;
                Ok(())
            }
            Sink::File(f) => f.write(data),
            Sink::InPlace(path, f) => f.write_all(data).with_context(|| format!("cannot write {}", path.display())),
        }
    }
}
