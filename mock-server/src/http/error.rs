//! A request's error instead of its answer, in the body SGLang sends on that route.

use super::{aborted_body, native_error, openai_error, validation_error};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why a generation handler answers with an error; the response is the body SGLang sends for it.
#[derive(Debug)]
pub(super) enum ApiError {
    /// A native error body (`{"error": {"message"}}`).
    Native(StatusCode, String),
    /// An OpenAI error body.
    OpenAi(StatusCode, String),
    /// FastAPI's validation error (malformed JSON, a field of the wrong type).
    Validation(String),
    /// The engine takes no more requests: plain text.
    Unavailable(String),
    /// The server crashed (or the engine went away): the connection is cut.
    Aborted,
    /// An error SGLang finds after the response began: for a streamed request, HTTP 200 with the
    /// error as an event (`{"error": {message, type, code, retryable}}`) and `[DONE]`; else a
    /// native 400.
    Late { streamed: bool, message: String },
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Native(status, m) => native_error(status, m),
            ApiError::OpenAi(status, m) => openai_error(status, m),
            ApiError::Validation(m) => validation_error(m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m).into_response(),
            ApiError::Aborted => aborted_body(),
            ApiError::Late {
                streamed: false,
                message,
            } => native_error(StatusCode::BAD_REQUEST, message),
            ApiError::Late {
                streamed: true,
                message,
            } => {
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
        }
    }
}
