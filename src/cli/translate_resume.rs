//! `translate --output FILE` keeps `FILE.partial.progress` beside its partial output: the run's
//! settings, and how many input lines and bytes the partial file holds complete. After Ctrl-C,
//! SIGTERM or a kill, `--resume` checks the settings, cuts the partial file back to those bytes
//! and goes on from the next line; the buffers are read and batched as in one run, so the
//! output is byte for byte the one an uninterrupted run writes.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::args::{GlobalArgs, TranslateArgs};
use super::partial::PartialFile;
use super::settings::{canonical, check, clap_name, model_settings, opt, Settings};

/// The progress file's `format`: its name and version.
const PROGRESS_FORMAT: &str = "tchseq-translate-progress/1";

#[derive(Debug, Serialize, Deserialize)]
struct Progress {
    format: String,
    settings: Settings,
    /// Input lines whose records the partial file holds complete.
    lines: u64,
    /// The partial file's bytes that hold them.
    output_bytes: u64,
    /// How many of those lines were not translated (too long, unreadable, a failed batch).
    failed: u64,
}

/// The settings of a `translate` run that decide its output records. `batching` is what the
/// run resolved: `(max_tokens, batch_size, buffer_size)`.
pub fn settings(global: &GlobalArgs, a: &TranslateArgs, batching: (Option<usize>, Option<usize>, usize)) -> Settings {
    let mut s = model_settings(global, &a.model, &a.pipeline);
    let mut put = |k: &str, v: String| {
        s.insert(k.to_string(), v);
    };
    put("--input", a.input.as_deref().map_or_else(|| "(stdin)".to_string(), canonical));
    put("sentence arguments", a.sentences.join("\n"));
    put("--input-format", clap_name(a.input_format));
    put("--format", clap_name(a.format));
    let q = &a.search;
    put("--beam", q.beam.to_string());
    put("--lenpen", q.lenpen.to_string());
    put("--unkpen", q.unkpen.to_string());
    put("--max-len-a", q.max_len_a.to_string());
    put("--max-len-b", q.max_len_b.to_string());
    put("--min-len", q.min_len.to_string());
    put("--unnormalized", q.unnormalized.to_string());
    put("--no-repeat-ngram-size", q.no_repeat_ngram_size.to_string());
    put("--ngram-blocking", clap_name(q.ngram_blocking));
    put("--fairseq-compat-ngram", q.fairseq_compat_ngram.to_string());
    put("--diverse-beam-groups", q.diverse_beam_groups.to_string());
    put("--diverse-beam-strength", q.diverse_beam_strength.to_string());
    put("--diversity-rate", q.diversity_rate.to_string());
    put("--prefix-size", q.prefix_size.to_string());
    put("--match-source-len", q.match_source_len.to_string());
    put("--nbest", a.nbest.to_string());
    put("--sampling", a.sampling.to_string());
    put("--sampling-topk", a.sampling_topk.to_string());
    put("--sampling-topp", a.sampling_topp.to_string());
    put("--temperature", a.temperature.to_string());
    put("--seed", a.seed.to_string());
    put("--print-alignment", opt(a.print_alignment.as_ref()));
    put("--post-process", opt(a.post_process.as_ref()));
    put("--dtype", clap_name(a.dtype));
    put("--compute-type", a.compute_type.name().to_string());
    put("--constraints", opt(a.constraints.map(clap_name)));
    // batch composition moves the low bits of a score, as in fairseq
    put("--max-tokens", opt(batching.0));
    put("--batch-size", opt(batching.1));
    put("--buffer-size", batching.2.to_string());
    s
}

/// `<partial>.progress`, written after every finished batch that moved the partial file on,
/// and removed with the partial file (when it is renamed into place, or removed after an
/// error); a signal or a kill leaves both.
pub struct ProgressFile {
    path: PathBuf,
    settings: Settings,
}

impl ProgressFile {
    pub fn new(partial: &Path, settings: Settings) -> Self {
        ProgressFile { path: progress_path(partial), settings }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The partial file holds `lines` complete input lines (`failed` of them not translated)
    /// in its first `bytes` bytes. Written whole or not at all (a rename).
    pub fn record(&self, lines: u64, bytes: u64, failed: u64) -> Result<()> {
        let progress = Progress { format: PROGRESS_FORMAT.to_string(), settings: self.settings.clone(), lines, output_bytes: bytes, failed };
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        fs::write(&tmp, serde_json::to_vec(&progress)?).with_context(|| format!("writing {}", tmp.display()))?;
        fs::rename(&tmp, &self.path).with_context(|| format!("writing {}", self.path.display()))
    }
}

impl Drop for ProgressFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

fn progress_path(partial: &Path) -> PathBuf {
    let mut p = partial.as_os_str().to_owned();
    p.push(".progress");
    PathBuf::from(p)
}

/// Where an interrupted run stopped: its partial file (cut back to its complete records and
/// open for appending), how many input lines it holds and how many of those failed.
pub struct Resumed {
    pub file: PartialFile,
    pub lines: u64,
    pub failed: u64,
}

/// Takes up the interrupted run of the same command: refuses a changed setting by name.
pub fn resume(a: &TranslateArgs, settings: &Settings) -> Result<Resumed> {
    if a.sampling {
        bail!("--resume cannot continue --sampling: its draws come from one random generator through the whole input, so a resumed run would draw other samples");
    }
    if a.shard.num_shards.is_some() {
        bail!("--resume cannot continue a --num-shards run: run the shard again");
    }
    let Some(output) = a.output.as_deref() else { bail!("--resume needs --output FILE: the file the interrupted run was writing") };
    let partial = PartialFile::partial_path(output)?;
    let progress_path = progress_path(&partial);
    let text = fs::read_to_string(&progress_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("--resume: {} does not exist: no interrupted run to go on with (run without --resume)", progress_path.display())
        }
        _ => anyhow::Error::new(e).context(format!("--resume: cannot read {}", progress_path.display())),
    })?;
    let progress: Progress = serde_json::from_str(&text).ok().filter(|p: &Progress| p.format == PROGRESS_FORMAT).ok_or_else(|| {
        anyhow::anyhow!("--resume: {} is not a translate progress file ({PROGRESS_FORMAT}); run without --resume to start over", progress_path.display())
    })?;
    check(&progress.settings, settings, &partial)?;
    let file = PartialFile::reopen(output, progress.output_bytes)?;
    Ok(Resumed { file, lines: progress.lines, failed: progress.failed })
}
