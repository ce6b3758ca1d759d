//! The text-pipeline settings of a model: defaults, then the checkpoint config, then the model
//! directory's files (`bpecodes`, `sentencepiece.bpe.model`), then the caller's overrides.

use std::path::PathBuf;

use super::{ModelFiles, ModelSpec};
use crate::config::TransformerConfig;
use crate::text::pipeline::{PipelineError, PipelineOptions, TextPipeline};

/// The caller's choices, each overriding what the checkpoint and the model directory say.
#[derive(Debug, Clone, Default)]
pub struct PipelineOverrides {
    /// `moses`, `space` or `none`.
    pub tokenizer: Option<String>,
    /// `subword_nmt`, `fastbpe`, `sentencepiece` or `none`.
    pub bpe: Option<String>,
    /// fairseq's `--bpe-codes` (subword-nmt/fastBPE codes file).
    pub bpe_codes: Option<PathBuf>,
    /// fairseq's `--sentencepiece-model`.
    pub sentencepiece_model: Option<PathBuf>,
    /// fairseq's `--moses-no-dash-splits`: no `@-@` around hyphens.
    pub moses_no_dash_splits: bool,
    /// fairseq's `--moses-no-escape`: no HTML escaping of special characters.
    pub moses_no_escape: bool,
}

impl PipelineOverrides {
    /// Settings without a model: defaults, the data directory's files, the overrides.
    pub fn without_model(&self, spec: &ModelSpec) -> PipelineOptions {
        self.apply(spec, PipelineOptions::default())
    }

    pub(super) fn apply(&self, spec: &ModelSpec, mut opts: PipelineOptions) -> PipelineOptions {
        if self.tokenizer.is_some() {
            opts.tokenizer = self.tokenizer.clone();
        }
        if self.bpe.is_some() {
            opts.bpe = self.bpe.clone();
        }
        if self.bpe_codes.is_some() {
            opts.bpe_codes = self.bpe_codes.clone();
        }
        if self.sentencepiece_model.is_some() {
            opts.sentencepiece_model = self.sentencepiece_model.clone();
        }
        if let Some(dir) = &spec.data {
            opts = opts.with_model_dir(dir);
        }
        if let Some(l) = &spec.source_lang {
            opts.source_lang = l.clone();
        }
        if let Some(l) = &spec.target_lang {
            opts.target_lang = l.clone();
        }
        opts.moses_no_dash_splits |= self.moses_no_dash_splits;
        opts.moses_no_escape |= self.moses_no_escape;
        opts
    }
}

/// Builds the pipeline of `options`, with one warning per language Moses has no data for.
pub fn build(options: &PipelineOptions) -> Result<(TextPipeline, Vec<String>), PipelineError> {
    let pipeline = TextPipeline::new(options)?;
    let warnings = pipeline
        .fallback_languages()
        .iter()
        .map(|lang| format!("Moses has no data for language {lang:?}; using sacremoses' generic rules and English non-breaking prefixes"))
        .collect();
    Ok((pipeline, warnings))
}

pub(super) fn options(spec: &ModelSpec, overrides: &PipelineOverrides, files: &ModelFiles, config: &TransformerConfig) -> PipelineOptions {
    let mut opts = PipelineOptions::from_config(config);
    opts.bpe_codes = files.bpe_codes.clone();
    opts.sentencepiece_model = files.sentencepiece_model.clone();
    overrides.apply(spec, opts)
}
