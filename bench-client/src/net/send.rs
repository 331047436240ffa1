//! One streaming POST, stamped at the socket (or by the task), read to its end under the request's
//! deadlines and turned into a [`RequestTrace`]. Never panics; failures are in the trace.

use std::time::Duration;

use futures::StreamExt;
use tokio::time::{timeout_at, Instant};

use super::errors::{body_error, classify, classify_wire, error_chain};
use super::stamped::{ConnLog, Exchange, ResponseStamps};
use super::{Http, Target};
use crate::plan::{RequestSpec, StreamCaps, Timeouts};
use crate::stream::assemble::{StreamAssembler, TraceHead};
use crate::trace::{RequestTrace, Stamps, StreamEnd};

fn ns_since(t0: Instant) -> u64 {
    ns_between(t0, Instant::now())
}

fn ns_between(t0: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(t0).as_nanos()).unwrap_or(u64::MAX)
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
                        let message = error_chain(&e).text;
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
    /// The `Retry-After` header, in its delay-seconds form.
    retry_after: Option<Duration>,
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
            retry_after: retry_after(resp.headers()),
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
        retry_after: retry_after(resp.headers()),
        headers_at: Instant::now(),
        exchange: None,
        frames: Frames::Reqwest(resp.bytes_stream().boxed()),
    })
}

/// Send one streaming request and record everything it produced. Never panics; failures are in
/// the trace (`trace.failure()`).
///
/// Instants count from the send: the `write` of the request's first byte when the connection
/// stamped it ([`crate::net::stamped`]; the time before it is `send_delay_ns`), else the call.
pub async fn send(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> RequestTrace {
    send_traced(http, target, spec, timeouts).await.0
}

/// The `Retry-After` of a response in its delay-seconds form (the HTTP-date form is not read).
fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    h.get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// [`send`], also returning the instant the trace's times count from (its "send").
pub async fn send_traced(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> (RequestTrace, Instant) {
    let s = send_full(http, target, spec, timeouts).await;
    (s.trace, s.origin)
}

/// What [`send_full`] gives.
pub struct Sent {
    /// Everything the request produced.
    pub trace: RequestTrace,
    /// The instant the trace's times count from (its "send").
    pub origin: Instant,
    /// The server's `Retry-After`, when it sent one (seconds form).
    pub retry_after: Option<Duration>,
}

/// [`send_traced`], also returning the server's `Retry-After`.
pub async fn send_full(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
) -> Sent {
    let mut retry = None;
    let (trace, origin) = send_inner(http, target, spec, timeouts, &mut retry).await;
    Sent {
        trace,
        origin,
        retry_after: retry,
    }
}

async fn send_inner(
    http: &Http,
    target: &Target,
    spec: &RequestSpec,
    timeouts: &Timeouts,
    retry: &mut Option<Duration>,
) -> (RequestTrace, Instant) {
    let head = TraceHead::of(spec, target.dialect);
    let invalid = |head: TraceHead, message| {
        let end = StreamEnd::Invalid { message };
        (head.finish(None, None, None, end, 0), Instant::now())
    };
    // Serialise before the clock starts: a 185k-token prompt is ~1.3 MB of JSON.
    let bytes = match target.dialect.body_bytes(spec, target.model.as_deref()) {
        Ok(b) => b,
        Err(message) => return invalid(head, message),
    };
    let url = target.url(target.dialect.path());
    let t0 = Instant::now();
    let prompt_tokens = spec.prompt.token_len().unwrap_or(0);
    let (pre, pre_phase) = timeouts.deadline(prompt_tokens, None);
    let pre_deadline = t0 + pre;

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
        retry_after,
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
    *retry = retry_after;
    if !(200..300).contains(&status) {
        let body = match timeout_at(
            pre_deadline.max(Instant::now() + timeouts.idle),
            frames.text(64 * 1024),
        )
        .await
        {
            // A server's error may quote the key it refused.
            Ok(b) => super::redact::redact_keyed(
                &crate::api::truncate(&b, 2000),
                target.api_key.as_deref(),
            ),
            Err(_) => "(body timed out)".to_string(),
        };
        let end = StreamEnd::HttpStatus { status, body };
        let tr = head.finish(Some(status), headers_ns, None, end, ns_since(origin));
        return (stamped(tr, &tally), origin);
    }

    let mut asm = StreamAssembler::new(target.dialect);
    if spec.keep_output_ids {
        asm = asm.keeping_output_ids(target.dialect);
    }
    let mut last_read = t0;
    let mut size = SizeGuard::new(timeouts.caps);
    let end = loop {
        let (deadline, phase) = if asm.first_output_seen() {
            let read = last_read.saturating_duration_since(t0);
            let (d, p) = timeouts.deadline(prompt_tokens, Some(read));
            (t0 + d, p)
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
                // Checked before the decoder sees the frame: nothing past a cap is buffered.
                if let Err(end) = size.admit(&f.bytes) {
                    break end;
                }
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

/// Counts a body's bytes against the [`StreamCaps`]: the whole body, and the bytes since the last
/// line end (an SSE line the decoder would have to hold).
struct SizeGuard {
    caps: StreamCaps,
    body: u64,
    line: u64,
}

impl SizeGuard {
    fn new(caps: StreamCaps) -> Self {
        Self {
            caps,
            body: 0,
            line: 0,
        }
    }

    /// Counts one frame; the end of the stream when it passes a cap.
    fn admit(&mut self, bytes: &[u8]) -> Result<(), StreamEnd> {
        let len = bytes.len() as u64;
        self.body += len;
        // The longest line this frame holds or continues: the open line up to the frame's first
        // line end, then whatever follows its last one.
        let longest = match memchr::memchr2(b'\n', b'\r', bytes) {
            Some(first) => {
                let last = memchr::memrchr2(b'\n', b'\r', bytes).unwrap_or(first);
                let open = self.line + first as u64;
                self.line = len - last as u64 - 1;
                open.max(self.line)
            }
            None => {
                self.line += len;
                self.line
            }
        };
        if longest > self.caps.line {
            return Err(StreamEnd::TooLarge {
                message: format!(
                    "a line of the stream passed {} bytes (--max-stream-bytes) after {} bytes of body; the rest was not read",
                    self.caps.line, self.body
                ),
            });
        }
        if self.body > self.caps.body {
            return Err(StreamEnd::TooLarge {
                message: format!(
                    "the body passed {} bytes (--max-stream-bytes) after {} bytes; the rest was not read",
                    self.caps.body, self.body
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(line: u64, body: u64) -> SizeGuard {
        SizeGuard::new(StreamCaps { line, body })
    }

    #[test]
    fn a_line_is_counted_across_frames_and_ends_at_a_line_end() {
        let mut g = guard(10, 1000);
        assert!(g.admit(b"data: 1234").is_ok());
        // The open line reaches 11 bytes before its end: past the cap.
        assert!(matches!(g.admit(b"5\n"), Err(StreamEnd::TooLarge { .. })));
        let mut g = guard(10, 1000);
        assert!(g.admit(b"data: 12\n\ndata: 1").is_ok());
        assert!(g.admit(b"2\r\n\r\n").is_ok());
        assert!(g.admit(b"0123456789\n").is_ok());
    }

    #[test]
    fn the_body_is_capped_whatever_its_lines() {
        let mut g = guard(10, 30);
        for _ in 0..3 {
            assert!(g.admit(b"data: 1\n\n").is_ok());
        }
        let e = g.admit(b"data: 1\n\n").unwrap_err();
        assert!(matches!(e, StreamEnd::TooLarge { message } if message.contains("after 36 bytes")));
    }
}
