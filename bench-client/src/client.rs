//! The network stage: one streaming POST per request, stamped with tokio's clock, turned into a
//! [`RequestTrace`]; plus the small probes a sweep needs (dialect, model, health, cache flush).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use tokio::time::{timeout_at, Instant};

use crate::api::{Decoded, Dialect, StreamDecoder};
use crate::prompt::Prompt;
use crate::sse::SseDecoder;
use crate::trace::{Chunk, RequestTrace, Stamps, StreamEnd, TimeoutPhase, TokenAttribution};
use crate::wire::{ConnLog, Exchange, ResponseStamps, StampedConnector, Stamping};

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

/// The client's HTTP stack. Streams to plain-HTTP servers go through hyper over connections that
/// stamp their I/O at the socket ([`crate::wire`]); streams to HTTPS servers, and every probe, go
/// through reqwest (which also [`Deref`](std::ops::Deref)s from this type), whose streams are stamped
/// by the request's task.
#[derive(Clone, Debug)]
pub struct Http {
    reqwest: reqwest::Client,
    wire: Option<WireClient>,
    /// Set when the environment names a proxy.
    proxy: Option<ProxyEnv>,
}

type WireClient =
    hyper_util::client::legacy::Client<StampedConnector, http_body_util::Full<bytes::Bytes>>;

impl Http {
    /// The client without socket stamps: every stream goes through reqwest.
    pub fn reqwest_only(reqwest: reqwest::Client) -> Self {
        Self {
            reqwest,
            wire: None,
            proxy: None,
        }
    }

    /// The reqwest client, for probes.
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

impl std::ops::Deref for Http {
    type Target = reqwest::Client;
    fn deref(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

/// The proxy variables of the environment, when one is set: reqwest sends plain-HTTP requests
/// through the proxy, the socket-stamped path would not, so proxied hosts go through reqwest.
#[derive(Clone, Debug)]
struct ProxyEnv {
    /// Entries of `NO_PROXY` / `no_proxy`, lower case.
    no_proxy: Vec<String>,
}

impl ProxyEnv {
    fn from_env() -> Option<Self> {
        let var = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .into_iter()
            .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))?;
        let no_proxy = ["NO_PROXY", "no_proxy"]
            .into_iter()
            .filter_map(|v| std::env::var(v).ok())
            .flat_map(|v| {
                v.split(',')
                    .map(|e| e.trim().to_ascii_lowercase())
                    .filter(|e| !e.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect();
        tracing::info!(
            "{var} is set: streams to hosts it applies to go through reqwest, stamped by the task"
        );
        Some(ProxyEnv { no_proxy })
    }

    /// Whether requests to `host` go through the proxy: `NO_PROXY` lists neither the host nor a
    /// domain above it, nor `*` (entries reqwest would also match by IP range are taken as not
    /// matching, which errs towards the proxy).
    fn applies_to(&self, host: &str) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        !self.no_proxy.iter().any(|e| {
            let e = e.trim_start_matches('.');
            e == "*" || host == e || host.ends_with(&format!(".{e}"))
        })
    }
}

/// The client with the connect timeout set, reads stamped by the kernel where it can.
pub fn http_client(timeouts: &Timeouts) -> reqwest::Result<Http> {
    http_client_with(timeouts, Stamping::Kernel)
}

/// The client with the connect timeout set; `stamping` says where streams are stamped (use
/// [`Stamping::Socket`] under tokio's paused clock).
pub fn http_client_with(timeouts: &Timeouts, stamping: Stamping) -> reqwest::Result<Http> {
    let reqwest = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()?;
    if stamping == Stamping::Task {
        return Ok(Http::reqwest_only(reqwest));
    }
    let connector = StampedConnector::new(timeouts.connect, stamping);
    let wire = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    Ok(Http {
        reqwest,
        wire: Some(wire),
        proxy: ProxyEnv::from_env(),
    })
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
            stamps: Stamps::Task,
            send_delay_ns: None,
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
    ns_between(t0, Instant::now())
}

fn ns_between(t0: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(t0).as_nanos()).unwrap_or(u64::MAX)
}

/// An error's message with its sources, and whether any source was a refused connection or a
/// connect past its deadline.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> (String, bool, bool) {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut refused = false;
    let mut timed_out = false;
    let mut text = e.to_string();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            refused |= io.kind() == std::io::ErrorKind::ConnectionRefused;
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        let st = s.to_string();
        if !text.contains(&st) {
            text = format!("{text}: {st}");
        }
        src = s.source();
    }
    (text, refused, timed_out)
}

fn classify(e: &reqwest::Error) -> StreamEnd {
    let (text, refused, _) = error_chain(e);
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

/// A failure before the response headers, on the socket-stamped path.
fn classify_wire(e: &hyper_util::client::legacy::Error) -> StreamEnd {
    let (text, refused, timed_out) = error_chain(e);
    if refused {
        StreamEnd::ConnectRefused { message: text }
    } else if timed_out {
        StreamEnd::Timeout {
            phase: TimeoutPhase::Connect,
        }
    } else {
        StreamEnd::Connect { message: text }
    }
}

/// A failure while reading the body: the connection broke.
fn body_error(end: StreamEnd) -> StreamEnd {
    match end {
        StreamEnd::Connect { message } => StreamEnd::Reset { message },
        other => other,
    }
}

/// One body frame and when it arrived.
struct Frame {
    bytes: bytes::Bytes,
    at: Instant,
    /// Where the instant was taken.
    source: StampSource,
}

/// Where one instant of a trace was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StampSource {
    Kernel,
    Socket,
    Task,
}

/// The trace's [`Stamps`]: one source for every instant, or `mixed`.
#[derive(Debug, Default)]
struct StampTally {
    kernel: bool,
    socket: bool,
    task: bool,
}

impl StampTally {
    fn add(&mut self, s: StampSource) {
        match s {
            StampSource::Kernel => self.kernel = true,
            StampSource::Socket => self.socket = true,
            StampSource::Task => self.task = true,
        }
    }

    fn stamps(&self) -> Stamps {
        match (self.kernel, self.socket, self.task) {
            (true, false, false) => Stamps::Kernel,
            (false, true, false) => Stamps::Socket,
            (false, false, _) => Stamps::Task,
            _ => Stamps::Mixed,
        }
    }
}

/// The body of a streaming response, whichever way it was sent.
enum Frames {
    Reqwest(futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>),
    Wire {
        body: hyper::body::Incoming,
        log: Option<ConnLog>,
    },
}

impl Frames {
    async fn next(&mut self) -> Option<Result<Frame, StreamEnd>> {
        match self {
            Frames::Reqwest(s) => match s.next().await? {
                Ok(bytes) => Some(Ok(Frame {
                    bytes,
                    at: Instant::now(),
                    source: StampSource::Task,
                })),
                Err(e) => Some(Err(body_error(classify(&e)))),
            },
            Frames::Wire { body, log } => loop {
                use http_body_util::BodyExt;
                match body.frame().await? {
                    Err(e) => {
                        let (message, _, _) = error_chain(&e);
                        return Some(Err(StreamEnd::Reset { message }));
                    }
                    Ok(f) => {
                        // Trailers carry no data.
                        let Ok(bytes) = f.into_data() else { continue };
                        if bytes.is_empty() {
                            continue;
                        }
                        let now = Instant::now();
                        let (at, source) = match log.as_ref().and_then(|l| l.arrival_of(&bytes)) {
                            Some(a) if a.kernel => (a.at.min(now), StampSource::Kernel),
                            Some(a) => (a.at.min(now), StampSource::Socket),
                            None => (now, StampSource::Task),
                        };
                        return Some(Ok(Frame { bytes, at, source }));
                    }
                }
            },
        }
    }

    /// The rest of the body as text (an error response), at most `limit` bytes kept.
    async fn text(&mut self, limit: usize) -> String {
        let mut out = Vec::new();
        while let Some(f) = self.next().await {
            match f {
                Ok(f) => {
                    let room = limit.saturating_sub(out.len());
                    out.extend_from_slice(&f.bytes[..f.bytes.len().min(room)]);
                }
                Err(e) if out.is_empty() => return format!("(body unreadable: {e:?})"),
                Err(_) => break,
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// A response whose headers have arrived.
struct Opened {
    status: u16,
    /// When the headers arrived, as the request's task saw it.
    headers_at: Instant,
    /// The request's exchange, as its connection stamped it.
    exchange: Option<Exchange>,
    frames: Frames,
}

/// Send the request: through hyper over a stamped connection for a plain-HTTP server, else through
/// reqwest.
async fn open(
    http: &Http,
    target: &Target,
    url: String,
    body: Vec<u8>,
) -> Result<Opened, StreamEnd> {
    use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
    let uri = url
        .starts_with("http://")
        .then(|| url.parse::<hyper::Uri>())
        .transpose()
        .map_err(|e| StreamEnd::Invalid {
            message: format!("bad URL {url}: {e}"),
        })?;
    let proxied = |u: &hyper::Uri| {
        http.proxy
            .as_ref()
            .is_some_and(|p| p.applies_to(u.host().unwrap_or("")))
    };
    if let (Some(wire), Some(uri)) = (&http.wire, uri.filter(|u| !proxied(u))) {
        let mut req = hyper::Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream");
        if let Some(k) = &target.api_key {
            let mut v =
                reqwest::header::HeaderValue::try_from(format!("Bearer {k}")).map_err(|_| {
                    StreamEnd::Invalid {
                        message: "the API key is not a valid header value".to_string(),
                    }
                })?;
            v.set_sensitive(true);
            req = req.header(AUTHORIZATION, v);
        }
        let req = req
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .map_err(|e| StreamEnd::Invalid {
                message: format!("cannot build the request: {e}"),
            })?;
        let resp = wire.request(req).await.map_err(|e| classify_wire(&e))?;
        let stamps = resp.extensions().get::<ResponseStamps>();
        let exchange = stamps.and_then(|r| r.exchange);
        let log = stamps.map(|r| r.log.clone());
        return Ok(Opened {
            status: resp.status().as_u16(),
            headers_at: Instant::now(),
            exchange,
            frames: Frames::Wire {
                body: resp.into_body(),
                log,
            },
        });
    }
    let mut req = http
        .reqwest
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(body);
    if let Some(k) = &target.api_key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.map_err(|e| classify(&e))?;
    Ok(Opened {
        status: resp.status().as_u16(),
        headers_at: Instant::now(),
        exchange: None,
        frames: Frames::Reqwest(resp.bytes_stream().boxed()),
    })
}

/// Send one streaming request and record everything it produced. Never panics; failures are in
/// the trace (`trace.failure()`).
///
/// Instants count from the send: the `write` of the request's first byte when the connection
/// stamped it ([`crate::wire`]; the time before it is `send_delay_ns`), else the call.
pub async fn send(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> RequestTrace {
    send_traced(http, target, spec, timeouts).await.0
}

/// [`send`], also returning the instant the trace's times count from (its "send").
pub async fn send_traced(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> (RequestTrace, Instant) {
    let head = TraceHead::of(spec, target.dialect);
    let invalid = |head: TraceHead, message| {
        let end = StreamEnd::Invalid { message };
        (head.finish(None, None, None, end, 0), Instant::now())
    };
    let body = match target.dialect.build_body(spec, target.model.as_deref()) {
        Ok(b) => b,
        Err(message) => return invalid(head, message),
    };
    // Serialise before the clock starts: a 185k-token prompt is ~1.3 MB of JSON.
    let bytes = match serde_json::to_vec(&body) {
        Ok(b) => b,
        Err(e) => return invalid(head, format!("cannot serialise request body: {e}")),
    };
    let url = target.url(target.dialect.path());
    let t0 = Instant::now();
    let total_deadline = t0 + timeouts.total;
    let ttft_deadline = t0 + timeouts.first_token(spec.prompt.token_len().unwrap_or(0));
    let (pre_deadline, pre_phase) = earliest(ttft_deadline, total_deadline);

    let opened = match timeout_at(pre_deadline, open(http, target, url, bytes)).await {
        Err(_) => {
            let end = StreamEnd::Timeout { phase: pre_phase };
            return (head.finish(None, None, None, end, ns_since(t0)), t0);
        }
        Ok(Err(end)) => return (head.finish(None, None, None, end, ns_since(t0)), t0),
        Ok(Ok(o)) => o,
    };
    let Opened {
        status,
        headers_at,
        exchange,
        mut frames,
    } = opened;
    // The origin of every instant in the trace: the write of the request's first byte when the
    // connection stamped this request's exchange whole (sent after the call, before the head).
    let mut tally = StampTally::default();
    let (origin, headers_at, send_delay_ns) = match exchange {
        Some(Exchange {
            sent: Some(sent),
            head: Some(head),
        }) if sent >= t0 && sent <= head.at => {
            tally.add(if head.kernel {
                StampSource::Kernel
            } else {
                StampSource::Socket
            });
            (sent, head.at.min(headers_at), Some(ns_between(t0, sent)))
        }
        _ => {
            tally.add(StampSource::Task);
            (t0, headers_at, None)
        }
    };
    let stamped = |mut tr: RequestTrace, tally: &StampTally| {
        tr.stamps = tally.stamps();
        tr.send_delay_ns = send_delay_ns;
        tr
    };
    let headers_ns = Some(ns_between(origin, headers_at));
    if !(200..300).contains(&status) {
        let body = match timeout_at(
            pre_deadline.max(Instant::now() + timeouts.idle),
            frames.text(64 * 1024),
        )
        .await
        {
            Ok(b) => crate::api::truncate(&b, 2000),
            Err(_) => "(body timed out)".to_string(),
        };
        let end = StreamEnd::HttpStatus { status, body };
        let tr = head.finish(Some(status), headers_ns, None, end, ns_since(origin));
        return (stamped(tr, &tally), origin);
    }

    let mut asm = StreamAssembler::new(target.dialect);
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
        match timeout_at(deadline, frames.next()).await {
            Err(_) => break StreamEnd::Timeout { phase },
            Ok(None) => break StreamEnd::Eof,
            Ok(Some(Err(end))) => break end,
            Ok(Some(Ok(f))) => {
                last_read = Instant::now();
                tally.add(f.source);
                if asm.push(&f.bytes, ns_between(origin, f.at)) {
                    break StreamEnd::Done;
                }
            }
        }
    };
    if end == StreamEnd::Done {
        // Read the body to its end (the server ends it right after `[DONE]`), so that the
        // connection goes back to the pool at once and carries the next request; a server that
        // keeps the body open after `[DONE]` gets 10 ms.
        let until = Instant::now() + timeouts.idle.min(Duration::from_millis(10));
        let _ = timeout_at(until, async {
            while let Some(Ok(_)) = frames.next().await {}
        })
        .await;
    }
    let end_ns = match (&end, asm.done_ns) {
        (StreamEnd::Done, Some(d)) => d,
        _ => ns_since(origin),
    };
    let tr = head.finish(Some(status), headers_ns, Some(asm), end, end_ns);
    (stamped(tr, &tally), origin)
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
    fn no_proxy_lists_hosts_and_domains() {
        let p = ProxyEnv {
            no_proxy: vec!["localhost".into(), ".internal".into(), "10.0.0.5".into()],
        };
        assert!(!p.applies_to("localhost"));
        assert!(!p.applies_to("LOCALHOST"));
        assert!(!p.applies_to("gpu-3.internal"));
        assert!(!p.applies_to("internal"));
        assert!(!p.applies_to("10.0.0.5"));
        assert!(p.applies_to("127.0.0.1"));
        assert!(p.applies_to("notinternal"));
        assert!(!ProxyEnv {
            no_proxy: vec!["*".into()]
        }
        .applies_to("anything"));
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
