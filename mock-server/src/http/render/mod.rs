//! One engine event into the writes of a response, in the request's dialect.

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

mod native;
mod openai;

/// How one request's responses are written: fixed once the handler has parsed the request.
pub(super) struct RenderOptions {
    pub(super) dialect: Dialect,
    /// The request's id (native `meta_info.id`, OpenAI `id`).
    pub(super) rid: String,
    pub(super) model: String,
    /// OpenAI's `created` stamp (0 on the native dialect).
    pub(super) created: u64,
    pub(super) received: Instant,
    pub(super) prompt_tokens: usize,
    /// Each event carries only its new output (else native events carry the output so far).
    pub(super) incremental: bool,
    /// OpenAI usage reports cached prompt tokens (`enable_cache_report`).
    pub(super) cache_report: bool,
    /// OpenAI `stream_options.include_usage` and `continuous_usage_stats`.
    pub(super) include_usage: bool,
    pub(super) continuous_usage: bool,
    /// The scheduler's timings in native `meta_info` (`enable_metrics`).
    pub(super) metrics: bool,
    /// Native `return_logprob`.
    pub(super) logprobs: bool,
    /// The response is a stream (SGLang stamps `response_sent_to_client_ts` on its first event).
    pub(super) streamed: bool,
    /// The way in and out ([`crate::Config::way_ns`]), which `first_token_latency` leaves out.
    pub(super) way_ns: u64,
}

/// What a native response has rendered so far.
#[derive(Default)]
struct NativeOutput {
    /// Cumulative output so far, as JSON: the ids comma-separated, the text escaped, the
    /// logprob entries comma-separated.
    ids_json: Vec<u8>,
    text_json: Vec<u8>,
    logprobs_json: Vec<u8>,
    /// Bytes of the last streamed event.
    event_len: usize,
    /// Events rendered so far, and the instant of the first (ns since received).
    events: usize,
    first_at_ns: u64,
}

/// Buffers for the pieces of the event being rendered, kept from event to event to be reused.
#[derive(Default)]
struct Scratch {
    ids_json: Vec<u8>,
    text_json: Vec<u8>,
    logprobs_json: Vec<u8>,
}

/// Renders one request's events in its dialect: its options, what follows from them once (the
/// rid as JSON, the receive instant on the Unix clock), and a native response's output so far.
pub(super) struct Renderer {
    opts: RenderOptions,
    rid_json: Vec<u8>,
    /// When the request was received, in seconds since the Unix epoch (SGLang's `*_ts` fields).
    received_unix_s: f64,
    output: NativeOutput,
    scratch: Scratch,
}

impl Renderer {
    pub(super) fn new(opts: RenderOptions) -> Self {
        Renderer {
            rid_json: serde_json::to_vec(&opts.rid).unwrap_or_default(),
            received_unix_s: unix_s_at(opts.received),
            opts,
            output: NativeOutput::default(),
            scratch: Scratch::default(),
        }
    }

    pub(super) fn options(&self) -> &RenderOptions {
        &self.opts
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
    let dialect = ctx.opts.dialect;
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
            if dialect == Dialect::Native {
                // An event is about as long as the one before, plus its new tokens.
                let mut buf = Vec::with_capacity(ctx.output.event_len + 32 * new_ids.len() + 256);
                buf.extend_from_slice(b"data: ");
                ctx.native(
                    &mut buf,
                    &Collected {
                        ids: new_ids.into_vec(),
                        cached: cached_tokens,
                        completion: completion_tokens,
                        finish: finish.clone(),
                        speculative: speculative.map(|s| *s),
                        at_ns,
                        first_at_ns: at_ns,
                        times,
                    },
                );
                buf.extend_from_slice(b"\n\n");
                ctx.output.event_len = buf.len();
                out.push(Bytes::from(buf));
            } else {
                let o = &ctx.opts;
                out.push(sse(&o.openai_chunk(&new_ids, completion_tokens, &finish)));
                if finish.is_some() {
                    o.openai_final_chunks(&mut out, completion_tokens, cached_tokens, &finish);
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
