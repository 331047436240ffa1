//! One line of a results file: a [`Record`] per request (or per two-point pair), with its
//! measurement, its failure, its raw trace and, for load runs, its schedule.

use serde::{Deserialize, Serialize};

use crate::measure::{
    basics, contamination, measure, ms, ttft_from_schedule_ns, MeasureError, Measurement,
    TtftSplit, TwoPoint, TwoPointError,
};
use crate::plan::Shard;
use crate::trace::{FailureKind, RequestTrace, TokenAttribution};

/// Which method produced a record.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// One streaming request per measurement.
    Streaming,
    /// The old two-request method (run beside the streaming method).
    TwoPoint,
}

impl Method {
    /// Wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::TwoPoint => "two-point",
        }
    }
}

/// A failure in a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What happened.
    pub message: String,
}

/// The kind of a record's failure, written as its kebab-case name (`connect-refused`,
/// `stream-cut`, `cache-hit`, ...). A name this build does not know (from another version or an
/// imported file) reads as [`ErrorKind::Other`] and is written back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ErrorKind {
    /// The request failed ([`FailureKind`]).
    Request(FailureKind),
    /// The stream succeeded but carried no output chunk.
    NoOutput,
    /// A two-point pair's request failed.
    RequestFailed,
    /// Request b of a two-point pair hit the prefix cache.
    CacheHit,
    /// A two-point pair's wall times did not increase with its output lengths.
    TimeNotIncreasing,
    /// A two-point pair's output tokens did not increase.
    TokensNotIncreasing,
    /// A two-point pair solved to a rate that is not positive and finite.
    InvalidRate,
    /// A request another tool recorded as failed (`bench-client import`).
    Imported,
    /// Any other name.
    Other(String),
}

const REQUEST_KINDS: [FailureKind; 9] = [
    FailureKind::ConnectRefused,
    FailureKind::Connect,
    FailureKind::HttpStatus,
    FailureKind::InBandError,
    FailureKind::StreamCut,
    FailureKind::Timeout,
    FailureKind::ShortOutput,
    FailureKind::Invalid,
    FailureKind::FlushRefused,
];

impl ErrorKind {
    /// The name records and reports use.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Request(k) => k.as_str(),
            Self::NoOutput => "no-output",
            Self::RequestFailed => "request-failed",
            Self::CacheHit => "cache-hit",
            Self::TimeNotIncreasing => "time-not-increasing",
            Self::TokensNotIncreasing => "tokens-not-increasing",
            Self::InvalidRate => "invalid-rate",
            Self::Imported => "imported-failure",
            Self::Other(s) => s,
        }
    }

    /// The kind of a name (the inverse of [`ErrorKind::as_str`]).
    pub fn parse(name: &str) -> Self {
        if let Some(k) = REQUEST_KINDS.iter().find(|k| k.as_str() == name) {
            return Self::Request(*k);
        }
        match name {
            "no-output" => Self::NoOutput,
            "request-failed" => Self::RequestFailed,
            "cache-hit" => Self::CacheHit,
            "time-not-increasing" => Self::TimeNotIncreasing,
            "tokens-not-increasing" => Self::TokensNotIncreasing,
            "invalid-rate" => Self::InvalidRate,
            "imported-failure" => Self::Imported,
            other => Self::Other(other.to_string()),
        }
    }

    /// The request failure kind, when it is one.
    pub fn request(&self) -> Option<FailureKind> {
        match self {
            Self::Request(k) => Some(*k),
            _ => None,
        }
    }
}

impl From<String> for ErrorKind {
    fn from(s: String) -> Self {
        Self::parse(&s)
    }
}

impl From<ErrorKind> for String {
    fn from(k: ErrorKind) -> Self {
        k.as_str().to_string()
    }
}

/// A kind equals its name (`kind == "stream-cut"`).
impl PartialEq<&str> for ErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Details of a two-point pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoPointDetail {
    /// Output tokens asked of a and b.
    pub a_tokens: u32,
    /// Output tokens asked of b.
    pub b_tokens: u32,
    /// Wall time of a.
    pub t_a_ms: Option<f64>,
    /// Wall time of b.
    pub t_b_ms: Option<f64>,
    /// Cached tokens b reported.
    pub cached_tokens_b: Option<u32>,
    /// Whether the cache was flushed between a and b.
    pub flushed: bool,
    /// Trace of a.
    #[serde(default, with = "super::compact::opt_trace")]
    pub trace_a: Option<RequestTrace>,
    /// Trace of b.
    #[serde(default, with = "super::compact::opt_trace")]
    pub trace_b: Option<RequestTrace>,
}

/// The results schema this build writes. 1: traces with a list of chunk objects (and no `schema`
/// field); 2: traces with chunk columns (the `compact` module). Both read back to the same records.
pub const SCHEMA: u32 = 2;

fn schema_1() -> u32 {
    1
}

fn write_current<S: serde::Serializer>(_read: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u32(SCHEMA)
}

/// One line of the results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The results schema of the line the record was read from ([`SCHEMA`] for a new record); a
    /// record is always written in [`SCHEMA`].
    #[serde(default = "schema_1", serialize_with = "write_current")]
    pub schema: u32,
    /// Method.
    pub method: Method,
    /// Context length asked (prompt tokens).
    pub context_tokens: u32,
    /// Run number at this point (0-based).
    pub run: u32,
    /// The `rid` sent (for two-point, request b's).
    pub rid: String,
    /// Output tokens asked.
    pub output_tokens: u32,
    /// Prompt tokens the server reported (else sent).
    pub prompt_tokens: Option<u32>,
    /// Cached prompt tokens the server reported.
    pub cached_tokens: Option<u32>,
    /// Output tokens produced.
    pub completion_tokens: Option<u32>,
    /// Time to response headers.
    pub ttfb_ms: Option<f64>,
    /// Time to first output chunk.
    pub ttft_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_ms: Option<f64>,
    /// Uncached prompt tokens / TTFT (two-point: solved).
    pub prefill_tok_s: Option<f64>,
    /// Tokens after the first chunk / time after the first chunk (two-point: solved).
    pub decode_tok_s: Option<f64>,
    /// Why `decode_tok_s` is absent on a successful streaming request.
    pub decode_unavailable: Option<String>,
    /// (completion_tokens - 1) / (t_last - t_first), the common formula, for comparison.
    pub naive_decode_tok_s: Option<f64>,
    /// Time per output token after the first chunk.
    pub tpot_ms: Option<f64>,
    /// TTFT split by the server's own timing, when the server reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_split: Option<TtftSplit>,
    /// Tokens per output-carrying chunk (empty when unknown).
    pub tokens_per_chunk: Vec<u32>,
    /// How per-chunk token counts were known.
    pub token_attribution: TokenAttribution,
    /// Prompt length mismatch or cache hit: the point did not measure a cold prefill of N tokens.
    pub contaminated: bool,
    /// Why the point is contaminated.
    pub contamination: Vec<String>,
    /// Failure, or null.
    pub error: Option<RecordError>,
    /// Two-point details.
    pub two_point: Option<TwoPointDetail>,
    /// The raw trace (streaming records).
    #[serde(default, with = "super::compact::opt_trace")]
    pub trace: Option<RequestTrace>,
    /// Load-run fields (`bench-client load` records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadInfo>,
}

impl Record {
    /// A streaming record from a trace.
    pub fn streaming(trace: RequestTrace, context_tokens: u32, run: u32) -> Self {
        Self::streaming_measured(trace, context_tokens, run).0
    }

    /// [`Record::streaming`] and the trace's measurement (for a caller that summarises it too).
    pub fn streaming_measured(
        trace: RequestTrace,
        context_tokens: u32,
        run: u32,
    ) -> (Self, Result<Measurement, MeasureError>) {
        let contamination = contamination(&trace, context_tokens);
        let b = basics(&trace);
        let base = Self {
            rid: trace.rid.clone(),
            output_tokens: trace.max_tokens,
            prompt_tokens: b.prompt_tokens,
            cached_tokens: b.cached_tokens,
            completion_tokens: b.completion_tokens,
            ttfb_ms: b.ttfb_ms,
            e2e_ms: Some(b.e2e_ms),
            token_attribution: trace.attribution,
            contaminated: !contamination.is_empty(),
            contamination,
            ..Self::empty(Method::Streaming, context_tokens, run)
        };
        let measured = measure(&trace);
        let rec = match &measured {
            Ok(m) => Self {
                ttft_ms: Some(m.ttft_ms),
                e2e_ms: Some(m.e2e_ms),
                prefill_tok_s: m.prefill_tok_s,
                decode_tok_s: m.decode_tok_s,
                decode_unavailable: m.decode_unavailable.map(|d| d.to_string()),
                naive_decode_tok_s: m.naive_decode_tok_s,
                tpot_ms: m.tpot_ms,
                ttft_split: m.ttft_split,
                tokens_per_chunk: m.tokens_per_chunk.clone(),
                ..base
            },
            Err(MeasureError::Failed(f)) => Self {
                error: Some(RecordError {
                    kind: ErrorKind::Request(f.kind),
                    message: f.message.clone(),
                }),
                ..base
            },
            Err(e @ MeasureError::NoOutput) => Self {
                error: Some(RecordError {
                    kind: ErrorKind::NoOutput,
                    message: e.to_string(),
                }),
                ..base
            },
        };
        let rec = Self {
            trace: Some(trace),
            ..rec
        };
        (rec, measured)
    }

    /// A two-point record from its result.
    pub fn two_point(
        result: Result<TwoPoint, TwoPointError>,
        detail: TwoPointDetail,
        context_tokens: u32,
        run: u32,
    ) -> Self {
        let b = detail.trace_b.as_ref();
        let mut contamination = Vec::new();
        if let Some(c) = detail.cached_tokens_b.filter(|&c| c > 0) {
            contamination.push(format!("request b had {c} prompt tokens cached"));
        }
        let (prefill, decode, error) = match &result {
            Ok(r) => (Some(r.prefill_tok_s), Some(r.decode_tok_s), None),
            Err(e) => (
                None,
                None,
                Some(RecordError {
                    kind: ErrorKind::parse(e.kind()),
                    message: e.to_string(),
                }),
            ),
        };
        Self {
            rid: b.map(|t| t.rid.clone()).unwrap_or_default(),
            output_tokens: detail.b_tokens,
            prompt_tokens: b.and_then(|t| basics(t).prompt_tokens),
            cached_tokens: detail.cached_tokens_b,
            completion_tokens: b.and_then(RequestTrace::completion_tokens),
            e2e_ms: detail.t_b_ms,
            prefill_tok_s: prefill,
            decode_tok_s: decode,
            token_attribution: b.map_or(TokenAttribution::Unknown, |t| t.attribution),
            contaminated: !contamination.is_empty(),
            contamination,
            error,
            two_point: Some(detail),
            ..Self::empty(Method::TwoPoint, context_tokens, run)
        }
    }

    /// A record of `method` at a point with nothing measured: every field once, for the
    /// constructors to fill in.
    pub fn empty(method: Method, context_tokens: u32, run: u32) -> Self {
        Self {
            schema: SCHEMA,
            method,
            context_tokens,
            run,
            rid: String::new(),
            output_tokens: 0,
            prompt_tokens: None,
            cached_tokens: None,
            completion_tokens: None,
            ttfb_ms: None,
            ttft_ms: None,
            e2e_ms: None,
            prefill_tok_s: None,
            decode_tok_s: None,
            decode_unavailable: None,
            naive_decode_tok_s: None,
            tpot_ms: None,
            ttft_split: None,
            tokens_per_chunk: Vec::new(),
            token_attribution: TokenAttribution::Unknown,
            contaminated: false,
            contamination: Vec::new(),
            error: None,
            two_point: None,
            trace: None,
            load: None,
        }
    }

    /// Whether the request failed.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// Key of the point this record measured, for `--resume`.
    pub fn point_key(&self) -> (Method, u32, u32) {
        (self.method, self.context_tokens, self.run)
    }
}

/// Build the record of one finished request: TTFT from its scheduled start is the client's queue
/// time (scheduled start to the trace's send) plus the trace's TTFT.
pub fn load_record(trace: RequestTrace, prompt_tokens: u32, info: LoadInfo) -> Record {
    load_record_measured(trace, prompt_tokens, info).0
}

/// [`load_record`] and the trace's measurement.
pub fn load_record_measured(
    trace: RequestTrace,
    prompt_tokens: u32,
    info: LoadInfo,
) -> (Record, Result<Measurement, MeasureError>) {
    let (mut rec, measured) = Record::streaming_measured(
        trace,
        prompt_tokens,
        u32::try_from(info.index).unwrap_or(u32::MAX),
    );
    let ttft = rec
        .trace
        .as_ref()
        .and_then(|t| ttft_from_schedule_ns(t, info.client_queue_ns))
        .filter(|_| rec.error.is_none());
    rec.load = Some(LoadInfo {
        ttft_from_schedule_ms: ttft.map(ms),
        ..info
    });
    (rec, measured)
}

/// The load-run fields of a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadInfo {
    /// Request index in the whole (unsharded) schedule.
    pub index: u64,
    /// Shard that sent it.
    pub shard: Shard,
    /// Schedule and workload seed.
    pub seed: u64,
    /// Run start, unix ms (shared by all shards of a run started with `--start-at`).
    pub start_unix_ms: u64,
    /// Scheduled start, ns after the run start.
    pub scheduled_ns: u64,
    /// Actual send, ns after the run start (the instant the trace's times count from: the write of
    /// the request's first byte when stamped at the socket).
    pub sent_ns: u64,
    /// client_queue_time: actual send - scheduled start, ns. Client-side delay, kept out of TTFT's
    /// server part.
    pub client_queue_ns: u64,
    /// TTFT from the scheduled start: client_queue_time + TTFT after the send, ms.
    pub ttft_from_schedule_ms: Option<f64>,
    /// Prefix group (shared-prefix and replay workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_group: Option<u32>,
    /// The session and turn of a multi-turn run's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionTurn>,
}

/// Where a request of a multi-turn run sits in its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTurn {
    /// Session number in the run (over all shards together).
    pub id: u64,
    /// Turn number in the session, from 0.
    pub turn: u32,
    /// Prompt tokens that stand in for earlier outputs the server listed no token ids for: the
    /// server never produced them, so its prefix cache misses from the first of them on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stand_in_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
