//! The HTTP/1.1 connections of [`crate::MockServer`]: hyper serves each accepted connection with
//! the app, closing it as uvicorn (SGLang's HTTP server) does once it has been idle after a
//! response, and closing it when a request's header takes too long to arrive.
//!
//! Rules:
//! - Keep-alive: once a response has ended and no request is in progress on the connection, it is
//!   closed after `timeout_keep_alive` unless bytes of a new request arrive first (uvicorn's
//!   `timeout_keep_alive`, which SGLang sets to 5 s). A connection that has not had a response yet
//!   is not subject to it (as in uvicorn).
//! - Header read: a request's header must be complete within `header_read_timeout` of the moment
//!   the connection is ready for it (accepted, or its previous response ended); hyper's timer.
//! - Stopping: every connection finishes its request in progress, then closes.

use crate::listen::{RxStamp, StampedListener};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{watch, Notify};
use tokio::time::Duration;
use tower::ServiceExt;

/// The connection timeouts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timeouts {
    /// Idle time after a response before the connection is closed.
    pub keep_alive: Duration,
    /// Longest wait for a request's complete header, from when the connection is ready for it.
    pub header_read: Duration,
}

/// uvicorn's default, and SGLang's (`SGLANG_TIMEOUT_KEEP_ALIVE`).
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5);
/// hyper's default.
pub const DEFAULT_HEADER_READ: Duration = Duration::from_secs(30);

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            keep_alive: DEFAULT_KEEP_ALIVE,
            header_read: DEFAULT_HEADER_READ,
        }
    }
}

/// Requests in progress on one connection, and the responses that ended on it.
#[derive(Default)]
struct Activity {
    in_progress: AtomicUsize,
    ended: AtomicU64,
    wake: Notify,
}

/// Counts a request in progress until its response body is dropped (hyper drops it once the
/// body is written, or when the connection breaks).
struct InProgress(Arc<Activity>);

impl InProgress {
    fn new(a: &Arc<Activity>) -> Self {
        a.in_progress.fetch_add(1, Ordering::SeqCst);
        InProgress(a.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.ended.fetch_add(1, Ordering::SeqCst);
        self.0.in_progress.fetch_sub(1, Ordering::SeqCst);
        self.0.wake.notify_one();
    }
}

/// A response body that holds its request's [`InProgress`] mark.
struct Tracked {
    inner: Body,
    _mark: InProgress,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Resolves once the connection has been idle for `t` after a response (never before the
/// first response ends).
async fn idle_for(a: &Activity, stamp: &RxStamp, t: Duration) {
    loop {
        a.wake.notified().await;
        loop {
            if a.in_progress.load(Ordering::SeqCst) > 0 {
                break;
            }
            let (ended, reads) = (a.ended.load(Ordering::SeqCst), stamp.reads());
            tokio::time::sleep(t).await;
            let quiet = a.in_progress.load(Ordering::SeqCst) == 0
                && a.ended.load(Ordering::SeqCst) == ended
                && stamp.reads() == reads;
            if quiet {
                return;
            }
        }
    }
}

/// Serves connections from `listener` until `stop` resolves, then waits for every connection to
/// finish its request in progress.
pub(crate) async fn serve(
    mut listener: StampedListener,
    router: Router,
    timeouts: Timeouts,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let (open_tx, open_rx) = watch::channel(());
    tokio::pin!(stop);
    loop {
        let (io, _addr) = tokio::select! {
            c = Listener::accept(&mut listener) => c,
            _ = &mut stop => break,
        };
        let stamp = io.observer().clone();
        let activity = Arc::new(Activity::default());
        let svc = {
            let (router, stamp, activity) = (router.clone(), stamp.clone(), activity.clone());
            hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let mark = InProgress::new(&activity);
                let mut req = req.map(Body::new);
                req.extensions_mut().insert(ConnectInfo(stamp.clone()));
                let call = router.clone().oneshot(req);
                async move {
                    let resp = match call.await {
                        Ok(r) => r,
                        Err(e) => match e {},
                    };
                    Ok::<_, Infallible>(resp.map(|inner| Tracked { inner, _mark: mark }))
                }
            })
        };
        let mut stop_rx = stop_rx.clone();
        let open_rx = open_rx.clone();
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(timeouts.header_read);
            let conn = builder.serve_connection(TokioIo::new(io), svc);
            tokio::pin!(conn);
            let idle = idle_for(&activity, &stamp, timeouts.keep_alive);
            tokio::pin!(idle);
            let mut closing = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::trace!("connection ended: {e}");
                        }
                        break;
                    }
                    _ = stop_rx.changed(), if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                    _ = &mut idle, if !closing => {
                        closing = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(open_rx);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
}
