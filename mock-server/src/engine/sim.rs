//! The engine path: the same engine driven on an exact virtual clock, with no HTTP, no SSE and
//! no tokio timer. Every instant is an integer number of nanoseconds from the start, where the
//! cost model puts it; a run takes the time its arithmetic takes.
//!
//! The driver owns the order of events. Before it lets the engine run the pass due at
//! [`Simulator::next_step_ns`], it submits every request received strictly before that instant:
//! the engine admits only requests received before a pass begins, so a request received at the
//! instant a pass begins waits for the next one, as on the HTTP path (see `plan_prefill`).

use super::output::OutQueue;
use super::{Engine, GenRequest, Msg, Stepped, StreamEvent};
use crate::clock::Clock;
use crate::config::Config;
use crate::truth::{GroundTruth, RequestTruth};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

/// A request as the engine path submits it (what the HTTP handlers parse out of a body).
#[derive(Debug, Clone)]
pub struct SimRequest {
    pub rid: String,
    /// The prompt (shared: a closed loop sends one buffer many times without copying it).
    pub input_ids: crate::radix::Tokens,
    pub max_new_tokens: usize,
    pub min_new_tokens: usize,
    pub ignore_eos: bool,
    pub stop_token_ids: Vec<u32>,
}

/// Why the server did not take a request, as a client over HTTP would learn it.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Nothing listens: the server died and does not restart.
    Down,
    /// The server restarts after a crash and answers 503 until this instant (ns).
    Starting { until_ns: u64 },
    /// SGLang's length checks failed (the message SGLang sends).
    Length(String),
    /// The request id is already in use.
    DuplicateRid,
}

/// What the engine path tells the driver.
#[derive(Debug, Clone)]
pub enum SimEvent {
    /// An event of one request's stream (the key [`Simulator::submit`] gave it), at its
    /// modelled instant.
    Stream {
        id: u64,
        at_ns: u64,
        event: StreamEvent,
    },
    /// The server died at `at_ns` (every stream still open is cut there).
    Died { at_ns: u64, reason: String },
}

/// The engine on the virtual clock.
pub struct Simulator {
    config: Config,
    engine: Engine,
    /// The streams in flight, by key: the engine sends on them only an error or a crash (its
    /// token events come through its output list).
    streams: HashMap<u64, mpsc::UnboundedReceiver<StreamEvent>>,
    /// The key of the next request submitted.
    next_id: u64,
    base: Instant,
    /// The end of the last pass while passes follow each other.
    chain: Option<Instant>,
    /// When an idle engine wakes: at the first submission to it, or when its last step ended
    /// if that is later (a request received during a pass waits for its end).
    woke: Option<Instant>,
    /// When the engine's last step ended.
    free_at: Instant,
    crashes: u32,
    /// After a crash without restart: nothing listens.
    down: bool,
    starting_until: Option<u64>,
    crash_log: Option<String>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("in_flight", &self.streams.len())
            .field("crashes", &self.crashes)
            .finish()
    }
}

/// Runs a future of the engine that never waits on the virtual clock to its end.
fn run_now<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    // Every wait ends at once on the virtual clock; a future still pending after this many
    // polls waits on something the engine path does not have.
    for _ in 0..64 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
    }
    None
}

impl Simulator {
    /// An idle server of `config` at virtual instant 0 (the configuration is validated).
    pub fn new(config: Config) -> Result<Self, crate::ConfigError> {
        config.validate()?;
        let base = Instant::now();
        let engine = Self::fresh_engine(&config, base);
        Ok(Simulator {
            config,
            engine,
            streams: HashMap::new(),
            next_id: 0,
            base,
            chain: None,
            woke: None,
            free_at: base,
            crashes: 0,
            down: false,
            starting_until: None,
            crash_log: None,
        })
    }

    fn fresh_engine(config: &Config, at: Instant) -> Engine {
        let crashed = Arc::new(watch::channel(None::<String>).0);
        Engine::new(
            config.clone(),
            GroundTruth::default(),
            crashed,
            Clock::Tokio,
            Some(at),
        )
        .0
    }

    /// The server's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Submits a request received at `at_ns`: never before an instant the engine has reached,
    /// unless requests received before it still wait in the queue, behind which it is admitted
    /// as if it had come at `at_ns` (the scheduler admits in order of arrival, at most
    /// `max_running_requests` a pass). Returns the key its stream's events carry (distinct for
    /// every request of a run).
    pub fn submit(&mut self, at_ns: u64, req: SimRequest) -> Result<u64, Refusal> {
        if self.down {
            return Err(Refusal::Down);
        }
        if let Some(until_ns) = self.starting_until {
            if at_ns < until_ns {
                return Err(Refusal::Starting { until_ns });
            }
            self.starting_until = None;
        }
        crate::config::check_lengths(
            self.config.context_length,
            req.input_ids.len(),
            req.max_new_tokens,
        )
        .map_err(Refusal::Length)?;
        // Every request in flight has its ground truth until its stream ends.
        if self.engine.shared.truth.contains(&req.rid) {
            return Err(Refusal::DuplicateRid);
        }
        let received = self.at(at_ns);
        if self.engine.idle() && self.chain.is_none() {
            let free_at = self.free_at;
            self.woke.get_or_insert(received.max(free_at));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next_id;
        self.next_id += 1;
        self.streams.insert(id, rx);
        self.engine.handle(Msg::Submit(
            GenRequest {
                rid: req.rid,
                input_ids: req.input_ids,
                max_new_tokens: req.max_new_tokens,
                min_new_tokens: req.min_new_tokens.min(req.max_new_tokens),
                ignore_eos: req.ignore_eos,
                stop_token_ids: req.stop_token_ids,
                received,
                arrived_unix_ns: None,
            },
            tx,
            id,
        ));
        Ok(id)
    }

    /// When the engine's next step is due (ns), or `None` while it is idle with nothing held.
    /// The driver submits every request received strictly before it, then calls
    /// [`Simulator::step`].
    pub fn next_step_ns(&self) -> Option<u64> {
        if self.down {
            return None;
        }
        if !self.engine.idle() {
            return self.chain.or(self.woke).map(|t| self.ns(t));
        }
        if !self.engine.lagged.is_empty() {
            return Some(self.chain.map_or(0, |t| self.ns(t)));
        }
        None
    }

    /// Runs the step due at [`Simulator::next_step_ns`]: one pass (or an idle engine's release
    /// of held results), returning the stream events it produced, each at its instant.
    pub fn step(&mut self) -> Vec<SimEvent> {
        let mut out = Vec::new();
        self.step_with(|e| out.push(e));
        out
    }

    /// [`Simulator::step`], handing each event to `f` in order (straight from the engine's
    /// output list: an event is large, and a driver that queues it moves it once).
    pub fn step_with(&mut self, mut f: impl FnMut(SimEvent)) {
        if self.engine.idle() {
            let chain = self.chain.take();
            let _ = run_now(self.engine.go_idle(chain));
            self.woke = None;
            self.drain(&mut f);
            return;
        }
        let start = match self.chain.or(self.woke) {
            Some(t) => t,
            None => return,
        };
        self.engine.vnow = Some(start);
        self.woke = None;
        self.engine.publish_stats();
        let stepped = run_now(self.engine.step(self.chain));
        match stepped {
            Some(Stepped::Pass(end)) => {
                self.chain = Some(end);
                self.free_at = end;
                if self.engine.idle() {
                    // The idle engine processes the pass's held results at its end.
                    let _ = run_now(self.engine.go_idle(Some(end)));
                    self.chain = None;
                }
            }
            Some(Stepped::Refused(refused)) => {
                self.chain = None;
                self.free_at = start;
                if let Some((rid, id)) = refused {
                    if let Some(mut rx) = self.streams.remove(&id) {
                        while let Ok(event) = rx.try_recv() {
                            f(SimEvent::Stream {
                                id,
                                at_ns: self.ns(start),
                                event,
                            });
                        }
                    }
                    self.engine.shared.truth.take(&rid);
                }
                if !self.engine.idle() {
                    self.woke = Some(start);
                }
            }
            Some(Stepped::Died) | None => {
                let reason = self
                    .engine
                    .shared
                    .crashed
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| "the engine stopped".into());
                self.die(start, reason.clone());
                // Events of earlier passes due after the death never leave: the driver cuts
                // every stream still open at `at_ns`.
                f(SimEvent::Died {
                    at_ns: self.ns(start),
                    reason,
                });
                return;
            }
        }
        self.drain(&mut f);
    }

    /// The client closed the stream of key `id` (request `rid`): the engine drops the request
    /// wherever it is (queued, prefilling or decoding) and frees its KV, as the server's loop
    /// does between passes (a pass computes at its start, so before the next one is the same
    /// instant to it). Events of a pass already run still come out of [`Simulator::step`];
    /// they belong to no stream.
    pub fn abort(&mut self, id: u64, rid: &str) {
        if self.streams.remove(&id).is_some() {
            self.engine.shared.truth.take(rid);
            self.engine.reap_closed();
        }
    }

    /// Runs as one the coming decode steps that send nothing and start no later than `limit_ns`
    /// (the driver's next send, if any), to the nanosecond where step-by-step decoding puts them
    /// (`engine/jump.rs`); false when none can be jumped. A closed loop calls it before
    /// [`Simulator::step`]: only the token ids of the jumped steps are not drawn.
    pub fn skip_decode(&mut self, limit_ns: Option<u64>) -> bool {
        let Some(start) = self.chain else {
            return false;
        };
        if self.down || self.engine.idle() {
            return false;
        }
        self.engine.vnow = Some(start);
        let limit = limit_ns.map(|l| self.at(l));
        match self.engine.jump_decode(start, limit) {
            Some(end) => {
                self.chain = Some(end);
                self.free_at = end;
                true
            }
            None => false,
        }
    }

    /// The server died at `at`: streams cut, the engine replaced by an empty one that answers
    /// after `startup_s` (`restart_on_oom`), or nothing listens again.
    fn die(&mut self, at: Instant, reason: String) {
        self.crashes += 1;
        self.crash_log = Some(reason);
        self.streams.clear();
        self.chain = None;
        self.woke = None;
        self.free_at = at;
        if self.config.restart_on_oom {
            let startup =
                Duration::from_secs_f64(self.config.startup_s.max(0.0) / self.config.time_scale);
            self.engine = Self::fresh_engine(&self.config, at);
            self.starting_until = Some(self.ns(at + startup));
        } else {
            self.down = true;
        }
    }

    /// The output stage's events of the last step, each at its modelled instant; a request's
    /// final event takes its ground truth out of the store (constant memory over a long run).
    fn drain(&mut self, f: &mut impl FnMut(SimEvent)) {
        let mut events = match &mut self.engine.out {
            OutQueue::Direct(events) => std::mem::take(events),
            OutQueue::Stage(_) => Vec::new(),
        };
        for o in events.drain(..) {
            let at_ns = self.ns(o.at);
            let last = matches!(
                o.event,
                StreamEvent::Tokens {
                    finish: Some(_),
                    ..
                }
            );
            if last {
                self.streams.remove(&o.key);
                if let Some(rid) = &o.rid {
                    self.engine.shared.truth.take(rid);
                }
            }
            f(SimEvent::Stream {
                id: o.key,
                at_ns,
                event: o.event,
            });
        }
        // The emptied list goes back, keeping its capacity for the next pass.
        if let OutQueue::Direct(q) = &mut self.engine.out {
            if q.is_empty() {
                *q = events;
            }
        }
    }

    /// Empties the radix cache (`/flush_cache`); false while requests are queued or running.
    pub fn flush_cache(&mut self) -> bool {
        if self.down || !self.engine.idle() {
            return false;
        }
        self.engine.tree.reset();
        true
    }

    /// Whether `/health` answers 200 at `at_ns`.
    pub fn healthy(&self, at_ns: u64) -> bool {
        !self.down && self.starting_until.is_none_or(|u| at_ns >= u)
    }

    /// Requests in the scheduler's waiting queue (not yet admitted to a batch).
    pub fn queued(&self) -> usize {
        self.engine.waiting_len()
    }

    /// Requests submitted and not yet ended.
    pub fn in_flight(&self) -> usize {
        self.streams.len()
    }

    /// How often the server died.
    pub fn crashes(&self) -> u32 {
        self.crashes
    }

    /// Why the server last died.
    pub fn crash_log(&self) -> Option<&str> {
        self.crash_log.as_deref()
    }

    /// The live counters, as `/metrics` and `/server_info` read them.
    pub fn stats(&self) -> super::Stats {
        self.engine.publish_stats();
        self.engine
            .shared
            .stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The server's memory budget.
    pub fn budget(&self) -> &crate::memory::MemoryBudget {
        &self.engine.shared.budget
    }

    /// The ground truth of a request still in flight.
    pub fn truth(&self, rid: &str) -> Option<RequestTruth> {
        self.engine.shared.truth.request(rid)
    }
}
