//! SGLang's HTTP API over the engine: native `/generate`, OpenAI completions and chat, cache
//! control, health, model and server info, metrics, tokenize and debug ground truth.
//!
//! Layout: `routes` (the router, its guard and the small handlers), `generate` (the generation
//! handlers), `parse` (request bodies and their validation), `native` and `openai` (each
//! dialect's bytes), `render` (an engine event into a response's writes), `sse` (the streamed
//! response), `faults` (the `x-mock-fault` header), `prometheus` (the `/metrics` text).

mod error;
mod faults;
mod generate;
pub(crate) mod parse;
pub(crate) mod prometheus;
mod render;
pub(crate) mod routes;
mod sim_views;
mod sse;

pub use routes::app;

use crate::engine::EngineHandle;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
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
    /// Whether the server is still starting up (it answers 503).
    fn starting(&self) -> bool {
        self.starting_until
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| Instant::now() < t)
    }
    /// The engine's context length, in tokens.
    fn context_length(&self) -> usize {
        self.engine().shared.config.context_length
    }
    /// A fresh request id: 32 hex digits.
    fn next_id(&self) -> String {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{:032x}", u128::from(n) ^ 0x6d6f_636b_0000_0000)
    }
}

/// A body that fails at once: the client sees the connection cut, as from a dead process.
fn aborted_body() -> Response {
    let s = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("server crashed"))
    });
    Response::new(Body::from_stream(s))
}

/// An OpenAI-style error body.
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

/// A request SGLang's request model refuses before any handler runs (malformed JSON, a field of
/// the wrong type): FastAPI's validation error, the same on every route.
fn validation_error(msg: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"object": "error", "message": msg.into(), "type": "Bad Request", "param": null, "code": 400})),
    )
        .into_response()
}

/// A native error body.
fn native_error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": msg.into()}})),
    )
        .into_response()
}
