//! One TCP connection whose reads take the kernel's receive timestamps and whose I/O is reported
//! to an observer: the mock keeps the latest arrival for its ground truth, the client logs every
//! read and write for its stamps.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::StampedReads;

/// What a [`StampedStream`] reports of its I/O.
pub trait Observe: Unpin {
    /// Taken just before each write and handed to [`Observe::wrote`] when the write took bytes
    /// (the client's instant of the write).
    type Mark;

    /// The mark of a write about to start.
    fn mark(&self) -> Self::Mark;

    /// `bytes` were read; `kernel_unix_ns` is the kernel's stamp of the last segment, when the
    /// socket gave one. Not called for empty reads.
    fn read(&mut self, bytes: &[u8], kernel_unix_ns: Option<u64>);

    /// A write that began at `mark` took bytes; `first` is its first non-empty buffer.
    fn wrote(&mut self, mark: Self::Mark, first: &[u8]);

    /// What hyper's client learns of the connection when it is opened.
    #[cfg(feature = "hyper-client")]
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

/// A TCP connection whose reads are stamped by the kernel where the socket allows it and whose
/// I/O goes to an [`Observe`]r.
#[derive(Debug)]
pub struct StampedStream<O> {
    tcp: TcpStream,
    reads: StampedReads,
    observer: O,
}

impl<O: Observe> StampedStream<O> {
    /// `tcp` with reads of at most `max_read` bytes, kernel-stamped when `want_stamps` and the
    /// socket takes them (untimed, as tokio reads, otherwise).
    pub fn new(tcp: TcpStream, max_read: usize, want_stamps: bool, observer: O) -> Self {
        let reads = StampedReads::on(&tcp, max_read, want_stamps);
        StampedStream {
            tcp,
            reads,
            observer,
        }
    }

    /// The observer.
    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The socket.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl<O: Observe> AsyncRead for StampedStream<O> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let stamp = std::task::ready!(this.reads.poll_read(&mut this.tcp, cx, buf))?;
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            this.observer.read(new, stamp);
        }
        Poll::Ready(Ok(()))
    }
}

impl<O: Observe> AsyncWrite for StampedStream<O> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mark = this.observer.mark();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.observer.wrote(mark, buf);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mark = this.observer.mark();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            this.observer.wrote(mark, first);
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

#[cfg(feature = "hyper-client")]
impl<O: Observe> hyper_util::client::legacy::connect::Connection for StampedStream<O> {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        self.observer.connected()
    }
}
