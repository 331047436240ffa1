//! Kernel receive timestamps of TCP reads, shared by the mock server (when a request reached its
//! socket) and the client (when each chunk reached its socket).
//!
//! On Linux a socket with `SO_TIMESTAMPNS` on has every received segment stamped by the kernel on
//! the real-time clock, and a `recvmsg` reports the stamp of the last segment it consumed. Elsewhere
//! [`enable`] fails and [`StampedReads::poll_read`] reads as tokio does, with no stamp.

mod stream;

use std::io;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;
use tokio::net::TcpStream;

pub use stream::{Observe, StampedStream};

/// Turns on receive timestamps for `socket` (a listening socket passes it on to the connections it
/// accepts). Linux turns timestamping on in a deferred job after the first socket asks for it, so
/// the first segments a process receives may still come without a stamp.
#[cfg(target_os = "linux")]
pub fn enable<S: std::os::fd::AsFd>(socket: &S) -> io::Result<()> {
    nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
        .map_err(io::Error::from)
}

/// Turns on receive timestamps for `socket`: not available on this system.
#[cfg(not(target_os = "linux"))]
pub fn enable<S>(_socket: &S) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "receive timestamps need Linux",
    ))
}

/// The size a connection's read scratch starts at.
#[cfg(target_os = "linux")]
const FIRST_SCRATCH: usize = 4096;

/// Reads of one connection that take the kernel's receive timestamps.
#[derive(Debug)]
pub struct StampedReads {
    /// Room for one `SCM_TIMESTAMPNS` control message, reused by every read.
    #[cfg(target_os = "linux")]
    cmsg: Vec<u8>,
    /// Most bytes one read takes.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    max_read: usize,
    /// Where `recvmsg` reads to, copied from into the caller's buffer. That buffer comes
    /// uninitialised and `recvmsg` needs initialised bytes: zeroing it on every read costs more
    /// than copying what arrived (a read is far shorter than `max_read`). It starts small and
    /// doubles, up to `max_read`, whenever a read fills it.
    #[cfg(target_os = "linux")]
    scratch: Vec<u8>,
    /// The socket takes receive timestamps: reads go through `recvmsg`.
    stamped: bool,
}

impl StampedReads {
    /// Reads of `tcp` of at most `max_read` bytes each, stamped when `want` and the socket takes
    /// receive timestamps ([`enable`]); untimed otherwise.
    pub fn on(tcp: &TcpStream, max_read: usize, want: bool) -> Self {
        let stamped = want
            && match enable(tcp) {
                Ok(()) => true,
                Err(e) => {
                    tracing::debug!("no receive timestamps on this connection: {e}");
                    false
                }
            };
        StampedReads {
            #[cfg(target_os = "linux")]
            cmsg: nix::cmsg_space!(nix::sys::time::TimeSpec),
            max_read: max_read.max(1),
            #[cfg(target_os = "linux")]
            scratch: vec![0; max_read.clamp(1, FIRST_SCRATCH)],
            stamped,
        }
    }

    /// Whether reads take the kernel's stamps.
    pub fn stamped(&self) -> bool {
        self.stamped
    }

    /// One read of `tcp` (the socket this was made `on`) into `buf`, at most `max_read` bytes
    /// when stamped, as `AsyncRead::poll_read` does: returns the kernel's stamp of the last segment
    /// read, in ns since the Unix epoch, when it gave one. A read that returns no bytes (end of
    /// stream) has no stamp.
    pub fn poll_read(
        &mut self,
        tcp: &mut TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<Option<u64>>> {
        if !self.stamped {
            return poll_read_untimed(tcp, cx, buf).map_ok(|()| None);
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let fd = tcp.as_raw_fd();
            loop {
                std::task::ready!(tcp.poll_read_ready(cx))?;
                let len = buf.remaining().min(self.scratch.len());
                let (dst, cmsg) = (&mut self.scratch[..len], &mut self.cmsg);
                // A short read drained the socket: it is reported to tokio as `WouldBlock`, which
                // clears the readiness, so the next read waits for new bytes instead of making a
                // `recvmsg` that finds none (tokio's own reads do the same).
                let mut drained = None;
                let got = tcp.try_io(tokio::io::Interest::READABLE, || {
                    match recv_stamped(fd, dst, cmsg)? {
                        (n, stamp) if n > 0 && n < len => {
                            drained = Some((n, stamp));
                            Err(io::ErrorKind::WouldBlock.into())
                        }
                        read => Ok(read),
                    }
                });
                match drained.map_or(got, Ok) {
                    Ok((n, stamp)) => {
                        buf.put_slice(&self.scratch[..n]);
                        if n == self.scratch.len() && n < self.max_read {
                            self.scratch.resize((2 * n).min(self.max_read), 0);
                        }
                        return Poll::Ready(Ok(stamp.filter(|_| n > 0)));
                    }
                    Err(e) if retry(&e) => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        poll_read_untimed(tcp, cx, buf).map_ok(|()| None)
    }
}

/// Readiness was stale (the read cleared it), or a signal interrupted the call: read again.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// One read of `tcp` into `buf`, without a stamp (what [`StampedReads::poll_read`] does on a
/// socket without receive timestamps): tokio's own read, which reads into the buffer's
/// uninitialised room without zeroing it first and takes a short read to mean the socket is
/// drained (no second `read` that only finds it empty).
pub fn poll_read_untimed(
    tcp: &mut TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    tokio::io::AsyncRead::poll_read(std::pin::Pin::new(tcp), cx, buf)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn an_untimed_read_reads() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(b"abc").await.unwrap();
        let mut storage = [0u8; 8];
        let mut buf = ReadBuf::new(&mut storage);
        buf.put_slice(b"x");
        let mut server = server;
        std::future::poll_fn(|cx| poll_read_untimed(&mut server, cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(buf.filled(), b"xabc");
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_read_carries_the_kernels_stamp_of_its_segment() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        enable(&listener).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        // Timestamping turns on in a deferred kernel job: give it a moment.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let unix_ns = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        };
        let before = unix_ns();
        client.write_all(b"hello").await.unwrap();
        let after_write = unix_ns();
        // Read well after the segment arrived: the stamp is its arrival, not the read.
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        let mut reads = StampedReads::on(&server, 1024, true);
        assert!(reads.stamped());
        let mut storage = [0u8; 64];
        let mut buf = ReadBuf::new(&mut storage);
        let mut server = server;
        let stamp = std::future::poll_fn(|cx| reads.poll_read(&mut server, cx, &mut buf))
            .await
            .unwrap()
            .expect("a stamp");
        assert_eq!(buf.filled(), b"hello");
        assert!(
            stamp >= before && stamp <= after_write,
            "stamped {} ns after the write began",
            stamp.saturating_sub(before)
        );
    }
}
