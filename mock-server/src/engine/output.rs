//! The output stage: a pass's events handed over in order, each sent to its stream at its
//! modelled instant and recorded in the ground truth as it leaves.

use super::stats::PassStats;
use super::{Engine, RequestState, Shared, StreamEvent};
use crate::clock::Clock;
use crate::truth::{ChunkTruth, FinishTruth};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

/// A stream event due at its modelled instant.
pub(super) struct Outgoing {
    /// The request's stream; `None` on the engine path, whose driver takes events by key.
    pub(super) tx: Option<mpsc::UnboundedSender<StreamEvent>>,
    pub(super) event: StreamEvent,
    /// The modelled emission instant.
    pub(super) at: Instant,
    /// The same, in ns since the request was received.
    pub(super) model_ns: u64,
    /// The request id: on the engine path only on a final event (its ground truth is taken out
    /// then), so that an event costs no reference count.
    pub(super) rid: Option<Arc<str>>,
    /// The request's key ([`super::Msg::Submit`]).
    pub(super) key: u64,
    pub(super) received: Instant,
    pub(super) tokens: usize,
    pub(super) completion: usize,
    pub(super) verify_ct: usize,
    /// The accept histogram so far, for the ground truth the output stage records (empty on the
    /// engine path, which records no chunks; the final event's statistics carry it).
    pub(super) hist: Vec<u64>,
}

/// Where a pass's events go: the output stage's queue, or on the engine path a list its driver
/// empties after each step.
pub(super) enum OutQueue {
    Stage(mpsc::UnboundedSender<Outgoing>),
    Direct(Vec<Outgoing>),
}

/// A request a pass drew tokens for, and where it goes when the pass ends.
pub(super) enum Drawn {
    /// It finished: into the cache, its KV released.
    Finished(Box<RequestState>),
    /// It goes on decoding.
    Running(Box<RequestState>),
}

impl Engine {
    /// Ends a pass: its counters first (so no client reads a chunk `/metrics` has not counted),
    /// then its events to the output stage, and only then the requests it drew into the cache
    /// (finished) or back into the running set, yielding every 32 finished requests so that the
    /// events due meanwhile are not held up.
    pub(super) async fn end_pass(
        &mut self,
        mut stats: PassStats,
        events: Vec<Outgoing>,
        mut reqs: Vec<Drawn>,
        end: Instant,
    ) {
        stats.apply(&self.shared);
        self.spare_stats = stats;
        let events = if self.cfg.results_after_next_pass {
            // This pass's results wait for the next pass; the last pass's are processed now.
            let mut last = std::mem::replace(&mut self.lagged, events);
            self.time_events(&mut last, end);
            last
        } else {
            events
        };
        self.hand_over(events).await;
        let mut completed = 0usize;
        for drawn in reqs.drain(..) {
            let r = match drawn {
                Drawn::Running(r) => {
                    self.running.push(r);
                    continue;
                }
                Drawn::Finished(r) => r,
            };
            if completed > 0 && completed % 32 == 0 {
                self.let_others_run().await;
            }
            self.complete(r);
            completed += 1;
        }
        self.spare_drawn = reqs;
    }

    /// Hands the held events of the last pass to the output stage, processed from `at` on.
    pub(super) async fn release_lagged(&mut self, at: Instant) {
        if self.lagged.is_empty() {
            return;
        }
        let mut events = std::mem::take(&mut self.lagged);
        self.time_events(&mut events, at);
        self.hand_over(events).await;
    }

    /// Times events whose processing starts at `from`, in order, through the output queue.
    pub(super) fn time_events(&mut self, events: &mut [Outgoing], from: Instant) {
        for o in events {
            let at = self.output_at(from);
            let ns = at.saturating_duration_since(o.received).as_nanos() as u64;
            o.at = at;
            o.model_ns = ns;
            if let StreamEvent::Tokens { at_ns, .. } = &mut o.event {
                *at_ns = ns;
            }
        }
    }

    /// When an event whose processing can start at `from` reaches its stream: it takes the output
    /// queue's next slot (`output_per_request_s` each), then `stream_latency_s`.
    pub(super) fn output_at(&mut self, from: Instant) -> Instant {
        let processed = self.output_free.map_or(from, |f| f.max(from));
        self.output_free = Some(processed + self.output_gap);
        processed + self.stream_latency
    }

    /// Hands a pass's events to the output stage, then yields once if there were any. Sending
    /// wakes the stage on this worker, in tokio's LIFO slot, which no other worker can take a
    /// task from: until the engine yields, the events due now would wait behind the rest of the
    /// pass's bookkeeping and the next scheduling step, which grows with the running batch (see
    /// BENCHMARKS.md).
    /// The emptied list is kept for the next pass.
    pub(super) async fn hand_over(&mut self, mut events: Vec<Outgoing>) {
        if events.is_empty() {
            self.spare_events = events;
            return;
        }
        match &mut self.out {
            OutQueue::Stage(tx) => {
                for o in events.drain(..) {
                    let _ = tx.send(o);
                }
            }
            OutQueue::Direct(out) => {
                if out.is_empty() {
                    // The driver's emptied list comes back as the spare.
                    std::mem::swap(out, &mut events);
                } else {
                    out.append(&mut events);
                }
            }
        }
        self.spare_events = events;
        self.let_others_run().await;
    }
}

/// The server's output processing: hands each event to its stream at its modelled instant, in
/// order, and records the chunk in the ground truth with the instant it really left as `at_ns`.
/// It runs beside the engine, so a pass's events going out never delay the next pass.
///
/// On the real clock, an event that is not due yet first lets this worker write the events
/// already handed over (their connections' tasks are queued here), and a wait ends no sooner than
/// `tick` after the previous one (`output_tick_s`), so the events due meanwhile leave at one
/// wake-up. Rule: at most one OS sleep per tick, because a sleep costs about as much CPU as
/// writing an event (arming the timer exits a virtual machine to its host, and the thread is
/// switched out and back in); see BENCHMARKS.md.
pub(super) async fn output_stage(
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    clock: Clock,
    tick: Duration,
    shared: Arc<Shared>,
) {
    let mut held: Option<Outgoing> = None;
    let mut yielded = false;
    let mut last_wait: Option<Instant> = None;
    loop {
        let o = match held.take() {
            Some(o) => o,
            None => match rx.recv().await {
                Some(o) => o,
                None => return,
            },
        };
        if o.at > Instant::now() {
            if !yielded && clock == Clock::Precise {
                yielded = true;
                held = Some(o);
                tokio::task::yield_now().await;
                continue;
            }
            let at = last_wait.map_or(o.at, |w| o.at.max(w + tick));
            clock.wait_short(at).await;
            last_wait = Some(Instant::now());
        }
        yielded = false;
        emit(o, &shared);
    }
}

/// Hands one event to its stream now (unless the server died) and records its chunk.
fn emit(mut o: Outgoing, shared: &Shared) {
    // The finish is recorded with the final chunk, so whoever has the chunk can read it.
    let finish = match &o.event {
        StreamEvent::Tokens {
            finish: Some(f), ..
        } => Some(FinishTruth::from(f)),
        _ => None,
    };
    if shared.dead.load(std::sync::atomic::Ordering::SeqCst) {
        // The server died before this event left: it never does. That includes events due up to a
        // tick (or the stage's backlog) before the crash; the ground truth has only what left.
        // A request whose final event this was is no longer in the engine's sets, so the crash
        // did not mark it.
        if let (Some(rid), true) = (&o.rid, finish.is_some()) {
            shared.truth.update(rid, |t| {
                if t.finish == FinishTruth::Pending {
                    t.finish = FinishTruth::OomCrash;
                }
            });
        }
        return;
    }
    let now = Instant::now()
        .saturating_duration_since(o.received)
        .as_nanos() as u64;
    if let StreamEvent::Tokens { at_ns, .. } = &mut o.event {
        *at_ns = now;
    }
    let chunk = ChunkTruth {
        at_ns: now,
        model_ns: o.model_ns,
        tokens: o.tokens,
        sent_ns: None,
    };
    let (completion, verify_ct, hist) = (o.completion, o.verify_ct, o.hist);
    let rid = o.rid.as_deref().unwrap_or_default();
    shared.truth.update(rid, |t| {
        t.chunks.push(chunk);
        t.completion_tokens = completion;
        t.spec_verify_ct = verify_ct;
        t.spec_accept_histogram = hist;
        if let Some(f) = finish {
            t.finish = f;
        }
    });
    if let Some(tx) = o.tx {
        let _ = tx.send(o.event);
    }
}
