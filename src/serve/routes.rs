//! The handlers: each finds the model, checks the request against the limits, hands the
//! sentences to the model's engine and shapes the reply for its API.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use tokio::sync::oneshot;

use tchseq::plot::render::{render_svg, Axis, Figure, Heatmap, Scale};

use super::api::*;
use tchseq::hub::TranslateOptions;
use super::engine::{PairResult, SentenceResult, SubmitError, TextResult, TokenSender, Work};
use super::{AppState, Served};

const PAGE: &str = include_str!("page.html");
/// The largest beam a request may ask for (each beam row costs a decoder pass).
const MAX_BEAM: usize = 64;
/// The longest output a request may ask for (`max_len_b`).
const MAX_LEN_B: usize = 1024;

pub async fn page() -> Html<&'static str> {
    Html(PAGE)
}

/// 200 while every model's worker runs; 503, naming the stopped ones, once one has stopped (the
/// process is then on its way out, with a non-zero status, for a supervisor to restart).
pub async fn health(State(app): State<Arc<AppState>>) -> Response {
    let stopped: Vec<&str> = app.models.iter().filter(|m| !m.engine.alive()).map(|m| m.name.as_str()).collect();
    if stopped.is_empty() {
        return Json(serde_json::json!({ "status": "ok" })).into_response();
    }
    let body = serde_json::json!({ "status": "unavailable", "error": format!("the model worker of {} stopped", stopped.join(", ")) });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

pub async fn models(State(app): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let models: Vec<ModelInfo> = app.models.iter().map(Served::info).collect();
    Json(serde_json::json!({ "models": models }))
}

pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let queued: Vec<(String, usize)> = app.models.iter().map(|m| (m.name.clone(), m.engine.queued())).collect();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.metrics.render(&queued)).into_response()
}

fn model<'a>(app: &'a AppState, name: Option<&str>) -> Result<&'a Served, ApiError> {
    match name {
        None => app.models.first().ok_or_else(|| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no model is loaded")),
        Some(n) => app.models.iter().find(|m| m.name == n).ok_or_else(|| {
            let names: Vec<&str> = app.models.iter().map(|m| m.name.as_str()).collect();
            ApiError::new(StatusCode::NOT_FOUND, format!("unknown model {n:?} (loaded: {})", names.join(", ")))
        }),
    }
}

fn check_count(app: &AppState, n: usize) -> Result<(), ApiError> {
    if n == 0 {
        return Err(ApiError::bad_request("nothing to translate: the request has no sentences"));
    }
    if n > app.limits.max_sentences {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{n} sentences in one request; the limit is {}", app.limits.max_sentences),
        ));
    }
    Ok(())
}

fn submit_error(e: SubmitError) -> ApiError {
    let mut err = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string());
    err.retry_after = Some(1);
    err
}

/// Queues the sentences on the model's engine and waits for their results.
async fn translate(app: &AppState, m: &Served, sentences: Vec<String>, options: TranslateOptions) -> Result<Vec<SentenceResult>, ApiError> {
    translate_guided(app, m, sentences, Guided::default(), options).await
}

/// What a translate request asks besides its sentences: per sentence a target prefix its
/// hypotheses begin with and constraints they contain (each empty, or one per sentence; `None`
/// asks nothing; with any constraint the search is `options.constraints`, `ordered` unless
/// named), another of the pairs the model serves ([`Served::pair`]), and where its tokens go as
/// they are decoded (a stream).
#[derive(Default)]
pub struct Guided {
    pub prefixes: Vec<Option<String>>,
    pub constraints: Vec<Option<Vec<String>>>,
    pub pair: Option<(String, String)>,
    pub tokens: Option<TokenSender>,
}

/// [`translate`] with a [`Guided`] request.
async fn translate_guided(app: &AppState, m: &Served, sentences: Vec<String>, g: Guided, options: TranslateOptions) -> Result<Vec<SentenceResult>, ApiError> {
    submit(app, m, sentences, g, options)?.await.map_err(|_| dropped(m))
}

/// Why a request got no reply from its model's worker.
fn dropped(m: &Served) -> ApiError {
    if m.engine.alive() {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, DROPPED)
    } else {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the model worker of {} stopped; the server is shutting down", m.name))
    }
}


/// Checks the request against the limits and queues it; the receiver gets its results.
fn submit(app: &AppState, m: &Served, sentences: Vec<String>, g: Guided, mut options: TranslateOptions) -> Result<oneshot::Receiver<Vec<SentenceResult>>, ApiError> {
    check_count(app, sentences.len())?;
    for (what, n) in [("target prefixes", g.prefixes.len()), ("constraint lists", g.constraints.len())] {
        if n != 0 && n != sentences.len() {
            return Err(ApiError::bad_request(format!("{n} {what} for {} sentences", sentences.len())));
        }
    }
    let constraints: Vec<Vec<String>> = g.constraints.into_iter().map(Option::unwrap_or_default).collect();
    if constraints.iter().any(|c| !c.is_empty()) && options.constraints.is_none() {
        options.constraints = Some("ordered".into());
    }
    options.check().map_err(|e| ApiError::bad_request(e.to_string()))?;
    options.check_compute_type(m.compute_type).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if options.beam > MAX_BEAM || options.max_len_b > MAX_LEN_B || options.min_len > MAX_LEN_B {
        return Err(ApiError::bad_request(format!("this server allows beam up to {MAX_BEAM} and max_len_b, min_len up to {MAX_LEN_B}")));
    }
    let (reply, rx) = oneshot::channel();
    let work = Work::Translate { sentences, prefixes: g.prefixes, constraints, pair: g.pair, options: Box::new(options), reply, tokens: g.tokens };
    m.engine.submit(work).map_err(submit_error)?;
    Ok(rx)
}

pub async fn v1_translate(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<TranslateRequest>) -> Result<Response, ApiError> {
    let m = model(&app, req.model.as_deref())?;
    let sentences = req.text.into_vec();
    let prefixes = req.target_prefix.unwrap_or_default();
    let constraints = req.constraints.unwrap_or_default();
    let o = &req.options;
    if m.language_model {
        let guided = !prefixes.is_empty() || !constraints.is_empty() || req.source_lang.is_some() || req.target_lang.is_some();
        if guided || o.alignment || o.attention {
            return Err(ApiError::bad_request(format!(
                "model {:?} is a language model: it continues each text; target_prefix, constraints, languages, alignment and attention need a translation model",
                m.name
            )));
        }
    }
    if req.stream && (o.alignment || o.attention) {
        return Err(ApiError::bad_request("a stream sends text, tokens and scores: alignment and attention need \"stream\": false"));
    }
    let pair = if m.language_model { None } else { requested_pair(m, req.source_lang, req.target_lang)? };
    let mut g = Guided { prefixes, constraints, pair, tokens: None };
    if req.stream {
        let (tokens, decoded) = tokio::sync::mpsc::unbounded_channel();
        g.tokens = Some(tokens);
        let results = submit(&app, m, sentences.clone(), g, req.options)?;
        return Ok(super::stream::events(m.name.clone(), sentences, decoded, results).into_response());
    }
    let results = translate_guided(&app, m, sentences.clone(), g, req.options).await?;
    Ok(Json(TranslateReply { model: m.name.clone(), translations: sentence_replies(sentences, results) }).into_response())
}

/// The engine's pair for a request naming `source_lang`/`target_lang` (each defaults to the
/// model's own), or a 400 when the model does not serve it.
fn requested_pair(m: &Served, source_lang: Option<String>, target_lang: Option<String>) -> Result<Option<(String, String)>, ApiError> {
    let source_lang = source_lang.unwrap_or_else(|| m.source_lang.clone());
    let target_lang = target_lang.unwrap_or_else(|| m.target_lang.clone());
    if !m.serves(&source_lang, &target_lang) {
        let pairs: Vec<String> = m.pairs.iter().map(|(s, t)| format!("{s}-{t}")).collect();
        return Err(ApiError::bad_request(format!("model {:?} does not serve {source_lang}-{target_lang} (it serves {})", m.name, pairs.join(", "))));
    }
    Ok(m.pair(&source_lang, &target_lang))
}


pub async fn v1_score(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<ScoreRequest>) -> Result<Json<ScoreReply>, ApiError> {
    let m = model(&app, req.model.as_deref())?;
    match (m.language_model, req.pairs.is_empty(), req.texts.is_empty()) {
        (true, true, _) => return score_texts(&app, m, req.texts, req.token_scores).await,
        (true, false, _) => return Err(ApiError::bad_request(format!("model {:?} is a language model: give \"texts\" to score, not \"pairs\"", m.name))),
        (false, _, false) => return Err(ApiError::bad_request(format!("model {:?} is a translation model: give \"pairs\" to score, not \"texts\"", m.name))),
        (false, _, true) => {}
    }
    check_count(&app, req.pairs.len())?;
    let pairs: Vec<(String, String)> = req.pairs.into_iter().map(|p| (p.source, p.target)).collect();
    let (reply, rx) = oneshot::channel();
    m.engine.submit(Work::Score { pairs, reply }).map_err(submit_error)?;
    let results: Vec<PairResult> = rx.await.map_err(|_| dropped(m))?;
    let scores = results
        .into_iter()
        .map(|r| match r {
            Ok((s, symbols)) => PairReply::scored(s.logprob, s.avg_logprob, symbols, s.positional_scores, req.token_scores),
            Err(e) => PairReply::failed(e),
        })
        .collect();
    Ok(Json(ScoreReply { model: m.name.clone(), scores }))
}

/// `/v1/score` with a language model: each text scored as one sample (`tchseq score --lm
/// --sample-break-mode eos`), in the shape of a pair's score.
async fn score_texts(app: &AppState, m: &Served, texts: Vec<String>, token_scores: bool) -> Result<Json<ScoreReply>, ApiError> {
    check_count(app, texts.len())?;
    let (reply, rx) = oneshot::channel();
    m.engine.submit(Work::ScoreTexts { texts, reply }).map_err(submit_error)?;
    let results: Vec<TextResult> = rx.await.map_err(|_| dropped(m))?;
    let scores = results
        .into_iter()
        .map(|r| match r {
            Ok((symbols, s)) => PairReply::scored(s.logprob(), s.avg_logprob(), symbols, s.scores, token_scores),
            Err(e) => PairReply::failed(e),
        })
        .collect();
    Ok(Json(ScoreReply { model: m.name.clone(), scores }))
}

/// The SVG heatmap of the best translation's attention (the model's alignment layer, heads
/// averaged), drawn by the renderer of `tchseq attention`.
pub async fn v1_attention(State(app): State<Arc<AppState>>, JsonBody(req): JsonBody<AttentionRequest>) -> Result<Response, ApiError> {
    let m = model(&app, req.model.as_deref())?;
    if m.language_model {
        return Err(ApiError::bad_request(format!("model {:?} is a language model: it has no encoder to attend to", m.name)));
    }
    let options = TranslateOptions { nbest: 1, attention: true, ..req.options };
    let pair = requested_pair(m, req.source_lang, req.target_lang)?;
    let mut results = translate_guided(&app, m, vec![req.text], Guided { pair, ..Default::default() }, options).await?;
    let best = results.pop().unwrap_or_else(|| Err("not translated".into())).map_err(ApiError::bad_request)?;
    let attention = best.into_iter().next().and_then(|h| h.attention).ok_or_else(|| ApiError::bad_request("no hypothesis"))?;
    let max = attention.weights.iter().flatten().fold(0f32, |m, &v| m.max(v));
    let figure = Figure {
        title: "cross-attention, alignment layer, mean of heads".into(),
        columns: 1,
        panels: vec![Heatmap {
            title: String::new(),
            values: attention.weights,
            rows: Axis::Tokens(attention.target),
            cols: Axis::Tokens(attention.source),
            row_title: "target".into(),
            col_title: "source".into(),
        }],
        scale: Scale { min: 0.0, max: if max > 0.0 { max } else { 1.0 }, label: "attention weight".into() },
    };
    let svg = tokio::task::spawn_blocking(move || render_svg(&figure))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

// --- LibreTranslate --------------------------------------------------------------------------

pub async fn libre_languages(State(app): State<Arc<AppState>>) -> Json<Vec<LibreLanguage>> {
    let mut langs: Vec<LibreLanguage> = Vec::new();
    for (source, target) in app.models.iter().flat_map(|m| &m.pairs) {
        match langs.iter_mut().find(|l| l.code == *source) {
            Some(l) if !l.targets.contains(target) => l.targets.push(target.clone()),
            Some(_) => {}
            None => langs.push(LibreLanguage { code: source.clone(), name: source.clone(), targets: vec![target.clone()] }),
        }
    }
    Json(langs)
}

pub async fn libre_translate(State(app): State<Arc<AppState>>, JsonOrForm(req): JsonOrForm<LibreRequest>) -> Result<Json<serde_json::Value>, ApiError> {
    if let Some(f) = req.format.as_deref().filter(|f| *f != "text") {
        return Err(ApiError::bad_request(format!("format {f:?} is not supported (only \"text\")")));
    }
    let mut source = req.source.clone();
    if source == "auto" {
        // no served model tells languages apart: "auto" stands only for the one source there is
        let into_target = app.models.iter().flat_map(|m| &m.pairs).filter(|(_, t)| *t == req.target).map(|(s, _)| s.clone());
        let sources: Vec<String> = into_target.collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        if sources.len() > 1 {
            return Err(ApiError::bad_request(format!(
                "source \"auto\": the served models cannot detect languages, and more than one translates into {}: name the source, one of {}",
                req.target,
                sources.join(", ")
            )));
        }
        source = sources.into_iter().next().unwrap_or(source);
    }
    // a model loaded for the pair first, then one that serves it among others
    let m = app
        .models
        .iter()
        .find(|m| m.source_lang == source && m.target_lang == req.target)
        .or_else(|| app.models.iter().find(|m| m.serves(&source, &req.target)))
        .ok_or_else(|| ApiError::bad_request(format!("{} → {} is not supported by the loaded models", req.source, req.target)))?;
    let pair = m.pair(&source, &req.target);
    let single = matches!(req.q, OneOrMany::One(_));
    let alternatives = req.alternatives.unwrap_or(0);
    let options = TranslateOptions { nbest: (alternatives + 1).min(TranslateOptions::default().beam), ..Default::default() };
    let results = translate_guided(&app, m, req.q.into_vec(), Guided { pair, ..Default::default() }, options).await?;
    let mut texts = Vec::new();
    let mut alts = Vec::new();
    let mut errors = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(h) => {
                texts.push(h.first().map(|h| h.text.clone()).unwrap_or_default());
                alts.push(h.iter().skip(1).map(|h| h.text.clone()).collect::<Vec<_>>());
            }
            Err(e) if single => return Err(ApiError::bad_request(e)),
            Err(e) => {
                texts.push(String::new());
                alts.push(Vec::new());
                errors.push(serde_json::json!({ "index": i, "error": e }));
            }
        }
    }
    let mut reply = if single {
        serde_json::json!({ "translatedText": texts[0] })
    } else {
        serde_json::json!({ "translatedText": texts })
    };
    if alternatives > 0 {
        reply["alternatives"] = if single { serde_json::json!(alts[0]) } else { serde_json::json!(alts) };
    }
    if !errors.is_empty() {
        reply["errors"] = serde_json::json!(errors);
    }
    Ok(Json(reply))
}

/// LibreTranslate's `/detect`. No served model tells languages apart (each translates from the
/// languages it is given), so the answer names the sources served.
pub async fn libre_detect(State(app): State<Arc<AppState>>) -> ApiError {
    ApiError::bad_request(format!(
        "language detection is not available: the served models cannot detect languages; name the source language, one of {}",
        served_sources(app.models.iter()).join(", ")
    ))
}

fn served_sources<'a>(models: impl Iterator<Item = &'a super::Served>) -> Vec<String> {
    let sources: std::collections::BTreeSet<String> = models.flat_map(|m| &m.pairs).map(|(s, _)| s.clone()).collect();
    sources.into_iter().collect()
}

// --- OpenNMT-py ----------------------------------------------------------------------------

pub async fn onmt_models(State(app): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let models: Vec<serde_json::Value> =
        app.models.iter().enumerate().map(|(i, m)| serde_json::json!({ "model_id": i, "name": m.name, "loaded": true })).collect();
    Json(serde_json::json!(models))
}

pub async fn onmt_translate(State(app): State<Arc<AppState>>, JsonBody(items): JsonBody<Vec<OnmtItem>>) -> Result<Json<Vec<Vec<OnmtReply>>>, ApiError> {
    let ids: Vec<Option<&serde_json::Value>> = items.iter().map(|i| i.id.as_ref()).collect();
    let first = ids.first().copied().flatten();
    if ids.iter().any(|id| *id != first) {
        return Err(ApiError::bad_request("all items of one request must name the same model id"));
    }
    let m = match first {
        None => model(&app, None)?,
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|i| app.models.get(i as usize))
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown model id {n}")))?,
        Some(serde_json::Value::String(s)) => model(&app, Some(s))?,
        Some(other) => return Err(ApiError::bad_request(format!("model id must be a number or a name, not {other}"))),
    };
    let sources: Vec<String> = items.into_iter().map(|i| i.src).collect();
    let results = translate(&app, m, sources.clone(), TranslateOptions::default()).await?;
    let replies = sources
        .into_iter()
        .zip(results)
        .map(|(src, r)| match r {
            Ok(h) => {
                let best = h.into_iter().next();
                OnmtReply {
                    src,
                    tgt: best.as_ref().map(|h| h.text.clone()).unwrap_or_default(),
                    n_best: 1,
                    pred_score: best.map_or(0.0, |h| h.score),
                    error: None,
                }
            }
            Err(e) => OnmtReply { src, tgt: String::new(), n_best: 1, pred_score: 0.0, error: Some(e) },
        })
        .collect();
    Ok(Json(vec![replies]))
}
