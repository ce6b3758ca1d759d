//! Text in, hypotheses out: fairseq's `GeneratorHubInterface` with fairseq-interactive's buffer
//! loop (encode, order, filter, batch, generate). The CLI, the server and the Python API all
//! translate through [`Translator::translate_tokens`]; [`Translator::translate`] is its
//! text-in form for library users.

use tch::Device;

use super::guide::{GuideError, TargetGuide};
use super::options::{OptionError, OptionName, TranslateOptions};
use super::scoring::PairScoring;
use crate::hub::{apply_compute_type, resolve_compute_type, ComputeTypeError, HubError, LanguageTokens, Languages, LoadReport, ModelBundle};
use crate::checkpoint::FileStorages;
use crate::generate::batching::{batch_by_size, ordered_indices};
use crate::generate::sequence_generator::Specials;
use crate::generate::{GenerateError, GeneratorConfig, Hypothesis, InvalidOption, SequenceGenerator};
use crate::config::ComputeType;
use crate::model::TransformerModel;
use crate::text::dictionary::Dictionary;
use crate::text::pipeline::{PipelineError, PipelineOptions, TextPipeline};

/// How a buffer of sentences is cut into batches (fairseq's `--max-tokens`/`--batch-size`), and
/// how many batches run side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// fairseq's `--max-tokens`: the most source tokens in a batch.
    pub max_tokens: Option<usize>,
    /// fairseq's `--batch-size`: the most sentences in a batch.
    pub batch_size: Option<usize>,
    /// Batches translated at once, each on its own thread, all sharing the models.
    pub inter_threads: usize,
}

impl Batching {
    /// `max_tokens` and `batch_size` as fairseq takes them, checked; with neither, one sentence
    /// per batch (fairseq-interactive).
    pub fn new(max_tokens: Option<usize>, batch_size: Option<usize>, inter_threads: usize) -> Result<Self, OptionError> {
        for (name, value) in [(OptionName::MaxTokens, max_tokens), (OptionName::BatchSize, batch_size), (OptionName::InterThreads, Some(inter_threads))] {
            if value == Some(0) {
                return Err(OptionError::AtLeastOne(name));
            }
        }
        let batch_size = if max_tokens.is_none() && batch_size.is_none() { Some(1) } else { batch_size };
        Ok(Batching { max_tokens, batch_size, inter_threads })
    }

    /// The token budget of a list of sentences given without batching settings (the CLI's files,
    /// pipes and sentence arguments, Python's lists): 512 tokens (some 35 sentences) ran as fast
    /// as a batch size of 32; bigger budgets were slower (4,096: 1.4× the time with 2
    /// inter-threads, and twice the memory).
    pub const LIST_MAX_TOKENS: usize = 512;

    /// [`Batching::new`], except that with neither limit given a list is cut into batches of
    /// [`Batching::LIST_MAX_TOKENS`] tokens instead of one sentence each.
    pub fn for_list(max_tokens: Option<usize>, batch_size: Option<usize>, inter_threads: usize) -> Result<Self, OptionError> {
        match (max_tokens, batch_size) {
            (None, None) => Self::new(Some(Self::LIST_MAX_TOKENS), None, inter_threads),
            _ => Self::new(max_tokens, batch_size, inter_threads),
        }
    }
}

impl Default for Batching {
    /// fairseq-interactive without batching flags: one sentence per batch.
    fn default() -> Self {
        Batching { max_tokens: None, batch_size: Some(1), inter_threads: 1 }
    }
}

/// What a call of [`Translator::translate_tokens`] asks besides the sentences and the search
/// (CTranslate2's `TranslationOptions`); by default, nothing.
#[derive(Clone, Copy, Default)]
pub struct TranslateRequest<'a> {
    /// Sentence `i`'s hypotheses follow `guides[i]` (a target prefix, constraints); empty, or
    /// one per sentence.
    pub guides: &'a [TargetGuide],
    /// Hard alignments (`--print-alignment`) in each hypothesis.
    pub alignment: bool,
    /// Told `(sentence, token)` for each target token as it is decoded, when the generator's
    /// beam is 1 (greedy or sampling; the language tokens and the final EOS are not told): what
    /// a stream shows while the batch decodes.
    pub on_token: Option<&'a (dyn Fn(usize, i64) + Sync)>,
    /// Told the sentences of each batch as soon as it is finished (`(sentence, what became of
    /// it)`; sentences too long for the model first), from the thread that computed it: what
    /// lets a caller write finished work before the whole call returns.
    pub on_batch: Option<&'a (dyn Fn(&[(usize, Translation)]) + Sync)>,
}

/// What became of one sentence.
#[derive(Debug, Clone)]
pub enum Translation {
    /// Generated: the source and its hypotheses.
    Done {
        /// The encoded source, EOS included.
        src_tokens: Vec<i64>,
        /// Finished hypotheses, best first (`beam` of them).
        hypos: Vec<Hypothesis>,
        /// The batch's generation time divided by its sentences.
        seconds: f64,
    },
    /// Not translated: longer than the model accepts.
    TooLong {
        /// The length fairseq checks: EOS included, language tokens not (for a prompt: the
        /// start symbol included).
        len: usize,
        /// The model's limit (`max_source_positions`; a language model's `max_positions`).
        max: usize,
    },
    /// Not translated: the batch it was in failed (an internal error, caught). Only that
    /// batch's sentences get it; the run goes on.
    Failed {
        /// Why, as one line.
        reason: String,
    },
}

impl Translation {
    /// Why the sentence was not translated, as one line; `None` when it was.
    pub fn error(&self) -> Option<String> {
        match self {
            Translation::Done { .. } => None,
            Translation::TooLong { len, max } => Some(format!(
                "input is {len} tokens long (EOS included) but the model accepts at most {max}; not translated"
            )),
            Translation::Failed { reason } => Some(format!("{reason}; not translated")),
        }
    }
}

/// A hypothesis as text: the subword tokens fairseq prints on `H-` lines and the detokenized
/// text of `D-` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HypothesisText {
    /// The subword tokens, space-separated (`H-`).
    pub tokens: String,
    /// The detokenized text (`D-`).
    pub text: String,
}

impl HypothesisText {
    /// `tgt_dict.string(tokens)` without EOS, and that detokenized (fairseq's `H-`/`D-` text).
    pub(super) fn new(dict: &Dictionary, pipeline: &TextPipeline, h: &Hypothesis, strip: &[i64]) -> Result<Self, PipelineError> {
        let tokens = dict.string(&h.tokens, None, false, strip);
        let text = pipeline.decode(&tokens)?;
        Ok(HypothesisText { tokens, text })
    }
}

/// Soft alignment of one hypothesis, rows = target tokens (EOS included), columns = source tokens
/// (EOS included, batch padding dropped).
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttentionMatrix {
    /// The hypothesis' symbols (the rows).
    pub target: Vec<String>,
    /// The source's symbols (the columns).
    pub source: Vec<String>,
    /// Attention weights, one row per target symbol.
    pub weights: Vec<Vec<f32>>,
}

/// Every line's result, in order; a line without one is an invariant broken (`missing` names it,
/// with `{i}` for its index).
/// The lines of `order` whose size fits `max`, in order; each one that does not gets its
/// `TooLong` result.
pub(super) fn within_max(order: Vec<usize>, sizes: &[usize], max: usize, results: &mut [Option<Translation>]) -> Vec<usize> {
    order
        .into_iter()
        .filter(|&i| {
            let ok = sizes[i] <= max;
            if !ok {
                results[i] = Some(Translation::TooLong { len: sizes[i], max });
            }
            ok
        })
        .collect()
}

pub(super) fn all_done(results: Vec<Option<Translation>>, missing: &str) -> Result<Vec<Translation>, GenerateError> {
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.ok_or_else(|| GenerateError::Invariant(missing.replace("{i}", &i.to_string()))))
        .collect()
}

/// How text reaches the dictionaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextMode {
    /// Raw text through the model's tokenizer and BPE.
    Raw,
    /// Text already tokenized and split into subwords: split on spaces only.
    Tokenized,
}

/// A loaded model ready to translate and to score (CTranslate2's `Translator`).
///
/// ```rust
/// use tchseq::hub::{Batching, LoadOptions, ModelBundle, ModelSpec, TextMode, TranslateOptions, Translation, Translator};
///
/// let model = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/../weights/multi30k.en-de");
/// let spec = ModelSpec { model: Some(model.into()), ..Default::default() };
/// let bundle = ModelBundle::load(&spec, &LoadOptions::fp32(tch::Device::Cpu))?;
/// let translator = Translator::new(bundle, tch::Device::Cpu, TextMode::Raw)?;
/// // beam 5, as fairseq-interactive
/// let (generator, batching) = translator.search(&TranslateOptions::default(), Batching::default())?;
/// let results = translator.translate(&generator, &["A dog runs."], &batching, false)?;
/// let Translation::Done { hypos, .. } = &results[0] else { panic!("not translated") };
/// assert_eq!(translator.hypothesis_text(&hypos[0])?.text, "Ein Hund rennt.");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Translator {
    /// Tokenizes in the source language, detokenizes in the target language.
    pub pipeline: TextPipeline,
    /// Tokenizes reference targets (scoring) in the target language.
    pub target_pipeline: TextPipeline,
    /// The source dictionary, language tokens appended.
    pub src_dict: Dictionary,
    /// The target dictionary, language tokens appended.
    pub tgt_dict: Dictionary,
    /// The ensemble, run as fairseq's `EnsembleModel`.
    pub models: Vec<TransformerModel>,
    /// Where the models' weights are.
    pub device: Device,
    /// Longer sources are not translated ([`ModelBundle::max_source_positions`]).
    pub max_source_positions: usize,
    /// What loading found and did.
    pub report: LoadReport,
    /// The arithmetic of the linear layers: the bundle's, or [`Translator::set_compute_type`]'s.
    pub compute_type: ComputeType,
    /// The languages of a multilingual model, and the tokens of the loaded pair.
    pub languages: Languages,
    /// The language tokens around the loaded pair's sentences.
    pub language_tokens: LanguageTokens,
    pub(super) scoring: PairScoring,
}

impl Translator {
    /// Takes a bundle loaded with weights on `device`, in its compute type, and builds its
    /// translation pipeline. What the models still read from the checkpoint files moves into
    /// memory of their own (`checkpoint/file_storage.rs`).
    pub fn new(mut bundle: ModelBundle, device: Device, text: TextMode) -> Result<Self, HubError> {
        // the state dicts go first, so that the tensors the models hold are the storages' last users
        let file_storages: Vec<FileStorages> = bundle.checkpoints.drain(..).map(|c| c.file_storages).collect();
        let translator = Self::build(bundle, device, text);
        drop(file_storages);
        translator
    }

    fn build(mut bundle: ModelBundle, device: Device, text: TextMode) -> Result<Self, HubError> {
        let (pipeline, target_pipeline) = match text {
            TextMode::Raw => {
                let target_lang = bundle.pipeline_options.target_lang.clone();
                (bundle.pipeline()?, bundle.side_pipeline(&target_lang)?)
            }
            TextMode::Tokenized => {
                let none = PipelineOptions::default();
                (TextPipeline::new(&none)?, TextPipeline::new(&none)?)
            }
        };
        let max_source_positions = bundle.max_source_positions();
        let (src, tgt) = (&bundle.files.source_lang, &bundle.files.target_lang);
        let language_tokens = bundle.languages.tokens(src, tgt, &bundle.src_dict, &bundle.tgt_dict)?;
        let scoring = PairScoring::new(&bundle, &language_tokens);
        let ModelBundle { models, src_dict, tgt_dict, report, languages, compute_type, .. } = bundle;
        Ok(Translator {
            pipeline,
            target_pipeline,
            src_dict,
            tgt_dict,
            models,
            device,
            max_source_positions,
            report,
            compute_type,
            languages,
            language_tokens,
            scoring,
        })
    }

    /// Switches every model to `compute_type`, as if it had been loaded in it; once `exact` is
    /// left, the weights are fused or quantized and there is no way back.
    pub fn set_compute_type(&mut self, compute_type: ComputeType) -> Result<(), HubError> {
        if compute_type == self.compute_type {
            return Ok(());
        }
        if self.compute_type != ComputeType::Exact {
            return Err(ComputeTypeError::AlreadyRuns(self.compute_type).into());
        }
        // a switch converts the loaded weights itself: no dtype is asked for here
        let wanted = resolve_compute_type(compute_type, tch::Kind::Float, self.device)?;
        let warnings = apply_compute_type(&mut self.models, wanted, self.device)?;
        self.report.warnings.extend(warnings);
        self.compute_type = wanted;
        Ok(())
    }

    /// A generator for this model's target dictionary (and its task's EOS).
    pub fn generator(&self, cfg: GeneratorConfig) -> Result<SequenceGenerator, GenerateError> {
        let d = &self.tgt_dict;
        SequenceGenerator::new(cfg, d.len(), Specials { pad: d.pad(), eos: self.generator_eos(), unk: d.unk() })
    }

    /// The EOS generation ends with: the dictionary's, or the task's (`[tgt]` of mBART fine-tuning).
    pub fn generator_eos(&self) -> i64 {
        self.language_tokens.generator_eos(self.tgt_dict.eos())
    }

    /// The generator for `options`, and the batching it runs with. A sampling search seeds
    /// libtorch's generator with `options.seed` here (fairseq's `set_torch_seed`) and runs on one
    /// worker, so that its draws come in batch order.
    pub fn search(
        &self,
        options: &TranslateOptions,
        batching: Batching,
    ) -> Result<(SequenceGenerator, Batching), GenerateError> {
        match options.check_compute_type(self.compute_type) {
            Ok(()) => {}
            Err(OptionError::ComputeTypeNotLoaded { asked, runs }) => return Err(InvalidOption::ComputeType { asked, runs }.into()),
            // the check gives no other refusal; one it gained would not pass unseen
            Err(other) => return Err(GenerateError::Invariant(other.to_string())),
        }
        let generator = self.generator(options.generator_config())?;
        if !options.sampling {
            return Ok((generator, batching));
        }
        let seed = i64::try_from(options.seed)
            .map_err(|_| InvalidOption::Seed(options.seed))?;
        tch::manual_seed(seed);
        Ok((generator, Batching { inter_threads: 1, ..batching }))
    }

    /// Source text → token ids (tokenizer, BPE, dictionary, EOS, and the task's language tokens).
    pub fn encode(&self, line: &str) -> Vec<i64> {
        self.encode_in(line, &self.language_tokens)
    }

    /// Translates one buffer as fairseq-interactive does: the whole buffer is ordered by length,
    /// too long sentences are set aside, the rest batched. Results come in input order. With
    /// `alignment`, the generator must have been made with `need_attn`.
    pub fn translate(
        &self,
        generator: &SequenceGenerator,
        lines: &[&str],
        batching: &Batching,
        alignment: bool,
    ) -> Result<Vec<Translation>, GenerateError> {
        let tokens: Vec<Vec<i64>> = lines.iter().map(|l| self.encode(l)).collect();
        self.translate_tokens(generator, tokens, batching, &TranslateRequest { alignment, ..Default::default() })
    }

    /// Target text → token ids as a reference target (tokenizer, BPE, dictionary, EOS, and the
    /// task's language tokens).
    pub fn encode_target(&self, text: &str) -> Vec<i64> {
        self.language_tokens.target(self.tgt_dict.encode_line(&self.target_pipeline.encode(text), true))
    }

    /// Target text → the token ids of a forced prefix (tokenizer, BPE, dictionary; no EOS).
    pub fn encode_target_prefix(&self, text: &str) -> Vec<i64> {
        self.tgt_dict.encode_line(&self.target_pipeline.encode(text), false)
    }

    /// A constraint's text → its target token ids, as fairseq-interactive encodes the text after
    /// a tab: the source side's tokenizer and BPE (`encode_fn`), the target dictionary, no EOS.
    pub fn encode_constraint(&self, text: &str) -> Vec<i64> {
        self.tgt_dict.encode_line(&self.pipeline.encode(text), false)
    }

    /// Target token ids as fairseq prints them (`tgt_dict.string`): a constraint's `C-` line.
    pub fn target_string(&self, tokens: &[i64]) -> String {
        self.tgt_dict.string(tokens, None, false, &[])
    }

    /// [`Translator::translate`] for sentences already encoded, with what the call asks besides
    /// them ([`TranslateRequest`]).
    pub fn translate_tokens(
        &self,
        generator: &SequenceGenerator,
        tokens: Vec<Vec<i64>>,
        batching: &Batching,
        request: &TranslateRequest<'_>,
    ) -> Result<Vec<Translation>, GenerateError> {
        let TranslateRequest { guides, on_batch, .. } = *request;
        if !guides.is_empty() && guides.len() != tokens.len() {
            return Err(InvalidOption::GuideCount { guides: guides.len(), sentences: tokens.len() }.into());
        }
        if tokens.is_empty() {
            // an empty buffer must not draw from the generator
            return Ok(Vec::new());
        }
        // build_dataset_for_inference keeps the lengths from before the language tokens
        let added = self.language_tokens.source_added();
        let sizes: Vec<usize> = tokens.iter().map(|t| t.len().saturating_sub(added)).collect();
        let mut results: Vec<Option<Translation>> = vec![None; tokens.len()];
        let max = self.max_source_positions;
        // fairseq orders the whole buffer first and filters afterwards
        let order = within_max(ordered_indices(&sizes), &sizes, max, &mut results);
        if let Some(tell) = on_batch {
            let too_long: Vec<(usize, Translation)> =
                results.iter().enumerate().filter_map(|(i, r)| Some((i, r.clone()?))).collect();
            if !too_long.is_empty() {
                tell(&too_long);
            }
        }
        // fairseq-interactive's get_batch_iterator keeps required_batch_size_multiple = 1
        let order_sizes: Vec<usize> = order.iter().map(|&i| sizes[i]).collect();
        let mut batches = batch_by_size(&order, &order_sizes, batching.max_tokens, batching.batch_size, 1);
        if on_batch.is_some() && !generator.draws_at_random() {
            // a caller that writes in input order writes a batch once every sentence before it
            // is done: the batch of the first sentence goes first. Each batch is computed alone,
            // so the order changes no result (as --inter-threads shows).
            batches.sort_by_key(|b| b.iter().min().copied());
        }
        let done = self.translate_batches(generator, tokens, batches, batching.inter_threads, request)?;
        for (slot, r) in results.iter_mut().zip(done) {
            if r.is_some() {
                *slot = r;
            }
        }
        all_done(results, "sentence {i} was neither translated nor rejected")
    }

    /// The symbols left out of hypothesis and reference text (`get_symbols_to_strip_from_output`):
    /// the EOS of the dictionary and of the generator, and the decoder language token.
    pub fn output_strip(&self) -> Vec<i64> {
        self.language_tokens.output_strip(self.tgt_dict.eos())
    }

    /// A binarized sample of the loaded pair as the model's task reads it from a data-bin: its
    /// language tokens (and `--prepend-bos`) added to both sides.
    pub fn task_sample(&self, source: Vec<i64>, target: Option<Vec<i64>>) -> (Vec<i64>, Option<Vec<i64>>) {
        self.language_tokens.sample(source, target, self.src_dict.bos())
    }

    /// The source as fairseq prints it on `S-` lines.
    pub fn source_string(&self, src_tokens: &[i64]) -> String {
        self.src_dict.string(src_tokens, None, false, &[])
    }

    /// The subword tokens (`H-`) and detokenized text (`D-`) of a hypothesis.
    pub fn hypothesis_text(&self, h: &Hypothesis) -> Result<HypothesisText, PipelineError> {
        self.hypothesis_text_in(h, &self.language_tokens)
    }

    /// The hypothesis' attention with the symbols of both sides, or `None` when the generator
    /// kept no attention.
    pub fn attention_matrix(&self, h: &Hypothesis, src_tokens: &[i64]) -> Option<AttentionMatrix> {
        let attn = h.attention.as_ref()?;
        let pad = attn.first().map_or(0, |r| r.len().saturating_sub(src_tokens.len()));
        let weights = attn.iter().map(|r| r.get(pad..).unwrap_or(&[]).to_vec()).collect();
        let symbols = |d: &Dictionary, ids: &[i64]| -> Vec<String> { ids.iter().map(|&i| d.symbol(i).to_string()).collect() };
        Some(AttentionMatrix { target: symbols(&self.tgt_dict, &h.tokens), source: symbols(&self.src_dict, src_tokens), weights })
    }
}

impl Translator {
    /// A sentence's guide: `prefix` as target ids, and its constraints' texts encoded as
    /// [`Translator::encode_constraint`] encodes them.
    pub fn guide(&self, prefix: Vec<i64>, constraints: &[String]) -> Result<TargetGuide, GuideError> {
        let d = &self.tgt_dict;
        if prefix.contains(&d.eos()) {
            return Err(GuideError::PrefixWithEos);
        }
        let mut ids = Vec::with_capacity(constraints.len());
        for (i, text) in constraints.iter().enumerate() {
            let c = self.encode_constraint(text);
            if c.is_empty() {
                return Err(GuideError::EmptyConstraint(i + 1));
            }
            if c.iter().any(|&id| id == d.bos() || id == d.eos() || id == d.pad()) {
                return Err(GuideError::SpecialSymbol(i + 1));
            }
            ids.push(c);
        }
        Ok(TargetGuide { prefix, constraints: ids, language: None })
    }
}
