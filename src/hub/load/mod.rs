//! The loader: finds a model's files, parses each checkpoint once, checks the dictionaries
//! against the embeddings, builds the models in the compute type resolved for the device, and
//! works out the text pipelines, as fairseq's `hub_utils.from_pretrained` +
//! `checkpoint_utils.load_model_ensemble_and_task` do. Every model kind loads here:
//! [`ModelBundle::load`] (a translation model or an ensemble) and
//! [`LanguageModelBundle::load`] (a `transformer_lm`), both through [`LoadOptions`].

mod compute_type;
mod language_model;
mod languages;
pub mod model_dir;
mod pipeline;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tch::{Device, Kind};

use crate::checkpoint::{load_checkpoint, read_summary, Checkpoint, CheckpointError, ContainerFormat};
use crate::config::{TaskOverrides, TransformerConfig};
use crate::generate::rng_replay::replay_model_init;
use crate::generate::GenerateError;
use crate::config::ComputeType;
use crate::model::{ModelError, TransformerModel};
use crate::text::dictionary::{Dictionary, DictionaryError};
use crate::text::pipeline::{PipelineError, PipelineOptions, TextPipeline};

pub use compute_type::{apply_compute_type, dtype_name, load_kind, resolve_compute_type, ComputeTypeError, KV_CACHE_ENV};
pub use language_model::{language_model_checkpoint, LanguageModelBundle};
pub use languages::{LanguageTokens, Languages};
pub use model_dir::ModelFiles;
pub use pipeline::{build as build_pipeline, PipelineOverrides};

/// fairseq's task default `--max-source-positions` (a model's own limit may be lower).
pub const TASK_MAX_SOURCE_POSITIONS: usize = 1024;

/// Why a model could not be loaded or made ready.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// A checkpoint could not be read or parsed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// `--model` names nothing.
    #[error("model {}: no such file or directory", path.display())]
    NoSuchModel {
        /// The path given.
        path: PathBuf,
    },
    /// A model directory without a fairseq checkpoint or Hugging Face weights.
    #[error("{}: no model.pt, checkpoint_best.pt or checkpoint_last.pt (also looked in {})", dir.display(), dir.join("checkpoints").display())]
    NoCheckpoint {
        /// The model directory.
        dir: PathBuf,
    },
    /// A CTranslate2 directory, given where a model to run is asked for.
    #[error("{}: a CTranslate2 model, which tchseq reads only to compare it with the model it came from (`tchseq verify -m MODEL --against {}`)", dir.display(), dir.display())]
    CTranslate2Model {
        /// The CTranslate2 directory.
        dir: PathBuf,
    },
    /// A directory given as a conversion holds none.
    #[error("{}: no checkpoint, Hugging Face weights or CTranslate2 model.bin", dir.display())]
    NoConversion {
        /// The directory.
        dir: PathBuf,
    },
    /// A CTranslate2 model could not be read back.
    #[error(transparent)]
    CTranslate2(#[from] crate::checkpoint::ctranslate2::Ct2Error),
    /// `--path` lists no checkpoint.
    #[error("the checkpoint list names no checkpoint")]
    EmptyCheckpointList,
    /// A checkpoint of `--path` that is not a file.
    #[error("checkpoint {} does not exist", path.display())]
    NoSuchCheckpoint {
        /// The checkpoint named.
        path: PathBuf,
    },
    /// `--data` is not a directory.
    #[error("data directory {}: not a directory", path.display())]
    NotADataDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The task flags over the checkpoint's do not make a task.
    #[error("task flags: {0}")]
    TaskFlags(#[source] crate::config::ConfigError),
    /// A language the model does not know.
    #[error("language `{lang}` is not one of the model's languages ({})", langs.join(", "))]
    UnknownLanguage {
        /// The language asked for.
        lang: String,
        /// The model's languages.
        langs: Vec<String>,
    },
    /// fairseq refuses both language lists.
    #[error("--langs and --lang-dict can not both be specified")]
    LangsAndLangDict,
    /// The `--lang-dict` file the checkpoint names is not beside it.
    #[error("the model's language list `{name}` (--lang-dict {stored}) is not in the model directory")]
    NoLangDict {
        /// Its file name.
        name: String,
        /// The checkpoint's `--lang-dict`.
        stored: String,
    },
    /// The `--lang-dict` file could not be read.
    #[error("{}: {source}", path.display())]
    LangDictUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// More language tokens than any model has: the checkpoint's lists are hostile or broken.
    #[error("{langs} languages × {specs} language-token sets: more than {max} tokens")]
    TooManyLanguageTokens {
        /// The languages.
        langs: usize,
        /// The language-token sets (`--langtoks-specs`).
        specs: usize,
        /// The most tokens allowed.
        max: usize,
    },
    /// A language's token is not in the dictionary.
    #[error("language token {token} is not in the dictionary")]
    NoLanguageToken {
        /// The token.
        token: String,
    },
    /// Another pair asked of a bilingual model.
    #[error("the model is not multilingual: it translates {pair} only")]
    NotMultilingual {
        /// The model's pair (`en-de`).
        pair: String,
    },
    /// Another pair whose target language ends with its own EOS (mBART fine-tuning).
    #[error("this model's task ends each target language with its own EOS: load it for {pair} on its own")]
    PairNeedsOwnLoad {
        /// The pair asked for (`en-de`).
        pair: String,
    },
    /// The checkpoint named is not a `transformer_lm`.
    #[error("the checkpoint is not a transformer_lm language model")]
    NotALanguageModel,
    /// A language model's weights were not asked for.
    #[error("a language model loads with its weights")]
    LanguageModelNeedsWeights,
    /// No `dict.txt` beside a language model.
    #[error("no dict.txt in {} (a language model's dictionary; give --data DIR)", dir.display())]
    NoLanguageModelDictionary {
        /// The first directory searched.
        dir: PathBuf,
    },
    /// No model was named.
    #[error("no model given: a model directory, a checkpoint file or a list of checkpoints")]
    NoModel,
    /// The source and target languages cannot be told from the model; the message says why
    /// and asks for them.
    #[error("{0}")]
    LanguagesNeeded(String),
    /// No directory holds the dictionaries.
    #[error("dictionaries {names} not found (searched {searched}); give the data directory")]
    DictionariesNotFound {
        /// The dictionary file names looked for.
        names: String,
        /// The directories searched.
        searched: String,
    },
    /// The compute type asked for cannot run as asked.
    #[error(transparent)]
    ComputeType(#[from] ComputeTypeError),
    /// A `tokenizer.json` could not be read.
    #[error(transparent)]
    TokenizerJson(#[from] crate::text::hf_bpe::TokenizerJsonError),
    /// A dictionary file could not be read.
    #[error("{}: {source}", path.display())]
    Dictionary {
        /// The dictionary file.
        path: PathBuf,
        /// What was wrong with it.
        source: DictionaryError,
    },
    /// A dictionary's size differs from the rows of the checkpoint's embedding matrix.
    #[error("{}: the {side} dictionary has {symbols} symbols but {tensor} of {} has {rows} rows (wrong dictionary?)", dict.display(), checkpoint.display())]
    DictionarySize {
        /// `source`, `target` or `language model`.
        side: &'static str,
        /// The dictionary file.
        dict: PathBuf,
        /// Its size, the special symbols (and any language tokens) included.
        symbols: usize,
        /// The checkpoint it was checked against.
        checkpoint: PathBuf,
        /// The embedding matrix's state-dict key.
        tensor: &'static str,
        /// The matrix's rows: the size of the dictionary the model was trained with.
        rows: i64,
    },
    /// `share_all_embeddings` with different source and target dictionaries.
    #[error("{}: share_all_embeddings needs one joined dictionary, but the source and target dictionaries differ", checkpoint.display())]
    NotJoined {
        /// The checkpoint that shares its embeddings.
        checkpoint: PathBuf,
    },
    /// The checkpoint's state dict does not build its architecture, or a compute type could not
    /// be applied.
    #[error("building the model of {}: {source}", path.display())]
    Model {
        /// The checkpoint (or `the loaded model`).
        path: PathBuf,
        /// What went wrong.
        source: ModelError,
    },
    /// Replaying fairseq's random initialisation (`replay_init`) failed.
    #[error("replaying fairseq's model initialisation: {0}")]
    Replay(#[source] GenerateError),
    /// The tokenizer or BPE could not be set up (e.g. a missing BPE codes file).
    #[error("text pipeline: {0}")]
    Pipeline(#[from] PipelineError),
}

/// Where a model is: a model directory or checkpoint file, and/or a `:`-separated checkpoint
/// list (an ensemble), the data directory with the dictionaries, and the languages (default:
/// from the checkpoint).
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    /// A model directory (fairseq hub layout, or a training run's) or a checkpoint file.
    pub model: Option<PathBuf>,
    /// fairseq's `--path`: checkpoints separated by `:`, relative ones also looked up in `model`.
    pub path: Option<String>,
    /// The data directory with the dictionaries (fairseq's positional `data` argument).
    pub data: Option<PathBuf>,
    /// fairseq's `--source-lang`.
    pub source_lang: Option<String>,
    /// fairseq's `--target-lang`.
    pub target_lang: Option<String>,
    /// fairseq's task flags (`--lang-pairs`, `--encoder-langtok`, ...) over the checkpoint's.
    pub task: TaskOverrides,
    /// A multilingual model given no languages loads for its first language pair instead of
    /// asking for one (a caller that serves every pair, [`Translator::pair_tokens`]).
    pub any_pair: bool,
}

/// What to load besides the files.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Weights {
    /// Build every model of the ensemble on `device` in `kind`. `replay_init` replays fairseq's
    /// random initialisation of each model first (only sampling draws from the generator after).
    Load {
        /// Where the weights go.
        device: Device,
        /// The weights' dtype (`Kind::Float` is fairseq's fp32).
        kind: Kind,
        /// Replay fairseq's random initialisation first.
        replay_init: bool,
    },
    /// Read the first checkpoint's config only (text tools).
    ConfigOnly,
}

/// How [`ModelBundle::load`] loads.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The weights, or the config only.
    pub weights: Weights,
    /// The caller's tokenizer/BPE settings, over the checkpoint's and the model directory's.
    pub pipeline: PipelineOverrides,
    /// How the models compute once built; it decides the weights' dtype where it has one
    /// ([`load_kind`]).
    pub compute_type: ComputeType,
}

impl LoadOptions {
    /// fp32 weights on `device`, no initialisation replay, the model's own text pipeline.
    pub fn fp32(device: Device) -> Self {
        Self { weights: Weights::Load { device, kind: Kind::Float, replay_init: false }, pipeline: PipelineOverrides::default(), compute_type: ComputeType::Exact }
    }

    /// [`LoadOptions::fp32`], to run in `compute_type`.
    pub fn computing(device: Device, compute_type: ComputeType) -> Self {
        Self { compute_type, ..Self::fp32(device) }
    }
}

/// What loading found and did, for `inspect`, `--verbose`, the server and the Python API.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    /// One per checkpoint of the ensemble (only the first with `Weights::ConfigOnly`).
    pub checkpoints: Vec<CheckpointReport>,
    /// The source language, given or inferred.
    pub source_lang: String,
    /// The target language, given or inferred.
    pub target_lang: String,
    /// The source dictionary's file and size (language tokens included).
    pub source_dictionary: DictionaryReport,
    /// The target dictionary's file and size (language tokens included).
    pub target_dictionary: DictionaryReport,
    /// The BPE codes file in use (`bpecodes`/`code`), if any.
    pub bpe_codes: Option<PathBuf>,
    /// The sentencepiece model in use, if any.
    pub sentencepiece_model: Option<PathBuf>,
    /// A multilingual model's languages and language tokens (absent for a bilingual model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub languages: Option<LanguageReport>,
    /// Things that were guessed or that fairseq would have done differently, one line each.
    pub warnings: Vec<String>,
}

/// The languages of a multilingual or mBART fine-tuned model, as loaded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LanguageReport {
    /// fairseq's task name.
    pub task: String,
    /// The languages, in the order that sets their token ids.
    pub langs: Vec<String>,
    /// `--lang-pairs` (multilingual models).
    pub lang_pairs: Vec<String>,
    /// Every language token (and `<mask>`) with its id in the source dictionary.
    pub tokens: Vec<(String, i64)>,
}

/// One loaded checkpoint.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckpointReport {
    /// The checkpoint file.
    pub path: PathBuf,
    /// How the file is stored: a `torch.save` zip, a legacy pickle, or safetensors.
    pub format: ContainerFormat,
    /// Where its config came from: `args` (argparse `Namespace`) or `cfg` (omegaconf `DictConfig`).
    pub config_source: &'static str,
    /// State-dict tensors (0 with `Weights::ConfigOnly`).
    pub tensors: usize,
    /// Elements in all state-dict tensors (0 with `Weights::ConfigOnly`).
    pub parameters: i64,
    /// State-dict keys no module asked for (empty with `Weights::ConfigOnly`).
    pub unused_keys: Vec<String>,
}

/// A loaded dictionary.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DictionaryReport {
    /// The `dict.*.txt` file.
    pub path: PathBuf,
    /// Symbols, the special symbols and any language tokens included.
    pub size: usize,
}

/// A model ready to run: the ensemble, its dictionaries (checked against the embeddings), the
/// text pipeline options and the position limits.
///
/// ```rust
/// use tchseq::hub::{LoadOptions, ModelBundle, ModelSpec};
///
/// let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/../weights/multi30k.en-de");
/// let spec = ModelSpec { model: Some(model.into()), ..Default::default() };
/// let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu))?;
/// // the languages come from the checkpoint or the dictionaries' names
/// assert_eq!((bundle.files.source_lang.as_str(), bundle.files.target_lang.as_str()), ("en", "de"));
/// assert_eq!(bundle.models.len(), 1);
/// assert_eq!(bundle.report.source_dictionary.size, bundle.src_dict.len());
/// assert!(bundle.max_source_positions() <= tchseq::hub::TASK_MAX_SOURCE_POSITIONS);
/// # Ok::<(), tchseq::hub::HubError>(())
/// ```
pub struct ModelBundle {
    /// The files found for the spec.
    pub files: ModelFiles,
    /// The first checkpoint's config (fairseq takes the task and text settings from it).
    pub config: TransformerConfig,
    /// The ensemble, in `files.checkpoints` order (empty with `Weights::ConfigOnly`).
    pub models: Vec<TransformerModel>,
    /// The loaded checkpoints, in `files.checkpoints` order (kept for `inspect` and `verify`;
    /// none once a compute type other than `exact` has packed the weights from them). While
    /// they are here, the models' weights may still read the checkpoint files where they are
    /// mapped; [`Translator::new`] (and dropping them) ends that.
    pub checkpoints: Vec<Checkpoint>,
    /// The source dictionary, language tokens appended.
    pub src_dict: Dictionary,
    /// The target dictionary, language tokens appended.
    pub tgt_dict: Dictionary,
    /// The languages of a multilingual task (see [`Languages`]); the dictionaries hold their tokens.
    pub languages: Languages,
    /// Tokenizer/BPE settings: defaults < checkpoint config < model directory < overrides.
    pub pipeline_options: PipelineOptions,
    /// What loading found and did; building pipelines adds their warnings.
    pub report: LoadReport,
    /// The compute type resolved for the device, which the models compute in.
    pub compute_type: ComputeType,
}

fn load_dictionary(path: &Path) -> Result<Dictionary, HubError> {
    let tokenizer_json = path.file_name().is_some_and(|n| n == crate::checkpoint::hf::NLLB_TOKENIZER_JSON);
    let dictionary = match path.extension().and_then(|e| e.to_str()) {
        _ if tokenizer_json => tokenizer_json_dictionary(path)?,
        Some("json") => std::fs::read(path).map_err(Into::into).and_then(|bytes| Dictionary::from_vocab_json(&bytes)),
        Some("model") => sentencepiece_dictionary(path),
        _ => Dictionary::load(path),
    };
    let mut dictionary = dictionary.map_err(|source| HubError::Dictionary { path: path.to_path_buf(), source })?;
    // a Hugging Face vocabulary may leave the language tokens to its tokenizer
    for token in crate::checkpoint::hf::tokens_after_vocabulary(path, dictionary.len())? {
        dictionary.add_symbol(&token);
    }
    Ok(dictionary)
}

/// NLLB's dictionary from its sentencepiece model (`NllbTokenizer`): after fairseq's four
/// specials, every piece but the model's own `<unk>`, `<s>`, `</s>` (its first three), in order.
fn sentencepiece_dictionary(path: &Path) -> Result<Dictionary, DictionaryError> {
    let model = crate::text::sentencepiece::SentencePieceModel::load(path).map_err(|e| DictionaryError::Vocabulary(e.to_string()))?;
    let pieces = model.pieces();
    let first: Vec<&str> = pieces.iter().take(3).map(|p| p.piece.as_str()).collect();
    if first != ["<unk>", "<s>", "</s>"] {
        return Err(DictionaryError::Vocabulary(format!("a sentencepiece model whose first pieces are {first:?}, not <unk> <s> </s>")));
    }
    let mut dictionary = Dictionary::new();
    for p in &pieces[3..] {
        dictionary.add_symbol(&p.piece);
    }
    Ok(dictionary)
}

/// NLLB's dictionary from transformers 5's `tokenizer.json`: its BPE vocabulary, whose ids are
/// fairseq's (`<s>` `<pad>` `</s>` `<unk>`, then the sentencepiece pieces).
fn tokenizer_json_dictionary(path: &Path) -> Result<Result<Dictionary, DictionaryError>, HubError> {
    let tokenizer = crate::text::hf_bpe::Tokenizer::from_file(path)?;
    let vocab: HashMap<String, i64> = tokenizer.vocab().iter().map(|(t, &id)| (t.clone(), i64::from(id))).collect();
    Ok(Dictionary::from_vocab(&vocab))
}

/// fairseq sizes the embeddings from the dictionaries: a dictionary that disagrees with the
/// stored embedding matrix is the wrong dictionary.
pub fn check_dictionaries(
    checkpoint: &Path,
    summary: &crate::checkpoint::CheckpointSummary,
    files: &ModelFiles,
    src: &Dictionary,
    tgt: &Dictionary,
) -> Result<(), HubError> {
    let sides = [
        ("source", &files.src_dict, src, "encoder.embed_tokens.weight", summary.src_embed_rows),
        ("target", &files.tgt_dict, tgt, "decoder.embed_tokens.weight", summary.tgt_embed_rows),
    ];
    for (side, dict, d, tensor, rows) in sides {
        if let Some(rows) = rows.filter(|&r| r != d.len() as i64) {
            let (dict, checkpoint) = (dict.clone(), checkpoint.to_path_buf());
            return Err(HubError::DictionarySize { side, dict, symbols: d.len(), checkpoint, tensor, rows });
        }
    }
    if summary.config.share_all_embeddings && src != tgt {
        return Err(HubError::NotJoined { checkpoint: checkpoint.to_path_buf() });
    }
    Ok(())
}

impl ModelBundle {
    /// Finds the files of `spec`, parses each checkpoint once, checks the dictionaries against
    /// every checkpoint's embeddings and builds the models.
    pub fn load(spec: &ModelSpec, options: &LoadOptions) -> Result<Self, HubError> {
        let load_weights = matches!(options.weights, Weights::Load { .. });
        let compute_type = match options.weights {
            Weights::Load { device, kind, .. } => resolve_compute_type(options.compute_type, kind, device)?,
            Weights::ConfigOnly => options.compute_type,
        };
        let mut first: Option<Checkpoint> = None;
        let mut first_summary = None;
        let files = ModelFiles::resolve(spec, |path| {
            let mut summary = if load_weights {
                let ckpt = load_checkpoint(path)?;
                let summary = ckpt.summary();
                first = Some(ckpt);
                summary
            } else {
                read_summary(path)?
            };
            let task = summary.config.language_task.with_overrides(summary.config.task.as_deref(), &spec.task);
            summary.config.language_task = task.map_err(HubError::TaskFlags)?;
            if let Some(ckpt) = &mut first {
                ckpt.config.language_task = summary.config.language_task.clone();
            }
            first_summary = Some(summary.clone());
            Ok(summary)
        })?;
        let mut src_dict = load_dictionary(&files.src_dict)?;
        let mut tgt_dict = load_dictionary(&files.tgt_dict)?;
        let task = first_summary.as_ref().map(|s| s.config.language_task.clone()).unwrap_or_default();
        let languages = Languages::new(&task, files.lang_dict.as_deref())?;
        languages.augment(&mut src_dict);
        languages.augment(&mut tgt_dict);
        // the pair's tokens must exist before any model is built
        languages.tokens(&files.source_lang, &files.target_lang, &src_dict, &tgt_dict)?;

        let mut checkpoints = Vec::new();
        let mut models = Vec::new();
        let mut reports = Vec::new();
        let mut warnings = Vec::new();
        let config = match options.weights {
            Weights::ConfigOnly => {
                let summary = match first_summary {
                    Some(summary) => summary,
                    None => read_summary(&files.checkpoints[0])?,
                };
                check_dictionaries(&files.checkpoints[0], &summary, &files, &src_dict, &tgt_dict)?;
                reports.push(CheckpointReport {
                    path: files.checkpoints[0].clone(),
                    format: summary.format,
                    config_source: summary.config_source.as_str(),
                    tensors: 0,
                    parameters: 0,
                    unused_keys: Vec::new(),
                });
                summary.config
            }
            Weights::Load { device, kind, replay_init } => {
                let kind = load_kind(compute_type, kind, device)?;
                for (i, path) in files.checkpoints.iter().enumerate() {
                    let ckpt = match (i, first.take()) {
                        (0, Some(ckpt)) => ckpt,
                        _ => load_checkpoint(path)?,
                    };
                    check_dictionaries(path, &ckpt.summary(), &files, &src_dict, &tgt_dict)?;
                    if replay_init {
                        let c = &ckpt.config;
                        replay_model_init(&ckpt.state_dict, c.share_all_embeddings, c.share_decoder_input_output_embed)
                            .map_err(HubError::Replay)?;
                    }
                    let (model, load) = TransformerModel::from_state_dict(&ckpt.config, &ckpt.state_dict, device, kind)
                        .map_err(|source| HubError::Model { path: path.clone(), source })?;
                    reports.push(CheckpointReport {
                        path: path.clone(),
                        format: ckpt.format,
                        config_source: ckpt.config_source.as_str(),
                        tensors: ckpt.state_dict.len(),
                        parameters: ckpt.state_dict.values().map(|t| t.numel() as i64).sum(),
                        unused_keys: load.unused_keys,
                    });
                    warnings.extend(load.warnings);
                    models.push(model);
                    checkpoints.push(ckpt);
                }
                let config = checkpoints[0].config.clone();
                if compute_type != ComputeType::Exact {
                    // the state dicts go first, so that a weight packed and let go of frees its
                    // file pages; what the models still read from the files then moves into
                    // memory of their own
                    let file_storages: Vec<_> = checkpoints.drain(..).map(|c| c.file_storages).collect();
                    warnings.extend(apply_compute_type(&mut models, compute_type, device)?);
                    drop(file_storages);
                }
                // what only loading ran
                crate::libtorch::library_pages::release();
                config
            }
        };
        let pipeline_options = pipeline::options(spec, &options.pipeline, &files, &config);
        let language_report = languages.is_multilingual().then(|| LanguageReport {
            task: config.task.clone().unwrap_or_default(),
            langs: languages.langs.clone(),
            lang_pairs: languages.pairs(),
            tokens: languages.token_names().into_iter().map(|t| (t.clone(), src_dict.index(&t))).collect(),
        });
        let report = LoadReport {
            checkpoints: reports,
            source_lang: files.source_lang.clone(),
            target_lang: files.target_lang.clone(),
            source_dictionary: DictionaryReport { path: files.src_dict.clone(), size: src_dict.len() },
            target_dictionary: DictionaryReport { path: files.tgt_dict.clone(), size: tgt_dict.len() },
            bpe_codes: pipeline_options.bpe_codes.clone(),
            sentencepiece_model: pipeline_options.sentencepiece_model.clone(),
            languages: language_report,
            warnings,
        };
        Ok(Self { files, config, models, checkpoints, src_dict, tgt_dict, languages, pipeline_options, report, compute_type })
    }

    /// fairseq-interactive's limit on source length: the smallest of the models' and the task's.
    pub fn max_source_positions(&self) -> usize {
        self.models.iter().map(TransformerModel::max_source_positions).chain([TASK_MAX_SOURCE_POSITIONS]).min().unwrap_or(TASK_MAX_SOURCE_POSITIONS)
    }

    /// The translation pipeline: tokenize in the source language, detokenize in the target
    /// language. Moses fallbacks are added to the report's warnings.
    pub fn pipeline(&mut self) -> Result<TextPipeline, HubError> {
        let options = self.pipeline_options.clone();
        self.build_pipeline(&options)
    }

    /// The pipeline of one side's text, tokenized and detokenized in that side's language.
    pub fn side_pipeline(&mut self, lang: &str) -> Result<TextPipeline, HubError> {
        let mut options = self.pipeline_options.clone();
        // the target's own sentencepiece model, unless the caller named one
        if lang == self.files.target_lang && options.sentencepiece_model == self.files.sentencepiece_model {
            if let Some(own) = &self.files.target_sentencepiece_model {
                options.sentencepiece_model = Some(own.clone());
            }
        }
        options.source_lang = lang.to_string();
        options.target_lang = lang.to_string();
        self.build_pipeline(&options)
    }

    fn build_pipeline(&mut self, options: &PipelineOptions) -> Result<TextPipeline, HubError> {
        let (pipeline, warnings) = pipeline::build(options)?;
        for w in warnings {
            if !self.report.warnings.contains(&w) {
                self.report.warnings.push(w);
            }
        }
        Ok(pipeline)
    }
}

