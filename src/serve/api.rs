//! What goes over the wire: our `/v1` JSON, LibreTranslate's and OpenNMT-py's shapes, and the
//! JSON error body every failure carries.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use tchseq::hub::TranslateOptions;

use super::engine::{Hypothesis, SentenceResult};

/// A failed request: its status and a one-line message, sent as `{"error": message}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), retry_after: None }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(serde_json::json!({ "error": self.message }))).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        response
    }
}

/// `axum::Json` whose rejections (malformed JSON, wrong types, wrong content type, too large)
/// are JSON errors too.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(JsonBody(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// A JSON body, or an HTML form (`application/x-www-form-urlencoded`), which LibreTranslate
/// accepts too and its Python client (`libretranslatepy`) sends.
pub struct JsonOrForm<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for JsonOrForm<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if is_form(req.headers()) {
            let axum::Form(v) = axum::Form::<T>::from_request(req, state)
                .await
                .map_err(|e| ApiError::new(e.status(), format!("invalid form: {}", e.body_text())))?;
            return Ok(JsonOrForm(v));
        }
        JsonBody::<T>::from_request(req, state).await.map(|JsonBody(v)| JsonOrForm(v))
    }
}

pub fn is_form(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let message = match &rejection {
        JsonRejection::JsonDataError(e) => format!("invalid request: {}", e.body_text().trim_start_matches("Failed to deserialize the JSON body into the target type: ")),
        JsonRejection::JsonSyntaxError(_) => format!("malformed JSON: {}", rejection.body_text().trim_start_matches("Failed to parse the request body as JSON: ")),
        JsonRejection::MissingJsonContentType(_) => "the body must be JSON (Content-Type: application/json)".into(),
        _ if status == StatusCode::PAYLOAD_TOO_LARGE => "the request body is too large".into(),
        _ => rejection.body_text(),
    };
    ApiError::new(status, message)
}

/// A string or a list of strings.
#[derive(Debug, Clone)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OneOrMany;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(v.to_string()))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<OneOrMany, E> {
                Ok(OneOrMany::One(v))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut all = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(s) = seq.next_element::<String>()? {
                    all.push(s);
                }
                Ok(OneOrMany::Many(all))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

// --- /v1 -----------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TranslateRequest {
    pub model: Option<String>,
    pub text: OneOrMany,
    /// Per sentence, target text its hypotheses must begin with (`null`: none).
    #[serde(default)]
    pub target_prefix: Option<Vec<Option<String>>>,
    /// Per sentence, texts its hypotheses must contain (`null`: none); `options.constraints`
    /// says whether in order (`ordered`, the default) or not (`unordered`).
    #[serde(default)]
    pub constraints: Option<Vec<Option<Vec<String>>>>,
    /// The pair to translate, for a model serving several (default: the model's own).
    #[serde(default)]
    pub source_lang: Option<String>,
    #[serde(default)]
    pub target_lang: Option<String>,
    /// Server-sent events: each token as it is decoded (beam 1), then each sentence, then `done`.
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub options: TranslateOptions,
}

#[derive(Debug, Serialize)]
pub struct TranslateReply {
    pub model: String,
    pub translations: Vec<SentenceReply>,
}

#[derive(Debug, Serialize)]
pub struct SentenceReply {
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hypotheses: Option<Vec<Hypothesis>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionRequest {
    pub model: Option<String>,
    pub text: String,
    /// The pair, for a model serving several (default: the model's own).
    #[serde(default)]
    pub source_lang: Option<String>,
    #[serde(default)]
    pub target_lang: Option<String>,
    #[serde(default)]
    pub options: TranslateOptions,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub source: String,
    pub target: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreRequest {
    pub model: Option<String>,
    /// (source, target) pairs, for a translation model.
    #[serde(default)]
    pub pairs: Vec<Pair>,
    /// Texts, for a language model: each scored as one sample.
    #[serde(default)]
    pub texts: Vec<String>,
    #[serde(default)]
    pub token_scores: bool,
}

#[derive(Debug, Serialize)]
pub struct ScoreReply {
    pub model: String,
    pub scores: Vec<PairReply>,
}

#[derive(Debug, Default, Serialize)]
pub struct PairReply {
    /// Natural-log probability of the target, EOS included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprob: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_logprob: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ppl: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_tokens: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_scores: Option<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl PairReply {
    /// A scored pair (or text): its summed and per-token natural-log probability, and with
    /// `token_scores` the target's symbols and each one's log-probability.
    pub fn scored(logprob: f32, avg_logprob: f32, symbols: Vec<String>, scores: Vec<f32>, token_scores: bool) -> Self {
        PairReply {
            logprob: Some(logprob),
            tokens: Some(scores.len()),
            avg_logprob: Some(avg_logprob),
            ppl: Some((-f64::from(avg_logprob)).exp()),
            target_tokens: token_scores.then_some(symbols),
            token_scores: token_scores.then_some(scores),
            error: None,
        }
    }

    pub fn failed(error: String) -> Self {
        PairReply { error: Some(error), ..Default::default() }
    }
}

#[derive(Debug, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub source_lang: String,
    pub target_lang: String,
    /// Every `src-tgt` pair served, the loaded one first.
    pub pairs: Vec<String>,
    /// `translation` or `language_model`.
    pub kind: &'static str,
    pub report: serde_json::Value,
}

// --- LibreTranslate --------------------------------------------------------------------------

/// LibreTranslate's `/translate` body (JSON or form).
#[derive(Debug, Deserialize)]
pub struct LibreRequest {
    pub q: OneOrMany,
    pub source: String,
    pub target: String,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default)]
    pub alternatives: Option<usize>,
    /// Checked by the API-key layer.
    #[serde(default)]
    #[allow(dead_code)]
    pub api_key: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LibreLanguage {
    pub code: String,
    pub name: String,
    pub targets: Vec<String>,
}

// --- OpenNMT-py ----------------------------------------------------------------------------

/// One item of OpenNMT-py's `/translator/translate` body: `id` names the model (its position
/// among `--model`s, or its name).
#[derive(Debug, Deserialize)]
pub struct OnmtItem {
    pub src: String,
    #[serde(default)]
    pub id: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct OnmtReply {
    pub src: String,
    pub tgt: String,
    pub n_best: usize,
    pub pred_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A request whose computation failed (an internal error, caught): only it is lost.
pub const DROPPED: &str = "an internal error stopped this request (the server goes on; please report it)";

/// Each sentence's reply: its hypotheses, or why it has none.
pub fn sentence_replies(sentences: Vec<String>, results: Vec<SentenceResult>) -> Vec<SentenceReply> {
    sentences
        .into_iter()
        .zip(results)
        .map(|(source, r)| match r {
            Ok(h) => SentenceReply { source, hypotheses: Some(h), error: None },
            Err(e) => SentenceReply { source, hypotheses: None, error: Some(e) },
        })
        .collect()
}
