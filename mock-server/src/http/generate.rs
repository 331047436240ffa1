//! The generation handlers: native `/generate`, OpenAI completions and chat, each streamed or
//! collected whole.

use super::error::ApiError;
use super::parse::{
    chat_prompt, check_lengths, completion_prompt, parse_body, parse_native, parse_openai,
    NativeRequest, OpenAiOptions, RawBody, Sampling,
};
use super::render::{Collected, Dialect, RenderOptions, Renderer};
use super::sse::stream_response;
use super::AppState;
use crate::engine::{GenRequest, StreamEvent};
use crate::listen::RxStamp;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{Map, Value};
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
                        speculative: speculative.map(|s| *s),
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

/// Hands a request to the engine; a duplicate rid or a stopped engine is refused.
pub(super) fn submit(
    st: &AppState,
    rid: &str,
    prompt: Vec<u32>,
    c: &Sampling,
    received: Instant,
    arrived_unix_ns: Option<u64>,
) -> Result<tokio::sync::mpsc::UnboundedReceiver<StreamEvent>, ApiError> {
    let engine = st.engine();
    if engine.shared.truth.contains(rid) {
        return Err(ApiError::Native(
            StatusCode::BAD_REQUEST,
            format!("duplicate request id (rid) {rid:?}"),
        ));
    }
    engine
        .submit(GenRequest {
            rid: rid.to_string(),
            input_ids: std::sync::Arc::new(prompt),
            max_new_tokens: c.max_new,
            min_new_tokens: c.min_new.min(c.max_new),
            ignore_eos: c.ignore_eos,
            stop_token_ids: c.stop_token_ids.clone(),
            received,
            arrived_unix_ns,
        })
        .map_err(|e| ApiError::Unavailable(e.to_string()))
}

/// `POST /generate`.
pub(super) async fn generate(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let arrived = socket_arrival(stamp);
    let cfg = st.engine().shared.config.clone();
    let m = parse_body(body).map_err(|e| match e {
        (StatusCode::BAD_REQUEST, e) => ApiError::Validation(e),
        (s, e) => ApiError::Native(s, e),
    })?;
    // SGLang checks these inside the request's generator, after the response has begun: a
    // streamed request gets HTTP 200 and the error as its one event, a plain one a 400.
    let streamed = m.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(message) = negative_max_new_tokens(&m) {
        return Err(ApiError::Late { streamed, message });
    }
    let NativeRequest {
        prompt,
        sampling: c,
        stream,
        rid,
        return_logprob,
    } = parse_native(&m, cfg.vocab_size).map_err(ApiError::Validation)?;
    check_lengths(st.context_length(), prompt.len(), c.max_new).map_err(|message| {
        ApiError::Late {
            streamed: stream,
            message,
        }
    })?;
    let rid = rid.unwrap_or_else(|| st.next_id());
    let prompt_tokens = prompt.len();
    let mut rx = submit(&st, &rid, prompt, &c, received, arrived)?;
    let opts = RenderOptions {
        dialect: Dialect::Native,
        rid,
        model: cfg.served_model_name.clone(),
        created: 0,
        received,
        prompt_tokens,
        // A whole answer carries the whole output.
        incremental: stream && cfg.incremental_streaming_output,
        cache_report: cfg.enable_cache_report,
        include_usage: false,
        continuous_usage: false,
        metrics: cfg.enable_metrics,
        logprobs: return_logprob,
        way_ns: cfg.way_ns(),
        streamed: stream,
    };
    let mut ctx = Renderer::new(opts);
    if stream {
        let truth = st.engine().shared.truth.clone();
        return Ok(stream_response(ctx, rx, &headers, truth));
    }
    let c = collect(&mut rx).await.map_err(|i| match i {
        Interrupted::Error(e) => ApiError::Native(StatusCode::BAD_REQUEST, e),
        Interrupted::Crashed => ApiError::Aborted,
    })?;
    let mut buf = Vec::new();
    ctx.native(&mut buf, &c);
    Ok(([(header::CONTENT_TYPE, "application/json")], buf).into_response())
}

/// SGLang's message for a negative `sampling_params.max_new_tokens`, when the request has one.
fn negative_max_new_tokens(m: &Map<String, Value>) -> Option<String> {
    let v = m.get("sampling_params")?.get("max_new_tokens")?.as_i64()?;
    (v < 0).then(|| format!("max_new_tokens must be at least 0, got {v}."))
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
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let arrived = socket_arrival(stamp);
    let cfg = st.engine().shared.config.clone();
    let m = parse_body(body).map_err(|e| match e {
        (StatusCode::BAD_REQUEST, e) => ApiError::Validation(e),
        (s, e) => ApiError::OpenAi(s, e),
    })?;
    let bad = |e| ApiError::OpenAi(StatusCode::BAD_REQUEST, e);
    let vocab = cfg.vocab_size;
    let prompt = if dialect == Dialect::Chat {
        chat_prompt(m.get("messages"), vocab)
    } else {
        completion_prompt(m.get("prompt"), vocab)
    };
    let prompt = prompt.map_err(bad)?;
    let OpenAiOptions {
        sampling: c,
        stream,
        include_usage,
        continuous_usage,
        rid,
    } = parse_openai(&m).map_err(bad)?;
    check_lengths(st.context_length(), prompt.len(), c.max_new).map_err(bad)?;
    let id = rid.unwrap_or_else(|| {
        let p = if dialect == Dialect::Chat {
            "chatcmpl-"
        } else {
            "cmpl-"
        };
        format!("{p}{}", st.next_id())
    });
    let prompt_tokens = prompt.len();
    let mut rx = submit(&st, &id, prompt, &c, received, arrived)?;
    let opts = RenderOptions {
        dialect,
        rid: id,
        model: cfg.served_model_name.clone(),
        created: created(),
        received,
        prompt_tokens,
        incremental: true,
        cache_report: cfg.enable_cache_report,
        include_usage,
        continuous_usage,
        metrics: cfg.enable_metrics,
        logprobs: false,
        streamed: stream,
        way_ns: cfg.way_ns(),
    };
    if stream {
        let truth = st.engine().shared.truth.clone();
        return Ok(stream_response(Renderer::new(opts), rx, &headers, truth));
    }
    let c = collect(&mut rx).await.map_err(|i| match i {
        Interrupted::Error(e) => bad(e),
        Interrupted::Crashed => ApiError::Aborted,
    })?;
    Ok(axum::Json(opts.openai_response(&c)).into_response())
}

/// `POST /v1/completions`.
pub(super) async fn completions(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    openai(st, stamp, headers, body, Dialect::Completions).await
}

/// `POST /v1/chat/completions`.
pub(super) async fn chat(
    State(st): State<AppState>,
    stamp: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: RawBody,
) -> Result<Response, ApiError> {
    openai(st, stamp, headers, body, Dialect::Chat).await
}

/// When the request's last bytes reached the socket (see [`crate::listen`]); `None` without a
/// timestamped connection (an in-process router, a platform without receive timestamps).
fn socket_arrival(stamp: Option<Extension<ConnectInfo<RxStamp>>>) -> Option<u64> {
    stamp.and_then(|Extension(ConnectInfo(stamp))| stamp.unix_ns())
}
