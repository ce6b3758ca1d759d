//! Helpers shared by the commands: threads, devices, error formatting.

use anyhow::{bail, Context, Result};
use tch::Device;

use tchseq::checkpoint::model_dir::ModelFiles;
use tchseq::config::TransformerConfig;
use tchseq::text::pipeline::{PipelineOptions, TextPipeline};

use super::args::{BpeArg, DeviceArg, ModelArgs, PipelineArgs, SearchArgs, TokenizerArg};
use tchseq::generate::{GeneratorConfig, NgramMode, SearchStrategy};

/// Applies `--threads` (default: all cores, libtorch's own default; one per worker when
/// `--inter-threads` is above 1).
pub fn apply_threads(threads: Option<usize>, inter_threads: usize) -> Result<()> {
    if inter_threads == 0 {
        bail!("--inter-threads must be at least 1");
    }
    let threads = threads.or((inter_threads > 1).then_some(1));
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        let n = i32::try_from(n).map_err(|_| anyhow::anyhow!("--threads {n} is too large"))?;
        tch::set_num_threads(n);
    }
    Ok(())
}

/// Resolves `--device cpu|cuda|auto` to a libtorch device.
#[allow(dead_code)]
pub fn resolve_device(arg: DeviceArg) -> Result<Device> {
    match arg {
        DeviceArg::Cpu => Ok(Device::Cpu),
        DeviceArg::Auto => Ok(Device::cuda_if_available()),
        DeviceArg::Cuda => {
            if tch::Cuda::is_available() {
                Ok(Device::Cuda(0))
            } else {
                bail!(
                    "--device cuda requested but libtorch sees no CUDA device (run `tchseq doctor` for details)"
                )
            }
        }
    }
}

/// True when the error comes from writing into a closed pipe (`tchseq ... | head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes on one line, `outer: inner: innermost`.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string().replace(['\n', '\r'], " ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// The checkpoint(s), dictionaries and BPE files `--model/--path/--data/-s/-t` point at.
pub fn model_files(m: &ModelArgs) -> Result<ModelFiles> {
    Ok(ModelFiles::resolve(
        m.model.as_deref(),
        m.path.as_deref(),
        m.data.as_deref(),
        m.source_lang.as_deref(),
        m.target_lang.as_deref(),
    )?)
}

/// Text-pipeline options in increasing precedence: defaults, the checkpoint config, the model
/// directory's files (`bpecodes`, `sentencepiece.bpe.model`), the command line.
pub fn pipeline_options(
    model: &ModelArgs,
    pipeline: &PipelineArgs,
    files: Option<&ModelFiles>,
    config: Option<&TransformerConfig>,
) -> PipelineOptions {
    let mut opts = config.map(PipelineOptions::from_config).unwrap_or_default();
    if let Some(f) = files {
        opts.bpe_codes = f.bpe_codes.clone();
        opts.sentencepiece_model = f.sentencepiece_model.clone();
    }
    if let Some(t) = pipeline.tokenizer {
        let name = match t {
            TokenizerArg::Moses => "moses",
            TokenizerArg::Space => "space",
            TokenizerArg::None => "none",
        };
        opts.tokenizer = Some(name.to_string());
    }
    if let Some(b) = pipeline.bpe {
        let name = match b {
            BpeArg::SubwordNmt => "subword_nmt",
            BpeArg::Fastbpe => "fastbpe",
            BpeArg::Sentencepiece => "sentencepiece",
            BpeArg::None => "none",
        };
        opts.bpe = Some(name.to_string());
    }
    if pipeline.bpe_codes.is_some() {
        opts.bpe_codes = pipeline.bpe_codes.clone();
    }
    if pipeline.sentencepiece_model.is_some() {
        opts.sentencepiece_model = pipeline.sentencepiece_model.clone();
    }
    if let Some(dir) = &model.data {
        opts = opts.with_model_dir(dir);
    }
    if let Some(l) = &model.source_lang {
        opts.source_lang = l.clone();
    }
    if let Some(l) = &model.target_lang {
        opts.target_lang = l.clone();
    }
    opts.moses_no_dash_splits |= pipeline.moses_no_dash_splits;
    opts.moses_no_escape |= pipeline.moses_no_escape;
    opts
}

/// Builds the pipeline, warning once per language Moses has no data for.
pub fn text_pipeline(opts: &PipelineOptions) -> Result<TextPipeline> {
    let pipeline = TextPipeline::new(opts)?;
    for lang in pipeline.fallback_languages() {
        eprintln!("warning: Moses has no data for language {lang:?}; using sacremoses' generic rules and English non-breaking prefixes");
    }
    Ok(pipeline)
}

/// libtorch prints a one-time "nested tensors are in prototype stage" warning (`TORCH_WARN_ONCE`)
/// the first time the post-norm encoder fast path (which fairseq takes, and so do we) builds a
/// nested tensor. Trigger it once with stderr muted, so stderr carries only our own lines.
pub fn mute_nested_tensor_warning() {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let Ok(devnull) = std::fs::OpenOptions::new().write(true).open("/dev/null") else { return };
        // SAFETY: plain descriptor juggling on fd 2; restored before returning.
        unsafe {
            let saved = libc::dup(2);
            if saved < 0 {
                return;
            }
            libc::dup2(devnull.as_raw_fd(), 2);
            let x = tch::Tensor::zeros([1, 1, 1], (tch::Kind::Float, Device::Cpu));
            let sizes = tch::Tensor::from_slice(&[1i64, 1]).reshape([1, 2]);
            let _ = tch::Tensor::f_internal_nested_from_padded(&x, &sizes, false);
            libc::dup2(saved, 2);
            libc::close(saved);
        }
    }
}

/// fairseq's `GenerationConfig` from the shared search flags.
pub fn generator_config(
    s: &SearchArgs,
    search: SearchStrategy,
    temperature: f64,
    need_attn: bool,
) -> Result<GeneratorConfig> {
    if s.beam == 0 {
        bail!("--beam must be at least 1");
    }
    Ok(GeneratorConfig {
        beam_size: s.beam,
        max_len_a: s.max_len_a,
        max_len_b: i64::try_from(s.max_len_b).context("--max-len-b is too large")?,
        min_len: i64::try_from(s.min_len).context("--min-len is too large")?,
        normalize_scores: !s.unnormalized,
        len_penalty: s.lenpen,
        unk_penalty: s.unkpen,
        temperature,
        no_repeat_ngram_size: s.no_repeat_ngram_size,
        ngram_mode: if s.fairseq_compat_ngram { NgramMode::FairseqCompat } else { NgramMode::Intended },
        search,
        need_attn,
    })
}
