//! The server's listener ([`StampedListener`], [`StampedStream`]): accepted connections record
//! when a request's bytes reached the server's socket.
//!
//! Under load the HTTP layer reads a request some time after the kernel received it: the
//! request waits in the socket while the workers write other streams' events. A real server
//! spends that time too, and a client cannot tell it apart from the rest of TTFT, so the ground
//! truth counts it: on Linux every accepted connection asks for kernel receive timestamps
//! (`SO_TIMESTAMPNS`), each read takes the timestamp of the last segment it consumed, and the
//! handler records the latest one as the request's arrival at the socket
//! ([`crate::truth::RequestTruth::socket_arrival_unix_ns`]). Elsewhere connections read as
//! usual and no arrival is recorded.

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Turns on receive timestamps for the listening socket, so that the kernel stamps every packet
/// from the start (connections accepted from it inherit the option): a request that reaches a
/// connection before the server has accepted it is stamped too.
pub(crate) fn timestamp_arrivals(listener: &TcpListener) {
    if let Err(e) = rx_stamps::enable(listener) {
        tracing::debug!("no receive timestamps on the listening socket: {e}");
    }
}

/// The server's listener: accepts as axum's `TcpListener` does (retrying after errors), sets
/// `TCP_NODELAY` and turns on receive timestamps for every connection.
pub struct StampedListener {
    inner: TcpListener,
}

impl StampedListener {
    pub fn new(inner: TcpListener) -> Self {
        StampedListener { inner }
    }
}

impl Listener for StampedListener {
    type Io = StampedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (tcp, addr) = Listener::accept(&mut self.inner).await;
        // Like uvicorn under SGLang, send every SSE event at once: without TCP_NODELAY, Nagle's
        // algorithm holds small writes until the peer's delayed ACK (~40 ms) on a reused
        // connection.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY: {e}");
        }
        (
            StampedStream::new(tcp, MAX_READ, true, RxStamp::default()),
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The latest kernel receive timestamp of one connection, shared with its requests' handlers
/// (as axum's connect info), and how many reads returned bytes (the keep-alive timer's sign of a
/// new request).
#[derive(Debug, Clone, Default)]
pub struct RxStamp {
    ns: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
}

impl RxStamp {
    /// When the last bytes read from the connection reached its socket, in ns since the Unix
    /// epoch; `None` before any timestamped read.
    pub fn unix_ns(&self) -> Option<u64> {
        Some(self.ns.load(Ordering::Relaxed)).filter(|&ns| ns > 0)
    }

    /// Reads from the connection that returned bytes.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

impl Connected<IncomingStream<'_, StampedListener>> for RxStamp {
    fn connect_info(stream: IncomingStream<'_, StampedListener>) -> Self {
        stream.io().observer().clone()
    }
}

/// Most bytes one timestamped read takes.
const MAX_READ: usize = 64 * 1024;

/// A TCP connection whose reads record the kernel's receive timestamp in its [`RxStamp`]
/// (untimed, as tokio reads, when the socket refused timestamps).
pub type StampedStream = rx_stamps::StampedStream<RxStamp>;

impl rx_stamps::Observe for RxStamp {
    type Mark = ();

    fn mark(&self) {}

    fn read(&mut self, bytes: &[u8], kernel_unix_ns: Option<u64>) {
        if !bytes.is_empty() {
            self.reads.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(ns) = kernel_unix_ns {
            self.ns.store(ns, Ordering::Relaxed);
        }
    }

    fn wrote(&mut self, (): (), _first: &[u8]) {}
}
