//! `"stream": true` in `/v1/translate`: server-sent events. A `token` event for each target
//! token as it is decoded (beam 1: greedy or sampling, whose one hypothesis never changes its
//! past, as CTranslate2's `generate_tokens`), then a `sentence` event for each sentence in order
//! (the reply's entry with its `index`), then `done`; or one `error` event.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use tokio::sync::{mpsc, oneshot};

use super::api::SentenceReply;
use super::engine::SentenceResult;
use super::api::{sentence_replies, DROPPED};

enum State {
    /// Tokens until the worker drops their sender (after it replied).
    Tokens { decoded: mpsc::UnboundedReceiver<(usize, String)>, results: oneshot::Receiver<Vec<SentenceResult>>, sentences: Vec<String>, model: String },
    /// The sentence events and `done`, left to send.
    Rest(std::vec::IntoIter<Event>),
}

/// The events of one streamed request: `decoded` brings its tokens, `results` its sentences.
pub fn events(
    model: String,
    sentences: Vec<String>,
    decoded: mpsc::UnboundedReceiver<(usize, String)>,
    results: oneshot::Receiver<Vec<SentenceResult>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let start = State::Tokens { decoded, results, sentences, model };
    let events = stream::unfold(start, |state| async move {
        let mut rest = match state {
            State::Tokens { mut decoded, results, sentences, model } => match decoded.recv().await {
                Some((index, token)) => {
                    let event = Event::default().event("token").data(serde_json::json!({ "index": index, "token": token }).to_string());
                    return Some((Ok(event), State::Tokens { decoded, results, sentences, model }));
                }
                None => finished(results.await.ok(), sentences, &model),
            },
            State::Rest(rest) => rest,
        };
        rest.next().map(|event| (Ok(event), State::Rest(rest)))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[derive(serde::Serialize)]
struct Indexed<'a> {
    index: usize,
    #[serde(flatten)]
    reply: &'a SentenceReply,
}

/// Each sentence's event in order, then `done`; or `error` when the worker dropped the request.
fn finished(results: Option<Vec<SentenceResult>>, sentences: Vec<String>, model: &str) -> std::vec::IntoIter<Event> {
    let Some(results) = results else {
        let error = serde_json::json!({ "error": DROPPED });
        return vec![Event::default().event("error").data(error.to_string())].into_iter();
    };
    let mut events: Vec<Event> = sentence_replies(sentences, results)
        .into_iter()
        .enumerate()
        .map(|(index, reply)| {
            // serialized as the reply without `stream` is (its f32 scores printed as f32)
            let data = serde_json::to_string(&Indexed { index, reply: &reply }).unwrap_or_default();
            Event::default().event("sentence").data(data)
        })
        .collect();
    events.push(Event::default().event("done").data(serde_json::json!({ "model": model }).to_string()));
    events.into_iter()
}
