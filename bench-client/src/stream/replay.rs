//! Replays a stream transcript (fixtures/streams format) through the same decoding a live run uses.

use serde::Deserialize;
use serde_json::Value;

use crate::stream::{StreamAssembler, TraceHead};
use crate::trace::Dialect;
use crate::trace::{RequestTrace, StreamEnd};

/// The request recorded in a transcript.
#[derive(Clone, Debug, Deserialize)]
pub struct TranscriptRequest {
    /// Path the request went to.
    pub path: String,
    /// JSON body sent.
    pub body: Value,
}

/// One TCP read.
#[derive(Clone, Debug, Deserialize)]
pub struct Read {
    /// Arrival, ms after the request was sent.
    pub at_ms: f64,
    /// Exact text of the read.
    pub data: String,
}

/// How the stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscriptEnd {
    /// The server closed the body normally.
    Eof,
    /// The connection was cut.
    Reset,
}

/// One transcript file.
#[derive(Clone, Debug, Deserialize)]
pub struct Transcript {
    /// What the case shows.
    pub description: String,
    /// Where the format comes from.
    pub source: String,
    /// Bytes captured from a real server (true) or constructed from documentation (false).
    pub recorded: bool,
    /// Wire dialect.
    pub dialect: Dialect,
    /// The request.
    pub request: TranscriptRequest,
    /// HTTP status.
    pub status: u16,
    /// Headers arrived, ms after send.
    pub headers_at_ms: f64,
    /// Every read.
    pub reads: Vec<Read>,
    /// How it ended.
    pub end: TranscriptEnd,
}

fn ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

/// Fields of the request body that the trace keeps: rid, prompt length, output tokens asked.
fn head(t: &Transcript) -> TraceHead {
    let b = &t.request.body;
    let rid = b
        .get("rid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let prompt = b
        .get("input_ids")
        .or_else(|| b.get("prompt").filter(|p| p.is_array()))
        .and_then(Value::as_array)
        .map(|a| u32::try_from(a.len()).unwrap_or(u32::MAX));
    let max_tokens = b
        .pointer("/sampling_params/max_new_tokens")
        .or_else(|| b.get("max_tokens"))
        .or_else(|| b.get("max_completion_tokens"))
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    TraceHead {
        rid,
        dialect: t.dialect,
        prompt_tokens_sent: prompt,
        max_tokens,
    }
}

/// Feed the transcript's reads through SSE decoding and the dialect decoder, as a live run would.
pub fn replay(transcript: &Transcript) -> RequestTrace {
    let head = head(transcript);
    let headers_ns = Some(ns(transcript.headers_at_ms));
    let last_ns = transcript
        .reads
        .iter()
        .map(|r| ns(r.at_ms))
        .max()
        .unwrap_or(0);
    if !(200..300).contains(&transcript.status) {
        let body: String = transcript.reads.iter().map(|r| r.data.as_str()).collect();
        let end = StreamEnd::HttpStatus {
            status: transcript.status,
            body: crate::api::truncate(&body, 2000),
        };
        return head.finish(Some(transcript.status), headers_ns, None, end, last_ns);
    }
    let mut asm = StreamAssembler::new(transcript.dialect);
    let mut done = false;
    for r in &transcript.reads {
        if asm.push(r.data.as_bytes(), ns(r.at_ms)) {
            done = true;
            break;
        }
    }
    let (end, end_ns) = match (done, asm.done_ns, transcript.end) {
        (true, Some(d), _) => (StreamEnd::Done, d),
        (_, _, TranscriptEnd::Eof) => (StreamEnd::Eof, last_ns),
        (_, _, TranscriptEnd::Reset) => (
            StreamEnd::Reset {
                message: "connection reset (transcript)".into(),
            },
            last_ns,
        ),
    };
    head.finish(Some(transcript.status), headers_ns, Some(asm), end, end_ns)
}

/// Read a transcript file.
pub fn load(path: &std::path::Path) -> anyhow::Result<Transcript> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing transcript {}", path.display()))
}
