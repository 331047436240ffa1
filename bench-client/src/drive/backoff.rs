//! The gate every request of a load run passes: it backs the run off a server that refuses, and
//! stops the run when the server went away.
//!
//! Rules (one gate for the whole run, all workers and open-loop slots together):
//! - A request refused a connection (or failing to connect) counts one more consecutive refusal;
//!   the next request waits 50 ms · 2^(n−1), at most 2 s. After [`GONE_AFTER`] consecutive
//!   refusals the run stops: the server went away.
//! - HTTP 429 or 503 counts one more consecutive "busy": the next request waits the answer's
//!   `Retry-After` (seconds, at most [`MAX_WAIT`]), else 100 ms · 2^(n−1), at most 10 s.
//! - While either count is above zero the run is backing off: one request passes the gate per
//!   wait, each pass holding the next request back by the same wait, so requests queued at the gate
//!   go one by one, never as a burst when a wait ends.
//! - Any other outcome (a success, another failure) resets both counts and lets every request go.
//!
//! A request waiting at the gate has the wait in its `client_queue_time`, as any client-side wait.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::trace::{FailureKind, RequestTrace, StreamEnd};

/// Consecutive refused connections after which the server counts as gone.
pub const GONE_AFTER: u32 = 16;
/// The longest wait a `Retry-After` may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Whether a request's failure says the server is away or refusing work: no connection, a cut
/// stream, or HTTP 429, 502, 503 or 504.
pub fn server_away(t: &RequestTrace) -> bool {
    match &t.end {
        StreamEnd::HttpStatus { status, .. } => matches!(status, 429 | 502 | 503 | 504),
        _ => t
            .failure()
            .is_some_and(|f: crate::trace::Failure| f.kind.server_may_be_down()),
    }
}

#[derive(Debug, Default)]
struct State {
    /// No request passes before this.
    resume_at: Option<Instant>,
    /// The wait between passes while backing off.
    interval: Duration,
    refused: u32,
    busy: u32,
    /// Requests seen, those that succeeded, those whose failure says the server is away.
    seen: u64,
    succeeded: u64,
    away: u64,
    /// Why the run stopped, once it did.
    stopped: Option<String>,
}

/// The run's gate; see the module's rules.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<State>,
}

fn doubling(base: Duration, n: u32, cap: Duration) -> Duration {
    base.saturating_mul(1u32 << n.saturating_sub(1).min(16))
        .min(cap)
}

impl Gate {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until requests may go again; `false` once the run has stopped.
    pub async fn pass(&self) -> bool {
        loop {
            let at = {
                let mut s = self.lock();
                if s.stopped.is_some() {
                    return false;
                }
                let now = Instant::now();
                match s.resume_at {
                    Some(t) if t > now => t,
                    _ => {
                        if s.refused > 0 || s.busy > 0 {
                            s.resume_at = Some(now + s.interval);
                        }
                        return true;
                    }
                }
            };
            tokio::time::sleep_until(at).await;
        }
    }

    /// Whether the run has stopped.
    pub fn stopped(&self) -> bool {
        self.lock().stopped.is_some()
    }

    /// Counts one finished request (its `Retry-After`, when it had one).
    pub fn observe(&self, t: &RequestTrace, retry_after: Option<Duration>) {
        let failure = t.failure();
        let mut s = self.lock();
        s.seen += 1;
        let Some(f) = failure else {
            s.succeeded += 1;
            s.refused = 0;
            s.busy = 0;
            s.resume_at = None;
            return;
        };
        if server_away(t) {
            s.away += 1;
        }
        let now = Instant::now();
        let wait = match (&t.end, f.kind) {
            (_, FailureKind::ConnectRefused | FailureKind::Connect) => {
                s.refused += 1;
                s.busy = 0;
                if s.refused >= GONE_AFTER && s.stopped.is_none() {
                    s.stopped = Some(format!(
                        "the server went away: {GONE_AFTER} requests in a row were refused a connection"
                    ));
                }
                doubling(Duration::from_millis(50), s.refused, Duration::from_secs(2))
            }
            (
                StreamEnd::HttpStatus {
                    status: 429 | 503, ..
                },
                _,
            ) => {
                s.busy += 1;
                s.refused = 0;
                match retry_after {
                    Some(d) => d.min(MAX_WAIT),
                    None => doubling(Duration::from_millis(100), s.busy, Duration::from_secs(10)),
                }
            }
            _ => {
                s.refused = 0;
                s.busy = 0;
                s.resume_at = None;
                return;
            }
        };
        // The latest answer sets the wait (one request at a time goes while backing off).
        s.interval = wait;
        s.resume_at = Some(now + wait);
    }

    /// Why the server counts as gone at the end of the run: it stopped the run, or no request
    /// succeeded and every one failed as [`server_away`].
    pub fn verdict(&self) -> Option<String> {
        let s = self.lock();
        if let Some(r) = &s.stopped {
            return Some(r.clone());
        }
        (s.seen > 0 && s.succeeded == 0 && s.away == s.seen).then(|| {
            format!(
                "no request succeeded: all {} were refused (no connection, or HTTP 429/502/503/504)",
                s.seen
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Prompt, RequestSpec};
    use crate::stream::assemble::TraceHead;
    use crate::trace::Dialect;

    fn trace(end: StreamEnd) -> RequestTrace {
        let spec = RequestSpec::new("r", Prompt::TokenIds(vec![1]), 1);
        TraceHead::of(&spec, Dialect::Sglang).finish(None, None, None, end, 0)
    }

    fn refused() -> RequestTrace {
        trace(StreamEnd::ConnectRefused {
            message: "refused".into(),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_holds_every_request_back() {
        let g = Gate::default();
        let t0 = Instant::now();
        let busy = trace(StreamEnd::HttpStatus {
            status: 429,
            body: String::new(),
        });
        g.observe(&busy, Some(Duration::from_secs(3)));
        assert!(g.pass().await);
        assert_eq!(Instant::now() - t0, Duration::from_secs(3));
        // Without Retry-After, doubling from 100 ms: the third busy answer in a row waits 400 ms.
        g.observe(&busy, None);
        g.observe(&busy, None);
        let t1 = Instant::now();
        assert!(g.pass().await);
        assert_eq!(Instant::now() - t1, Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_queued_at_the_gate_go_one_per_wait_not_as_a_burst() {
        let g = std::sync::Arc::new(Gate::default());
        let t0 = Instant::now();
        g.observe(&refused(), None); // backing off: 50 ms between passes
        let passed: Vec<_> = (0..5)
            .map(|_| {
                let g = g.clone();
                tokio::spawn(async move {
                    assert!(g.pass().await);
                    Instant::now() - t0
                })
            })
            .collect();
        let mut at = Vec::new();
        for p in passed {
            at.push(p.await.unwrap());
        }
        at.sort();
        let ms: Vec<u128> = at.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![50, 100, 150, 200, 250]);
        // A success ends the back-off: the next request goes at once.
        g.observe(&trace(StreamEnd::Done), None);
        let t1 = Instant::now();
        assert!(g.pass().await && g.pass().await);
        assert_eq!(Instant::now(), t1);
    }

    #[tokio::test(start_paused = true)]
    async fn consecutive_refusals_stop_the_run() {
        let g = Gate::default();
        for _ in 0..GONE_AFTER - 1 {
            g.observe(&refused(), None);
        }
        assert!(!g.stopped());
        // A success in between starts the count again.
        g.observe(&trace(StreamEnd::Done), None);
        for _ in 0..GONE_AFTER - 1 {
            g.observe(&refused(), None);
        }
        assert!(!g.stopped() && g.verdict().is_none());
        g.observe(&refused(), None);
        assert!(g.stopped() && !g.pass().await);
        assert!(g.verdict().is_some_and(|v| v.contains("went away")));
    }

    #[test]
    fn all_refusing_is_a_verdict() {
        let g = Gate::default();
        g.observe(
            &trace(StreamEnd::HttpStatus {
                status: 503,
                body: String::new(),
            }),
            None,
        );
        assert!(g.verdict().is_some());
        g.observe(
            &trace(StreamEnd::HttpStatus {
                status: 400,
                body: String::new(),
            }),
            None,
        );
        assert!(g.verdict().is_none());
    }
}
