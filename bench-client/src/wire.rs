//! Time stamps taken at the socket, so a busy client does not count its own delays as the server's.
//!
//! A client under load reads a chunk some time after it reached its socket: the connection's task
//! waits for a worker, then the request's task waits for one too. Both waits would land in TTFT and
//! in the inter-chunk gaps. Streams to plain-HTTP servers therefore go over connections that stamp
//! their own I/O:
//! - the request: the runtime's clock right before the `write` that hands its first byte to the
//!   kernel;
//! - every read: on Linux, the kernel's receive timestamp of the last segment the read consumed
//!   (`SO_TIMESTAMPNS`), carried over to the runtime's clock by its age at the read; elsewhere, or
//!   with [`Stamping::Socket`], the runtime's clock at the read.
//!
//! Streams to HTTPS servers, and [`Stamping::Task`], go through reqwest and are stamped by the
//! request's task.
//!
//! hyper hands a response's body out as slices of the buffer it read into, without copying, so the
//! read a body frame came from is the logged read whose buffer holds the frame's first byte
//! ([`ConnLog::arrival_of`]). A frame found in no logged read (a change in hyper, or a body that was
//! copied) falls back to the request task's clock, which is never earlier than the truth.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
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
/// hyper reads again only when the frame before has been taken.
const LOG_READS: usize = 32;

/// Most bytes one timestamped read takes.
#[cfg(target_os = "linux")]
const MAX_READ: usize = 64 * 1024;

/// A kernel stamp older than this is not trusted (a clock step between the two readings).
const MAX_AGE: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Read {
    /// Address of the first byte the read wrote into the caller's buffer.
    start: usize,
    len: usize,
    /// Arrival of the last segment the read consumed.
    at: Instant,
}

#[derive(Debug, Default)]
struct Log {
    /// The next write starts a request (no request written yet, or a response read since).
    new_request: bool,
    /// The instant the current request's first byte was handed to the kernel.
    request_sent: Option<Instant>,
    reads: VecDeque<Read>,
    /// Reads take the kernel's receive timestamps.
    kernel: bool,
}

/// One connection's stamps, shared by the connection and the responses it carries (hyper puts it in
/// every response's extensions).
#[derive(Clone, Debug)]
pub struct ConnLog(Arc<Mutex<Log>>);

impl ConnLog {
    fn new(kernel: bool) -> Self {
        ConnLog(Arc::new(Mutex::new(Log {
            new_request: true,
            kernel,
            ..Log::default()
        })))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Log) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads take the kernel's receive timestamps.
    pub fn kernel(&self) -> bool {
        self.with(|l| l.kernel)
    }

    /// The instant the current request's first byte went to the kernel.
    pub fn request_sent(&self) -> Option<Instant> {
        self.with(|l| l.request_sent)
    }

    /// Arrival of the latest read: the read that completed the response's headers, when asked as
    /// the response arrives (hyper reads the body only when asked to).
    pub fn latest_arrival(&self) -> Option<Instant> {
        self.with(|l| l.reads.back().map(|r| r.at))
    }

    /// Arrival of `frame`: that of the read whose bytes hold its first byte. A read that found
    /// several segments waiting carries the stamp of the last one (all a TCP read reports), so a
    /// frame from an earlier segment gets an upper bound: never earlier than its arrival, never later
    /// than the read.
    pub fn arrival_of(&self, frame: &[u8]) -> Option<Instant> {
        let p = frame.as_ptr() as usize;
        // Newest first: an older read's buffer may have been freed and reused by a newer one, but
        // never while a frame of it is held.
        self.with(|l| {
            l.reads
                .iter()
                .rev()
                .find(|r| p >= r.start && p < r.start + r.len)
                .map(|r| r.at)
        })
    }

    fn wrote(&self, before: Instant) {
        self.with(|l| {
            if l.new_request {
                l.new_request = false;
                l.request_sent = Some(before);
            }
        });
    }

    fn read(&self, bytes: &[u8], at: Instant) {
        self.with(|l| {
            l.new_request = true;
            if l.reads.len() == LOG_READS {
                l.reads.pop_front();
            }
            l.reads.push_back(Read {
                start: bytes.as_ptr() as usize,
                len: bytes.len(),
                at,
            });
        });
    }
}

/// The instant on the runtime's clock of a segment the kernel stamped at `unix_ns`: now, less the
/// segment's age on the real-time clock.
#[cfg(target_os = "linux")]
fn from_kernel(unix_ns: u64) -> Instant {
    let now = Instant::now();
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let age = Duration::from_nanos(real.saturating_sub(unix_ns));
    if age > MAX_AGE {
        return now;
    }
    now.checked_sub(age).unwrap_or(now)
}

/// A TCP connection that stamps its I/O into a [`ConnLog`].
#[derive(Debug)]
pub struct StampedConn {
    tcp: TcpStream,
    log: ConnLog,
    /// Room for one `SCM_TIMESTAMPNS` control message, reused by every read.
    #[cfg(target_os = "linux")]
    cmsg: Vec<u8>,
    /// Reads go through `recvmsg` and take the kernel's stamp.
    #[cfg(target_os = "linux")]
    kernel: bool,
}

impl StampedConn {
    fn new(tcp: TcpStream, rx: Stamping) -> Self {
        #[cfg(target_os = "linux")]
        {
            let kernel = rx == Stamping::Kernel
                && match nix::sys::socket::setsockopt(
                    &tcp,
                    nix::sys::socket::sockopt::ReceiveTimestampns,
                    &true,
                ) {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::debug!("no receive timestamps on this connection: {e}");
                        false
                    }
                };
            StampedConn {
                tcp,
                log: ConnLog::new(kernel),
                cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec),
                kernel,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = rx;
            StampedConn {
                tcp,
                log: ConnLog::new(false),
            }
        }
    }
}

/// One `recvmsg` into `dst`: the bytes read and the kernel's stamp of the last segment consumed.
#[cfg(target_os = "linux")]
fn recv_stamped(
    fd: std::os::fd::RawFd,
    dst: &mut [u8],
    cmsg: &mut [u8],
) -> io::Result<(usize, Option<u64>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(dst)];
    let msg =
        recvmsg::<()>(fd, &mut iov, Some(cmsg), MsgFlags::empty()).map_err(io::Error::from)?;
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                let ns = i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec());
                stamp = u64::try_from(ns).ok();
            }
        }
    }
    Ok((msg.bytes, stamp))
}

impl AsyncRead for StampedConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        #[cfg(target_os = "linux")]
        if this.kernel {
            use std::os::fd::AsRawFd;
            let fd = this.tcp.as_raw_fd();
            loop {
                std::task::ready!(this.tcp.poll_read_ready(cx))?;
                // The buffer comes uninitialised and `recvmsg` needs initialised bytes: zero at
                // most one read's worth, not the whole of a large buffer.
                let len = buf.remaining().min(MAX_READ);
                let dst = buf.initialize_unfilled_to(len);
                let cmsg = &mut this.cmsg;
                match this.tcp.try_io(tokio::io::Interest::READABLE, || {
                    recv_stamped(fd, dst, cmsg)
                }) {
                    Ok((n, stamp)) => {
                        if n > 0 {
                            let at = stamp.map_or_else(Instant::now, from_kernel);
                            this.log.read(&dst[..n], at);
                        }
                        buf.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    // Readiness was stale (`try_io` cleared it), or a signal interrupted the call.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) =>
                    {
                        continue
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            this.log.read(new, Instant::now());
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for StampedConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let before = Instant::now();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.log.wrote(before);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let before = Instant::now();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.log.wrote(before);
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Connection for StampedConn {
    fn connected(&self) -> Connected {
        Connected::new().extra(self.log.clone())
    }
}

/// Opens [`StampedConn`]s for hyper's client: plain TCP, `TCP_NODELAY`, with a connect deadline.
#[derive(Clone, Debug)]
pub struct StampedConnector {
    /// Deadline for the TCP handshake.
    pub connect_timeout: Duration,
    /// `Kernel`: reads take the kernel's stamps.
    pub rx: Stamping,
}

/// A connect that ran past its deadline (the client reports it as a connect timeout).
#[derive(Debug, thiserror::Error)]
#[error("connect timed out after {0:?}")]
pub struct ConnectTimedOut(pub Duration);

impl tower::Service<Uri> for StampedConnector {
    type Response = TokioIo<StampedConn>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let limit = self.connect_timeout;
        let rx = self.rx;
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "URL has no host"))?;
            // An IPv6 literal comes in brackets.
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri.port_u16().unwrap_or(80);
            let tcp = match tokio::time::timeout(limit, TcpStream::connect((host.as_str(), port)))
                .await
            {
                Ok(r) => r?,
                Err(_) => return Err(ConnectTimedOut(limit).into()),
            };
            // Send the request at once: Nagle's algorithm would hold a small write back.
            tcp.set_nodelay(true)?;
            Ok(TokioIo::new(StampedConn::new(tcp, rx)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_maps_to_the_newest_read_that_holds_it() {
        let log = ConnLog::new(false);
        let t = Instant::now();
        let a = [0u8; 64];
        let b = [0u8; 64];
        let ms = |n| t + Duration::from_millis(n);
        log.read(&a, ms(1));
        log.read(&b[..32], ms(5));
        log.read(&a[..16], ms(9)); // `a`'s buffer, read into again
        assert_eq!(log.arrival_of(&b[10..]), Some(ms(5)));
        assert_eq!(log.arrival_of(&a[4..]), Some(ms(9)));
        assert_eq!(log.arrival_of(&a[40..]), Some(ms(1)));
        assert_eq!(log.arrival_of(&b[40..]), None, "past the read's bytes");
        assert_eq!(log.latest_arrival(), Some(ms(9)));
    }

    #[test]
    fn the_first_write_after_a_read_starts_a_request() {
        let log = ConnLog::new(false);
        let t = Instant::now();
        assert_eq!(log.request_sent(), None);
        log.wrote(t);
        log.wrote(t + Duration::from_millis(1));
        assert_eq!(
            log.request_sent(),
            Some(t),
            "later writes of a request keep its stamp"
        );
        log.read(&[1, 2, 3], t + Duration::from_millis(2));
        log.wrote(t + Duration::from_millis(3));
        assert_eq!(log.request_sent(), Some(t + Duration::from_millis(3)));
    }
}
