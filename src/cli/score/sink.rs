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
    pub(super) fn add(&mut self, result: &RowResult) {
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
            "scored {} rows ({} errors): mean avg_logprob {mean}, corpus perplexity {ppl}, {:.1}s ({} rows/s)",
            self.rows,
            self.errors,
            self.elapsed_s,
            crate::cli::progress::rate(if self.elapsed_s > 0.0 { self.rows_this_run as f64 / self.elapsed_s } else { 0.0 })
        )
    }
}

/// What `--resume` needs to continue: the run's settings, and where the input and the partial
/// output stood after the last complete chunk. Written as JSON beside the partial output
/// (`<output>.partial.progress`; docs/score.md describes it).
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

/// The partial output `<output>.partial` and its sidecar `<output>.partial.progress`; renamed to
/// `<output>` only when every row is written.
pub(super) struct FileSink {
    pub(super) final_path: PathBuf,
    pub(super) partial_path: PathBuf,
    pub(super) progress_path: PathBuf,
    pub(super) file: File,
    pub(super) bytes: u64,
}

impl FileSink {
    pub(super) fn paths(output: &Path) -> (PathBuf, PathBuf) {
        let partial = with_suffix(output, ".partial");
        let progress = with_suffix(output, ".partial.progress");
        (partial, progress)
    }

    pub(super) fn create(output: &Path) -> Result<Self> {
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
        file.set_len(progress.output_bytes)?;
        file.seek(SeekFrom::End(0))?;
        Ok(Self { final_path: output.to_path_buf(), partial_path, progress_path, file, bytes: progress.output_bytes })
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
