//! The streamed (SSE) response: engine events rendered when the connection polls for them.

use super::faults::Faults;
use super::render::{render, sse, Dialect, Rendered, Renderer, DONE};
use crate::engine::StreamEvent;
use crate::truth::GroundTruth;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// One write of the response body; an error cuts the connection.
type SseWrite = Result<Bytes, std::io::Error>;

/// One SSE response: events are rendered when the connection polls for them, so the instant an
/// event is handed to the connection is known and goes into the ground truth (`sent_ns`).
struct StreamState {
    ctx: Renderer,
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    faults: Faults,
    truth: GroundTruth,
    queue: std::collections::VecDeque<SseWrite>,
    events: usize,
    packed: Vec<u8>,
    ended: bool,
}

impl StreamState {
    /// Waits for the next engine event and queues its writes.
    async fn next_event(&mut self) {
        let Some(ev) = self.rx.recv().await else {
            // The engine went away without finishing the request.
            self.fail("engine stopped");
            return;
        };
        if matches!(ev, StreamEvent::Crash(_)) {
            self.fail("server crashed");
            return;
        }
        self.events += 1;
        let f = &self.faults;
        if f.reset_after.is_some_and(|n| self.events > n) {
            self.fail("fault: connection reset");
            return;
        }
        if f.error_after.is_some_and(|n| self.events > n) {
            self.queue.push_back(Ok(sse(
                &json!({"error": {"message": "fault: injected in-stream error"}}),
            )));
            self.queue.push_back(Ok(Bytes::from_static(DONE)));
            self.ended = true;
            return;
        }
        if self.events == 2 {
            if let Some(ms) = f.stall_ms {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
        let chunk = match &ev {
            StreamEvent::Tokens { chunk, .. } => Some(*chunk),
            _ => None,
        };
        let Rendered { writes, done } = render(&mut self.ctx, ev);
        for w in writes {
            if self.faults.pack {
                self.packed.extend_from_slice(&w);
            } else if self.faults.split && w.len() > 1 {
                let mid = w.len() / 2;
                self.queue.push_back(Ok(w.slice(..mid)));
                self.queue.push_back(Ok(w.slice(mid..)));
            } else {
                self.queue.push_back(Ok(w));
            }
        }
        if self.faults.pack && (done || self.packed.len() > 4096) {
            let packed = std::mem::take(&mut self.packed);
            self.queue.push_back(Ok(Bytes::from(packed)));
        }
        self.ended = done;
        if let Some(chunk) = chunk {
            let opts = self.ctx.options();
            let sent = opts.received.elapsed().as_nanos() as u64;
            self.truth.record_sent(&opts.rid, chunk, sent);
        }
    }

    /// Cuts the connection without `[DONE]`.
    fn fail(&mut self, why: &'static str) {
        self.queue.push_back(Err(std::io::Error::other(why)));
        self.ended = true;
    }
}

/// The SSE response for one request's events, with the faults its headers ask for.
pub(super) fn stream_response(
    ctx: Renderer,
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    headers: &HeaderMap,
    truth: GroundTruth,
) -> Response {
    let mut state = StreamState {
        ctx,
        rx,
        faults: Faults::from_headers(headers),
        truth,
        queue: std::collections::VecDeque::new(),
        events: 0,
        packed: Vec::new(),
        ended: false,
    };
    let opts = state.ctx.options();
    if opts.dialect == Dialect::Chat {
        let first = sse(&opts.chat_opening());
        state.queue.push_back(Ok(first));
    }
    let s = futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.ended {
                return None;
            }
            st.next_event().await;
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
