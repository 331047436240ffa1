//! One engine event into the writes of a response, in the request's dialect.

use crate::config::Config;
use crate::engine::{Finish, RequestTimes, SpeculativeStats, StreamEvent};
use axum::body::Bytes;
use serde_json::{json, Value};
use tokio::time::Instant;

/// The API a request came in on.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Dialect {
    Native,
    Completions,
    Chat,
}

/// Renders one request's events in its dialect: what every event repeats (id, model, options)
/// and, for native cumulative output, the output so far.
pub(super) struct Renderer {
    pub(super) dialect: Dialect,
    pub(super) rid: String,
    pub(super) model: String,
    pub(super) created: u64,
    pub(super) received: Instant,
    pub(super) incremental: bool,
    pub(super) cache_report: bool,
    pub(super) include_usage: bool,
    pub(super) continuous_usage: bool,
    /// Native cumulative output so far, as JSON: the ids comma-separated, the text escaped, the
    /// logprob entries comma-separated.
    pub(super) ids_json: Vec<u8>,
    pub(super) text_json: Vec<u8>,
    pub(super) logprobs_json: Vec<u8>,
    /// The pieces of the event being rendered (kept to be reused) and the rid as JSON.
    pub(super) new_ids_json: Vec<u8>,
    pub(super) new_text_json: Vec<u8>,
    pub(super) new_logprobs_json: Vec<u8>,
    pub(super) rid_json: Vec<u8>,
    /// Bytes of the last streamed native event.
    pub(super) event_len: usize,
    pub(super) prompt_tokens: usize,
    /// When the request was received, in seconds since the Unix epoch (SGLang's `*_ts` fields).
    pub(super) received_unix_s: f64,
    /// The scheduler's timings in native `meta_info` (`enable_metrics`).
    pub(super) metrics: bool,
    /// Native `return_logprob`.
    pub(super) logprobs: bool,
    /// The response is a stream (SGLang stamps `response_sent_to_client_ts` on its first event).
    pub(super) streamed: bool,
    /// Events rendered so far, and the instant of the first (ns since received).
    pub(super) events: usize,
    pub(super) first_at_ns: u64,
}

impl Renderer {
    /// A renderer for request `rid` of `prompt_tokens` tokens, received at `received`: native
    /// cumulative output, no `created` stamp and no usage options until the handler sets them.
    pub(super) fn new(
        dialect: Dialect,
        rid: String,
        cfg: &Config,
        received: Instant,
        prompt_tokens: usize,
    ) -> Self {
        let rid_json = serde_json::to_vec(&rid).unwrap_or_default();
        Renderer {
            dialect,
            rid,
            model: cfg.served_model_name.clone(),
            created: 0,
            received,
            incremental: false,
            cache_report: cfg.enable_cache_report,
            include_usage: false,
            continuous_usage: false,
            ids_json: Vec::new(),
            text_json: Vec::new(),
            logprobs_json: Vec::new(),
            new_ids_json: Vec::new(),
            new_text_json: Vec::new(),
            new_logprobs_json: Vec::new(),
            rid_json,
            event_len: 0,
            prompt_tokens,
            received_unix_s: unix_s_at(received),
            metrics: cfg.enable_metrics,
            logprobs: false,
            streamed: true,
            events: 0,
            first_at_ns: 0,
        }
    }
}

/// An instant of tokio's clock in seconds since the Unix epoch.
fn unix_s_at(at: Instant) -> f64 {
    let ago = Instant::now().saturating_duration_since(at);
    std::time::SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The writes one engine event turns into.
pub(super) struct Rendered {
    pub(super) writes: Vec<Bytes>,
    /// The response ends after these writes (with `[DONE]`, or cut when there are none).
    pub(super) done: bool,
}

/// One SSE event carrying `v`.
pub(super) fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The SSE event that ends a stream.
pub(super) const DONE: &[u8] = b"data: [DONE]\n\n";

/// Turns one engine event into SSE writes.
pub(super) fn render(ctx: &mut Renderer, ev: StreamEvent) -> Rendered {
    match ev {
        StreamEvent::Tokens {
            at_ns,
            new_ids,
            cached_tokens,
            completion_tokens,
            finish,
            speculative,
            times,
            ..
        } => {
            let mut out = Vec::new();
            if ctx.dialect == Dialect::Native {
                // An event is about as long as the one before, plus its new tokens.
                let mut buf = Vec::with_capacity(ctx.event_len + 32 * new_ids.len() + 256);
                buf.extend_from_slice(b"data: ");
                ctx.native(
                    &mut buf,
                    &Collected {
                        ids: new_ids,
                        cached: cached_tokens,
                        completion: completion_tokens,
                        finish: finish.clone(),
                        speculative,
                        at_ns,
                        first_at_ns: at_ns,
                        times,
                    },
                );
                buf.extend_from_slice(b"\n\n");
                ctx.event_len = buf.len();
                out.push(Bytes::from(buf));
            } else {
                out.push(sse(&ctx.openai_chunk(&new_ids, completion_tokens, &finish)));
                if finish.is_some() {
                    ctx.openai_final_chunks(&mut out, completion_tokens, cached_tokens, &finish);
                }
            }
            let done = finish.is_some();
            if done {
                out.push(Bytes::from_static(DONE));
            }
            Rendered { writes: out, done }
        }
        StreamEvent::Error(m) => Rendered {
            writes: vec![
                sse(&json!({"error": {"message": m}})),
                Bytes::from_static(DONE),
            ],
            done: true,
        },
        StreamEvent::Crash(_) => Rendered {
            writes: Vec::new(),
            done: true,
        },
    }
}

/// Output tokens with their meta data: one stream event, or a whole (non-streaming) generation.
pub(super) struct Collected {
    pub(super) ids: Vec<u32>,
    pub(super) cached: usize,
    pub(super) completion: usize,
    pub(super) finish: Option<Finish>,
    pub(super) speculative: Option<SpeculativeStats>,
    /// Modelled instant of the final chunk, ns since the request was received.
    pub(super) at_ns: u64,
    /// The instant of the first chunk, ns since the request was received.
    pub(super) first_at_ns: u64,
    pub(super) times: RequestTimes,
}
