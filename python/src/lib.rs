//! `tchseq._native`: the Python door. Models load through `tchseq::hub` and translate through
//! `hub::Translator`, as the CLI and the server do; options are `hub::TranslateOptions` (the
//! server's JSON names), checked by the library.

use std::sync::Mutex;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use tchseq::generate::Hypothesis;
use tchseq::config::ComputeType;
use tchseq::hub::{
    Batching, HypothesisText, LanguageTokens, LoadOptions, ModelBundle, ModelSpec, TargetGuide, TextMode, TranslateOptions, TranslateRequest, Translation, Translator as HubTranslator,
};
use tchseq::text::pipeline::PipelineError;

mod language_model;

/// CTranslate2's keyword names, mapped to ours.
const ALIASES: [(&str, &str); 8] = [
    ("beam_size", "beam"),
    ("num_hypotheses", "nbest"),
    ("length_penalty", "lenpen"),
    ("unk_penalty", "unkpen"),
    ("sampling_temperature", "temperature"),
    ("return_alignment", "alignment"),
    ("return_attention", "attention"),
    ("constraint_order", "constraints"),
];

fn parse_device(device: &str) -> PyResult<tch::Device> {
    match device {
        "cpu" => Ok(tch::Device::Cpu),
        "cuda" if tch::Cuda::is_available() => Ok(tch::Device::Cuda(0)),
        "cuda" => Err(value_error("device \"cuda\": libtorch sees no GPU")),
        other => Err(value_error(format!("device {other:?}: use \"cpu\" or \"cuda\""))),
    }
}

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A list of str argument (`name`), refused in Python's terms: a lone str is not a list of one.
fn texts(v: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<String>> {
    if v.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!("{name} must be a list of str, not a str: put one sentence in a list, e.g. [\"A dog runs.\"]")));
    }
    v.extract().map_err(|_| {
        let got = v.get_type().name().map_or_else(|_| "another type".to_string(), |n| n.to_string());
        PyTypeError::new_err(format!("{name} must be a list of str, not {got}"))
    })
}

fn py_to_json(v: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if v.is_none() {
        return Ok(serde_json::Value::Null);
    }
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.into());
    }
    if let Ok(i) = v.extract::<i64>() {
        return Ok(i.into());
    }
    if let Ok(f) = v.extract::<f64>() {
        return Ok(serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, serde_json::Value::Number));
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(s.into());
    }
    Err(value_error(format!("unsupported option value {v}")))
}

/// Keyword arguments → options, besides the batching keywords, which are returned apart.
fn options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(TranslateOptions, Option<usize>, Option<usize>)> {
    let mut map = serde_json::Map::new();
    let (mut batch_size, mut max_tokens) = (None, None);
    if let Some(kwargs) = kwargs {
        for (k, v) in kwargs.iter() {
            let key: String = k.extract()?;
            match key.as_str() {
                "batch_size" | "max_batch_size" => batch_size = v.extract::<Option<usize>>()?,
                "max_tokens" => max_tokens = v.extract::<Option<usize>>()?,
                "return_scores" => {}
                _ => {
                    let name = ALIASES.iter().find(|(a, _)| *a == key).map_or(key.as_str(), |(_, n)| n);
                    map.insert(name.to_string(), py_to_json(&v)?);
                }
            }
        }
    }
    let options: TranslateOptions = serde_json::from_value(serde_json::Value::Object(map)).map_err(value_error)?;
    options.check().map_err(value_error)?;
    Ok((options, batch_size, max_tokens))
}

/// One sentence's translation: hypotheses best first (CTranslate2's `TranslationResult`).
#[pyclass(module = "tchseq", frozen, get_all)]
pub struct TranslationResult {
    /// Each hypothesis as subword tokens.
    hypotheses: Vec<Vec<String>>,
    /// Each hypothesis detokenized.
    texts: Vec<String>,
    /// Natural-log scores, length-normalized as fairseq does.
    scores: Vec<f32>,
    /// Per-token log-probabilities of each hypothesis, EOS included.
    token_scores: Vec<Vec<f32>>,
    /// `(source word, target word)` pairs per hypothesis, with `return_alignment=True`.
    alignments: Option<Vec<Vec<(i64, i64)>>>,
}

#[pymethods]
impl TranslationResult {
    fn __repr__(&self) -> String {
        format!("TranslationResult(texts={:?}, scores={:?})", self.texts, self.scores)
    }
}

/// One pair's score (CTranslate2's `ScoringResult`).
#[pyclass(module = "tchseq", frozen, get_all)]
pub struct ScoringResult {
    /// Target tokens, EOS included.
    tokens: Vec<String>,
    /// Their log-probabilities.
    log_probs: Vec<f32>,
    /// The sum (fairseq's unnormalized score).
    logprob: f32,
    /// fairseq's `--score-reference` score: `logprob / len(tokens)`.
    avg_logprob: f32,
}

#[pymethods]
impl ScoringResult {
    fn __repr__(&self) -> String {
        format!("ScoringResult(logprob={}, avg_logprob={}, tokens={:?})", self.logprob, self.avg_logprob, self.tokens)
    }
}

/// A fairseq Transformer model, loaded once, ready to translate and score.
#[pyclass(module = "tchseq", frozen)]
pub struct Translator {
    inner: Mutex<HubTranslator>,
    threads: i32,
    inter_threads: usize,
    /// A multilingual model loaded without a pair: each call names its languages.
    open: bool,
}

/// Runs `f` on the model behind `model` without the GIL, one call at a time, on `threads`
/// intra-op threads (0: libtorch's default).
fn run_locked<M: Send, R: Send>(py: Python<'_>, model: &Mutex<M>, threads: i32, f: impl FnOnce(&M) -> Result<R, String> + Send) -> PyResult<R> {
    py.detach(|| {
        let m = model.lock().map_err(|_| "an earlier call panicked inside the model".to_string())?;
        if threads > 0 {
            tch::set_num_threads(threads);
        }
        f(&m)
    })
    .map_err(value_error)
}

impl Translator {
    fn run<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&HubTranslator) -> Result<R, String> + Send) -> PyResult<R> {
        run_locked(py, &self.inner, self.threads, f)
    }

    fn batching(&self, batch_size: Option<usize>, max_tokens: Option<usize>) -> PyResult<Batching> {
        Batching::for_list(max_tokens, batch_size, self.inter_threads).map_err(value_error)
    }
}

enum Input {
    Text(Vec<String>),
    Tokens(Vec<Vec<String>>),
}

/// What a sentence's hypotheses must begin with: target text, subword tokens, or nothing.
enum Prefix {
    None,
    Text(String),
    Tokens(Vec<String>),
}

/// What each sentence's hypotheses must hold, and the language pair of each (all empty, or one
/// per sentence).
#[derive(Default)]
struct Guidance {
    prefixes: Vec<Prefix>,
    constraints: Vec<Vec<String>>,
    pairs: Vec<(String, String)>,
}

fn translate_all(t: &HubTranslator, input: Input, g: &Guidance, options: &TranslateOptions, batching: &Batching) -> Result<Vec<TranslationResult>, String> {
    let languages: Vec<LanguageTokens> = g
        .pairs
        .iter()
        .enumerate()
        .map(|(i, (s, tg))| t.pair_tokens(s, tg).map_err(|e| format!("sentence {i}: {e}")))
        .collect::<Result<_, _>>()?;
    let language = |i: usize| languages.get(i).unwrap_or(&t.language_tokens);
    let tokens: Vec<Vec<i64>> = match &input {
        Input::Text(lines) => lines.iter().enumerate().map(|(i, l)| t.encode_in(l.trim(), language(i))).collect(),
        Input::Tokens(toks) => toks.iter().map(|s| t.src_dict.encode_line(&s.join(" "), true)).collect(),
    };
    let n = g.prefixes.len().max(g.constraints.len()).max(languages.len());
    let guides: Vec<TargetGuide> = (0..n)
        .map(|i| {
            let prefix = match g.prefixes.get(i).unwrap_or(&Prefix::None) {
                Prefix::None => Vec::new(),
                Prefix::Text(text) => t.encode_target_prefix(text.trim()),
                Prefix::Tokens(tokens) => t.tgt_dict.encode_line(&tokens.join(" "), false),
            };
            let mut guide = t.guide(prefix, g.constraints.get(i).map_or(&[][..], Vec::as_slice)).map_err(|e| format!("sentence {i}: {e}"))?;
            guide.language = languages.get(i).and_then(|l| l.target_prefix);
            Ok::<_, String>(guide)
        })
        .collect::<Result<_, _>>()?;
    let (generator, batching) = t.search(options, *batching).map_err(|e| e.to_string())?;
    let translations = t
        .translate_tokens(&generator, tokens, &batching, &TranslateRequest { guides: &guides, alignment: options.alignment, on_token: None, on_batch: None })
        .map_err(|e| e.to_string())?;
    to_results(translations, options, |i, h| t.hypothesis_text_in(h, language(i)))
}

/// `source_lang=` or `target_lang=` of a call: a language for every sentence, or one each.
#[derive(Clone)]
enum LangArg {
    Loaded,
    All(String),
    Each(Vec<String>),
}

impl LangArg {
    fn extract(v: Option<&Bound<'_, PyAny>>, n: usize, what: &str) -> PyResult<Self> {
        match v {
            None => Ok(LangArg::Loaded),
            Some(v) if v.is_none() => Ok(LangArg::Loaded),
            Some(v) if v.is_instance_of::<PyString>() => Ok(LangArg::All(v.extract()?)),
            Some(v) => {
                let list: Vec<String> = v.extract().map_err(|_| value_error(format!("{what} must be a language code or a list of one per sentence")))?;
                if list.len() != n {
                    return Err(value_error(format!("{} {what} values for {n} sentences", list.len())));
                }
                Ok(LangArg::Each(list))
            }
        }
    }

    fn resolve(&self, n: usize, loaded: &str) -> Vec<String> {
        match self {
            LangArg::Loaded => vec![loaded.to_string(); n],
            LangArg::All(l) => vec![l.clone(); n],
            LangArg::Each(list) => list.clone(),
        }
    }
}

/// Per sentence, the pair a call names (empty when it names none). A Translator loaded without
/// a pair (`open`) on a multilingual model needs both languages named.
fn sentence_pairs(t: &HubTranslator, n: usize, source: &LangArg, target: &LangArg, open: bool) -> Result<Vec<(String, String)>, String> {
    let named = |a: &LangArg| !matches!(a, LangArg::Loaded);
    if open && !(named(source) && named(target)) {
        return Err(format!(
            "a multilingual model loaded without a pair: give source_lang and target_lang (any two of its languages: {})",
            t.languages.langs.join(", ")
        ));
    }
    if !named(source) && !named(target) {
        return Ok(Vec::new());
    }
    Ok(source.resolve(n, &t.report.source_lang).into_iter().zip(target.resolve(n, &t.report.target_lang)).collect())
}

/// Each translation's hypotheses, the first `options.nbest`, as `TranslationResult`s; a
/// sentence that was not translated fails the call, naming its index.
fn to_results(
    translations: Vec<Translation>,
    options: &TranslateOptions,
    text_of: impl Fn(usize, &Hypothesis) -> Result<HypothesisText, PipelineError>,
) -> Result<Vec<TranslationResult>, String> {
    translations
        .into_iter()
        .enumerate()
        .map(|(i, tr)| {
            if let Some(e) = tr.error() {
                return Err(format!("sentence {i}: {e}"));
            }
            let Translation::Done { hypos, .. } = tr else { return Err(format!("sentence {i}: not translated")) };
            let top = &hypos[..hypos.len().min(options.nbest)];
            let mut r = TranslationResult {
                hypotheses: Vec::new(),
                texts: Vec::new(),
                scores: Vec::new(),
                token_scores: Vec::new(),
                alignments: options.alignment.then(Vec::new),
            };
            for h in top {
                let text = text_of(i, h).map_err(|e| format!("sentence {i}: {e}"))?;
                r.hypotheses.push(text.tokens.split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect());
                r.texts.push(text.text);
                r.scores.push(h.score);
                r.token_scores.push(h.positional_scores.clone());
                if let Some(a) = r.alignments.as_mut() {
                    a.push(h.alignment.clone().unwrap_or_default());
                }
            }
            Ok(r)
        })
        .collect()
}

#[pymethods]
impl Translator {
    /// Loads a model directory (model.pt, dict.*.txt, bpecodes) or a checkpoint file.
    #[new]
    /// A multilingual model translates `source_lang` into `target_lang`; loaded without them,
    /// each call names its pair (`source_lang=`/`target_lang=`, per call or per sentence).
    #[pyo3(signature = (model_dir, device = "cpu", compute_type = "exact", threads = 0, inter_threads = 1, tokenized = false, source_lang = None, target_lang = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(py: Python<'_>, model_dir: std::path::PathBuf, device: &str, compute_type: &str, threads: i32, inter_threads: usize, tokenized: bool, source_lang: Option<String>, target_lang: Option<String>) -> PyResult<Self> {
        if threads < 0 || inter_threads == 0 {
            return Err(value_error("threads must be at least 0 (0: libtorch's default) and inter_threads at least 1"));
        }
        let device = parse_device(device)?;
        let compute_type: ComputeType = compute_type.parse().map_err(value_error)?;
        tchseq::libtorch::mute_nested_tensor_warning();
        let open = source_lang.is_none() && target_lang.is_none();
        let spec = ModelSpec { model: Some(model_dir), source_lang, target_lang, any_pair: open, ..Default::default() };
        let text = if tokenized { TextMode::Tokenized } else { TextMode::Raw };
        let translator = py
            .detach(|| {
                HubTranslator::new(ModelBundle::load(&spec, &LoadOptions::computing(device, compute_type))?, device, text)
            })
            .map_err(value_error)?;
        let open = open && translator.languages.is_multilingual() && translator.language_pairs().len() > 1;
        Ok(Translator { inner: Mutex::new(translator), threads, inter_threads, open })
    }

    /// Raw sentences in, the best translation of each out (`tchseq translate --format text`).
    #[pyo3(signature = (sentences, source_lang = None, target_lang = None, **options))]
    fn translate(
        &self,
        py: Python<'_>,
        sentences: &Bound<'_, PyAny>,
        source_lang: Option<&Bound<'_, PyAny>>,
        target_lang: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<String>> {
        let sentences = texts(sentences, "sentences")?;
        let (opts, batch_size, max_tokens) = self::options(options)?;
        let batching = self.batching(batch_size, max_tokens)?;
        let n = sentences.len();
        let (source, target) = (LangArg::extract(source_lang, n, "source_lang")?, LangArg::extract(target_lang, n, "target_lang")?);
        let open = self.open;
        let results = self.run(py, move |t| {
            let g = Guidance { pairs: sentence_pairs(t, n, &source, &target, open)?, ..Default::default() };
            translate_all(t, Input::Text(sentences), &g, &opts, &batching)
        })?;
        Ok(results.into_iter().map(|r| r.texts.into_iter().next().unwrap_or_default()).collect())
    }

    /// Raw sentences, or sentences as lists of subword tokens, in; a `TranslationResult` each
    /// out. Keywords: beam_size (5), num_hypotheses (1), length_penalty (1.0), unk_penalty,
    /// max_len_a, max_len_b (200), min_len (1), no_repeat_ngram_size, sampling,
    /// sampling_topk, sampling_topp, sampling_temperature, seed, return_alignment,
    /// batch_size / max_tokens (default: batches of up to 512 tokens, as the CLI batches a file;
    /// batch_size=1 for fairseq-interactive's one sentence at a time).
    /// `target_prefix`: per sentence, target text (or a list of subword tokens, or None) that
    /// its hypotheses must begin with (fairseq's `prefix_tokens`).
    /// `constraints`: per sentence, a list of texts its hypotheses must contain (or None);
    /// `constraint_order="unordered"` lets them come in any order (fairseq's
    /// `--constraints unordered`; `ordered` is the default).
    /// `source_lang`/`target_lang`: the pair of a multilingual model, for every sentence or a
    /// list of one per sentence (sentences of different pairs share batches).
    #[pyo3(signature = (source, target_prefix = None, constraints = None, source_lang = None, target_lang = None, **options))]
    #[allow(clippy::too_many_arguments)]
    fn translate_batch(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyList>,
        target_prefix: Option<&Bound<'_, PyList>>,
        constraints: Option<Vec<Option<Vec<String>>>>,
        source_lang: Option<&Bound<'_, PyAny>>,
        target_lang: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Vec<TranslationResult>> {
        let n = source.len();
        let (source_langs, target_langs) = (LangArg::extract(source_lang, n, "source_lang")?, LangArg::extract(target_lang, n, "target_lang")?);
        let (mut opts, batch_size, max_tokens) = self::options(options)?;
        let constraints: Vec<Vec<String>> = constraints.unwrap_or_default().into_iter().map(Option::unwrap_or_default).collect();
        if !constraints.is_empty() && constraints.len() != source.len() {
            return Err(value_error(format!("{} constraint lists for {} sentences", constraints.len(), source.len())));
        }
        if constraints.iter().any(|c| !c.is_empty()) && opts.constraints.is_none() {
            opts.constraints = Some("ordered".into());
            opts.check().map_err(value_error)?;
        }
        let batching = self.batching(batch_size, max_tokens)?;
        let input = if source.iter().all(|s| s.is_instance_of::<PyString>()) {
            Input::Text(source.extract()?)
        } else {
            Input::Tokens(source.extract().map_err(|_| value_error("source must be a list of strings or a list of token lists"))?)
        };
        let prefixes: Vec<Prefix> = match target_prefix {
            None => Vec::new(),
            Some(list) => {
                if list.len() != source.len() {
                    return Err(value_error(format!("{} target prefixes for {} sentences", list.len(), source.len())));
                }
                list.iter()
                    .map(|p| {
                        if p.is_none() {
                            Ok(Prefix::None)
                        } else if let Ok(text) = p.extract::<String>() {
                            Ok(Prefix::Text(text))
                        } else {
                            let tokens: Vec<String> = p.extract().map_err(|_| {
                                value_error("a target prefix must be a string, a list of subword tokens or None")
                            })?;
                            Ok(Prefix::Tokens(tokens))
                        }
                    })
                    .collect::<PyResult<_>>()?
            }
        };
        let open = self.open;
        self.run(py, move |t| {
            let pairs = sentence_pairs(t, n, &source_langs, &target_langs, open)?;
            translate_all(t, input, &Guidance { prefixes, constraints, pairs }, &opts, &batching)
        })
    }

    /// (source, target) pairs scored as `fairseq-generate --score-reference` does; in
    /// `source_lang`/`target_lang` (per call or per pair) for a multilingual model.
    #[pyo3(signature = (source, target, max_tokens = 4096, source_lang = None, target_lang = None))]
    fn score_batch(
        &self,
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
        max_tokens: usize,
        source_lang: Option<&Bound<'_, PyAny>>,
        target_lang: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<ScoringResult>> {
        let (source, target) = (texts(source, "source")?, texts(target, "target")?);
        if source.len() != target.len() {
            return Err(value_error(format!("{} sources but {} targets", source.len(), target.len())));
        }
        let n = source.len();
        let (source_langs, target_langs) = (LangArg::extract(source_lang, n, "source_lang")?, LangArg::extract(target_lang, n, "target_lang")?);
        let (inter_threads, open) = (self.inter_threads, self.open);
        self.run(py, move |t| {
            let pairs = sentence_pairs(t, n, &source_langs, &target_langs, open)?;
            let encoded = source
                .iter()
                .zip(&target)
                .enumerate()
                .map(|(i, (s, g))| match pairs.get(i) {
                    Some((sl, tl)) if (sl, tl) != (&t.report.source_lang, &t.report.target_lang) => t.encode_pair_in(s.trim(), g.trim(), sl, tl),
                    _ => t.encode_pair(s.trim(), g.trim()),
                }
                .map_err(|e| format!("pair {i}: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let scored = t.score_pairs(&encoded, max_tokens, inter_threads);
            encoded
                .iter()
                .zip(scored)
                .enumerate()
                .map(|(i, (e, s))| {
                    let s = s.map_err(|err| format!("pair {i}: {err}"))?;
                    let tokens = e.target.iter().map(|&id| t.tgt_dict.symbol(id).to_string()).collect();
                    Ok(ScoringResult { tokens, log_probs: s.positional_scores, logprob: s.logprob, avg_logprob: s.avg_logprob })
                })
                .collect()
        })
    }

    /// The load report (checkpoints, dictionaries, languages, warnings) as a dict-like JSON string.
    #[getter]
    fn report(&self) -> PyResult<String> {
        let t = self.inner.lock().map_err(|_| PyRuntimeError::new_err("an earlier call panicked inside the model"))?;
        serde_json::to_string(&t.report).map_err(value_error)
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Translator>()?;
    m.add_class::<TranslationResult>()?;
    m.add_class::<ScoringResult>()?;
    m.add_class::<language_model::LanguageModel>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
