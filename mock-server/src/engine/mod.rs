//! The scheduler: one loop with continuous batching, chunked prefill, decode steps and
//! speculative multi-token steps. Every pass costs model time from the cost model and the loop
//! waits for it on tokio's clock with absolute deadlines, so errors never accumulate.
//!
//! Layout: [`events`] (what goes in and out), [`stats`] (live counters), `kv` (KV accounting),
//! `admission` (admission, retraction), `prefill`, `decode` (and speculation), `output` (the
//! output stage). The engine knows no HTTP.

mod admission;
mod decode;
pub mod events;
mod jump;
mod kv;
mod output;
mod prefill;
pub mod sim;
pub mod stats;

pub use events::{EventIds, Finish, GenRequest, RequestTimes, SpeculativeStats, StreamEvent};
pub use stats::Stats;

use crate::clock::Clock;
use crate::config::Config;
use crate::memory::MemoryBudget;
use crate::radix::{NodeId, RadixTree};
use crate::truth::{FinishTruth, GroundTruth, RequestTruth};
use output::{output_stage, OutQueue, Outgoing};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use stats::PassStats;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Duration, Instant};

/// The engine is gone (its task ended): it takes no more work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the engine is not running")]
pub struct EngineStopped;

enum Msg {
    /// A request, its stream, and the key its events carry (the engine path's handle; 0 over
    /// HTTP, where each request has its own stream).
    Submit(GenRequest, mpsc::UnboundedSender<StreamEvent>, u64),
    Flush(oneshot::Sender<bool>),
}

/// State shared between the engine and the HTTP layer.
pub struct Shared {
    pub config: Config,
    pub budget: MemoryBudget,
    pub truth: GroundTruth,
    pub stats: Mutex<Stats>,
    pub crashed: Arc<watch::Sender<Option<String>>>,
    /// Set when this engine died: its output stage sends nothing more.
    dead: std::sync::atomic::AtomicBool,
}

/// A handle to submit work to the engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Msg>,
    pub shared: Arc<Shared>,
}

impl EngineHandle {
    /// Starts an engine task on the current runtime.
    pub fn spawn(
        config: Config,
        truth: GroundTruth,
        crashed: Arc<watch::Sender<Option<String>>>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let clock = Clock::detect();
        let (engine, out_rx) = Engine::new(config, truth, crashed, clock, None);
        let shared = engine.shared.clone();
        tokio::spawn(engine.run(rx));
        let tick = match clock {
            Clock::Tokio => Duration::ZERO,
            Clock::Precise => Duration::from_secs_f64(shared.config.output_tick_s),
        };
        tokio::spawn(output_stage(out_rx, clock, tick, shared.clone()));
        EngineHandle { tx, shared }
    }

    /// Queues a request; the returned channel yields its stream events.
    pub fn submit(
        &self,
        req: GenRequest,
    ) -> Result<mpsc::UnboundedReceiver<StreamEvent>, EngineStopped> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.tx
            .send(Msg::Submit(req, tx, 0))
            .map_err(|_| EngineStopped)?;
        Ok(rx)
    }

    /// Empties the radix cache; `Ok(false)` when requests are running or waiting.
    pub async fn flush_cache(&self) -> Result<bool, EngineStopped> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(Msg::Flush(tx)).map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    pub fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }

    pub fn stats(&self) -> Stats {
        self.shared
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// What one scheduling step did.
enum Stepped {
    /// A pass ran and ended at this instant.
    Pass(Instant),
    /// Nothing could run: the head of the queue (this request) was refused, and the chain of
    /// passes breaks (its id and key).
    Refused(Option<(String, u64)>),
    /// The server died in the pass.
    Died,
}

/// A request inside the engine: what was asked, its KV and cache lock, its output so far. The
/// queues hold it boxed: a pass moves every running request out of its set and back.
struct RequestState {
    request: GenRequest,
    /// The request id, shared with each of its events.
    rid: Arc<str>,
    /// The key its events carry ([`Msg::Submit`]).
    key: u64,
    tx: mpsc::UnboundedSender<StreamEvent>,
    /// Tokens whose KV exists (cached prefix included).
    kv_len: usize,
    node: NodeId,
    locked_len: usize,
    cached: usize,
    output: Vec<u32>,
    pending: EventIds,
    emitted_first: bool,
    verify_ct: usize,
    /// Its verify steps after the first token that accept no draft (`spec_warmup_steps`, or its
    /// own draw from `spec_warmup_shares` at its first step).
    warmup_steps: usize,
    hist: Vec<u64>,
    last_chunk_at: Option<Instant>,
    /// Stream events sent so far (the next chunk's index in the ground truth).
    chunks: usize,
    times: RequestTimes,
}

impl RequestState {
    /// The sequence prefill must cover (prompt, plus output after a retraction): the prompt
    /// itself, not a copy, while there is no output (a long prompt is copied once per pass else).
    fn target(&self) -> std::borrow::Cow<'_, [u32]> {
        if self.output.is_empty() {
            return std::borrow::Cow::Borrowed(&self.request.input_ids);
        }
        let mut t = self.request.input_ids.to_vec();
        t.extend_from_slice(&self.output);
        std::borrow::Cow::Owned(t)
    }
    /// `range` of [`RequestState::target`] as a cache key: a range of the prompt itself while
    /// there is no output, else a copy of the range.
    fn target_key(&self, range: std::ops::Range<usize>) -> crate::radix::Key {
        if self.output.is_empty() {
            return crate::radix::Key::new(&self.request.input_ids, range);
        }
        // Prompt and output joined, only the range copied.
        let prompt = &self.request.input_ids[..];
        let (lo, hi) = (range.start.min(prompt.len()), range.end.min(prompt.len()));
        let mut tokens = Vec::with_capacity(range.len());
        tokens.extend_from_slice(&prompt[lo..hi]);
        let (lo, hi) = (range.start.max(prompt.len()), range.end.max(prompt.len()));
        let out = self.output.len();
        tokens.extend_from_slice(
            &self.output[(lo - prompt.len()).min(out)..(hi - prompt.len()).min(out)],
        );
        debug_assert_eq!(tokens[..], self.target()[range]);
        crate::radix::Key::owned(tokens)
    }
    fn target_len(&self) -> usize {
        self.request.input_ids.len() + self.output.len()
    }
    fn private(&self) -> usize {
        self.kv_len.saturating_sub(self.locked_len)
    }
    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.request.received)
            .as_nanos() as u64
    }
}

/// The scheduler's state: the three queues (waiting, prefilling, running), the radix cache and
/// the modelled output stage.
struct Engine {
    cfg: Config,
    rng: ChaCha8Rng,
    tree: RadixTree,
    waiting: VecDeque<Box<RequestState>>,
    prefilling: VecDeque<Box<RequestState>>,
    // Boxed on purpose: every pass moves each running request out of this set and back.
    #[allow(clippy::vec_box)]
    running: Vec<Box<RequestState>>,
    shared: Arc<Shared>,
    /// When the last pass of the current busy period ended, in model time (None while idle).
    last_wake: Option<Instant>,
    clock: Clock,
    /// Events for the output stage, in order.
    out: OutQueue,
    /// When the modelled output stage is free for the next event.
    output_free: Option<Instant>,
    /// With `results_after_next_pass`, the last pass's events, held until the next pass ends.
    lagged: Vec<Outgoing>,
    /// The engine path's virtual clock (`sim`): waits end at once and move it to their instant.
    /// `None`: the engine waits on tokio's clock.
    vnow: Option<Instant>,
    /// `output_per_request_s` and `stream_latency_s` scaled, as every event takes them.
    output_gap: Duration,
    stream_latency: Duration,
    /// Emptied lists of the last passes, kept for the next (a pass allocates nothing).
    spare_events: Vec<Outgoing>,
    spare_drawn: Vec<output::Drawn>,
    spare_stats: PassStats,
    /// SGLang's new-token ratio: the share of a running request's remaining output that the
    /// admission budget reserves, when it does not ignore EOS (`reserve_output_tokens`).
    new_token_ratio: f64,
}

impl Engine {
    /// A new engine on `clock`, or on the virtual clock starting at `vnow` (the engine path), and
    /// the receiving end of its output stage's queue.
    fn new(
        config: Config,
        truth: GroundTruth,
        crashed: Arc<watch::Sender<Option<String>>>,
        clock: Clock,
        vnow: Option<Instant>,
    ) -> (Self, mpsc::UnboundedReceiver<Outgoing>) {
        let shared = Arc::new(Shared {
            budget: MemoryBudget::new(&config),
            config: config.clone(),
            truth,
            stats: Mutex::new(Stats::default()),
            crashed,
            dead: std::sync::atomic::AtomicBool::new(false),
        });
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        // The engine path's driver takes the events after each step: no output stage runs.
        let out = match vnow {
            Some(_) => OutQueue::Direct(Vec::new()),
            None => OutQueue::Stage(out_tx),
        };
        let (output_gap, stream_latency) = (
            config.scaled(config.output_per_request_s),
            config.scaled(config.stream_latency_s),
        );
        let engine = Engine {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            tree: RadixTree::new(),
            waiting: VecDeque::new(),
            prefilling: VecDeque::new(),
            running: Vec::new(),
            shared,
            last_wake: None,
            out,
            output_free: None,
            lagged: Vec::new(),
            cfg: config,
            clock,
            vnow,
            output_gap,
            stream_latency,
            spare_events: Vec::new(),
            spare_drawn: Vec::new(),
            spare_stats: PassStats::default(),
            new_token_ratio: admission::NEW_TOKEN_RATIO_INIT,
        };
        (engine, out_rx)
    }

    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.prefilling.is_empty() && self.running.is_empty()
    }

    fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    /// The engine's present: the virtual clock on the engine path, else tokio's.
    fn now(&self) -> Instant {
        self.vnow.unwrap_or_else(Instant::now)
    }

    /// Waits for `at` on tokio's clock, or moves the virtual clock there at once.
    async fn wait_until(&mut self, at: Instant) {
        match &mut self.vnow {
            Some(v) => *v = (*v).max(at),
            None => self.clock.sleep_until(at).await,
        }
    }

    /// Lets the output stage and the connections run (nothing to let run on the engine path).
    async fn let_others_run(&self) {
        if self.vnow.is_none() {
            tokio::task::yield_now().await;
        }
    }

    fn scaled(&self, secs: f64) -> Duration {
        self.cfg.scaled(secs)
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Submit(request, tx, key) => {
                let mut t = RequestTruth::new(&request.rid);
                t.prompt_tokens = request.input_ids.len();
                t.max_new_tokens = request.max_new_tokens;
                t.received_unix_ns = unix_ns_at(request.received);
                t.socket_arrival_unix_ns = request.arrived_unix_ns;
                self.shared.truth.insert(t);
                self.waiting.push_back(Box::new(RequestState {
                    rid: Arc::from(request.rid.as_str()),
                    key,
                    request,
                    tx,
                    kv_len: 0,
                    node: RadixTree::ROOT,
                    locked_len: 0,
                    cached: 0,
                    output: Vec::new(),
                    pending: EventIds::new(),
                    emitted_first: false,
                    verify_ct: 0,
                    warmup_steps: self.cfg.spec_warmup_steps,
                    hist: Vec::new(),
                    last_chunk_at: None,
                    chunks: 0,
                    times: RequestTimes::default(),
                }));
            }
            Msg::Flush(reply) => {
                let ok = self.idle();
                if ok {
                    self.tree.reset();
                }
                let _ = reply.send(ok);
            }
        }
    }

    fn finish_truth(&self, r: &RequestState, f: FinishTruth) {
        self.shared.truth.update(&r.request.rid, |t| t.finish = f);
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut chain: Option<Instant> = None;
        loop {
            if self.idle() {
                self.go_idle(chain).await;
                chain = None;
                match rx.recv().await {
                    Some(m) => self.handle(m),
                    None => return,
                }
            }
            while let Ok(m) = rx.try_recv() {
                self.handle(m);
            }
            self.reap_closed();
            self.publish_stats();
            if self.idle() {
                continue;
            }
            match self.step(chain).await {
                Stepped::Pass(end) => chain = Some(end),
                Stepped::Refused(_) => chain = None,
                Stepped::Died => return,
            }
        }
    }

    /// The engine has nothing queued or running: the last pass's held results are processed now
    /// (no pass follows) and the gauges read idle (no running requests, cache-only KV).
    async fn go_idle(&mut self, chain: Option<Instant>) {
        let at = chain.unwrap_or_else(|| self.now());
        self.release_lagged(at).await;
        self.last_wake = None;
        self.new_token_ratio = admission::NEW_TOKEN_RATIO_INIT;
        self.publish_stats();
    }

    /// One scheduling step of a busy engine: a prefill (or mixed) pass or a decode step from the
    /// end of the last pass (`chain`) or from now, or, when nothing runs and the head of the
    /// queue can never fit, that request's refusal.
    async fn step(&mut self, chain: Option<Instant>) -> Stepped {
        let start = chain.unwrap_or_else(|| self.now());
        if self.plan_prefill(start) && self.prefill_has_room() {
            match self.prefill_pass(start).await {
                Some(end) => Stepped::Pass(end),
                None => Stepped::Died,
            }
        } else if !self.running.is_empty() {
            Stepped::Pass(self.decode_step(start).await)
        } else {
            let mut refused = None;
            if let Some(r) = self.waiting.pop_front() {
                let msg = format!(
                    "request needs {} KV tokens but the pool holds {}",
                    r.target_len(),
                    self.shared.budget.kv_pool_tokens
                );
                let _ = r.tx.send(StreamEvent::Error(msg.clone()));
                self.finish_truth(&r, FinishTruth::Error(msg));
                refused = Some((r.request.rid, r.key));
            }
            self.release_lagged(start).await;
            Stepped::Refused(refused)
        }
    }

    fn publish_stats(&self) {
        if let Ok(mut s) = self.shared.stats.lock() {
            s.num_running = self.running.len() + self.prefilling.len();
            s.num_waiting = self.waiting.len();
            s.kv_used_tokens = self.shared.budget.kv_pool_tokens - self.kv_available();
        }
    }
}

/// `at` on the system's real-time clock, in ns since the Unix epoch (0 if the clock is before it).
fn unix_ns_at(at: Instant) -> u64 {
    let ago = Instant::now().saturating_duration_since(at);
    std::time::SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}
