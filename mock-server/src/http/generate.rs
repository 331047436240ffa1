//! The generation handlers: native `/generate`, OpenAI completions and chat, each streamed or
//! collected whole.

use super::parse::{
    chat_prompt, check_lengths, completion_prompt, parse_body, parse_native, parse_openai,
    NativeRequest, OpenAiOptions, RawBody, Sampling,
};
use super::render::{Collected, Dialect, Renderer};
use super::sse::stream_response;
use super::{aborted_body, native_error, openai_error, validation_error, AppState};
use crate::engine::{GenRequest, StreamEvent};
use crate::listen::RxStamp;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

/// Why a collected generation has no answer.
pub(super) enum Interrupted {
    /// The engine refused the request; the client gets this message.
    Error(String),
    /// The server crashed (or the engine went away): the connection is cut.
    Crashed,
}

/// Collects a whole (non-streaming) generation.
pub(super) async fn collect(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
) -> Result<Collected, Interrupted> {
    let mut ids = Vec::new();
    let mut first_at_ns = None;
    while let Some(ev) = rx.recv().await {
        match ev {
            StreamEvent::Tokens {
                at_ns,
                new_ids,
                cached_tokens,
                finish,
                speculative,
                times,
                ..
            } => {
                ids.extend(new_ids);
                let first_at_ns = *first_at_ns.get_or_insert(at_ns);
                if finish.is_some() {
                    return Ok(Collected {
                        completion: ids.len(),
                        ids,
                        cached: cached_tokens,
                        finish,
                        speculative,
                        at_ns,
                        first_at_ns,
                        times,
                    });
                }
            }
            StreamEvent::Error(m) => return Err(Interrupted::Error(m)),
            StreamEvent::Crash(_) => return Err(Interrupted::Crashed),
        }
    }
    Err(Interrupted::Crashed)
}

/// Hands a request to the engine; a duplicate rid or a stopped engine is the response to send.
#[allow(clippy::result_large_err)]
pub(super) fn submit(
    st: &AppState,
    rid: &str,
    prompt: Vec<u32>,
    c: &Sampling,
    received: Instant,
    arrived_unix_ns: Option<u64>,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<StreamEvent>, Response> {
    let engine = st.engine();
    if engine.shared.truth.contains(rid) {
        return Err(native_error(
            StatusCode::BAD_REQUEST,
            format!("duplicate request id (rid) {rid:?}"),
        ));
    }
    engine
        .submit(GenRequest {
            rid: rid.to_string(),
            input_ids: prompt,
            max_new_tokens: c.max_new,
            min_new_tokens: c.min_new.min(c.max_new),
            ignore_eos: c.ignore_eos,
            stop_token_ids: c.stop_token_ids.clone(),
            received,
            arrived_unix_ns,
        })
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response())
}

/// `POST /generate`.
pub(super) async fn generate(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Response {
    let received = Instant::now();
    let arrived = socket_arrival(stamp);
    let cfg = st.engine().shared.config.clone();
    let m = match parse_body(body) {
        Ok(m) => m,
        Err((StatusCode::BAD_REQUEST, e)) => return validation_error(e),
        Err((s, e)) => return native_error(s, e),
    };
    // SGLang checks these inside the request's generator, after the response has begun: a
    // streamed request gets HTTP 200 and the error as its one event, a plain one a 400.
    let streamed = m.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(e) = negative_max_new_tokens(&m) {
        return late_error(streamed, e);
    }
    let NativeRequest {
        prompt,
        sampling: c,
        stream,
        rid,
        return_logprob,
    } = match parse_native(&m, cfg.vocab_size) {
        Ok(p) => p,
        Err(e) => return validation_error(e),
    };
    if let Err(e) = check_lengths(st.context_length(), &prompt, c.max_new) {
        return late_error(stream, e);
    }
    let rid = rid.unwrap_or_else(|| st.next_id());
    let prompt_tokens = prompt.len();
    let mut rx = match submit(&st, &rid, prompt, &c, received, arrived) {
        Ok(rx) => rx,
        Err(r) => return r,
    };
    let mut ctx = Renderer::new(Dialect::Native, rid, &cfg, received, prompt_tokens);
    ctx.incremental = cfg.incremental_streaming_output;
    ctx.logprobs = return_logprob;
    if stream {
        return stream_response(ctx, rx, &headers, st.engine().shared.truth.clone());
    }
    match collect(&mut rx).await {
        Ok(c) => {
            ctx.incremental = false;
            ctx.streamed = false;
            let mut buf = Vec::new();
            ctx.native(&mut buf, &c);
            ([(header::CONTENT_TYPE, "application/json")], buf).into_response()
        }
        Err(Interrupted::Error(e)) => native_error(StatusCode::BAD_REQUEST, e),
        Err(Interrupted::Crashed) => aborted_body(),
    }
}

/// SGLang's message for a negative `sampling_params.max_new_tokens`, when the request has one.
fn negative_max_new_tokens(m: &Map<String, Value>) -> Option<String> {
    let v = m.get("sampling_params")?.get("max_new_tokens")?.as_i64()?;
    (v < 0).then(|| format!("max_new_tokens must be at least 0, got {v}."))
}

/// An error SGLang finds after the response began: for a streamed request, HTTP 200 with the
/// error as an event (`{"error": {message, type, code, retryable}}`) and `[DONE]`; else a 400.
fn late_error(streamed: bool, message: String) -> Response {
    if !streamed {
        return native_error(StatusCode::BAD_REQUEST, message);
    }
    let event = json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "code": 400,
        "retryable": false,
    }});
    let body = format!("data: {event}\n\ndata: [DONE]\n\n");
    (
        [(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Seconds since the Unix epoch (OpenAI's `created`).
pub(super) fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `POST /v1/completions` and `POST /v1/chat/completions`.
async fn openai(
    st: AppState,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
    dialect: Dialect,
) -> Response {
    let received = Instant::now();
    let arrived = socket_arrival(stamp);
    let cfg = st.engine().shared.config.clone();
    let m = match parse_body(body) {
        Ok(m) => m,
        Err((StatusCode::BAD_REQUEST, e)) => return validation_error(e),
        Err((s, e)) => return openai_error(s, e),
    };
    let vocab = cfg.vocab_size;
    let prompt = if dialect == Dialect::Chat {
        chat_prompt(m.get("messages"), vocab)
    } else {
        completion_prompt(m.get("prompt"), vocab)
    };
    let prompt = match prompt {
        Ok(p) => p,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, e),
    };
    let OpenAiOptions {
        sampling: c,
        stream,
        include_usage,
        continuous_usage,
        rid,
    } = match parse_openai(&m) {
        Ok(x) => x,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, e),
    };
    if let Err(e) = check_lengths(st.context_length(), &prompt, c.max_new) {
        return openai_error(StatusCode::BAD_REQUEST, e);
    }
    let id = rid.unwrap_or_else(|| {
        let p = if dialect == Dialect::Chat {
            "chatcmpl-"
        } else {
            "cmpl-"
        };
        format!("{p}{}", st.next_id())
    });
    let prompt_tokens = prompt.len();
    let mut rx = match submit(&st, &id, prompt, &c, received, arrived) {
        Ok(rx) => rx,
        Err(r) => return r,
    };
    let mut ctx = Renderer::new(dialect, id, &cfg, received, prompt_tokens);
    ctx.created = created();
    ctx.incremental = true;
    ctx.include_usage = include_usage;
    ctx.continuous_usage = continuous_usage;
    if stream {
        return stream_response(ctx, rx, &headers, st.engine().shared.truth.clone());
    }
    match collect(&mut rx).await {
        Ok(c) => axum::Json(ctx.openai_response(&c)).into_response(),
        Err(Interrupted::Error(e)) => openai_error(StatusCode::BAD_REQUEST, e),
        Err(Interrupted::Crashed) => aborted_body(),
    }
}

/// `POST /v1/completions`.
pub(super) async fn completions(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Response {
    openai(st, stamp, headers, body, Dialect::Completions).await
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Response {
    openai(st, stamp, headers, body, Dialect::Chat).await
}

/// When the request's last bytes reached the socket (see [`crate::listen`]); `None` without a
/// timestamped connection (an in-process router, a platform without receive timestamps).
fn socket_arrival(stamp: Option<Extension<ConnectInfo<RxStamp>>>) -> Option<u64> {
    stamp.and_then(|Extension(ConnectInfo(stamp))| stamp.unix_ns())
}
