//! `tchseq generate`: fairseq-generate on a binarized data-bin split, without Python.
//!
//! The split is read as the translation task reads it (`data/`), batched as fairseq's iterator
//! batches it (`generate::epoch`), translated batch by batch, and printed in that order with the
//! scorer's line last (`output.rs`).

mod output;
mod reference;

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tchseq::data::{infer_language_pair, DataBin, DatasetImpl, LoadOptions, PairDataset};
use tchseq::generate::epoch::{epoch_batches, EpochOptions};
use tchseq::hub::{TargetGuide, TextMode, TranslateOptions, TranslateRequest, Translation, Translator, Weights};
use tchseq::config::{ComputeType, LanguageTask};
use tchseq::metrics::fairseq_scorers::{EvaluationTokenizer, GenerateScorer, TokenBleu};
use tchseq::metrics::TokenizerKind;
use tchseq::text::pipeline::{PipelineOptions, TextPipeline};
use tchseq::text::replace_unk::load_align_dict;

use super::args::generate::{EvalTokenizerArg, GenerateArgs, ScoringArg};
use super::args::GlobalArgs;
use super::common;
use super::interrupt::Piece;
use super::lines::Failures;
use super::partial::OutputSink;
use super::Outcome;
use output::{AlignmentLines, Lines, Original, Scoring};

pub fn run(global: &GlobalArgs, a: &GenerateArgs) -> Result<Outcome> {
    validate(a)?;
    let device = common::resolve_device(global.device)?;
    let kind = common::dtype_kind(a.dtype);
    // fairseq-generate: utils.set_torch_seed(cfg.common.seed) before the models are built
    common::seed_torch(a.seed, device)?;
    let (src, tgt) = match (&a.model.source_lang, &a.model.target_lang) {
        (Some(s), Some(t)) => (s.clone(), t.clone()),
        _ => infer_language_pair(&a.data_dir).map_err(|e| anyhow::anyhow!("{e} (pass -s SRC -t TGT)"))?,
    };
    let mut model = a.model.clone();
    model.data = Some(a.data_dir.clone());
    (model.source_lang, model.target_lang) = (Some(src.clone()), Some(tgt.clone()));
    let weights = Weights::Load { device, kind, replay_init: a.sampling };
    let bundle = common::load_bundle(&model, None, weights, a.compute_type)?;
    let translator = Translator::new(bundle, device, TextMode::Tokenized).map_err(common::hub_error)?;
    common::print_warnings(&translator.report);
    let data = open_split(a, &translator, &src, &tgt)?;
    let mut samples = Samples::new(&translator, &data);
    let decode = TextPipeline::new(&pipeline_options(a, &src, &tgt)).map_err(common::pipeline_error)?;
    let generator = translator.generator(common::generator_config(&search_options(a))?)?;

    let max_positions = (
        translator.models.iter().map(|m| m.max_source_positions()).chain([a.max_source_positions]).min().unwrap_or(0),
        translator.models.iter().map(|m| m.max_target_positions()).chain([a.max_target_positions]).min().unwrap_or(0),
    );
    let src_sizes: Vec<usize> = samples.sources.iter().map(Vec::len).collect();
    let tgt_sizes: Option<Vec<usize>> = samples.targets.as_ref().map(|t| t.iter().map(Vec::len).collect());
    let (max_tokens, batch_size) = match (a.batching.max_tokens, a.batching.batch_size) {
        (None, None) => (Some(12000), None),
        limits => limits,
    };
    let epoch = EpochOptions {
        max_tokens,
        max_sentences: batch_size,
        required_batch_size_multiple: a.required_batch_size_multiple,
        max_positions,
        ignore_invalid_inputs: a.skip_invalid_size_inputs_valid_test,
        shuffle: shuffled(&translator.languages.task, &a.gen_subset),
        seed: u32::try_from(a.seed).context("--seed must fit numpy's seed (below 2^32)")?,
        num_shards: a.num_shards,
        shard_id: a.shard_id,
    };
    let epoch = epoch_batches(&src_sizes, tgt_sizes.as_deref(), &epoch)
        .map_err(|e| anyhow::anyhow!("{e}: leave such pairs out with --skip-invalid-size-inputs-valid-test"))?;
    if !epoch.skipped.is_empty() {
        let first: Vec<String> = epoch.skipped.iter().take(10).map(usize::to_string).collect();
        eprintln!(
            "warning: {} samples have invalid sizes and will be skipped, max_positions=({}, {}), first few sample ids=[{}]",
            epoch.skipped.len(),
            max_positions.0,
            max_positions.1,
            first.join(", ")
        );
    }
    // the search owns the sources from here (scoring the references reads them from `samples`)
    let tokens = if a.score_reference { Vec::new() } else { std::mem::take(&mut samples.sources) };
    let opens_with_language = translator.language_tokens.target_prefix.is_some();
    let guides = prefixes(&samples, a.search.prefix_size, opens_with_language, &epoch.batches)?;
    let sentences: usize = epoch.batches.iter().map(Vec::len).sum();
    let mut batch_of = vec![usize::MAX; data.len()];
    for (k, batch) in epoch.batches.iter().enumerate() {
        for &i in batch {
            batch_of[i] = k;
        }
    }

    let output_path = a.results_path.as_ref().map(|dir| -> Result<_> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create --results-path {}", dir.display()))?;
        Ok(dir.join(format!("generate-{}.txt", a.gen_subset)))
    });
    let output_path = output_path.transpose()?;
    let out = OutputSink::open(output_path.as_deref())?;
    if let OutputSink::File(f) = &out {
        if let Some((partial, fd)) = f.partial() {
            let note = vec![
                Piece::Text(format!("interrupted: {} holds the output of the first ", partial.display())),
                Piece::Done,
                Piece::Text(" sentences in batch order; run the command again for the whole split".to_string()),
            ];
            super::interrupt::arm(note, fd, None);
        }
    }
    let scorer = scorer(a, &translator)?;
    let align_dict = replace_unk_dictionary(a, &data)?;
    let lines = Lines {
        src_dict: &translator.src_dict,
        tgt_dict: &translator.tgt_dict,
        decode: &decode,
        post_process: a.post_process.as_deref(),
        // fairseq's SequenceScorer strips only its EOS, not the decoder language token
        strip: if a.score_reference { vec![translator.tgt_dict.eos(), translator.generator_eos()] } else { translator.output_strip() },
        nbest: a.nbest,
        quiet: a.quiet,
        print_alignment: match a.print_alignment.as_deref() {
            None => None,
            Some("soft") => Some(AlignmentLines::Soft),
            Some(_) => Some(AlignmentLines::Hard),
        },
        // translation_from_pretrained_bart's generator computes no alignment: its A- lines are empty
        aligned_task: !matches!(translator.languages.task, LanguageTask::FromPretrainedBart { .. }),
        replace_unk: align_dict,
        source_offset: usize::from(translator.language_tokens.source_prefix.is_some()) + usize::from(translator.language_tokens.prepend_bos),
        device,
    };
    let shown = !a.quiet && std::io::stderr().is_terminal();
    let bar = super::progress::bar(shown, Some(sentences as u64), "sentences");
    let writer = Mutex::new(Writer {
        next: 0,
        pending: BTreeMap::new(),
        out,
        scoring: Scoring { scorer, dict: translator.tgt_dict.clone() },
        failures: Failures::default(),
        error: None,
        written: 0,
        generated_tokens: 0,
        seconds: 0.0,
    });
    let on_batch = |done: &[(usize, Translation)]| {
        let mut w = writer.lock().unwrap_or_else(|e| e.into_inner());
        if w.error.is_some() {
            return;
        }
        let Some(&k) = done.first().map(|(i, _)| &batch_of[*i]) else { return };
        w.pending.insert(k, done.to_vec());
        if let Err(e) = w.flush(&lines, &samples, &data) {
            w.error = Some(e);
        }
        bar.set_position(w.written as u64);
    };
    let request = TranslateRequest { guides: &guides, alignment: aligned(a), on_token: None, on_batch: Some(&on_batch) };
    // fairseq's random draws (sampling) happen in batch order
    let inter_threads = if a.sampling { 1 } else { global.inter_threads };
    let started = Instant::now();
    let translated = if a.score_reference {
        reference::score(&translator, &samples, &epoch.batches, inter_threads, &on_batch)
    } else if epoch.batches.is_empty() {
        Ok(())
    } else {
        translator.translate_batches(&generator, tokens, epoch.batches, inter_threads, &request).map(drop).map_err(Into::into)
    };
    let w = writer.into_inner().unwrap_or_else(|e| e.into_inner());
    translated?;
    if let Some(e) = w.error {
        return Err(e);
    }
    bar.finish_and_clear();
    let Writer { mut out, scoring, failures, written, generated_tokens, seconds, .. } = w;
    let wall = started.elapsed().as_secs_f64();
    if samples.targets.is_some() {
        let ran = match translator.compute_type {
            ComputeType::Exact => String::new(),
            other => format!(" (compute type {other})"),
        };
        let result = scoring.scorer.result_string()?;
        writeln!(out, "Generate {} with beam={}{ran}: {result}", a.gen_subset, a.search.beam)?;
    }
    out.commit()?;
    let per = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
    eprintln!(
        "Translated {written} sentences ({generated_tokens} tokens) in {seconds:.1}s ({:.2} sentences/s, {:.2} tokens/s); {wall:.1}s in all",
        per(written as f64),
        per(generated_tokens as f64)
    );
    failures.finish("generated")?;
    Ok(Outcome::Ok)
}

/// Finished batches, written in fairseq's batch order as soon as every batch before is.
struct Writer {
    next: usize,
    pending: BTreeMap<usize, Vec<(usize, Translation)>>,
    out: OutputSink,
    scoring: Scoring,
    failures: Failures,
    error: Option<anyhow::Error>,
    written: usize,
    generated_tokens: usize,
    seconds: f64,
}

impl Writer {
    fn flush(&mut self, lines: &Lines, samples: &Samples, data: &PairDataset) -> Result<()> {
        while let Some(batch) = self.pending.remove(&self.next) {
            for (id, t) in &batch {
                match t {
                    Translation::Done { src_tokens, hypos, seconds } => {
                        let target = samples.target(*id);
                        let original = lines.replace_unk.as_ref().map(|_| Original {
                            source: data.src_text(*id).unwrap_or_default(),
                            target: data.tgt_text(*id),
                        });
                        lines.sentence(&mut self.out, &mut self.scoring, *id, src_tokens, target, original.as_ref(), hypos)?;
                        self.generated_tokens += hypos.first().map_or(0, |h| h.tokens.len());
                        self.seconds += seconds;
                    }
                    other => {
                        eprintln!("error: sentence {id}: {}", other.error().unwrap_or_default());
                        self.failures.add("their batch failed");
                    }
                }
                self.written += 1;
            }
            self.out.flush()?;
            if let OutputSink::File(f) = &self.out {
                super::interrupt::progress(self.written as u64, f.written());
            }
            self.next += 1;
        }
        Ok(())
    }
}

fn validate(a: &GenerateArgs) -> Result<()> {
    common::refuse_unsupported(&a.search)?;
    common::generator_config(&search_options(a))?;
    common::batching(a.batching.max_tokens, a.batching.batch_size, 1)?;
    if a.model.data.is_some() {
        bail!("--data is not taken here: the data-bin DATA holds the dictionaries");
    }
    if a.model.model.is_none() && a.model.path.is_none() {
        bail!("--path required for generation (a checkpoint, or several joined by ':')");
    }
    if a.num_shards == 0 || a.shard_id >= a.num_shards {
        bail!("--shard-id {} is not one of --num-shards {}'s shards (0 to N-1)", a.shard_id, a.num_shards);
    }
    if a.required_batch_size_multiple == 0 {
        bail!("--required-batch-size-multiple must be at least 1");
    }
    if a.score_reference && a.print_alignment.is_some() {
        bail!("--print-alignment is not supported with --score-reference");
    }
    Ok(())
}

fn search_options(a: &GenerateArgs) -> TranslateOptions {
    TranslateOptions {
        nbest: a.nbest,
        sampling: a.sampling,
        sampling_topk: a.sampling_topk,
        sampling_topp: a.sampling_topp,
        temperature: a.temperature,
        seed: a.seed,
        alignment: aligned(a),
        compute_type: Some(a.compute_type),
        ..common::translate_options(&a.search)
    }
}

/// `decode_fn`'s pipeline: fairseq-generate builds it from the command line alone.
fn pipeline_options(a: &GenerateArgs, src: &str, tgt: &str) -> PipelineOptions {
    let o = common::pipeline_overrides(&a.pipeline);
    PipelineOptions {
        tokenizer: o.tokenizer,
        bpe: o.bpe,
        bpe_codes: o.bpe_codes,
        sentencepiece_model: o.sentencepiece_model,
        source_lang: src.to_string(),
        target_lang: tgt.to_string(),
        moses_no_dash_splits: o.moses_no_dash_splits,
        moses_no_escape: o.moses_no_escape,
    }
}

/// `--prefix-size N`: each sentence's hypotheses start with its reference's first N tokens
/// (`sample["target"][:, :N]`). A multilingual target opens with the decoder language token,
/// which the translator forces itself: the guide holds the tokens after it.
fn prefixes(samples: &Samples, prefix_size: usize, opens_with_language: bool, batches: &[Vec<usize>]) -> Result<Vec<TargetGuide>> {
    if prefix_size == 0 {
        return Ok(Vec::new());
    }
    let Some(targets) = &samples.targets else {
        bail!("--prefix-size takes the prefix from the reference targets, and this split has none");
    };
    let mut guides = vec![TargetGuide::default(); targets.len()];
    for &i in batches.iter().flatten() {
        let target = &targets[i];
        if target.len() < prefix_size {
            bail!("sentence {i}'s reference has {} tokens, fewer than --prefix-size {prefix_size}", target.len());
        }
        guides[i].prefix = target[usize::from(opens_with_language)..prefix_size].to_vec();
    }
    Ok(guides)
}

/// Whether hypotheses need their hard alignments: for A- lines, or to replace unknown words.
fn aligned(a: &GenerateArgs) -> bool {
    a.print_alignment.is_some() || a.replace_unk.is_some()
}

/// `--replace-unk [FILE]`: the alignment dictionary, read from FILE or empty. The source words
/// come from the raw text, as fairseq-generate takes them (`get_original_text`).
fn replace_unk_dictionary(a: &GenerateArgs, data: &PairDataset) -> Result<Option<HashMap<String, String>>> {
    let Some(file) = &a.replace_unk else { return Ok(None) };
    if !data.is_empty() && data.src_text(0).is_none() {
        bail!("--replace-unk takes the source words from the split's raw text: binarize it with --dataset-impl raw");
    }
    match file {
        Some(file) => Ok(Some(load_align_dict(file)?)),
        None => Ok(Some(HashMap::new())),
    }
}

/// The split's samples as the model's task holds them: the language tokens of a multilingual or
/// mBART task around both sides.
pub struct Samples {
    pub sources: Vec<Vec<i64>>,
    /// `None` for a split without targets.
    pub targets: Option<Vec<Vec<i64>>>,
}

impl Samples {
    fn new(translator: &Translator, data: &PairDataset) -> Self {
        let has_targets = data.tgt_sizes().is_some();
        let (sources, targets): (Vec<_>, Vec<_>) = (0..data.len()).map(|i| translator.task_sample(data.src(i), data.tgt(i))).unzip();
        let targets = has_targets.then(|| targets.into_iter().map(Option::unwrap_or_default).collect());
        Samples { sources, targets }
    }

    pub fn target(&self, i: usize) -> Option<&[i64]> {
        self.targets.as_ref().and_then(|t| t.get(i)).map(Vec::as_slice)
    }
}

/// `--gen-subset` of DATA as the model's task loads it: `translation_multi_simple_epoch` with the
/// task's own dictionaries (`--fixed-dictionary` or `dict.{lang}.txt`, language tokens added);
/// the translation tasks with DATA's `dict.{lang}.txt`, which must be the model's (language
/// tokens and `<mask>` aside).
fn open_split(a: &GenerateArgs, translator: &Translator, src: &str, tgt: &str) -> Result<PairDataset> {
    let dataset_impl = a.dataset_impl.as_deref().and_then(DatasetImpl::from_name);
    // fairseq-generate loads --gen-subset alone (combine=False)
    let options = LoadOptions { dataset_impl, combine: false };
    let report = &translator.report;
    if let LanguageTask::Multilingual(_) = translator.languages.task {
        let src_dict = (translator.src_dict.clone(), report.source_dictionary.path.clone());
        let tgt_dict = (translator.tgt_dict.clone(), report.target_dictionary.path.clone());
        return Ok(DataBin::open_with_dictionaries(&a.data_dir, &a.gen_subset, (src, src_dict), (tgt, tgt_dict), options)?);
    }
    let data = DataBin::open_with(&a.data_dir, &a.gen_subset, Some(src), Some(tgt), options)?;
    let added = report.languages.as_ref().map_or(0, |l| l.tokens.len());
    if translator.src_dict.len() != data.src_dict.len() + added || translator.tgt_dict.len() != data.tgt_dict.len() + added {
        bail!("the model's dictionaries differ from {}'s", a.data_dir.display());
    }
    Ok(data)
}

/// Whether the task's batch order starts from a shuffle: `translation` shuffles every split but
/// `test`, `translation_from_pretrained_bart` every split (its `load_langpair_dataset` keeps
/// the default), and `translation_multi_simple_epoch` none (its `ConcatDataset` only sorts).
fn shuffled(task: &LanguageTask, split: &str) -> bool {
    match task {
        LanguageTask::Bilingual => split != "test",
        LanguageTask::FromPretrainedBart { .. } => true,
        LanguageTask::Multilingual(_) => false,
    }
}

fn scorer(a: &GenerateArgs, t: &Translator) -> Result<GenerateScorer> {
    let tokenizer = |arg: EvalTokenizerArg, lowercase: bool, punctuation_removal: bool, character_tokenization: bool| {
        let name = match arg {
            EvalTokenizerArg::None => "none",
            EvalTokenizerArg::T13a => "13a",
            EvalTokenizerArg::Intl => "intl",
            EvalTokenizerArg::Char => "char",
            EvalTokenizerArg::Zh => "zh",
        };
        TokenizerKind::parse(name).map(|tokenizer| EvaluationTokenizer { tokenizer, lowercase, punctuation_removal, character_tokenization })
    };
    let d = &t.tgt_dict;
    Ok(match a.scoring {
        ScoringArg::Bleu => GenerateScorer::Bleu(TokenBleu::new(d.pad(), d.eos(), d.unk())),
        ScoringArg::Sacrebleu => GenerateScorer::Sacrebleu {
            tokenizer: tokenizer(a.sacrebleu_tokenizer, a.sacrebleu_lowercase, false, a.sacrebleu_char_level)?,
            refs: Vec::new(),
            preds: Vec::new(),
        },
        ScoringArg::Chrf => GenerateScorer::Chrf { refs: Vec::new(), preds: Vec::new() },
        ScoringArg::Wer => GenerateScorer::Wer {
            tokenizer: tokenizer(a.wer_tokenizer, a.wer_lowercase, a.wer_remove_punct, a.wer_char_level)?,
            distance: 0,
            ref_length: 0,
        },
    })
}
