//! Raw per-request traces: what was sent, every decoded chunk with its arrival instant, and how the stream ended.
//!
//! All instants are `u64` nanosecond offsets from the instant the request was sent, taken from tokio's
//! clock. Traces are plain serialisable data; every metric is computed from them by `measure`.

use serde::{Deserialize, Serialize};

pub use crate::api::{Chunk, Dialect, ServerTiming, TokenAttribution, Usage};
pub use crate::plan::TimeoutPhase;

/// How the stream ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum StreamEnd {
    /// `data: [DONE]` arrived.
    Done,
    /// The connection was refused (nothing listening).
    ConnectRefused { message: String },
    /// Another connection or request error before the response headers.
    Connect { message: String },
    /// A non-success HTTP status; `body` is the (truncated) response body.
    HttpStatus { status: u16, body: String },
    /// The body ended (EOF) without `[DONE]`.
    Eof,
    /// The connection broke while reading the body (reset, crash).
    Reset { message: String },
    /// A deadline expired.
    Timeout { phase: TimeoutPhase },
    /// The request could not be built (for example a text-only dialect with a token-id prompt).
    Invalid { message: String },
    /// The response passed a size cap (one line, or the whole body); the rest was not read.
    TooLarge { message: String },
}

/// Where a trace's instants were taken (the network stage's `stamped` module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stamps {
    /// By the request's task: the call of the send, and each body frame as the task got it.
    #[default]
    Task,
    /// At the socket, on the runtime's clock: the `write` of the request's first byte, and each
    /// read of the connection.
    Socket,
    /// As `socket`, with each read stamped by the kernel's receive timestamp.
    Kernel,
    /// At the socket, but some body frames were found in no logged read and carry the task's stamp.
    Mixed,
}

impl Stamps {
    /// The default (task stamps), which records leave out.
    pub fn is_task(&self) -> bool {
        *self == Stamps::Task
    }

    /// The name used in records and reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stamps::Task => "task",
            Stamps::Socket => "socket",
            Stamps::Kernel => "kernel",
            Stamps::Mixed => "mixed",
        }
    }
}

/// Everything one streaming request produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestTrace {
    /// Request id sent as `rid`.
    pub rid: String,
    /// Wire dialect used.
    pub dialect: Dialect,
    /// Prompt length sent, in tokens (for token-id prompts; `None` for text prompts).
    pub prompt_tokens_sent: Option<u32>,
    /// Output tokens asked for.
    pub max_tokens: u32,
    /// HTTP status, when headers arrived.
    pub status: Option<u16>,
    /// Response headers arrived, ns after send.
    pub headers_ns: Option<u64>,
    /// Number of body reads.
    pub reads: u32,
    /// Every decoded event except `[DONE]`.
    pub chunks: Vec<Chunk>,
    /// Instant of `[DONE]`, when it arrived.
    pub done_ns: Option<u64>,
    /// How the stream ended.
    pub end: StreamEnd,
    /// Instant the client stopped, ns after send.
    pub end_ns: u64,
    /// How per-chunk token counts were known.
    pub attribution: TokenAttribution,
    /// Where the instants were taken. With stamps at the socket, "send" (the origin of every `_ns`
    /// field) is the `write` of the request's first byte.
    #[serde(default, skip_serializing_if = "Stamps::is_task")]
    pub stamps: Stamps,
    /// Socket stamps only: ns from the client's call to the `write` of the request's first byte
    /// (connection pool, connecting, the connection task's turn): the client's time, not the
    /// server's, and not in TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_delay_ns: Option<u64>,
    /// The output token ids the server listed, kept only when the request asked
    /// (`RequestSpec::keep_output_ids`: multi-turn sessions); `None` when not kept or not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ids: Option<Vec<u32>>,
}

/// Why a request counts as failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// Connection refused.
    ConnectRefused,
    /// Other connection error.
    Connect,
    /// HTTP error status.
    HttpStatus,
    /// The server sent `{"error": ...}` in the stream.
    InBandError,
    /// The stream ended or broke without `[DONE]`.
    StreamCut,
    /// A deadline expired.
    Timeout,
    /// Fewer output tokens than asked.
    ShortOutput,
    /// The request could not be built.
    Invalid,
    /// The server flushed nothing when asked to flush its cache (two-point only).
    FlushRefused,
    /// The response passed the client's size cap (`--max-stream-bytes`).
    StreamTooLarge,
}

impl FailureKind {
    /// The wire name used in records and reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::ConnectRefused => "connect-refused",
            Self::Connect => "connect",
            Self::HttpStatus => "http-status",
            Self::InBandError => "in-band-error",
            Self::StreamCut => "stream-cut",
            Self::Timeout => "timeout",
            Self::ShortOutput => "short-output",
            Self::Invalid => "invalid",
            Self::FlushRefused => "flush-refused",
            Self::StreamTooLarge => "stream-too-large",
        }
    }

    /// Whether this failure suggests the server is down (so the sweep checks its health).
    pub fn server_may_be_down(&self) -> bool {
        matches!(self, Self::ConnectRefused | Self::Connect | Self::StreamCut)
    }
}

/// A typed failure with a message a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// What happened, in words.
    pub message: String,
}

impl RequestTrace {
    /// Output tokens the server reported in total (last usage), else the sum of known chunk counts.
    pub fn completion_tokens(&self) -> Option<u32> {
        let reported = self
            .chunks
            .iter()
            .rev()
            .filter_map(|c| c.usage.as_ref().and_then(|u| u.completion_tokens))
            .next();
        if reported.is_some() {
            return reported;
        }
        if !self.attribution.counts_known() {
            return None;
        }
        Some(self.chunks.iter().filter_map(|c| c.tokens).sum())
    }

    /// Prompt tokens the server reported (last usage that had them).
    pub fn reported_prompt_tokens(&self) -> Option<u32> {
        self.chunks
            .iter()
            .rev()
            .find_map(|c| c.usage.as_ref().and_then(|u| u.prompt_tokens))
    }

    /// Cached prompt tokens the server reported (last usage that had them).
    pub fn cached_tokens(&self) -> Option<u32> {
        self.chunks
            .iter()
            .rev()
            .find_map(|c| c.usage.as_ref().and_then(|u| u.cached_tokens))
    }

    /// The server's own timing, as its events reported it: the queue time from the first event
    /// that had one, the first-token latency from the last.
    pub fn server_timing(&self) -> Option<ServerTiming> {
        let queue_s = self
            .chunks
            .iter()
            .find_map(|c| c.server_timing.as_deref().and_then(|t| t.queue_s));
        let first_token_s = self
            .chunks
            .iter()
            .rev()
            .find_map(|c| c.server_timing.as_deref().and_then(|t| t.first_token_s));
        let prefill_s = self
            .chunks
            .iter()
            .rev()
            .find_map(|c| c.server_timing.as_deref().and_then(|t| t.prefill_s));
        ServerTiming::reported(queue_s, first_token_s)
            .map(|t| ServerTiming { prefill_s, ..t })
            .or_else(|| ServerTiming::prefill_ms(prefill_s.map(|s| s * 1e3)))
    }

    /// First in-band error message, if any.
    pub fn in_band_error(&self) -> Option<&str> {
        self.chunks.iter().find_map(|c| c.error.as_deref())
    }

    /// The typed failure of this request, or `None` if it succeeded with the requested length.
    pub fn failure(&self) -> Option<Failure> {
        let fail = |kind, message: String| Some(Failure { kind, message });
        if let Some(msg) = self.in_band_error() {
            return fail(
                FailureKind::InBandError,
                format!("server error in stream: {msg}"),
            );
        }
        match &self.end {
            StreamEnd::Done => {}
            StreamEnd::ConnectRefused { message } => {
                return fail(
                    FailureKind::ConnectRefused,
                    format!("connection refused: {message}"),
                )
            }
            StreamEnd::Connect { message } => {
                return fail(FailureKind::Connect, format!("connection error: {message}"))
            }
            StreamEnd::HttpStatus { status, body } => {
                return fail(FailureKind::HttpStatus, format!("HTTP {status}: {body}"))
            }
            StreamEnd::Eof => {
                return fail(
                    FailureKind::StreamCut,
                    format!(
                        "stream ended without [DONE] after {} events",
                        self.chunks.len()
                    ),
                )
            }
            StreamEnd::Reset { message } => {
                return fail(
                    FailureKind::StreamCut,
                    format!(
                        "connection broke after {} events: {message}",
                        self.chunks.len()
                    ),
                )
            }
            StreamEnd::Timeout { phase } => {
                let what = match phase {
                    TimeoutPhase::Connect => "connecting",
                    TimeoutPhase::FirstToken => "waiting for the first token",
                    TimeoutPhase::Idle => "waiting for the next chunk",
                    TimeoutPhase::Total => "for the whole request",
                };
                let ms = |ns: u64| ns as f64 / 1e6;
                // A gap's timeout counts from the last read, not the send.
                let after = match (phase, self.chunks.last()) {
                    (TimeoutPhase::Idle, Some(c)) => format!(
                        "{:.1} ms after the last chunk ({:.1} ms after the send)",
                        ms(self.end_ns.saturating_sub(c.at_ns)),
                        ms(self.end_ns)
                    ),
                    _ => format!("{:.1} ms after the send", ms(self.end_ns)),
                };
                return fail(FailureKind::Timeout, format!("timed out {what}: {after}"));
            }
            StreamEnd::Invalid { message } => return fail(FailureKind::Invalid, message.clone()),
            StreamEnd::TooLarge { message } => {
                return fail(FailureKind::StreamTooLarge, message.clone())
            }
        }
        if let Some(got) = self.completion_tokens() {
            if got < self.max_tokens {
                return fail(
                    FailureKind::ShortOutput,
                    format!(
                        "server produced {got} output tokens, {} were asked",
                        self.max_tokens
                    ),
                );
            }
        }
        None
    }
}
