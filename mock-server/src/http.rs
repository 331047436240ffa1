//! Axum routes for SGLang's HTTP API: native `/generate`, OpenAI completions and chat, cache
//! control, health, model and server info, metrics, tokenize and debug ground truth.

use crate::engine::{EngineHandle, Finish, GenRequest, SpecStats, StreamEvent};
use crate::tokenizer;
use crate::truth::GroundTruth;
use crate::wire::RxStamp;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{json, Map, Value};
use std::sync::{Arc, RwLock};
use tokio::time::Instant;

/// Everything a handler needs: the engine (swapped on an OOM restart) and start-up state.
#[derive(Clone)]
pub struct AppState {
    engine: Arc<RwLock<EngineHandle>>,
    /// While `Some(t)` and now < t, the server answers 503 ("starting up").
    starting_until: Arc<RwLock<Option<Instant>>>,
    counter: Arc<std::sync::atomic::AtomicU64>,
}

impl AppState {
    pub fn new(engine: EngineHandle) -> Self {
        AppState {
            engine: Arc::new(RwLock::new(engine)),
            starting_until: Arc::new(RwLock::new(None)),
            counter: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }
    pub fn engine(&self) -> EngineHandle {
        self.engine
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    pub fn replace_engine(&self, e: EngineHandle) {
        *self.engine.write().unwrap_or_else(|p| p.into_inner()) = e;
    }
    pub fn set_starting_until(&self, t: Option<Instant>) {
        *self
            .starting_until
            .write()
            .unwrap_or_else(|p| p.into_inner()) = t;
    }
    fn starting(&self) -> bool {
        self.starting_until
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| Instant::now() < t)
    }
    fn next_id(&self) -> String {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{:032x}", u128::from(n) ^ 0x6d6f_636b_0000_0000)
    }
}

/// The router; tests can drive it with `tower::ServiceExt::oneshot`.
pub fn app(state: AppState) -> Router {
    let limit = state.engine().shared.config.max_body_bytes;
    let mut r = Router::new()
        .route("/generate", post(generate))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
        .route("/health", get(health))
        .route("/health_generate", get(health_generate))
        .route("/model_info", get(model_info))
        .route("/get_model_info", get(model_info))
        .route("/server_info", get(server_info))
        .route("/get_server_info", get(server_info))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize))
        .route("/metrics", get(metrics));
    if state.engine().shared.config.debug_endpoints {
        r = r.route("/debug/requests/{rid}", get(debug_request));
    }
    r.fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// Refuses work while starting, after a crash, and without the API key (except on SGLang's
/// unauthenticated `/health*` and `/metrics*` paths).
async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let engine = st.engine();
    if engine.shared.crashed.borrow().is_some() && !engine.shared.config.restart_on_oom {
        // A dead process answers nothing: cut the connection.
        return aborted_body();
    }
    if st.starting() || !engine.is_alive() {
        return (StatusCode::SERVICE_UNAVAILABLE, "server is starting up").into_response();
    }
    // SGLang's middleware (`add_api_key_middleware`) lets `/health*` and `/metrics*` through.
    if !(path.starts_with("/health") || path.starts_with("/metrics")) {
        if let Some(key) = &engine.shared.config.api_key {
            let ok = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v == format!("Bearer {key}"));
            if !ok {
                return (
                    StatusCode::UNAUTHORIZED,
                    axum::Json(json!({"error": "Unauthorized"})),
                )
                    .into_response();
            }
        }
    }
    next.run(req).await
}

fn aborted_body() -> Response {
    let s = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("server crashed"))
    });
    Response::new(Body::from_stream(s))
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"detail": "Not Found"})),
    )
        .into_response()
}

fn openai_error(status: StatusCode, msg: impl Into<String>) -> Response {
    let kind = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
        StatusCode::UNPROCESSABLE_ENTITY => "UnprocessableEntity",
        _ => "BadRequestError",
    };
    (
        status,
        axum::Json(json!({"object": "error", "message": msg.into(), "type": kind, "param": null, "code": status.as_u16()})),
    )
        .into_response()
}

fn native_error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": msg.into()}})),
    )
        .into_response()
}

type Body2 = Result<Bytes, axum::extract::rejection::BytesRejection>;

fn parse_body(body: Body2) -> Result<Map<String, Value>, (StatusCode, String)> {
    let bytes = body.map_err(|e| {
        (
            e.status(),
            format!("could not read the request body: {}", e.body_text()),
        )
    })?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("malformed JSON body: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err((
            StatusCode::BAD_REQUEST,
            "the request body must be a JSON object".into(),
        )),
    }
}

fn get_uint(m: &Map<String, Value>, key: &str) -> Result<Option<usize>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if i < 0 => Err(format!("{key} must be non-negative, got {i}")),
            Some(i) => Ok(Some(i as usize)),
            None => Err(format!("{key} must be an integer, got {n}")),
        },
        Some(other) => Err(format!("{key} must be an integer, got {other}")),
    }
}

fn get_bool(m: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("{key} must be a boolean, got {other}")),
    }
}

fn get_ids(v: &Value, what: &str, vocab: u32) -> Result<Vec<u32>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("{what} must be a list of token ids"))?;
    arr.iter()
        .map(|x| match x.as_u64() {
            Some(i) if i < u64::from(vocab) => Ok(i as u32),
            Some(i) => Err(format!(
                "{what}: token id {i} is outside the vocabulary (size {vocab})"
            )),
            None => Err(format!(
                "{what} must contain non-negative integer token ids, got {x}"
            )),
        })
        .collect()
}

struct Common {
    max_new: usize,
    min_new: usize,
    ignore_eos: bool,
    stop_token_ids: Vec<u32>,
}

fn check_lengths(st: &AppState, prompt: &[u32], max_new: usize) -> Result<(), String> {
    let ctx = st.engine().shared.config.context_length;
    if prompt.is_empty() {
        return Err("the prompt is empty: at least one input token is required".into());
    }
    if prompt.len() >= ctx {
        return Err(format!(
            "The input ({} tokens) is longer than the model's context length ({ctx} tokens).",
            prompt.len()
        ));
    }
    if prompt.len() + max_new > ctx {
        return Err(format!(
            "Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested a total of {} tokens: {} tokens from the input messages and {max_new} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
            prompt.len() + max_new,
            prompt.len()
        ));
    }
    Ok(())
}

/// Faults requested with the `x-mock-fault` header, e.g. `reset-after=3,stall-ms=500,split`.
#[derive(Default, Clone)]
struct Faults {
    reset_after: Option<usize>,
    error_after: Option<usize>,
    stall_ms: Option<u64>,
    split: bool,
    pack: bool,
}

fn faults(h: &HeaderMap) -> Faults {
    let mut f = Faults::default();
    let Some(v) = h.get("x-mock-fault").and_then(|v| v.to_str().ok()) else {
        return f;
    };
    for part in v.split(',').map(str::trim) {
        let (k, val) = part.split_once('=').unwrap_or((part, ""));
        match k {
            "reset-after" => f.reset_after = val.parse().ok(),
            "error-after" => f.error_after = val.parse().ok(),
            "stall-ms" => f.stall_ms = val.parse().ok(),
            "split" => f.split = true,
            "pack" => f.pack = true,
            _ => {}
        }
    }
    f
}

#[derive(Clone, Copy, PartialEq)]
enum Dialect {
    Native,
    Completions,
    Chat,
}

struct Ctx {
    dialect: Dialect,
    rid: String,
    model: String,
    created: u64,
    received: Instant,
    incremental: bool,
    cache_report: bool,
    include_usage: bool,
    continuous_usage: bool,
    /// Native cumulative output so far, as JSON: the ids comma-separated, the text escaped.
    ids_json: Vec<u8>,
    text_json: Vec<u8>,
    prompt_tokens: usize,
}

fn finish_str(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(_)) => json!("length"),
        Some(Finish::Stop(_)) => json!("stop"),
    }
}

impl Ctx {
    fn usage(&self, completion: usize, cached: usize) -> Value {
        let details = if self.cache_report {
            json!({"cached_tokens": cached})
        } else {
            Value::Null
        };
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
               "total_tokens": self.prompt_tokens + completion, "prompt_tokens_details": details})
    }

    /// One native event (or the non-streaming answer) as JSON, written directly: this is the
    /// hot path at thousands of streams, and cumulative output makes every event longer.
    fn native(&mut self, buf: &mut Vec<u8>, o: &Collected) {
        use std::io::Write;
        let (new_ids, cached, completion) = (&o.ids[..], o.cached, o.completion);
        let (finish, spec, at_ns) = (&o.finish, &o.spec, o.at_ns);
        // Only the new tokens are rendered; cumulative output appends them to the JSON kept from
        // the events before (escaping is per character, so escaped pieces concatenate).
        let mut new_ids_json = Vec::with_capacity(new_ids.len() * 6);
        let mut num = itoa::Buffer::new();
        for id in new_ids {
            if !new_ids_json.is_empty() {
                new_ids_json.push(b',');
            }
            new_ids_json.extend_from_slice(num.format(*id).as_bytes());
        }
        let new_text = serde_json::to_vec(&tokenizer::decode(new_ids)).unwrap_or_default();
        let new_text = new_text
            .get(1..new_text.len().saturating_sub(1))
            .unwrap_or_default();
        let (ids, text): (&[u8], &[u8]) = if self.incremental {
            (&new_ids_json, new_text)
        } else {
            if !self.ids_json.is_empty() && !new_ids_json.is_empty() {
                self.ids_json.push(b',');
            }
            self.ids_json.extend_from_slice(&new_ids_json);
            self.text_json.extend_from_slice(new_text);
            (&self.ids_json, &self.text_json)
        };
        // Writing into a Vec cannot fail; the results are ignored for that reason.
        buf.extend_from_slice(b"{\"text\":\"");
        buf.extend_from_slice(text);
        buf.extend_from_slice(b"\",\"output_ids\":[");
        buf.extend_from_slice(ids);
        buf.extend_from_slice(b"],\"meta_info\":{\"id\":");
        let _ = serde_json::to_writer(&mut *buf, &self.rid);
        buf.extend_from_slice(b",\"finish_reason\":");
        match finish {
            None => buf.extend_from_slice(b"null"),
            Some(Finish::Length(n)) => {
                let _ = write!(buf, "{{\"type\":\"length\",\"length\":{n}}}");
            }
            Some(Finish::Stop(t)) => {
                let _ = write!(buf, "{{\"type\":\"stop\",\"matched\":{t}}}");
            }
        }
        let _ = write!(
            buf,
            ",\"prompt_tokens\":{},\"completion_tokens\":{completion},\"cached_tokens\":{cached}",
            self.prompt_tokens
        );
        if finish.is_some() {
            buf.extend_from_slice(b",\"e2e_latency\":");
            // The instant the engine handed the final chunk over.
            let _ = serde_json::to_writer(&mut *buf, &(at_ns as f64 / 1e9));
            if let Some(s) = spec {
                let _ = write!(
                    buf,
                    ",\"spec_verify_ct\":{},\"spec_accept_length\":",
                    s.verify_ct
                );
                let _ = serde_json::to_writer(&mut *buf, &s.accept_length);
                buf.extend_from_slice(b",\"spec_accept_rate\":");
                let _ = serde_json::to_writer(&mut *buf, &s.accept_rate);
                buf.extend_from_slice(b",\"spec_accept_histogram\":");
                let _ = serde_json::to_writer(&mut *buf, &s.histogram);
            }
        }
        buf.extend_from_slice(b"},\"index\":0}");
    }

    fn openai_chunk(
        &self,
        new_ids: &[u32],
        completion: usize,
        cached: usize,
        finish: &Option<Finish>,
    ) -> Value {
        let text = tokenizer::decode(new_ids);
        let usage = if self.continuous_usage {
            self.usage(completion, cached)
        } else {
            Value::Null
        };
        match self.dialect {
            Dialect::Chat => {
                json!({"id": self.rid, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model, "choices": [{"index": 0, "delta": {"content": text},
                "logprobs": null, "finish_reason": null, "matched_stop": null}], "usage": usage})
            }
            _ => {
                json!({"id": self.rid, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish_str(finish),
                "matched_stop": matched(finish)}], "usage": usage})
            }
        }
    }
}

fn matched(f: &Option<Finish>) -> Value {
    match f {
        Some(Finish::Stop(t)) => json!(t),
        _ => Value::Null,
    }
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// Turns one engine event into SSE writes; `None` means cut the connection.
fn render(ctx: &mut Ctx, ev: StreamEvent) -> (Vec<Bytes>, bool) {
    match ev {
        StreamEvent::Tokens {
            at_ns,
            new_ids,
            cached_tokens,
            completion_tokens,
            finish,
            spec,
            ..
        } => {
            let mut out = Vec::new();
            if ctx.dialect == Dialect::Native {
                let mut buf = Vec::with_capacity(256 + ctx.ids_json.len() + ctx.text_json.len());
                buf.extend_from_slice(b"data: ");
                ctx.native(
                    &mut buf,
                    &Collected {
                        ids: new_ids,
                        cached: cached_tokens,
                        completion: completion_tokens,
                        finish: finish.clone(),
                        spec,
                        at_ns,
                    },
                );
                buf.extend_from_slice(b"\n\n");
                out.push(Bytes::from(buf));
            } else {
                out.push(sse(&ctx.openai_chunk(
                    &new_ids,
                    completion_tokens,
                    cached_tokens,
                    &finish,
                )));
                if finish.is_some() {
                    if ctx.dialect == Dialect::Chat {
                        let usage = if ctx.continuous_usage {
                            ctx.usage(completion_tokens, cached_tokens)
                        } else {
                            Value::Null
                        };
                        out.push(sse(&json!({"id": ctx.rid, "object": "chat.completion.chunk", "created": ctx.created,
                            "model": ctx.model, "choices": [{"index": 0, "delta": {}, "logprobs": null,
                            "finish_reason": finish_str(&finish), "matched_stop": matched(&finish)}], "usage": usage})));
                    }
                    if ctx.include_usage {
                        let obj = if ctx.dialect == Dialect::Chat {
                            "chat.completion.chunk"
                        } else {
                            "text_completion"
                        };
                        out.push(sse(&json!({"id": ctx.rid, "object": obj, "created": ctx.created, "model": ctx.model,
                            "choices": [], "usage": ctx.usage(completion_tokens, cached_tokens)})));
                    }
                }
            }
            let done = finish.is_some();
            if done {
                out.push(Bytes::from_static(b"data: [DONE]\n\n"));
            }
            (out, done)
        }
        StreamEvent::Error(m) => (
            vec![
                sse(&json!({"error": {"message": m}})),
                Bytes::from_static(b"data: [DONE]\n\n"),
            ],
            true,
        ),
        StreamEvent::Crash(_) => (Vec::new(), true),
    }
}

type Item = Result<Bytes, std::io::Error>;

/// One SSE response: events are rendered when the connection polls for them, so the instant an
/// event is handed to the connection is known and goes into the ground truth (`sent_ns`).
struct StreamState {
    ctx: Ctx,
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    f: Faults,
    truth: GroundTruth,
    queue: std::collections::VecDeque<Item>,
    events: usize,
    packed: Vec<u8>,
    ended: bool,
}

impl StreamState {
    /// Waits for the next engine event and queues its writes.
    async fn next_event(&mut self) {
        let Some(ev) = self.rx.recv().await else {
            // The engine went away without finishing the request.
            self.fail("engine stopped");
            return;
        };
        if matches!(ev, StreamEvent::Crash(_)) {
            self.fail("server crashed");
            return;
        }
        self.events += 1;
        let f = &self.f;
        if f.reset_after.is_some_and(|n| self.events > n) {
            self.fail("fault: connection reset");
            return;
        }
        if f.error_after.is_some_and(|n| self.events > n) {
            self.queue.push_back(Ok(sse(
                &json!({"error": {"message": "fault: injected in-stream error"}}),
            )));
            self.queue
                .push_back(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
            self.ended = true;
            return;
        }
        if self.events == 2 {
            if let Some(ms) = f.stall_ms {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
        let chunk = match &ev {
            StreamEvent::Tokens { chunk, .. } => Some(*chunk),
            _ => None,
        };
        let (writes, done) = render(&mut self.ctx, ev);
        for w in writes {
            if self.f.pack {
                self.packed.extend_from_slice(&w);
            } else if self.f.split && w.len() > 1 {
                let mid = w.len() / 2;
                self.queue.push_back(Ok(w.slice(..mid)));
                self.queue.push_back(Ok(w.slice(mid..)));
            } else {
                self.queue.push_back(Ok(w));
            }
        }
        if self.f.pack && (done || self.packed.len() > 4096) {
            let packed = std::mem::take(&mut self.packed);
            self.queue.push_back(Ok(Bytes::from(packed)));
        }
        self.ended = done;
        if let Some(chunk) = chunk {
            let sent = self.ctx.received.elapsed().as_nanos() as u64;
            self.truth.record_sent(&self.ctx.rid, chunk, sent);
        }
    }

    /// Cuts the connection without `[DONE]`.
    fn fail(&mut self, why: &'static str) {
        self.queue.push_back(Err(std::io::Error::other(why)));
        self.ended = true;
    }
}

fn stream_response(
    ctx: Ctx,
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    f: Faults,
    truth: GroundTruth,
) -> Response {
    let mut state = StreamState {
        ctx,
        rx,
        f,
        truth,
        queue: std::collections::VecDeque::new(),
        events: 0,
        packed: Vec::new(),
        ended: false,
    };
    if state.ctx.dialect == Dialect::Chat {
        let c = &state.ctx;
        let first = json!({"id": c.rid, "object": "chat.completion.chunk", "created": c.created,
            "model": c.model, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
            "logprobs": null, "finish_reason": null, "matched_stop": null}], "usage": null});
        state.queue.push_back(Ok(sse(&first)));
    }
    let s = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.ended {
                return None;
            }
            st.next_event().await;
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Output tokens with their meta data: one stream event, or a whole (non-streaming) generation.
struct Collected {
    ids: Vec<u32>,
    cached: usize,
    completion: usize,
    finish: Option<Finish>,
    spec: Option<SpecStats>,
    /// Modelled instant of the final chunk, ns since the request was received.
    at_ns: u64,
}

/// Collects a whole (non-streaming) generation; `Err(None)` means the server crashed.
async fn collect(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
) -> Result<Collected, Option<String>> {
    let mut ids = Vec::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            StreamEvent::Tokens {
                at_ns,
                new_ids,
                cached_tokens,
                finish,
                spec,
                ..
            } => {
                ids.extend(new_ids);
                if finish.is_some() {
                    return Ok(Collected {
                        completion: ids.len(),
                        ids,
                        cached: cached_tokens,
                        finish,
                        spec,
                        at_ns,
                    });
                }
            }
            StreamEvent::Error(m) => return Err(Some(m)),
            StreamEvent::Crash(_) => return Err(None),
        }
    }
    Err(None)
}

#[allow(clippy::result_large_err)]
fn submit(
    st: &AppState,
    rid: &str,
    prompt: Vec<u32>,
    c: &Common,
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
        .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e).into_response())
}

async fn generate(
    State(st): State<AppState>,
    wire: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: Body2,
) -> Response {
    let received = Instant::now();
    let arrived = socket_arrival(wire);
    let cfg = st.engine().shared.config.clone();
    let m = match parse_body(body) {
        Ok(m) => m,
        Err((s, e)) => return native_error(s, e),
    };
    let parsed = (|| -> Result<(Vec<u32>, Common, bool, Option<String>), String> {
        let prompt = match (m.get("text"), m.get("input_ids")) {
            (Some(t), Some(i)) if !t.is_null() && !i.is_null() => {
                return Err("Either text or input_ids should be provided, not both.".into())
            }
            (Some(Value::String(t)), _) => tokenizer::encode(t, cfg.vocab_size),
            (Some(t), _) if !t.is_null() => return Err(format!("text must be a string, got {t}")),
            (_, Some(i)) if !i.is_null() => get_ids(i, "input_ids", cfg.vocab_size)?,
            _ => return Err("Either text or input_ids should be provided.".into()),
        };
        let empty = Map::new();
        let sp = match m.get("sampling_params") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(o)) => o,
            Some(o) => return Err(format!("sampling_params must be an object, got {o}")),
        };
        if let Some(t) = sp.get("temperature") {
            if !t.is_null() && !t.as_f64().is_some_and(|x| x >= 0.0) {
                return Err(format!(
                    "temperature must be a non-negative number, got {t}"
                ));
            }
        }
        let stop_token_ids = match sp.get("stop_token_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => get_ids(v, "stop_token_ids", cfg.vocab_size)?,
        };
        let c = Common {
            max_new: get_uint(sp, "max_new_tokens")?.unwrap_or(128),
            min_new: get_uint(sp, "min_new_tokens")?.unwrap_or(0),
            ignore_eos: get_bool(sp, "ignore_eos")?,
            stop_token_ids,
        };
        let rid = match m.get("rid") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(o) => return Err(format!("rid must be a non-empty string, got {o}")),
        };
        Ok((prompt, c, get_bool(&m, "stream")?, rid))
    })();
    let (prompt, c, stream, rid) = match parsed {
        Ok(p) => p,
        Err(e) => return native_error(StatusCode::BAD_REQUEST, e),
    };
    if let Err(e) = check_lengths(&st, &prompt, c.max_new) {
        return native_error(StatusCode::BAD_REQUEST, e);
    }
    let rid = rid.unwrap_or_else(|| st.next_id());
    let prompt_tokens = prompt.len();
    let mut rx = match submit(&st, &rid, prompt, &c, received, arrived) {
        Ok(rx) => rx,
        Err(r) => return r,
    };
    let mut ctx = Ctx {
        dialect: Dialect::Native,
        rid,
        model: cfg.served_model_name.clone(),
        created: 0,
        received,
        incremental: cfg.incremental_streaming_output,
        cache_report: cfg.enable_cache_report,
        include_usage: false,
        continuous_usage: false,
        ids_json: Vec::new(),
        text_json: Vec::new(),
        prompt_tokens,
    };
    if stream {
        return stream_response(ctx, rx, faults(&headers), st.engine().shared.truth.clone());
    }
    match collect(&mut rx).await {
        Ok(c) => {
            ctx.incremental = false;
            let mut buf = Vec::new();
            ctx.native(&mut buf, &c);
            ([(header::CONTENT_TYPE, "application/json")], buf).into_response()
        }
        Err(Some(e)) => native_error(StatusCode::BAD_REQUEST, e),
        Err(None) => aborted_body(),
    }
}

fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn openai_common(
    m: &Map<String, Value>,
) -> Result<(Common, bool, bool, bool, Option<String>), String> {
    let max_new = match get_uint(m, "max_completion_tokens")? {
        Some(v) => Some(v),
        None => get_uint(m, "max_tokens")?,
    };
    let (mut inc, mut cont) = (false, false);
    match m.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            inc = get_bool(o, "include_usage")?;
            cont = get_bool(o, "continuous_usage_stats")?;
        }
        Some(o) => return Err(format!("stream_options must be an object, got {o}")),
    }
    let rid = match m.get("rid") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(o) => return Err(format!("rid must be a non-empty string, got {o}")),
    };
    Ok((
        Common {
            max_new: max_new.unwrap_or(16),
            min_new: get_uint(m, "min_tokens")?.unwrap_or(0),
            ignore_eos: get_bool(m, "ignore_eos")?,
            stop_token_ids: Vec::new(),
        },
        get_bool(m, "stream")?,
        inc,
        cont,
        rid,
    ))
}

async fn openai(
    st: AppState,
    wire: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: Body2,
    dialect: Dialect,
) -> Response {
    let received = Instant::now();
    let arrived = socket_arrival(wire);
    let cfg = st.engine().shared.config.clone();
    let m = match parse_body(body) {
        Ok(m) => m,
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
    let (c, stream, include_usage, continuous_usage, rid) = match openai_common(&m) {
        Ok(x) => x,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, e),
    };
    if let Err(e) = check_lengths(&st, &prompt, c.max_new) {
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
    let ctx = Ctx {
        dialect,
        rid: id,
        model: cfg.served_model_name.clone(),
        created: created(),
        received,
        incremental: true,
        cache_report: cfg.enable_cache_report,
        include_usage,
        continuous_usage,
        ids_json: Vec::new(),
        text_json: Vec::new(),
        prompt_tokens,
    };
    if stream {
        return stream_response(ctx, rx, faults(&headers), st.engine().shared.truth.clone());
    }
    match collect(&mut rx).await {
        Ok(Collected {
            ids,
            cached,
            finish,
            ..
        }) => {
            let text = tokenizer::decode(&ids);
            let usage = ctx.usage(ids.len(), cached);
            let choice = if dialect == Dialect::Chat {
                json!({"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null,
                       "finish_reason": finish_str(&finish), "matched_stop": matched(&finish)})
            } else {
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish_str(&finish),
                       "matched_stop": matched(&finish)})
            };
            let obj = if dialect == Dialect::Chat {
                "chat.completion"
            } else {
                "text_completion"
            };
            axum::Json(
                json!({"id": ctx.rid, "object": obj, "created": ctx.created, "model": ctx.model,
                "choices": [choice], "usage": usage}),
            )
            .into_response()
        }
        Err(Some(e)) => openai_error(StatusCode::BAD_REQUEST, e),
        Err(None) => aborted_body(),
    }
}

fn completion_prompt(p: Option<&Value>, vocab: u32) -> Result<Vec<u32>, String> {
    match p {
        None | Some(Value::Null) => Err("prompt is required".into()),
        Some(Value::String(s)) => Ok(tokenizer::encode(s, vocab)),
        Some(Value::Array(a)) if a.is_empty() => Err("the prompt is empty: at least one input token is required".into()),
        Some(Value::Array(a)) if a.iter().all(|x| x.is_number()) => get_ids(&Value::Array(a.clone()), "prompt", vocab),
        Some(Value::Array(a)) if a.len() == 1 => completion_prompt(a.first(), vocab),
        Some(Value::Array(_)) => Err("batched prompts (a list of several prompts) are not supported by the mock; send one prompt per request".into()),
        Some(o) => Err(format!("prompt must be a string, a list of token ids, or a list of either; got {o}")),
    }
}

/// Chat template of the mock: each message is its role word plus its content words, and one more
/// token opens the assistant's turn.
fn chat_prompt(m: Option<&Value>, vocab: u32) -> Result<Vec<u32>, String> {
    let msgs = m
        .and_then(Value::as_array)
        .ok_or_else(|| "messages must be a list of {role, content} objects".to_string())?;
    if msgs.is_empty() {
        return Err("messages must not be empty".into());
    }
    let mut ids = Vec::new();
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{i}].role must be a string"))?;
        ids.push(tokenizer::word_id(role, vocab));
        match msg.get("content") {
            Some(Value::String(s)) => ids.extend(tokenizer::encode(s, vocab)),
            Some(Value::Array(parts)) => {
                for p in parts {
                    let t = p
                        .get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("messages[{i}].content parts must be text parts"))?;
                    ids.extend(tokenizer::encode(t, vocab));
                }
            }
            None | Some(Value::Null) => {}
            Some(o) => {
                return Err(format!(
                    "messages[{i}].content must be a string or a list of parts, got {o}"
                ))
            }
        }
    }
    ids.push(tokenizer::word_id("assistant", vocab));
    Ok(ids)
}

async fn completions(
    State(st): State<AppState>,
    wire: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: Body2,
) -> Response {
    openai(st, wire, headers, body, Dialect::Completions).await
}

async fn chat(
    State(st): State<AppState>,
    wire: Option<Extension<ConnectInfo<RxStamp>>>,
    headers: HeaderMap,
    body: Body2,
) -> Response {
    openai(st, wire, headers, body, Dialect::Chat).await
}

/// When the request's last bytes reached the socket (see [`crate::wire`]); `None` without a
/// timestamped connection (an in-process router, a platform without receive timestamps).
fn socket_arrival(wire: Option<Extension<ConnectInfo<RxStamp>>>) -> Option<u64> {
    wire.and_then(|Extension(ConnectInfo(stamp))| stamp.unix_ns())
}

async fn flush_cache(State(st): State<AppState>) -> Response {
    match st.engine().flush_cache().await {
        Ok(true) => (
            StatusCode::OK,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        )
            .into_response(),
        Ok(false) => (
            StatusCode::BAD_REQUEST,
            "Cache not flushed: there are running or waiting requests.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}

async fn health() -> Response {
    StatusCode::OK.into_response()
}

async fn health_generate(State(st): State<AppState>) -> Response {
    let c = Common {
        max_new: 1,
        min_new: 0,
        ignore_eos: true,
        stop_token_ids: Vec::new(),
    };
    let rid = format!("HEALTH_CHECK_{}", st.next_id());
    let mut rx = match submit(&st, &rid, vec![0], &c, Instant::now(), None) {
        Ok(rx) => rx,
        Err(r) => return r,
    };
    match collect(&mut rx).await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn model_info(State(st): State<AppState>) -> Response {
    let c = &st.engine().shared.config;
    axum::Json(
        json!({"model_path": c.model_path, "tokenizer_path": c.model_path, "is_generation": true,
        "preferred_sampling_params": null, "weight_version": "default"}),
    )
    .into_response()
}

async fn server_info(State(st): State<AppState>) -> Response {
    let e = st.engine();
    let c = &e.shared.config;
    let b = &e.shared.budget;
    let s = e.stats();
    let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("api_key");
        o.insert("max_total_num_tokens".into(), json!(b.kv_pool_tokens));
        o.insert(
            "speculative_accept_length".into(),
            json!(if s.spec_verify_total > 0 {
                s.spec_tokens_total as f64 / s.spec_verify_total as f64
            } else {
                0.0
            }),
        );
        o.insert(
            "memory_usage".into(),
            json!({
                "total_gb": b.total_bytes as f64 / 1073741824.0,
                "weight": b.weights_bytes as f64 / 1073741824.0,
                "kvcache": (b.kv_pool_tokens as u64 * c.kv_bytes_per_token) as f64 / 1073741824.0,
                "free_headroom_gb": b.free_headroom_bytes as f64 / 1073741824.0,
                "token_usage": s.kv_used_tokens as f64 / b.kv_pool_tokens.max(1) as f64,
            }),
        );
        o.insert(
            "version".into(),
            json!(concat!("mock-", env!("CARGO_PKG_VERSION"))),
        );
    }
    axum::Json(v).into_response()
}

async fn models(State(st): State<AppState>) -> Response {
    let c = &st.engine().shared.config;
    axum::Json(json!({"object": "list", "data": [{"id": c.served_model_name, "object": "model", "created": created(),
        "owned_by": "sglang", "root": c.served_model_name, "max_model_len": c.context_length}]}))
    .into_response()
}

async fn tokenize(State(st): State<AppState>, body: Body2) -> Response {
    let vocab = st.engine().shared.config.vocab_size;
    let m = match parse_body(body) {
        Ok(m) => m,
        Err((s, e)) => return openai_error(s, e),
    };
    match m.get("prompt").or(m.get("text")) {
        Some(Value::String(s)) => {
            let t = tokenizer::encode(s, vocab);
            axum::Json(json!({"tokens": t, "count": t.len(), "max_model_len": st.engine().shared.config.context_length})).into_response()
        }
        _ => openai_error(StatusCode::BAD_REQUEST, "prompt must be a string"),
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    let e = st.engine();
    let s = e.stats();
    let pool = e.shared.budget.kv_pool_tokens.max(1) as f64;
    let hit = if s.prompt_tokens_total > 0 {
        s.cached_tokens_total as f64 / s.prompt_tokens_total as f64
    } else {
        0.0
    };
    let accept = if s.spec_verify_total > 0 {
        s.spec_tokens_total as f64 / s.spec_verify_total as f64
    } else {
        0.0
    };
    // Every series carries the served model's name, as SGLang labels its metrics.
    let label = format!(
        "model_name={}",
        serde_json::to_string(&e.shared.config.served_model_name).unwrap_or_default()
    );
    let mut out = String::new();
    for (name, kind, v) in [
        ("sglang:num_running_reqs", "gauge", s.num_running as f64),
        ("sglang:num_queue_reqs", "gauge", s.num_waiting as f64),
        ("sglang:num_used_tokens", "gauge", s.kv_used_tokens as f64),
        (
            "sglang:token_usage",
            "gauge",
            s.kv_used_tokens as f64 / pool,
        ),
        ("sglang:cache_hit_rate", "gauge", hit),
        ("sglang:gen_throughput", "gauge", s.last_gen_throughput),
        ("sglang:spec_accept_length", "gauge", accept),
        (
            "sglang:prompt_tokens_total",
            "counter",
            s.prompt_tokens_total as f64,
        ),
        (
            "sglang:generation_tokens_total",
            "counter",
            s.generation_tokens_total as f64,
        ),
        (
            "sglang:cached_tokens_total",
            "counter",
            s.cached_tokens_total as f64,
        ),
        (
            "sglang:num_requests_total",
            "counter",
            s.requests_total as f64,
        ),
        (
            "sglang:num_retracted_requests_total",
            "counter",
            s.retracted_total as f64,
        ),
    ] {
        out.push_str(&format!(
            "# HELP {name} {name}\n# TYPE {name} {kind}\n{name}{{{label}}} {v}\n"
        ));
    }
    s.ttft.render(
        &mut out,
        &label,
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
    );
    s.itl.render(
        &mut out,
        &label,
        "sglang:inter_token_latency_seconds",
        "Histogram of token-to-token latency in seconds.",
    );
    s.e2e.render(
        &mut out,
        &label,
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
    );
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

async fn debug_request(State(st): State<AppState>, Path(rid): Path<String>) -> Response {
    match st.engine().shared.truth.request(&rid) {
        Some(t) => axum::Json(t).into_response(),
        None => native_error(
            StatusCode::NOT_FOUND,
            format!("no request with rid {rid:?}"),
        ),
    }
}
