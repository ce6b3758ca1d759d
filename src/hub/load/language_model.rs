//! A `transformer_lm` loaded (fairseq's `language_modeling` task): the checkpoint, its one
//! dictionary (`dict.txt`) and its text pipeline.

use std::path::{Path, PathBuf};

use super::model_dir::find_checkpoint;
use super::{pipeline, resolve_compute_type, ComputeTypeError, HubError, LoadOptions, ModelSpec, Weights};
use crate::checkpoint::{load_checkpoint, read_summary};
use crate::config::{ComputeType, TransformerConfig};
use crate::generate::rng_replay::replay_model_init;
use crate::model::TransformerLanguageModel;
use crate::text::dictionary::Dictionary;
use crate::text::pipeline::{PipelineOptions, TextPipeline};

/// A loaded `transformer_lm`, as [`LanguageModel`](crate::hub::LanguageModel) runs it.
pub struct LanguageModelBundle {
    /// The checkpoint file (`model.pt` of a directory, or the first of `--path`).
    pub checkpoint: PathBuf,
    /// The checkpoint's config (`add_bos_token` picks the start symbol).
    pub config: TransformerConfig,
    /// The decoder, without an encoder (fairseq's `TransformerLanguageModel`).
    pub model: TransformerLanguageModel,
    /// The model's one dictionary.
    pub dict: Dictionary,
    /// Where the dictionary was found (`dict.txt`).
    pub dict_path: PathBuf,
    /// Tokenizes and detokenizes text (one language).
    pub pipeline: TextPipeline,
    /// Moses fallbacks and what loading the weights noticed (e.g. tied weights that differ), one line each.
    pub warnings: Vec<String>,
}

/// The checkpoint `spec` names, when it holds a language model (else None).
pub fn language_model_checkpoint(spec: &ModelSpec) -> Option<PathBuf> {
    let path = match (&spec.path, &spec.model) {
        (Some(list), _) => PathBuf::from(list.split(':').next()?),
        (None, Some(m)) if m.is_file() => m.clone(),
        (None, Some(m)) => find_checkpoint(m).ok().flatten()?,
        _ => return None,
    };
    read_summary(&path).ok().filter(|s| s.config.is_language_model()).map(|_| path)
}

impl LanguageModelBundle {
    /// Loads the language model of `spec` (a directory with `model.pt` and `dict.txt`, or a
    /// checkpoint with `--data` holding `dict.txt`). A language model computes `exact` only, in
    /// the weights' dtype; `replay_init` replays fairseq's random initialisation of the model
    /// first (sampling draws from the generator after it).
    pub fn load(spec: &ModelSpec, options: &LoadOptions) -> Result<Self, HubError> {
        let Weights::Load { device, kind, replay_init } = options.weights else {
            return Err(HubError::LanguageModelNeedsWeights);
        };
        match resolve_compute_type(options.compute_type, kind, device)? {
            ComputeType::Exact => {}
            other => return Err(ComputeTypeError::LanguageModel(other).into()),
        }
        let checkpoint = language_model_checkpoint(spec).ok_or(HubError::NotALanguageModel)?;
        let ckpt = load_checkpoint(&checkpoint)?;
        // a bare file name (`-m model.pt`) lies in the current directory
        let ckpt_dir = checkpoint.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
        let dirs: Vec<PathBuf> = match (&spec.data, &spec.model) {
            (Some(d), _) => vec![d.clone()],
            (None, Some(m)) if m.is_dir() => vec![m.clone(), ckpt_dir.clone()],
            _ => vec![ckpt_dir.clone()],
        };
        let dict_path =
            dirs.iter().map(|d| d.join("dict.txt")).find(|p| p.is_file()).ok_or_else(|| HubError::NoLanguageModelDictionary { dir: dirs[0].clone() })?;
        let dict = Dictionary::load(&dict_path).map_err(|source| HubError::Dictionary { path: dict_path.clone(), source })?;
        let rows = ckpt.state_dict.get("decoder.embed_tokens.weight").map(|t| t.size()[0]);
        if let Some(rows) = rows.filter(|&r| r != dict.len() as i64) {
            return Err(HubError::DictionarySize {
                side: "language model",
                dict: dict_path,
                symbols: dict.len(),
                checkpoint,
                tensor: "decoder.embed_tokens.weight",
                rows,
            });
        }
        if replay_init {
            replay_model_init(&ckpt.state_dict, false, ckpt.config.share_decoder_input_output_embed).map_err(HubError::Replay)?;
        }
        let (model, report) =
            TransformerLanguageModel::from_checkpoint(&ckpt, device, kind).map_err(|source| HubError::Model { path: checkpoint.clone(), source })?;
        let mut pipeline_options = PipelineOptions::from_config(&ckpt.config);
        for d in &dirs {
            pipeline_options = pipeline_options.with_model_dir(d);
        }
        let pipeline_options = options.pipeline.apply(spec, pipeline_options);
        let (pipeline, mut warnings) = pipeline::build(&pipeline_options)?;
        warnings.extend(report.warnings);
        Ok(Self { checkpoint, config: ckpt.config, model, dict, dict_path, pipeline, warnings })
    }
}
