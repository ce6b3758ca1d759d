//! Helpers shared by the commands: threads, devices, error formatting.

use anyhow::{bail, Context, Result};
use tch::{Device, Kind};

use tchseq::text::pipeline::PipelineError;
use tchseq::hub::{dtype_name, ComputeTypeError, HubError, LoadOptions, LoadReport, ModelBundle, ModelSpec, OptionError, OptionName, PipelineOverrides, Weights};
use tchseq::config::ComputeType;

use super::args::{BpeArg, DeviceArg, DtypeArg, GlobalArgs, ModelArgs, PipelineArgs, SearchArgs, TokenizerArg};
use tchseq::generate::GeneratorConfig;
use tchseq::hub::{Batching, TranslateOptions};

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

/// `--dtype`'s kind.
pub fn dtype_kind(dtype: DtypeArg) -> Kind {
    match dtype {
        DtypeArg::Fp32 => Kind::Float,
        DtypeArg::Fp16 => Kind::Half,
        DtypeArg::Bf16 => Kind::BFloat16,
    }
}

/// Loads libtorch_cuda when `--device` may use it, before libtorch is asked anything about CUDA.
/// `auto` falls back to the CPU when it is not installed; `cuda` is then an error.
pub fn load_cuda_for(arg: DeviceArg) -> Result<()> {
    match arg {
        DeviceArg::Cpu => Ok(()),
        DeviceArg::Auto => {
            let _ = tchseq::libtorch::load_cuda();
            Ok(())
        }
        DeviceArg::Cuda => {
            tchseq::libtorch::load_cuda().map_err(|e| anyhow::anyhow!("--device cuda: {e}"))?;
            Ok(())
        }
    }
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

/// fairseq's `utils.set_torch_seed(seed)`: libtorch's CPU generator, and CUDA's on a GPU.
pub fn seed_torch(seed: u64, device: Device) -> Result<()> {
    tch::manual_seed(i64::try_from(seed).context("--seed is too large")?);
    if device.is_cuda() {
        tch::Cuda::manual_seed_all(seed);
    }
    Ok(())
}

/// `--model/--path/--data/-s/-t`.
pub fn model_spec(m: &ModelArgs) -> ModelSpec {
    ModelSpec {
        model: m.model.clone(),
        path: m.path.clone(),
        data: m.data.clone(),
        source_lang: m.source_lang.clone(),
        target_lang: m.target_lang.clone(),
        task: task_overrides(&m.task),
        any_pair: false,
    }
}

/// fairseq's task flags; `--lang-pairs` may name a file (fairseq's `FileContentsAction`).
fn task_overrides(t: &super::args::TaskArgs) -> tchseq::config::TaskOverrides {
    let lang_pairs = t.lang_pairs.as_ref().map(|p| match std::path::Path::new(p).is_file() {
        true => std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_else(|_| p.clone()),
        false => p.clone(),
    });
    tchseq::config::TaskOverrides {
        task: t.task.clone(),
        lang_pairs,
        langs: t.langs.clone(),
        lang_dict: t.lang_dict.clone(),
        lang_tok_style: t.lang_tok_style.clone(),
        encoder_langtok: t.encoder_langtok.clone(),
        decoder_langtok: t.decoder_langtok,
        fixed_dictionary: t.fixed_dictionary.clone(),
    }
}

/// `--tokenizer/--bpe/--bpe-codes/--sentencepiece-model` and the Moses switches.
pub fn pipeline_overrides(p: &PipelineArgs) -> PipelineOverrides {
    PipelineOverrides {
        tokenizer: p.tokenizer.map(|t| {
            match t {
                TokenizerArg::Moses => "moses",
                TokenizerArg::Space => "space",
                TokenizerArg::None => "none",
            }
            .to_string()
        }),
        bpe: p.bpe.map(|b| {
            match b {
                BpeArg::SubwordNmt => "subword_nmt",
                BpeArg::Fastbpe => "fastbpe",
                BpeArg::Sentencepiece => "sentencepiece",
                BpeArg::None => "none",
            }
            .to_string()
        }),
        bpe_codes: p.bpe_codes.clone(),
        sentencepiece_model: p.sentencepiece_model.clone(),
        moses_no_dash_splits: p.moses_no_dash_splits,
        moses_no_escape: p.moses_no_escape,
    }
}

/// The model of `--model/--path/--data/-s/-t` through the library's one loading path, to run
/// in `compute_type` (`--compute-type`).
pub fn load_bundle(m: &ModelArgs, pipeline: Option<&PipelineArgs>, weights: Weights, compute_type: ComputeType) -> Result<ModelBundle> {
    let options = LoadOptions { weights, pipeline: pipeline.map(pipeline_overrides).unwrap_or_default(), compute_type };
    ModelBundle::load(&model_spec(m), &options).map_err(hub_error)
}

/// A text pipeline error with the flag that gives what is missing.
pub fn pipeline_error(e: PipelineError) -> anyhow::Error {
    anyhow::anyhow!("{}", pipeline_error_text(&e))
}

fn pipeline_error_text(e: &PipelineError) -> String {
    match e {
        PipelineError::MissingCodes(_) => format!("{e} (pass --bpe-codes FILE)"),
        PipelineError::MissingSentencePieceModel => format!("{e} (pass --sentencepiece-model FILE)"),
        _ => e.to_string(),
    }
}

/// The library's words for what is missing, with the flags that give it.
pub fn hub_error(e: HubError) -> anyhow::Error {
    hub_error_naming(e, "pass -s SRC -t TGT")
}

/// [`hub_error`] where a missing language pair is given as `pair_hint` says (`serve` takes it
/// in `--model NAME=DIR@SRC-TGT`, not in `-s`/`-t`).
pub fn hub_error_naming(e: HubError, pair_hint: &str) -> anyhow::Error {
    let hint = match &e {
        HubError::Pipeline(p @ (PipelineError::MissingCodes(_) | PipelineError::MissingSentencePieceModel)) => {
            return anyhow::anyhow!("{}", pipeline_error_text(p));
        }
        HubError::LanguagesNeeded(_) => pair_hint,
        HubError::DictionariesNotFound { .. } => "pass --data DIR",
        HubError::NoModel => "use --model DIR|FILE or --path A.pt[:B.pt]",
        HubError::ComputeType(ComputeTypeError::LanguageModel(compute_type)) => {
            return anyhow::anyhow!("--compute-type {compute_type} is not supported with a language model (it computes exact only)");
        }
        HubError::ComputeType(ComputeTypeError::DtypeDisagrees { dtype, compute_type }) => {
            return anyhow::anyhow!(
                "--dtype {} and --compute-type {compute_type} disagree: --compute-type float16 and bfloat16 halve the model themselves, and the others compute in fp32",
                dtype_name(*dtype)
            );
        }
        _ => return e.into(),
    };
    anyhow::anyhow!("{e} ({hint})")
}

/// A one-checkpoint model in `kind` on `--device` (plots and `verify` take one model, not an
/// ensemble).
pub fn load_single(global: &GlobalArgs, m: &ModelArgs, pipeline: Option<&PipelineArgs>, kind: Kind) -> Result<ModelBundle> {
    let device = resolve_device(global.device)?;
    if let Some(list) = &m.path {
        let n = list.split(':').filter(|s| !s.is_empty()).count();
        if n > 1 {
            bail!("one checkpoint is needed here, not an ensemble of {n}");
        }
    }
    load_bundle(m, pipeline, Weights::Load { device, kind, replay_init: false }, ComputeType::Exact)
}

/// The load report's warnings, one `warning:` line each on stderr.
pub fn print_warnings(report: &LoadReport) {
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
}

/// The shared search flags as the library's options (the rest at their defaults).
pub fn translate_options(s: &SearchArgs) -> TranslateOptions {
    TranslateOptions {
        beam: s.beam,
        lenpen: s.lenpen,
        unkpen: s.unkpen,
        max_len_a: s.max_len_a,
        max_len_b: s.max_len_b,
        min_len: s.min_len,
        unnormalized: s.unnormalized,
        no_repeat_ngram_size: s.no_repeat_ngram_size,
        ngram_blocking: s.ngram_blocking,
        fairseq_compat_ngram: s.fairseq_compat_ngram,
        diverse_beam_groups: s.diverse_beam_groups,
        diverse_beam_strength: s.diverse_beam_strength,
        diversity_rate: s.diversity_rate,
        match_source_len: s.match_source_len,
        ..TranslateOptions::default()
    }
}

/// fairseq's `GenerationConfig` from checked options; the library's complaint, naming the flags.
pub fn generator_config(options: &TranslateOptions) -> Result<GeneratorConfig> {
    options.check().map_err(option_error)?;
    Ok(options.generator_config())
}

/// The search flags that fairseq has and this command refuses.
pub fn refuse_unsupported(s: &SearchArgs) -> Result<()> {
    if s.retain_dropout {
        bail!("--retain-dropout is not supported: inference with dropout on gives random results");
    }
    Ok(())
}

/// `--max-tokens/--batch-size/--inter-threads` as the library's batching, checked there.
pub fn batching(max_tokens: Option<usize>, batch_size: Option<usize>, inter_threads: usize) -> Result<Batching> {
    Batching::new(max_tokens, batch_size, inter_threads).map_err(option_error)
}

/// The library's complaint about its options, naming the flags that set them.
pub fn option_error(e: OptionError) -> anyhow::Error {
    anyhow::anyhow!("{}", e.describe(OptionName::flag))
}
