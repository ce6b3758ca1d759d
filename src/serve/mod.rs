//! `tchseq serve`: models behind HTTP (axum + tokio). Models load through `hub`, each gets an
//! [`engine::Engine`] (a worker thread that batches sentences across requests), and the routes
//! speak our `/v1` JSON, LibreTranslate's and OpenNMT-py's APIs.

mod api;
mod engine;
mod lm_work;
mod metrics;
mod routes;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use tchseq::hub::Translator;
use tchseq::config::ComputeType;

pub use engine::{BatchPolicy, Model};
use api::{ApiError, ModelInfo};
use engine::Engine;
use metrics::Metrics;

/// Everything `serve` needs besides the models.
#[derive(Debug, Clone)]
pub struct Settings {
    pub addr: SocketAddr,
    pub policy: BatchPolicy,
    pub limits: Limits,
    /// Required on every route except `/health` when set.
    pub api_key: Option<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_sentences: usize,
    pub request_timeout: Duration,
}

/// A model to serve: its name, the loaded model, and the (source, target) pairs it serves (the
/// loaded pair first; a multilingual model may serve every pair it knows on one copy of its
/// weights; a language model none).
pub struct ModelToServe {
    pub name: String,
    pub model: Model,
    pub pairs: Vec<(String, String)>,
}

impl ModelToServe {
    /// A translation model serving its loaded pair, and `more` pairs.
    pub fn translation(name: String, translator: Translator, more: Vec<(String, String)>) -> Self {
        let loaded = (translator.report.source_lang.clone(), translator.report.target_lang.clone());
        let mut pairs = vec![loaded.clone()];
        pairs.extend(more.into_iter().filter(|p| *p != loaded));
        ModelToServe { name, model: Model::Translation(Box::new(translator)), pairs }
    }
}

/// A loaded model and its engine.
pub struct Served {
    pub name: String,
    /// The pair a request gets when it names none.
    pub source_lang: String,
    pub target_lang: String,
    /// Every pair served, the loaded one first (none for a language model).
    pub pairs: Vec<(String, String)>,
    pub compute_type: ComputeType,
    /// A `transformer_lm`: it continues prompts and scores texts.
    pub language_model: bool,
    report: serde_json::Value,
    engine: Engine,
}

impl Served {
    fn info(&self) -> ModelInfo {
        ModelInfo {
            name: self.name.clone(),
            source_lang: self.source_lang.clone(),
            target_lang: self.target_lang.clone(),
            pairs: self.pairs.iter().map(|(s, t)| format!("{s}-{t}")).collect(),
            kind: if self.language_model { "language_model" } else { "translation" },
            report: self.report.clone(),
        }
    }

    fn serves(&self, source_lang: &str, target_lang: &str) -> bool {
        self.pairs.iter().any(|(s, t)| s == source_lang && t == target_lang)
    }

    /// What a request for `source_lang` → `target_lang` asks of the engine: nothing for the
    /// loaded pair, else the pair.
    fn pair(&self, source_lang: &str, target_lang: &str) -> Option<(String, String)> {
        (source_lang != self.source_lang || target_lang != self.target_lang).then(|| (source_lang.to_string(), target_lang.to_string()))
    }
}

pub struct AppState {
    models: Vec<Served>,
    limits: Limits,
    api_key: Option<String>,
    metrics: Arc<Metrics>,
}

/// How long a server whose model worker stopped keeps answering (`/health` with 503) before it
/// shuts down.
const LOST_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves `models` until SIGTERM or Ctrl-C, then lets the requests in flight finish and
/// returns. `on_listen` is told the bound address (the port may have been 0).
pub fn run(models: Vec<ModelToServe>, settings: Settings, on_listen: impl FnOnce(SocketAddr)) -> std::io::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let lost = Arc::new(tokio::sync::Notify::new());
    let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut served = Vec::with_capacity(models.len());
    for ModelToServe { name, model, pairs } in models {
        let (source_lang, target_lang, compute_type, report, language_model) = match &model {
            Model::Translation(t) => {
                let report = serde_json::to_value(&t.report).unwrap_or_default();
                (t.report.source_lang.clone(), t.report.target_lang.clone(), t.compute_type, report, false)
            }
            Model::Language(lm) => {
                let report = serde_json::json!({ "checkpoint": lm.checkpoint, "dictionary": lm.dict_path, "warnings": lm.warnings });
                (String::new(), String::new(), ComputeType::Exact, report, true)
            }
        };
        let report = file_names_only(report);
        let engine = Engine::start(name.clone(), model, settings.policy, metrics.clone(), lost.clone(), closing.clone())?;
        served.push(Served { name, source_lang, target_lang, pairs, compute_type, language_model, report, engine });
    }
    let state = Arc::new(AppState { models: served, limits: settings.limits, api_key: settings.api_key.clone(), metrics });
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(settings.addr).await?;
        // the handlers are registered before anyone is told where we listen: a SIGTERM from then
        // on is a graceful shutdown, never the default action (death, replies lost)
        let signal = shutdown_signal()?;
        // a worker that stopped by a panic ends the server too, for a supervisor to restart it;
        // for a few seconds before, `/health` tells probes so
        let closing_now = closing.clone();
        let shutdown = async move {
            tokio::select! {
                () = signal => {},
                () = lost.notified() => {
                    eprintln!("tchseq serve: a model worker stopped; /health answers 503, and the server shuts down in {} s", LOST_GRACE.as_secs());
                    tokio::time::sleep(LOST_GRACE).await;
                }
            }
            // the requests in flight are computed now, not after --max-wait-ms
            closing_now.store(true, std::sync::atomic::Ordering::SeqCst);
        };
        on_listen(listener.local_addr()?);
        axum::serve(listener, router(state.clone())).with_graceful_shutdown(shutdown).await
    })?;
    let stopped: Vec<String> = state.models.iter().filter(|m| !m.engine.alive()).map(|m| m.name.clone()).collect();
    // the requests in flight have their replies; let the workers finish and stop
    drop(runtime);
    if let Ok(state) = Arc::try_unwrap(state) {
        drop(state);
    }
    if !stopped.is_empty() {
        return Err(std::io::Error::other(format!("the model worker of {} stopped by an internal error", stopped.join(", "))));
    }
    Ok(())
}

fn router(state: Arc<AppState>) -> Router {
    let limits = state.limits;
    Router::new()
        .route("/", get(routes::page))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics))
        .route("/v1/models", get(routes::models))
        .route("/v1/translate", post(routes::v1_translate))
        .route("/v1/score", post(routes::v1_score))
        .route("/v1/attention", post(routes::v1_attention))
        .route("/translate", post(routes::libre_translate))
        .route("/languages", get(routes::libre_languages))
        .route("/detect", post(routes::libre_detect))
        .route("/translator/translate", post(routes::onmt_translate))
        .route("/translator/models", get(routes::onmt_models))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(middleware::from_fn_with_state(state.clone(), api_key))
        .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout))
        .layer(RequestBodyLimitLayer::new(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), refuse_oversized))
        .layer(middleware::from_fn_with_state(state.clone(), record))
        .with_state(state)
}

/// The most of a refused body that is read and discarded before the 413 goes out.
const DRAIN_BYTES: u64 = 64 << 20;

/// A body declared larger than `--max-body-bytes` gets its 413 at once; up to [`DRAIN_BYTES`] of
/// it are read and discarded first, as a lingering close does, so that a client that sends the
/// whole body before it reads the reply (Python's urllib) reads the 413, not a broken pipe.
async fn refuse_oversized(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    use http_body_util::BodyExt;
    let limit = app.limits.max_body_bytes as u64;
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let Some(declared) = declared.filter(|&n| n > limit) else { return next.run(req).await };
    if declared <= DRAIN_BYTES {
        let mut body = req.into_body();
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout(app.limits.request_timeout, drain).await;
    }
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is too large: {declared} bytes, the limit is {limit}")).into_response()
}

/// Counts every request by route and status, and its latency; 408 and 413 from the outer layers
/// get a JSON body.
async fn record(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or_else(|| "other".to_string(), |p| p.as_str().to_string());
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let start = Instant::now();
    let mut response = next.run(req).await;
    let status = response.status();
    let is_json = response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json && (status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::PAYLOAD_TOO_LARGE) {
        let message = if status == StatusCode::REQUEST_TIMEOUT { "the request took too long" } else { "the request body is too large" };
        response = ApiError::new(status, message).into_response();
    }
    if !is_json && status == StatusCode::METHOD_NOT_ALLOWED {
        // every route takes one method, GET or POST
        let other = if method == axum::http::Method::GET { "POST" } else { "GET" };
        let allow = response.headers().get(header::ALLOW).and_then(|v| v.to_str().ok()).unwrap_or(other).to_string();
        let mut reply = ApiError::new(status, format!("{method} is not allowed on {path}; it takes {allow}")).into_response();
        if let Ok(v) = header::HeaderValue::from_str(&allow) {
            reply.headers_mut().insert(header::ALLOW, v);
        }
        response = reply;
    }
    app.metrics.observe_request(&route, status.as_u16(), start.elapsed().as_secs_f64());
    response
}

/// With `--api-key`, every route but `/health` needs the key: `Authorization: Bearer KEY`,
/// `X-API-Key: KEY`, `?api_key=KEY`, or LibreTranslate's `api_key` field in the JSON body.
async fn api_key(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = app.api_key.as_deref() else { return next.run(req).await };
    if req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let headers = req.headers();
    let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let x_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    let query = req.uri().query().and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("api_key=")));
    if [bearer, x_key, query].into_iter().flatten().any(|k| same_key(k, key)) {
        return next.run(req).await;
    }
    if req.uri().path() == "/translate" {
        let (parts, body) = req.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, app.limits.max_body_bytes).await else {
            return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large").into_response();
        };
        let body_key = if api::is_form(&parts.headers) {
            serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes).ok().and_then(|kv| kv.into_iter().find(|(k, _)| k == "api_key").map(|(_, v)| v))
        } else {
            serde_json::from_slice::<serde_json::Value>(&bytes).ok().and_then(|v| v.get("api_key").and_then(|k| k.as_str()).map(str::to_string))
        };
        if body_key.is_some_and(|k| same_key(&k, key)) {
            return next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await;
        }
    }
    ApiError::new(StatusCode::UNAUTHORIZED, "a valid API key is required").into_response()
}

/// The load report as `/v1/models` shows it: every path cut to its file name, so that a public
/// endpoint does not tell where the server keeps its files.
fn file_names_only(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(s.split(' ').map(file_name_of).collect::<Vec<_>>().join(" ")),
        Value::Array(a) => Value::Array(a.into_iter().map(file_names_only).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, file_names_only(v))).collect()),
        other => other,
    }
}

/// A word that holds a path (a `/` in it) as its last component, punctuation around it kept.
fn file_name_of(word: &str) -> String {
    let core = word.trim_matches(|c: char| "()[]{}'\"`,;:".contains(c));
    if !core.contains('/') {
        return word.to_string();
    }
    let name = core.rsplit('/').find(|p| !p.is_empty()).unwrap_or("");
    word.replacen(core, name, 1)
}

/// Compares in time that does not depend on where the strings differ.
fn same_key(given: &str, key: &str) -> bool {
    let (a, b) = (given.as_bytes(), key.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Ctrl-C or SIGTERM, whichever comes first; the SIGTERM handler is registered on the call.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        let ctrl_c = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        let term = async move {
            term.recv().await;
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => {},
            _ = term => {},
        }
        eprintln!("tchseq serve: shutting down after the requests in flight");
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_models_report_shows_file_names_not_paths() {
        let report = serde_json::json!({
            "checkpoints": [{ "path": "/srv/models/wmt19/model.pt", "tensors": 12 }],
            "bpe_codes": "weights/multi30k.en-de/bpecodes",
            "warnings": ["(/srv/models/wmt19/model.pt): 3 unused keys", "no path here"],
        });
        let shown = super::file_names_only(report).to_string();
        assert!(!shown.contains("/srv") && !shown.contains("weights/"), "{shown}");
        assert!(shown.contains("\"model.pt\"") && shown.contains("\"bpecodes\""), "{shown}");
        assert!(shown.contains("(model.pt): 3 unused keys") && shown.contains("no path here"), "{shown}");
    }
}
