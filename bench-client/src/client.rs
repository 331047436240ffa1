//! The network stage: one streaming POST per request, stamped with tokio's clock, turned into a
//! [`RequestTrace`]; plus the small probes a sweep needs (dialect, model, health, cache flush).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::time::{timeout_at, Instant};

use crate::api::{Decoded, Dialect, StreamDecoder};
use crate::prompt::Prompt;
use crate::sse::SseDecoder;
use crate::trace::{Chunk, RequestTrace, StreamEnd, TimeoutPhase, TokenAttribution};

/// Where requests go.
#[derive(Clone)]
pub struct Target {
    /// Base URL, e.g. `http://127.0.0.1:30000`.
    pub base_url: String,
    /// Wire dialect.
    pub dialect: Dialect,
    /// Model name for OpenAI dialects.
    pub model: Option<String>,
    /// Bearer token; never printed, logged or recorded.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("base_url", &self.base_url)
            .field("dialect", &self.dialect)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Target {
    /// Full URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        join(&self.base_url, path)
    }
}

fn join(base: &str, path: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), path)
}

/// One request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Request id, sent as `rid` in every dialect.
    pub rid: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Output tokens asked for.
    pub max_tokens: u32,
    /// Ask the server to ignore end-of-sequence so the output has the requested length.
    pub ignore_eos: bool,
    /// Ask for per-chunk `token_ids` (vLLM `return_token_ids`); off by default.
    pub return_token_ids: bool,
}

impl RequestSpec {
    /// A spec with `ignore_eos` on and no `return_token_ids`.
    pub fn new(rid: impl Into<String>, prompt: Prompt, max_tokens: u32) -> Self {
        Self {
            rid: rid.into(),
            prompt,
            max_tokens,
            ignore_eos: true,
            return_token_ids: false,
        }
    }
}

/// Deadlines for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeouts {
    /// Establishing the TCP connection.
    pub connect: Duration,
    /// Time to first token, fixed part.
    pub first_token_base: Duration,
    /// Time to first token, added per 1,000 prompt tokens.
    pub first_token_per_1k: Duration,
    /// Longest gap between reads after the first token.
    pub idle: Duration,
    /// The whole request.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_token_base: Duration::from_secs(60),
            first_token_per_1k: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(3600),
        }
    }
}

impl Timeouts {
    /// Time-to-first-token deadline for a prompt of `prompt_tokens`.
    pub fn first_token(&self, prompt_tokens: u32) -> Duration {
        self.first_token_base
            + self
                .first_token_per_1k
                .mul_f64(f64::from(prompt_tokens) / 1000.0)
    }
}

/// A reqwest client with the connect timeout set.
pub fn http_client(timeouts: &Timeouts) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()
}

/// Bytes-with-instants in, chunks out: the decoding shared by live requests and replays.
#[derive(Debug)]
pub struct StreamAssembler {
    sse: SseDecoder,
    decoder: StreamDecoder,
    events: Vec<crate::sse::SseEvent>,
    /// Decoded events so far.
    pub chunks: Vec<Chunk>,
    /// Instant `[DONE]` arrived.
    pub done_ns: Option<u64>,
    /// Number of reads pushed.
    pub reads: u32,
}

impl StreamAssembler {
    /// A fresh assembler for one stream of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Self {
            sse: SseDecoder::new(),
            decoder: dialect.decoder(),
            events: Vec::new(),
            chunks: Vec::new(),
            done_ns: None,
            reads: 0,
        }
    }

    /// Push one read that arrived at `at_ns`; returns true once `[DONE]` has been seen.
    pub fn push(&mut self, bytes: &[u8], at_ns: u64) -> bool {
        if self.done_ns.is_some() {
            return true;
        }
        self.reads += 1;
        self.sse.push_into(bytes, &mut self.events);
        for ev in self.events.drain(..) {
            if self.done_ns.is_some() {
                break;
            }
            match self.decoder.decode(&ev.data, at_ns) {
                Decoded::Done => self.done_ns = Some(at_ns),
                Decoded::Chunk(c) => self.chunks.push(c),
            }
        }
        self.done_ns.is_some()
    }

    /// Whether an event with output tokens has arrived.
    pub fn first_output_seen(&self) -> bool {
        self.chunks.iter().any(Chunk::carries_output)
    }

    /// Attribution over the stream so far.
    pub fn attribution(&self) -> TokenAttribution {
        self.decoder.attribution()
    }
}

/// The parts of a trace known before the response.
#[derive(Clone, Debug)]
pub struct TraceHead {
    /// Request id.
    pub rid: String,
    /// Dialect.
    pub dialect: Dialect,
    /// Prompt tokens sent (token-id prompts).
    pub prompt_tokens_sent: Option<u32>,
    /// Output tokens asked.
    pub max_tokens: u32,
}

impl TraceHead {
    /// The head of a trace for `spec`.
    pub fn of(spec: &RequestSpec, dialect: Dialect) -> Self {
        Self {
            rid: spec.rid.clone(),
            dialect,
            prompt_tokens_sent: spec.prompt.token_len(),
            max_tokens: spec.max_tokens,
        }
    }

    /// Complete the trace.
    pub fn finish(
        self,
        status: Option<u16>,
        headers_ns: Option<u64>,
        asm: Option<StreamAssembler>,
        end: StreamEnd,
        end_ns: u64,
    ) -> RequestTrace {
        let (mut chunks, done_ns, reads, mut attribution) = match asm {
            Some(a) => {
                let attr = a.attribution();
                (a.chunks, a.done_ns, a.reads, attr)
            }
            None => (Vec::new(), None, 0, TokenAttribution::Unknown),
        };
        if attribution == TokenAttribution::Unknown && attribute_by_event_count(&mut chunks) {
            attribution = TokenAttribution::EventCount;
        }
        RequestTrace {
            rid: self.rid,
            dialect: self.dialect,
            prompt_tokens_sent: self.prompt_tokens_sent,
            max_tokens: self.max_tokens,
            status,
            headers_ns,
            reads,
            chunks,
            done_ns,
            end,
            end_ns,
            attribution,
        }
    }
}

/// Per-chunk counts when the server reports only a final total: each event that carried text
/// carried at least one token, so when there are exactly as many such events as the reported
/// `completion_tokens`, each carried exactly one and every other event none. This is a proof from
/// the stream, not a guess; any other case stays `unknown`. Returns whether it applied.
pub fn attribute_by_event_count(chunks: &mut [Chunk]) -> bool {
    let total = chunks
        .iter()
        .rev()
        .find_map(|c| c.usage.as_ref().and_then(|u| u.completion_tokens));
    let is_text = |c: &Chunk| c.text_len > 0 && !c.role_only && !c.usage_only && c.error.is_none();
    let events = chunks.iter().filter(|c| is_text(c)).count();
    match total {
        Some(t) if t > 0 && u64::from(t) == events as u64 => {
            for c in chunks.iter_mut() {
                c.tokens = Some(u32::from(is_text(c)));
            }
            true
        }
        _ => false,
    }
}

fn ns_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn classify(e: &reqwest::Error) -> StreamEnd {
    let mut src: Option<&dyn std::error::Error> = Some(e);
    let mut refused = false;
    let mut text = e.to_string();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                refused = true;
            }
        }
        let st = s.to_string();
        if !text.contains(&st) {
            text = format!("{text}: {st}");
        }
        src = s.source();
    }
    if refused {
        StreamEnd::ConnectRefused { message: text }
    } else if e.is_timeout() {
        StreamEnd::Timeout {
            phase: TimeoutPhase::Connect,
        }
    } else if e.is_connect() || e.is_request() {
        StreamEnd::Connect { message: text }
    } else {
        StreamEnd::Reset { message: text }
    }
}

/// Send one streaming request and record everything it produced. Never panics; failures are in
/// the trace (`trace.failure()`).
pub async fn send(
    http: &reqwest::Client,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> RequestTrace {
    let head = TraceHead::of(spec, target.dialect);
    let body = match target.dialect.build_body(spec, target.model.as_deref()) {
        Ok(b) => b,
        Err(message) => return head.finish(None, None, None, StreamEnd::Invalid { message }, 0),
    };
    // Serialise before the clock starts: a 185k-token prompt is ~1.3 MB of JSON.
    let bytes = match serde_json::to_vec(&body) {
        Ok(b) => b,
        Err(e) => {
            let message = format!("cannot serialise request body: {e}");
            return head.finish(None, None, None, StreamEnd::Invalid { message }, 0);
        }
    };
    let mut req = http
        .post(target.url(target.dialect.path()))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .body(bytes);
    if let Some(k) = &target.api_key {
        req = req.bearer_auth(k);
    }
    let t0 = Instant::now();
    let total_deadline = t0 + timeouts.total;
    let ttft_deadline = t0 + timeouts.first_token(spec.prompt.token_len().unwrap_or(0));
    let (pre_deadline, pre_phase) = earliest(ttft_deadline, total_deadline);

    let resp = match timeout_at(pre_deadline, req.send()).await {
        Err(_) => {
            let end = StreamEnd::Timeout { phase: pre_phase };
            return head.finish(None, None, None, end, ns_since(t0));
        }
        Ok(Err(e)) => return head.finish(None, None, None, classify(&e), ns_since(t0)),
        Ok(Ok(r)) => r,
    };
    let headers_ns = Some(ns_since(t0));
    let status = resp.status();
    if !status.is_success() {
        let body = match timeout_at(
            pre_deadline.max(Instant::now() + timeouts.idle),
            resp.bytes(),
        )
        .await
        {
            Ok(Ok(b)) => crate::api::truncate(&String::from_utf8_lossy(&b), 2000),
            Ok(Err(e)) => format!("(body unreadable: {e})"),
            Err(_) => "(body timed out)".to_string(),
        };
        let end = StreamEnd::HttpStatus {
            status: status.as_u16(),
            body,
        };
        return head.finish(Some(status.as_u16()), headers_ns, None, end, ns_since(t0));
    }

    let mut asm = StreamAssembler::new(target.dialect);
    let mut stream = resp.bytes_stream();
    let mut last_read = t0;
    let end = loop {
        let (deadline, phase) = if asm.first_output_seen() {
            let (d, p) = earliest(last_read + timeouts.idle, total_deadline);
            (
                d,
                if p == TimeoutPhase::FirstToken {
                    TimeoutPhase::Idle
                } else {
                    p
                },
            )
        } else {
            (pre_deadline, pre_phase)
        };
        match timeout_at(deadline, stream.next()).await {
            Err(_) => break StreamEnd::Timeout { phase },
            Ok(None) => break StreamEnd::Eof,
            Ok(Some(Err(e))) => {
                break match classify(&e) {
                    StreamEnd::Connect { message } => StreamEnd::Reset { message },
                    other => other,
                }
            }
            Ok(Some(Ok(b))) => {
                last_read = Instant::now();
                let at = ns_since(t0);
                if asm.push(&b, at) {
                    break StreamEnd::Done;
                }
            }
        }
    };
    let end_ns = match (&end, asm.done_ns) {
        (StreamEnd::Done, Some(d)) => d,
        _ => ns_since(t0),
    };
    head.finish(Some(status.as_u16()), headers_ns, Some(asm), end, end_ns)
}

/// The earlier deadline; `FirstToken` names the first, `Total` the second.
fn earliest(first: Instant, total: Instant) -> (Instant, TimeoutPhase) {
    if first <= total {
        (first, TimeoutPhase::FirstToken)
    } else {
        (total, TimeoutPhase::Total)
    }
}

fn get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let r = http.get(join(base, path)).timeout(Duration::from_secs(10));
    match key {
        Some(k) => r.bearer_auth(k),
        None => r,
    }
}

/// Pick the dialect: SGLang answers `GET /get_model_info` or `/model_info`; otherwise `openai`.
pub async fn probe_dialect(http: &reqwest::Client, base: &str, key: Option<&str>) -> Dialect {
    for path in ["/get_model_info", "/model_info"] {
        if let Ok(r) = get(http, base, path, key).send().await {
            if r.status().is_success() {
                return Dialect::Sglang;
            }
        }
    }
    Dialect::OpenAi
}

/// First model id from `GET /v1/models`, if the server lists any.
pub async fn first_model(http: &reqwest::Client, base: &str, key: Option<&str>) -> Option<String> {
    let r = get(http, base, "/v1/models", key).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    let v: Value = r.json().await.ok()?;
    v.pointer("/data/0/id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Server description for the run manifest: `/server_info`, else `/v1/models`.
pub async fn server_info(http: &reqwest::Client, base: &str, key: Option<&str>) -> Option<Value> {
    for path in ["/server_info", "/get_server_info", "/v1/models"] {
        if let Ok(r) = get(http, base, path, key).send().await {
            if r.status().is_success() {
                if let Ok(v) = r.json::<Value>().await {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// `GET /health` answered with a success status.
pub async fn health(http: &reqwest::Client, base: &str, key: Option<&str>) -> bool {
    matches!(get(http, base, "/health", key).send().await, Ok(r) if r.status().is_success())
}

/// `POST /flush_cache` (SGLang); an error says why the flush was refused.
pub async fn flush_cache(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> Result<(), String> {
    let mut r = http
        .post(join(base, "/flush_cache"))
        .timeout(Duration::from_secs(60));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    match r.send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            Err(format!(
                "POST /flush_cache answered HTTP {status}: {}",
                crate::api::truncate(body.trim(), 300)
            ))
        }
        Err(e) => Err(format!("POST /flush_cache failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_redacted_in_debug() {
        let t = Target {
            base_url: "http://x".into(),
            dialect: Dialect::Sglang,
            model: None,
            api_key: Some("sk-secret".into()),
        };
        let s = format!("{t:?}");
        assert!(!s.contains("sk-secret") && s.contains("redacted"));
    }

    #[test]
    fn first_token_timeout_scales_with_context() {
        let t = Timeouts::default();
        assert!(t.first_token(185_000) > t.first_token(1_000));
        assert_eq!(t.first_token(0), t.first_token_base);
    }

    fn text_chunk(at_ns: u64, text_len: u32) -> Chunk {
        Chunk {
            at_ns,
            text_len,
            content_event: true,
            ..Chunk::default()
        }
    }

    #[test]
    fn one_token_per_event_is_proved_only_when_counts_match() {
        let usage = |n| crate::trace::Usage {
            completion_tokens: Some(n),
            ..Default::default()
        };
        // llama.cpp: one text event per token, then a final empty chunk with the total.
        let mut chunks = vec![text_chunk(1, 3), text_chunk(2, 4), text_chunk(3, 2)];
        chunks.push(Chunk {
            at_ns: 4,
            tokens: Some(3),
            usage: Some(usage(3)),
            finish_reason: Some("length".into()),
            content_event: true,
            ..Chunk::default()
        });
        assert!(attribute_by_event_count(&mut chunks));
        let counts: Vec<_> = chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(counts, vec![Some(1), Some(1), Some(1), Some(0)]);

        // One event carried two tokens (a split UTF-8 character): counts stay unknown.
        let mut chunks = vec![text_chunk(1, 3), text_chunk(2, 4)];
        chunks.push(Chunk {
            at_ns: 4,
            usage: Some(usage(3)),
            ..Chunk::default()
        });
        assert!(!attribute_by_event_count(&mut chunks));
        assert!(chunks[0].tokens.is_none());
    }

    #[test]
    fn url_join() {
        assert_eq!(join("http://h:1/", "/generate"), "http://h:1/generate");
    }
}
