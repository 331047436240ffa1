//! Time stamps taken at the socket, so a busy client does not count its own delays as the server's.
//!
//! A client under load reads a chunk some time after it reached its socket: the connection's task
//! waits for a worker, then the request's task waits for one too. Both waits would land in TTFT and
//! in the inter-chunk gaps. Streams to plain-HTTP servers therefore go over connections that stamp
//! their own I/O ([`ConnLog`]):
//! - the request: the runtime's clock right before the `write` that hands its first byte to the
//!   kernel (the first write after the previous response's head starts an [`Exchange`]);
//! - every read: on Linux, the kernel's receive timestamp of the last segment the read consumed
//!   (`SO_TIMESTAMPNS`), carried over to the runtime's clock by its age at the read; elsewhere, or
//!   with [`Stamping::Socket`], the runtime's clock at the read;
//! - the response head: the arrival of the read in which its closing blank line arrived.
//!
//! Streams to HTTPS servers, and [`Stamping::Task`], go through reqwest and are stamped by the
//! request's task.
//!
//! hyper hands a response's body out as slices of the buffer it read into, without copying, so the
//! read a body frame came from is the logged read whose buffer holds the frame's first byte
//! ([`ConnLog::arrival_of`]). A frame found in no logged read (a change in hyper, or a body that was
//! copied) falls back to the request task's clock, which is never earlier than the truth. A request
//! finds its own exchange in its response's [`ResponseStamps`], a copy hyper-util makes while the
//! request still holds the connection.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::Connected;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Where a client stamps its streams (`--stamping`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Stamping {
    /// At the socket, each read by the kernel's receive timestamp (Linux; as `socket` elsewhere).
    #[default]
    Kernel,
    /// At the socket, each read by the runtime's clock as the connection reads it: for tokio's
    /// paused clock, on which the kernel's real-time stamps mean nothing.
    Socket,
    /// By the request's task, as it gets each body frame from reqwest (what socket stamps improve
    /// on; also what every stream to an HTTPS server gets).
    Task,
}

/// How many reads a connection remembers: a body frame is looked up right after it arrives, and
/// hyper reads ahead of it by at most one frame.
const LOG_READS: usize = 32;

/// Most bytes one timestamped read takes (into the connection's own scratch buffer).
const MAX_READ: usize = 16 * 1024;

/// A kernel stamp older than this is not trusted (a clock step between the two readings).
const MAX_AGE: Duration = Duration::from_secs(10);

/// When a read's bytes arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// The instant, on the runtime's clock.
    pub at: Instant,
    /// Taken from the kernel's receive timestamp (else from the clock at the read).
    pub kernel: bool,
}

#[derive(Debug)]
struct Read {
    /// Address of the first byte the read wrote into the caller's buffer.
    start: usize,
    len: usize,
    arrival: Arrival,
}

/// One request and its response head on a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exchange {
    /// Right before the `write` that handed the request's first byte to the kernel.
    pub sent: Option<Instant>,
    /// Arrival of the read that completed the response head.
    pub head: Option<Arrival>,
}

#[derive(Debug, Default)]
struct Log {
    /// The current (latest) exchange.
    exchange: Exchange,
    /// The last bytes read while looking for the end of the head (the blank line may span reads).
    head_tail: [u8; 3],
    /// The first bytes of the head being read, for its status code.
    head_prefix: Vec<u8>,
    /// The last read's arrival: every later one is at least this late.
    last: Option<Instant>,
    reads: VecDeque<Read>,
}

/// Bytes of a response head that hold its status code (`HTTP/1.1 200`).
const STATUS_PREFIX: usize = 12;

impl Log {
    /// Looks for the end of the response head in `bytes`, the next bytes read: a blank line
    /// (`\r\n\r\n`, or `\n\n`, which hyper accepts too). A 1xx head is an interim response, and
    /// the final head follows it.
    fn scan_head(&mut self, bytes: &[u8], arrival: Arrival) {
        if self.exchange.sent.is_none() || self.exchange.head.is_some() {
            return;
        }
        let mut rest = &bytes[..bytes.len().min(64 * 1024)];
        loop {
            if self.head_prefix.len() < STATUS_PREFIX {
                let take = (STATUS_PREFIX - self.head_prefix.len()).min(rest.len());
                self.head_prefix.extend_from_slice(&rest[..take]);
            }
            let mut window = Vec::with_capacity(3 + rest.len());
            window.extend_from_slice(&self.head_tail);
            window.extend_from_slice(rest);
            let end = [&b"\r\n\r\n"[..], b"\n\n"]
                .iter()
                .filter_map(|t| memchr::memmem::find(&window, t).map(|p| p + t.len()))
                .min();
            // A blank line inside the kept tail alone was looked for in the previous read.
            let Some(end) = end.filter(|&e| e > 3) else {
                let n = window.len();
                self.head_tail.copy_from_slice(&window[n - 3..]);
                return;
            };
            if self.head_prefix.get(9) != Some(&b'1') {
                self.exchange.head = Some(arrival);
                return;
            }
            self.head_prefix.clear();
            self.head_tail = [0; 3];
            rest = &rest[end - 3..];
        }
    }
}

/// Whether a write's bytes start a request: a request line starts with its method and a space,
/// which a request body (JSON, from this client) never does.
fn starts_request(bytes: &[u8]) -> bool {
    const METHODS: [&[u8]; 7] = [
        b"POST ",
        b"GET ",
        b"PUT ",
        b"PATCH ",
        b"DELETE ",
        b"HEAD ",
        b"OPTIONS ",
    ];
    METHODS.iter().any(|m| bytes.starts_with(m))
}

/// One connection's stamps, shared by the connection and the responses it carries.
#[derive(Clone, Debug)]
pub struct ConnLog(Arc<Mutex<Log>>);

impl ConnLog {
    fn new() -> Self {
        ConnLog(Arc::new(Mutex::new(Log::default())))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The connection's current exchange.
    pub fn exchange(&self) -> Exchange {
        self.with(|l| l.exchange)
    }

    /// Arrival of `frame`: that of the read whose bytes hold its first byte. A read that found
    /// several segments waiting carries the stamp of the last one (all a TCP read reports), so a
    /// frame from an earlier segment gets an upper bound: never earlier than its arrival, never later
    /// than the read.
    pub fn arrival_of(&self, frame: &[u8]) -> Option<Arrival> {
        let p = frame.as_ptr() as usize;
        // Newest first: an older read's buffer may have been freed and reused by a newer one, but
        // never while a frame of it is held.
        self.with(|l| {
            l.reads
                .iter()
                .rev()
                .find(|r| p >= r.start && p < r.start + r.len)
                .map(|r| r.arrival)
        })
    }

    /// A write that starts with `first` is about to hand bytes to the kernel at `before`: a write
    /// that starts a request line starts a new exchange (a server that answers before the whole
    /// body is written does not split its request in two).
    fn wrote(&self, before: Instant, first: &[u8]) {
        if !starts_request(first) {
            return;
        }
        self.with(|l| {
            l.exchange = Exchange {
                sent: Some(before),
                head: None,
            };
            l.head_tail = [0; 3];
            l.head_prefix.clear();
        });
    }

    fn read(&self, bytes: &[u8], mut arrival: Arrival) {
        self.with(|l| {
            // Never before the request went out or before an earlier read: a stamp moved across
            // clocks can be off by a clock step.
            let floor = l.last.max(l.exchange.sent);
            if let Some(f) = floor {
                arrival.at = arrival.at.max(f);
            }
            l.last = Some(arrival.at);
            l.scan_head(bytes, arrival);
            if l.reads.len() == LOG_READS {
                l.reads.pop_front();
            }
            l.reads.push_back(Read {
                start: bytes.as_ptr() as usize,
                len: bytes.len(),
                arrival,
            });
        });
    }
}

/// What a response carries of its connection (hyper puts the connection's `extra` on every
/// response): the log, and the exchange as it stood when the response head was handed to the
/// request. hyper-util clones the `extra` into the response while the request still holds the
/// connection, before it can go back to the pool, so the copy's exchange is this request's own.
#[derive(Debug)]
pub struct ResponseStamps {
    /// The connection's log, for the body frames.
    pub log: ConnLog,
    /// This request's exchange (`None` in the connection's own copy).
    pub exchange: Option<Exchange>,
}

impl Clone for ResponseStamps {
    /// Takes a snapshot of the connection's current exchange.
    fn clone(&self) -> Self {
        ResponseStamps {
            log: self.log.clone(),
            exchange: Some(self.log.exchange()),
        }
    }
}

/// The instant on the runtime's clock of a segment the kernel stamped at `unix_ns`: now, less the
/// segment's age on the real-time clock. The real-time clock is read first, so a pause between the
/// two readings makes the result later, never earlier.
fn from_kernel(unix_ns: u64) -> Option<Instant> {
    let real = super::unix::unix_ns_now();
    let now = Instant::now();
    let age = Duration::from_nanos(real.saturating_sub(unix_ns));
    if age > MAX_AGE {
        return None;
    }
    now.checked_sub(age)
}

/// A TCP connection that stamps its I/O into a [`ConnLog`] (kernel-stamped reads with
/// [`Stamping::Kernel`] where the socket takes them; untimed otherwise).
pub type StampedConn = rx_stamps::StampedStream<ConnLog>;

impl rx_stamps::Observe for ConnLog {
    type Mark = Instant;

    fn mark(&self) -> Instant {
        Instant::now()
    }

    fn read(&mut self, bytes: &[u8], kernel_unix_ns: Option<u64>) {
        // No stamp: the kernel turns timestamps on in a deferred job, so the first segments
        // after the first stamped socket may have none.
        let arrival = match kernel_unix_ns.and_then(from_kernel) {
            Some(at) => Arrival { at, kernel: true },
            None => Arrival {
                at: Instant::now(),
                kernel: false,
            },
        };
        ConnLog::read(self, bytes, arrival);
    }

    fn wrote(&mut self, before: Instant, first: &[u8]) {
        ConnLog::wrote(self, before, first);
    }

    fn connected(&self) -> Connected {
        Connected::new().extra(ResponseStamps {
            log: self.clone(),
            exchange: None,
        })
    }
}

/// Opens [`StampedConn`]s for hyper's client: hyper-util's `HttpConnector` (name resolution,
/// happy eyeballs, connect deadline, `TCP_NODELAY`), its socket wrapped.
#[derive(Clone, Debug)]
pub struct StampedConnector {
    http: hyper_util::client::legacy::connect::HttpConnector,
    rx: Stamping,
}

impl StampedConnector {
    /// A connector with the given connect deadline; `rx` = `Kernel` asks for kernel stamps.
    pub fn new(connect_timeout: Duration, rx: Stamping) -> Self {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.set_connect_timeout(Some(connect_timeout));
        // Send each request at once: Nagle's algorithm would hold a small write back.
        http.set_nodelay(true);
        StampedConnector { http, rx }
    }
}

impl tower::Service<Uri> for StampedConnector {
    type Response = TokioIo<StampedConn>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let rx = self.rx;
        let connecting = self.http.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            let conn = StampedConn::new(tcp, MAX_READ, rx == Stamping::Kernel, ConnLog::new());
            Ok(TokioIo::new(conn))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket(at: Instant) -> Arrival {
        Arrival { at, kernel: false }
    }

    #[test]
    fn a_frame_maps_to_the_newest_read_that_holds_it() {
        let log = ConnLog::new();
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        let a = [0u8; 64];
        let b = [0u8; 64];
        log.read(&a, socket(ms(1)));
        log.read(&b[..32], socket(ms(5)));
        log.read(&a[..16], socket(ms(9))); // `a`'s buffer, read into again
        assert_eq!(log.arrival_of(&b[10..]), Some(socket(ms(5))));
        assert_eq!(log.arrival_of(&a[4..]), Some(socket(ms(9))));
        assert_eq!(log.arrival_of(&a[40..]), Some(socket(ms(1))));
        assert_eq!(log.arrival_of(&b[40..]), None, "past the read's bytes");
    }

    const HEAD: &[u8] = b"POST /generate HTTP/1.1\r\nhost: x\r\n\r\n";
    const BODY: &[u8] = b"{\"input_ids\": [1, 2, 3]}";

    #[test]
    fn an_exchange_runs_from_its_request_line_to_the_end_of_its_head() {
        let log = ConnLog::new();
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        assert_eq!(log.exchange(), Exchange::default());
        log.wrote(ms(0), HEAD);
        log.wrote(ms(1), BODY);
        log.read(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r",
            socket(ms(3)),
        );
        assert_eq!(
            log.exchange().sent,
            Some(ms(0)),
            "the body's writes keep the request line's stamp"
        );
        assert_eq!(log.exchange().head, None, "the head is not complete yet");
        // The blank line that ends the head spans two reads.
        log.read(b"\n\r\n5\r\ndata:", socket(ms(4)));
        log.read(b" x\n\n\r\n", socket(ms(6)));
        assert_eq!(
            log.exchange(),
            Exchange {
                sent: Some(ms(0)),
                head: Some(socket(ms(4)))
            }
        );
        // The next request on the connection starts a new exchange.
        log.wrote(ms(8), HEAD);
        assert_eq!(
            log.exchange(),
            Exchange {
                sent: Some(ms(8)),
                head: None
            }
        );
    }

    #[test]
    fn an_early_answer_does_not_split_the_request() {
        let log = ConnLog::new();
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        log.wrote(ms(0), HEAD);
        log.read(b"HTTP/1.1 413 Payload Too Large\r\n\r\n", socket(ms(1)));
        log.wrote(ms(2), BODY);
        assert_eq!(
            log.exchange(),
            Exchange {
                sent: Some(ms(0)),
                head: Some(socket(ms(1)))
            }
        );
    }

    #[test]
    fn the_head_after_an_interim_1xx_response_is_the_one_stamped() {
        let log = ConnLog::new();
        let t = Instant::now();
        let ms = |n| t + Duration::from_millis(n);
        log.wrote(ms(0), HEAD);
        log.read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", socket(ms(1)));
        assert_eq!(log.exchange().head, None);
        log.read(b"00 OK\r\n\r\n", socket(ms(5)));
        assert_eq!(log.exchange().head, Some(socket(ms(5))));
    }

    #[test]
    fn a_head_ended_by_bare_line_feeds_is_found() {
        let log = ConnLog::new();
        let t = Instant::now();
        log.wrote(t, HEAD);
        log.read(
            b"HTTP/1.1 200 OK\ncontent-type: text/event-stream\n\ndata",
            socket(t),
        );
        assert_eq!(log.exchange().head, Some(socket(t)));
    }

    #[test]
    fn a_read_is_never_stamped_before_the_send_or_an_earlier_read() {
        let log = ConnLog::new();
        let t = Instant::now() + Duration::from_secs(1);
        log.wrote(t, HEAD);
        let early = [0u8; 8];
        log.read(&early, socket(t - Duration::from_millis(2)));
        assert_eq!(log.arrival_of(&early).map(|a| a.at), Some(t));
        let later = [0u8; 8];
        log.read(&later, socket(t - Duration::from_millis(1)));
        assert_eq!(log.arrival_of(&later).map(|a| a.at), Some(t));
    }

    #[test]
    fn the_responses_copy_is_a_snapshot_of_its_exchange() {
        let log = ConnLog::new();
        let t = Instant::now();
        let on_conn = ResponseStamps {
            log: log.clone(),
            exchange: None,
        };
        log.wrote(t, HEAD);
        log.read(
            b"HTTP/1.1 200 OK\r\n\r\n",
            socket(t + Duration::from_millis(2)),
        );
        let response = on_conn.clone();
        // The connection goes on to another request; the response keeps its own.
        log.wrote(t + Duration::from_millis(5), HEAD);
        assert_eq!(response.exchange.and_then(|e| e.sent), Some(t));
        assert_eq!(log.exchange().sent, Some(t + Duration::from_millis(5)));
    }
}
