//! The router: every route, the guard in front of them (start-up, crash, API key), and the
//! handlers that are not generation.

use super::generate::{chat, collect, completions, created, generate, submit};
use super::parse::{parse_body, RawBody, Sampling};
use super::{aborted_body, native_error, openai_error, prometheus, AppState};
use crate::tokenizer;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use tokio::time::Instant;

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
        r = r
            .route("/debug/requests/{rid}", get(debug_request))
            .route("/debug/ttft", get(debug_ttft));
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

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"detail": "Not Found"})),
    )
        .into_response()
}

/// `GET` or `POST /flush_cache`: SGLang's answer, a plain body with no content type (a Starlette
/// `Response` without a media type).
async fn flush_cache(State(st): State<AppState>) -> Response {
    match st.engine().flush_cache().await {
        Ok(true) => untyped(
            StatusCode::OK,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        ),
        Ok(false) => untyped(
            StatusCode::BAD_REQUEST,
            "Cache not flushed: there are running or waiting requests.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        ),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}

/// A response whose body carries no `content-type` header.
fn untyped(status: StatusCode, body: &'static str) -> Response {
    let mut r = Response::new(axum::body::Body::from(body));
    *r.status_mut() = status;
    r
}

async fn health() -> Response {
    StatusCode::OK.into_response()
}

async fn health_generate(State(st): State<AppState>) -> Response {
    let c = Sampling {
        max_new: 1,
        min_new: 0,
        ignore_eos: true,
        stop_token_ids: Vec::new(),
    };
    let rid = format!("HEALTH_CHECK_{}", st.next_id());
    let mut rx = match submit(&st, &rid, vec![0], &c, Instant::now(), None) {
        Ok(rx) => rx,
        Err(e) => return e.into_response(),
    };
    match collect(&mut rx).await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

async fn model_info(State(st): State<AppState>) -> Response {
    let c = &st.engine().shared.config;
    axum::Json(
        json!({"model_path": c.model_path, "served_model_name": c.served_model_name,
        "tokenizer_path": c.model_path, "is_generation": true, "preferred_sampling_params": null,
        "weight_version": "default", "load_format": "auto", "reasoning_parser": null,
        "tool_call_parser": null, "disaggregation_mode": "null", "has_image_understanding": false,
        "has_audio_understanding": false, "model_type": "mock", "architectures": ["MockForCausalLM"]}),
    )
    .into_response()
}

async fn server_info(State(st): State<AppState>) -> Response {
    let e = st.engine();
    axum::Json(server_info_value(
        &e.shared.config,
        &e.shared.budget,
        &e.stats(),
    ))
    .into_response()
}

/// `GET /server_info`: the configuration (no key) with SGLang's derived fields.
pub(crate) fn server_info_value(
    c: &crate::Config,
    b: &crate::memory::MemoryBudget,
    s: &crate::engine::Stats,
) -> Value {
    let mut v = serde_json::to_value(c).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("api_key");
        o.insert("max_total_num_tokens".into(), json!(b.kv_pool_tokens));
        o.insert("enable_mixed_chunk".into(), json!(c.mixed_batches));
        o.insert("speculative_accept_length".into(), json!(s.accept_length()));
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
    v
}

async fn models(State(st): State<AppState>) -> Response {
    let c = &st.engine().shared.config;
    axum::Json(json!({"object": "list", "data": [{"id": c.served_model_name, "object": "model", "created": created(),
        "owned_by": "sglang", "root": c.served_model_name, "parent": null, "max_model_len": c.context_length}]}))
    .into_response()
}

async fn tokenize(State(st): State<AppState>, body: RawBody) -> Response {
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

/// `GET /metrics`: Prometheus text, with `enable_metrics`; else SGLang's 404 (no such route).
async fn metrics(State(st): State<AppState>) -> Response {
    let e = st.engine();
    if !e.shared.config.enable_metrics {
        return not_found().await;
    }
    let out = prometheus::text(&e.stats(), e.shared.budget.kv_pool_tokens, &e.shared.config);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
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

/// The true TTFT of every streamed request whose ground truth is kept (the running ones and the
/// last `--truth-window` ended), in arrival order, for tools that do not send a `rid`: from the
/// request's arrival at the socket (else the handler) to the hand-off of its first chunk.
async fn debug_ttft(State(st): State<AppState>) -> Response {
    let rows: Vec<Value> = st
        .engine()
        .shared
        .truth
        .all()
        .iter()
        .filter_map(|t| {
            let sent = t.chunks.first()?.sent_ns?;
            let waited = t
                .socket_arrival_unix_ns
                .map_or(0, |a| t.received_unix_ns.saturating_sub(a));
            Some(json!({"rid": t.rid, "ttft_ns": waited + sent, "completion_tokens": t.completion_tokens}))
        })
        .collect();
    axum::Json(rows).into_response()
}
