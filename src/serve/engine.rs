//! One worker thread per model. Requests queue up here; the worker gathers the sentences of
//! compatible requests into one buffer, up to a token budget or until the oldest has waited
//! `max_wait`, and translates or scores it through `hub::Translator`, as `translate` and
//! `score` do with a file.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use tchseq::hub::fault::{self, Fault};
use tchseq::hub::{AttentionMatrix, Batching, Encoded, LanguageModel, LanguageTokens, LmScored, Scored, TargetGuide, TranslateOptions, TranslateRequest, Translation, Translator};

use super::metrics::Metrics;

/// How the worker gathers and cuts batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchPolicy {
    /// Source tokens (EOS included) of one gathered buffer, and of one batch in it.
    pub max_tokens: usize,
    /// How long the first request of a buffer may wait for others.
    pub max_wait: Duration,
    /// One request per buffer: a reply never depends on other traffic.
    pub deterministic: bool,
    /// Sentences waiting at most; more is refused (503).
    pub queue_size: usize,
    /// Longest source sentence accepted, in tokens (EOS included).
    pub max_sentence_tokens: usize,
    /// Batches decoded side by side.
    pub inter_threads: usize,
    /// Intra-op threads of the worker.
    pub intra_threads: i32,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Hypothesis {
    pub text: String,
    pub tokens: Vec<String>,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_scores: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alignment: Option<Vec<(i64, i64)>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionMatrix>,
}

/// The hypotheses of one sentence, or why it was not translated.
pub type SentenceResult = Result<Vec<Hypothesis>, String>;
pub type PairResult = Result<(Scored, Vec<String>), String>;
/// A text's symbols (EOS included) and their scores under a language model.
pub type TextResult = Result<(Vec<String>, LmScored), String>;

/// A streamed request's tokens as they are decoded: (its sentence index, the target symbol).
pub type TokenSender = tokio::sync::mpsc::UnboundedSender<(usize, String)>;

/// What a worker runs.
pub enum Model {
    Translation(Box<Translator>),
    /// A `transformer_lm`: it continues prompts and scores texts.
    Language(Box<LanguageModel>),
}

pub enum Work {
    /// `prefixes`: empty, or per sentence the target text its hypotheses must begin with;
    /// `constraints`: empty, or per sentence the texts its hypotheses must contain.
    Translate {
        sentences: Vec<String>,
        prefixes: Vec<Option<String>>,
        constraints: Vec<Vec<String>>,
        /// Another (source, target) pair of a multilingual model than the one it was loaded for.
        pair: Option<(String, String)>,
        options: Box<TranslateOptions>,
        reply: oneshot::Sender<Vec<SentenceResult>>,
        /// Where each target token goes as it is decoded (beam 1): (sentence, token). Dropped
        /// after `reply` is sent.
        tokens: Option<TokenSender>,
    },
    Score { pairs: Vec<(String, String)>, reply: oneshot::Sender<Vec<PairResult>> },
    /// Texts scored by a language model, each as one sample.
    ScoreTexts { texts: Vec<String>, reply: oneshot::Sender<Vec<TextResult>> },
}

impl Work {
    /// The texts it holds (sources and targets).
    fn texts(&self) -> Box<dyn Iterator<Item = &str> + '_> {
        match self {
            Work::Translate { sentences, .. } => Box::new(sentences.iter().map(String::as_str)),
            Work::Score { pairs, .. } => Box::new(pairs.iter().flat_map(|(s, t)| [s.as_str(), t.as_str()])),
            Work::ScoreTexts { texts, .. } => Box::new(texts.iter().map(String::as_str)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Work::Translate { sentences, .. } => sentences.len(),
            Work::Score { pairs, .. } => pairs.len(),
            Work::ScoreTexts { texts, .. } => texts.len(),
        }
    }
}

pub(super) struct Job {
    pub(super) work: Work,
    enqueued: Instant,
}

#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the queue is full ({0} sentences waiting); retry later")]
    Full(usize),
    #[error("the server is shutting down")]
    Closed,
}

/// The handle requests use to reach a model's worker.
pub struct Engine {
    tx: Option<mpsc::Sender<Job>>,
    queued: Arc<AtomicUsize>,
    queue_size: usize,
    worker: Option<JoinHandle<()>>,
    /// False once the worker thread has ended by a panic that nothing caught.
    alive: Arc<AtomicBool>,
}

/// Marks the engine dead, and tells `lost`, when the worker thread unwinds past everything.
struct Watch {
    alive: Arc<AtomicBool>,
    lost: Arc<tokio::sync::Notify>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.alive.store(false, Ordering::SeqCst);
            self.lost.notify_one();
        }
    }
}

/// Marks the worker dead when dropped by a panic.
struct Dying<'a>(&'a AtomicBool);

impl Drop for Dying<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(false, Ordering::SeqCst);
        }
    }
}

impl Engine {
    /// Starts the worker; `lost` is told if it ever stops by a panic, and once `closing` is set
    /// (the server shuts down) it waits for no more company.
    pub fn start(
        name: String,
        model: Model,
        policy: BatchPolicy,
        metrics: Arc<Metrics>,
        lost: Arc<tokio::sync::Notify>,
        closing: Arc<AtomicBool>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let queued = Arc::new(AtomicUsize::new(0));
        let alive = Arc::new(AtomicBool::new(true));
        let worker = Worker {
            name: name.clone(),
            model,
            policy,
            metrics,
            queued: queued.clone(),
            released: AtomicBool::new(false),
            alive: alive.clone(),
            held: VecDeque::new(),
            closing,
        };
        let watch = Watch { alive: alive.clone(), lost };
        // the worker thread owns the model from here on
        let handle = std::thread::Builder::new().name(format!("model-{name}")).spawn(move || {
            let _watch = watch;
            let mut worker = worker;
            tch::set_num_threads(worker.policy.intra_threads);
            worker.run(rx);
        })?;
        Ok(Engine { tx: Some(tx), queued, queue_size: policy.queue_size, worker: Some(handle), alive })
    }

    /// Whether the worker still runs (or stopped only because the engine was stopped).
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Queues `work`, or refuses it when the queue would grow past its size.
    pub fn submit(&self, work: Work) -> Result<(), SubmitError> {
        let n = work.len();
        let before = self.queued.fetch_add(n, Ordering::SeqCst);
        if before > 0 && before + n > self.queue_size {
            self.queued.fetch_sub(n, Ordering::SeqCst);
            return Err(SubmitError::Full(before));
        }
        let tx = self.tx.as_ref().ok_or(SubmitError::Closed)?;
        tx.send(Job { work, enqueued: Instant::now() }).map_err(|_| {
            self.queued.fetch_sub(n, Ordering::SeqCst);
            SubmitError::Closed
        })
    }

    /// Sentences waiting or being computed.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// Lets the worker finish what is queued, then joins it.
    pub fn stop(&mut self) {
        self.tx = None;
        if let Some(h) = self.worker.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How often a worker waiting for company looks whether the server is shutting down.
const CLOSING_POLL: Duration = Duration::from_millis(20);

pub(super) struct Worker {
    pub(super) name: String,
    pub(super) model: Model,
    pub(super) policy: BatchPolicy,
    pub(super) metrics: Arc<Metrics>,
    pub(super) queued: Arc<AtomicUsize>,
    /// Whether the group being computed has left `queued` ([`Worker::release`]).
    released: AtomicBool,
    /// The engine's: false once the worker dies.
    alive: Arc<AtomicBool>,
    /// Jobs received while gathering that could not join the buffer being gathered.
    held: VecDeque<Job>,
    /// Set when the server shuts down: a buffer waiting for company is computed at once.
    closing: Arc<AtomicBool>,
}

/// An encoded sentence of a gathered buffer: which job, which sentence, its tokens and what its
/// hypotheses must hold.
struct Slot {
    job: usize,
    index: usize,
    tokens: Vec<i64>,
    guide: TargetGuide,
}

impl Worker {
    fn run(&mut self, rx: mpsc::Receiver<Job>) {
        loop {
            let first = match self.held.pop_front() {
                Some(job) => job,
                None => match rx.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
            };
            let group = self.gather(first, &rx);
            let n: usize = group.iter().map(|j| j.work.len()).sum();
            self.metrics.observe_batch(&self.name, n);
            // a panic past here marks the worker dead before the group's replies are dropped, so
            // that their routes already see it
            let _dying = Dying(&self.alive);
            let fault = fault::asked_by(group.iter().flat_map(|j| j.work.texts()));
            if fault == Some(Fault::StopWorker) {
                Fault::StopWorker.raise();
            }
            self.released.store(false, Ordering::SeqCst);
            // a panic costs only this group: its replies are dropped (the routes answer 500), and
            // the worker goes on
            let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if let Some(f) = fault {
                    f.raise();
                }
                self.compute(group, n);
            }));
            if computed.is_err() && !self.released.load(Ordering::SeqCst) {
                self.queued.fetch_sub(n, Ordering::SeqCst);
            }
        }
    }

    fn compute(&self, group: Vec<Job>, n: usize) {
        match (&group[0].work, &self.model) {
            (Work::Translate { .. }, Model::Translation(_)) => self.translate(group, n),
            (Work::Translate { .. }, Model::Language(_)) => self.continue_prompts(group, n),
            (Work::Score { .. }, _) => self.score(group, n),
            (Work::ScoreTexts { .. }, _) => self.score_texts(group, n),
        }
    }

    /// The `n` sentences of the group being computed leave the queue.
    pub(super) fn release(&self, n: usize) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.queued.fetch_sub(n, Ordering::SeqCst);
        }
    }

    fn joins(&self, first: &Job, next: &Job) -> bool {
        match (&first.work, &next.work) {
            (Work::Translate { options: a, .. }, Work::Translate { options: b, .. }) => !a.sampling && a.same_search(b),
            (Work::Score { .. }, Work::Score { .. }) | (Work::ScoreTexts { .. }, Work::ScoreTexts { .. }) => true,
            _ => false,
        }
    }

    /// The first job and the compatible jobs that arrive before the token budget is reached or
    /// the first job has waited `max_wait`.
    fn gather(&mut self, first: Job, rx: &mpsc::Receiver<Job>) -> Vec<Job> {
        let sampling = matches!(&first.work, Work::Translate { options, .. } if options.sampling);
        if self.policy.deterministic || sampling {
            return vec![first];
        }
        let deadline = first.enqueued + self.policy.max_wait;
        let budget = self.policy.max_tokens;
        let mut tokens = self.estimate(&first);
        let mut group = vec![first];
        let mut i = 0;
        while i < self.held.len() && tokens < budget {
            if self.joins(&group[0], &self.held[i]) {
                let job = self.held.remove(i).expect("index checked");
                tokens += self.estimate(&job);
                group.push(job);
            } else {
                i += 1;
            }
        }
        while tokens < budget && !self.closing.load(Ordering::SeqCst) {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                break;
            }
            // a shutdown is looked for between waits of at most CLOSING_POLL
            match rx.recv_timeout(wait.min(CLOSING_POLL)) {
                Ok(job) if self.joins(&group[0], &job) => {
                    tokens += self.estimate(&job);
                    group.push(job);
                }
                Ok(job) => self.held.push_back(job),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        group
    }

    /// Source tokens of a job, about (whitespace words; subwords only add).
    fn estimate(&self, job: &Job) -> usize {
        match &job.work {
            Work::Translate { sentences, .. } => sentences.iter().map(|s| s.split_whitespace().count() + 1).sum(),
            Work::Score { pairs, .. } => pairs.iter().map(|(s, t)| s.split_whitespace().count() + t.split_whitespace().count() + 2).sum(),
            Work::ScoreTexts { texts, .. } => texts.iter().map(|t| t.split_whitespace().count() + 1).sum(),
        }
    }

    pub(super) fn batching(&self) -> Batching {
        Batching { max_tokens: Some(self.policy.max_tokens), batch_size: None, inter_threads: self.policy.inter_threads }
    }

    /// Translates the gathered `group` (`n` sentences) and replies to each job.
    fn translate(&self, group: Vec<Job>, n: usize) {
        let Model::Translation(translator) = &self.model else { return self.refuse(group, n, "a language model") };
        let mut replies = Vec::new();
        let mut streams: Vec<Option<TokenSender>> = Vec::new();
        let mut slots = Vec::new();
        let mut results: Vec<Vec<SentenceResult>> = Vec::new();
        let mut options = None;
        for (j, job) in group.into_iter().enumerate() {
            let Work::Translate { sentences, prefixes, constraints, pair, options: o, reply, tokens: stream } = job.work else { continue };
            streams.push(stream);
            let mut out: Vec<SentenceResult> = Vec::with_capacity(sentences.len());
            let language = match pair.as_ref().map(|(s, t)| translator.pair_tokens(s, t)).transpose() {
                Ok(l) => l,
                Err(e) => {
                    results.push(vec![Err(e.to_string()); sentences.len()]);
                    replies.push((reply, o, None));
                    continue;
                }
            };
            for (index, s) in sentences.iter().enumerate() {
                let tokens = match &language {
                    Some(l) => translator.encode_in(s.trim(), l),
                    None => translator.encode(s.trim()),
                };
                if tokens.len() > self.policy.max_sentence_tokens {
                    out.push(Err(format!(
                        "the sentence is {} tokens long (EOS included); this server accepts at most {}",
                        tokens.len(),
                        self.policy.max_sentence_tokens
                    )));
                } else {
                    let prefix = match prefixes.get(index) {
                        Some(Some(p)) => translator.encode_target_prefix(p),
                        _ => Vec::new(),
                    };
                    let texts = constraints.get(index).map_or(&[][..], Vec::as_slice);
                    match translator.guide(prefix, texts) {
                        Ok(mut guide) => {
                            guide.language = language.as_ref().and_then(|l| l.target_prefix);
                            out.push(Err(String::new()));
                            slots.push(Slot { job: j, index, tokens, guide });
                        }
                        Err(e) => out.push(Err(e.to_string())),
                    }
                }
            }
            results.push(out);
            options.get_or_insert(o.clone());
            replies.push((reply, o, language));
        }
        let Some(options) = options else {
            self.release(n);
            return;
        };
        let outcome: Result<Vec<Failable>, String> =
            translator.search(&options, self.batching()).map_err(|e| e.to_string()).map(|(generator, batching)| {
                let tokens: Vec<Vec<i64>> = slots.iter().map(|s| s.tokens.clone()).collect();
                let guides: Vec<TargetGuide> = slots.iter().map(|s| s.guide.clone()).collect();
                let t = &translator;
                let streamed = streams.iter().any(Option::is_some) && options.beam == 1;
                let first = if streamed {
                    let dict = &t.tgt_dict;
                    let slots = &slots;
                    let streams = &streams;
                    let tell = move |i: usize, token: i64| {
                        if let Some(tx) = &streams[slots[i].job] {
                            let _ = tx.send((slots[i].index, dict.symbol(token).to_string()));
                        }
                    };
                    t.translate_tokens(&generator, tokens, &batching, &TranslateRequest { guides: &guides, alignment: false, on_token: Some(&tell), on_batch: None })
                } else {
                    t.translate_tokens(&generator, tokens, &batching, &TranslateRequest { guides: &guides, alignment: options.alignment, on_token: None, on_batch: None })
                };
                // a failing batch fails only the sentences that fail alone
                let alone = |s: &Slot| -> Failable {
                    let one_guide = std::slice::from_ref(&s.guide);
                    let request = TranslateRequest { guides: one_guide, alignment: options.alignment, on_token: None, on_batch: None };
                    let one = t.translate_tokens(&generator, vec![s.tokens.clone()], &batching, &request);
                    one.map_err(|e| e.to_string()).and_then(|mut t| t.pop().ok_or_else(|| "not translated".to_string()))
                };
                match first {
                    Ok(done) => done
                        .into_iter()
                        .zip(&slots)
                        .map(|(d, s)| if matches!(d, Translation::Failed { .. }) { alone(s) } else { Ok(d) })
                        .collect(),
                    Err(_) => slots.iter().map(alone).collect(),
                }
            });
        match outcome {
            Ok(translations) => {
                for (slot, t) in slots.iter().zip(translations) {
                    let (_, reply_options, language) = &replies[slot.job];
                    results[slot.job][slot.index] = self.hypotheses(translator, t, reply_options, language.as_ref());
                }
            }
            Err(e) => {
                for slot in &slots {
                    results[slot.job][slot.index] = Err(e.clone());
                }
            }
        }
        // out of the queue before anyone hears back
        self.release(n);
        let mut sentences = 0;
        let mut tokens = 0;
        for ((reply, _, _), out) in replies.into_iter().zip(results) {
            sentences += out.iter().filter(|r| r.is_ok()).count();
            tokens += out.iter().flatten().filter_map(|h| h.first()).map(|h| h.tokens.len() + 1).sum::<usize>();
            let _ = reply.send(out);
        }
        drop(streams);
        self.metrics.add_work(&self.name, sentences, tokens);
    }

    fn hypotheses(&self, translator: &Translator, t: Failable, options: &TranslateOptions, language: Option<&LanguageTokens>) -> SentenceResult {
        let t = t?;
        if let Some(e) = t.error() {
            return Err(e);
        }
        let Translation::Done { src_tokens, hypos, .. } = t else { return Err("not translated".into()) };
        hypos
            .iter()
            .take(options.nbest)
            .map(|h| {
                let language = language.unwrap_or(&translator.language_tokens);
                let text = translator.hypothesis_text_in(h, language).map_err(|e| e.to_string())?;
                Ok(Hypothesis {
                    tokens: text.tokens.split(' ').filter(|s| !s.is_empty()).map(str::to_string).collect(),
                    text: text.text,
                    score: h.score,
                    token_scores: options.token_scores.then(|| h.positional_scores.clone()),
                    alignment: if options.alignment { h.alignment.clone() } else { None },
                    attention: if options.attention { translator.attention_matrix(h, &src_tokens) } else { None },
                })
            })
            .collect()
    }

    /// Scores the gathered `group` (`n` pairs) and replies to each job.
    fn score(&self, group: Vec<Job>, n: usize) {
        let Model::Translation(translator) = &self.model else { return self.refuse(group, n, "a language model") };
        let mut replies = Vec::new();
        let mut results: Vec<Vec<PairResult>> = Vec::new();
        let mut encoded: Vec<(usize, usize, Encoded)> = Vec::new();
        for (j, job) in group.into_iter().enumerate() {
            let Work::Score { pairs, reply } = job.work else { continue };
            let mut out = Vec::with_capacity(pairs.len());
            for (index, (s, t)) in pairs.iter().enumerate() {
                match translator.encode_pair(s.trim(), t.trim()) {
                    Ok(e) => {
                        out.push(Err(String::new()));
                        encoded.push((j, index, e));
                    }
                    Err(e) => out.push(Err(e.to_string())),
                }
            }
            results.push(out);
            replies.push(reply);
        }
        let pairs: Vec<Encoded> = encoded.iter().map(|(_, _, e)| e.clone()).collect();
        let scored = translator.score_pairs(&pairs, self.policy.max_tokens, self.policy.inter_threads);
        for ((j, index, e), result) in encoded.iter().zip(scored) {
            results[*j][*index] = result
                .map(|s| (s, e.target.iter().map(|&id| translator.tgt_dict.symbol(id).to_string()).collect()))
                .map_err(|e| e.to_string());
        }
        self.release(n);
        let mut pairs = 0;
        let mut tokens = 0;
        for (reply, out) in replies.into_iter().zip(results) {
            pairs += out.iter().filter(|r| r.is_ok()).count();
            tokens += out.iter().flatten().map(|(_, t)| t.len()).sum::<usize>();
            let _ = reply.send(out);
        }
        self.metrics.add_work(&self.name, pairs, tokens);
    }
}

type Failable = Result<Translation, String>;

impl Worker {
    /// Answers every sentence of `group` with the error that this model (`what`) cannot do the
    /// work (the routes refuse such requests first).
    pub(super) fn refuse(&self, group: Vec<Job>, n: usize, what: &str) {
        let why = format!("{} is {what}: it cannot do this", self.name);
        self.release(n);
        for job in group {
            match job.work {
                Work::Translate { sentences, reply, .. } => drop(reply.send(vec![Err(why.clone()); sentences.len()])),
                Work::Score { pairs, reply } => drop(reply.send(vec![Err(why.clone()); pairs.len()])),
                Work::ScoreTexts { texts, reply } => drop(reply.send(vec![Err(why.clone()); texts.len()])),
            }
        }
    }
}
