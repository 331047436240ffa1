//! The scheduler: one loop with continuous batching, chunked prefill, decode steps and
//! speculative multi-token steps. Every pass costs model time from the cost model and the loop
//! waits for it on tokio's clock with absolute deadlines, so errors never accumulate.

use crate::clock::Clock;
use crate::config::Config;
use crate::memory::MemoryBudget;
use crate::metrics::{Histogram, E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS};
use crate::radix::{NodeId, RadixTree};
use crate::truth::{ChunkTruth, FinishTruth, GroundTruth, PrefillPass, RequestTruth};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Duration, Instant};

/// A validated generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub max_new_tokens: usize,
    pub min_new_tokens: usize,
    pub ignore_eos: bool,
    pub stop_token_ids: Vec<u32>,
    /// The instant the HTTP handler received the request.
    pub received: Instant,
    /// When the request's last bytes reached the server's socket (kernel receive timestamp), in ns
    /// since the Unix epoch; `None` where unknown.
    pub arrived_unix_ns: Option<u64>,
}

/// Why a request finished.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    Length(usize),
    Stop(u32),
}

impl From<&Finish> for FinishTruth {
    fn from(f: &Finish) -> Self {
        match f {
            Finish::Length(_) => FinishTruth::Length,
            Finish::Stop(_) => FinishTruth::Stop,
        }
    }
}

/// Speculative-decoding statistics reported on the final event.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecStats {
    pub verify_ct: usize,
    pub accept_length: f64,
    pub accept_rate: f64,
    pub histogram: Vec<u64>,
}

/// What the engine sends to a request's HTTP stream.
#[derive(Debug, Clone)]
pub enum StreamEvent {
    Tokens {
        /// Index of this chunk in the request's ground truth.
        chunk: usize,
        /// When the engine handed the event over, in ns since the request was received.
        at_ns: u64,
        new_ids: Vec<u32>,
        prompt_tokens: usize,
        cached_tokens: usize,
        completion_tokens: usize,
        finish: Option<Finish>,
        spec: Option<SpecStats>,
    },
    Error(String),
    /// The server died; the stream must be cut without `[DONE]`.
    Crash(String),
}

enum Msg {
    Submit(GenRequest, mpsc::UnboundedSender<StreamEvent>),
    Flush(oneshot::Sender<bool>),
}

/// Live counters for `/metrics` and `/server_info`; constant memory (histograms, not samples).
#[derive(Debug, Clone)]
pub struct Stats {
    pub num_running: usize,
    pub num_waiting: usize,
    pub kv_used_tokens: usize,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub cached_tokens_total: u64,
    pub requests_total: u64,
    pub spec_verify_total: u64,
    pub spec_tokens_total: u64,
    /// Requests sent back to the queue under KV pressure.
    pub retracted_total: u64,
    pub last_gen_throughput: f64,
    /// Time to first token, one observation per request.
    pub ttft: Histogram,
    /// SGLang's token-weighted inter-token latency: each chunk after the first adds its token
    /// count of observations of (gap since the previous chunk / tokens), and the gap to the sum.
    pub itl: Histogram,
    /// End-to-end latency, one observation per finished request.
    pub e2e: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            num_running: 0,
            num_waiting: 0,
            kv_used_tokens: 0,
            prompt_tokens_total: 0,
            generation_tokens_total: 0,
            cached_tokens_total: 0,
            requests_total: 0,
            spec_verify_total: 0,
            spec_tokens_total: 0,
            retracted_total: 0,
            last_gen_throughput: 0.0,
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
        }
    }
}

/// What one pass adds to [`Stats`], applied under one lock when the pass ends.
#[derive(Default)]
struct PassStats {
    generation_tokens: u64,
    verify_steps: u64,
    ttft: Vec<f64>,
    /// (gap since the previous chunk, tokens in the chunk)
    itl: Vec<(f64, u64)>,
    e2e: Vec<f64>,
}

impl PassStats {
    fn apply(self, shared: &Shared) {
        if let Ok(mut s) = shared.stats.lock() {
            s.generation_tokens_total += self.generation_tokens;
            s.spec_verify_total += self.verify_steps;
            s.spec_tokens_total += self.generation_tokens;
            for t in self.ttft {
                s.ttft.observe(t);
            }
            for (gap, tokens) in self.itl {
                s.itl.observe_tokens(gap, tokens);
            }
            for t in self.e2e {
                s.e2e.observe(t);
            }
        }
    }
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
        let shared = Arc::new(Shared {
            budget: MemoryBudget::new(&config),
            config: config.clone(),
            truth,
            stats: Mutex::new(Stats::default()),
            crashed,
            dead: std::sync::atomic::AtomicBool::new(false),
        });
        let clock = Clock::detect();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let engine = Engine {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            tree: RadixTree::new(),
            waiting: VecDeque::new(),
            prefilling: VecDeque::new(),
            running: Vec::new(),
            shared: shared.clone(),
            last_wake: None,
            out_tx,
            output_free: None,
            cfg: config,
            clock,
        };
        tokio::spawn(engine.run(rx));
        let tick = match clock {
            Clock::Tokio => Duration::ZERO,
            Clock::Precise => Duration::from_secs_f64(shared.config.output_tick_s),
        };
        tokio::spawn(output_stage(out_rx, clock, tick, shared.clone()));
        EngineHandle { tx, shared }
    }

    /// Queues a request; the returned channel yields its stream events.
    pub fn submit(&self, req: GenRequest) -> Result<mpsc::UnboundedReceiver<StreamEvent>, String> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.tx
            .send(Msg::Submit(req, tx))
            .map_err(|_| "the engine is not running".to_string())?;
        Ok(rx)
    }

    /// Empties the radix cache; `Ok(false)` when requests are running or waiting.
    pub async fn flush_cache(&self) -> Result<bool, String> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Msg::Flush(tx))
            .map_err(|_| "the engine is not running".to_string())?;
        rx.await
            .map_err(|_| "the engine is not running".to_string())
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

struct Req {
    g: GenRequest,
    tx: mpsc::UnboundedSender<StreamEvent>,
    /// Tokens whose KV exists (cached prefix included).
    kv_len: usize,
    node: NodeId,
    locked_len: usize,
    cached: usize,
    output: Vec<u32>,
    pending: Vec<u32>,
    emitted_first: bool,
    verify_ct: usize,
    hist: Vec<u64>,
    last_chunk_at: Option<Instant>,
    /// Stream events sent so far (the next chunk's index in the ground truth).
    chunks: usize,
}

impl Req {
    /// The sequence prefill must cover (prompt, plus output after a retraction).
    fn target(&self) -> Vec<u32> {
        let mut t = self.g.input_ids.clone();
        t.extend_from_slice(&self.output);
        t
    }
    fn target_len(&self) -> usize {
        self.g.input_ids.len() + self.output.len()
    }
    fn private(&self) -> usize {
        self.kv_len.saturating_sub(self.locked_len)
    }
    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.g.received).as_nanos() as u64
    }
}

struct Engine {
    cfg: Config,
    rng: ChaCha8Rng,
    tree: RadixTree,
    waiting: VecDeque<Req>,
    prefilling: VecDeque<Req>,
    running: Vec<Req>,
    shared: Arc<Shared>,
    /// When the last pass of the current busy period ended, in model time (None while idle).
    last_wake: Option<Instant>,
    clock: Clock,
    /// Events for the output stage, in order.
    out_tx: mpsc::UnboundedSender<Outgoing>,
    /// When the modelled output stage is free for the next event.
    output_free: Option<Instant>,
}

/// A stream event due at its modelled instant.
struct Outgoing {
    tx: mpsc::UnboundedSender<StreamEvent>,
    event: StreamEvent,
    /// The modelled emission instant.
    at: Instant,
    /// The same, in ns since the request was received.
    model_ns: u64,
    rid: String,
    received: Instant,
    tokens: usize,
    completion: usize,
    verify_ct: usize,
    hist: Vec<u64>,
}

impl Engine {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.prefilling.is_empty() && self.running.is_empty()
    }

    fn scaled(&self, secs: f64) -> Duration {
        Duration::from_secs_f64((secs / self.cfg.time_scale).max(0.0))
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Submit(g, tx) => {
                let mut t = RequestTruth::new(&g.rid);
                t.prompt_tokens = g.input_ids.len();
                t.max_new_tokens = g.max_new_tokens;
                t.received_unix_ns = unix_ns_at(g.received);
                t.socket_arrival_unix_ns = g.arrived_unix_ns;
                self.shared.truth.insert(t);
                self.waiting.push_back(Req {
                    g,
                    tx,
                    kv_len: 0,
                    node: RadixTree::ROOT,
                    locked_len: 0,
                    cached: 0,
                    output: Vec::new(),
                    pending: Vec::new(),
                    emitted_first: false,
                    verify_ct: 0,
                    hist: Vec::new(),
                    last_chunk_at: None,
                    chunks: 0,
                });
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

    /// KV tokens in use: the radix tree plus every active request's private (unshared) tokens.
    fn kv_used(&self) -> usize {
        let private: usize = self
            .prefilling
            .iter()
            .chain(self.running.iter())
            .map(Req::private)
            .sum();
        self.tree.size() + private
    }

    fn kv_available(&self) -> usize {
        self.shared
            .budget
            .kv_pool_tokens
            .saturating_sub(self.kv_used())
    }

    /// Makes room for `need` tokens by evicting cache; true when they fit.
    fn reserve(&mut self, need: usize) -> bool {
        let used = self.kv_used();
        let pool = self.shared.budget.kv_pool_tokens;
        if used + need <= pool {
            return true;
        }
        // Evict the whole shortfall: `used` may already exceed the pool when the head-of-line
        // request was let through without room (below), so `pool - used` saturates at zero.
        self.tree.evict(used + need - pool);
        self.kv_available() >= need
    }

    fn release(&mut self, r: &mut Req) {
        self.tree.unlock(r.node);
        r.node = RadixTree::ROOT;
        r.locked_len = 0;
        r.kv_len = 0;
    }

    fn finish_truth(&self, r: &Req, f: FinishTruth) {
        self.shared.truth.update(&r.g.rid, |t| t.finish = f);
    }

    fn reap_closed(&mut self) {
        let mut gone = Vec::new();
        for q in [&mut self.waiting, &mut self.prefilling] {
            let mut i = 0;
            while i < q.len() {
                if q[i].tx.is_closed() {
                    if let Some(r) = q.remove(i) {
                        gone.push(r);
                    }
                } else {
                    i += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].tx.is_closed() {
                gone.push(self.running.swap_remove(i));
            } else {
                i += 1;
            }
        }
        for mut r in gone {
            self.finish_truth(&r, FinishTruth::Aborted);
            self.release(&mut r);
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut chain: Option<Instant> = None;
        loop {
            if self.idle() {
                chain = None;
                self.last_wake = None;
                // Gauges must read idle (no running requests, cache-only KV) while waiting.
                self.publish_stats();
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
            let start = chain.unwrap_or_else(Instant::now);
            let end = if self.plan_prefill() {
                match self.prefill_pass(start).await {
                    Some(end) => end,
                    None => return, // crashed
                }
            } else if !self.running.is_empty() {
                self.decode_step(start).await
            } else {
                // Nothing runs and the head of the queue cannot fit: it can never be served.
                if let Some(r) = self.waiting.pop_front() {
                    let msg = format!(
                        "request needs {} KV tokens but the pool holds {}",
                        r.target_len(),
                        self.shared.budget.kv_pool_tokens
                    );
                    let _ = r.tx.send(StreamEvent::Error(msg.clone()));
                    self.finish_truth(&r, FinishTruth::Error(msg));
                }
                chain = None;
                continue;
            };
            chain = Some(end);
        }
    }

    /// Admits waiting requests into the prefill set; true when a prefill pass should run.
    ///
    /// A request is admitted only when the KV pool (after evicting cache) holds the rest of its
    /// prompt together with the rest of every request already admitted, and one more decode step
    /// for the running batch and for it, as SGLang's prefill adder budgets a batch as a whole.
    fn plan_prefill(&mut self) -> bool {
        let per_step = self.tokens_per_step();
        let mut committed: usize = self
            .prefilling
            .iter()
            .map(|r| r.target_len() - r.kv_len)
            .sum::<usize>()
            + per_step * (self.running.len() + self.prefilling.len());
        // Admitting a request changes no KV use (it holds only cached, locked tokens until its
        // first pass), so the use is read once and again only after eviction: thousands of
        // requests can arrive at once.
        let mut used = self.kv_used();
        let pool = self.shared.budget.kv_pool_tokens;
        while self.running.len() + self.prefilling.len() < self.cfg.max_running_requests {
            let Some(mut r) = self.waiting.pop_front() else {
                break;
            };
            let target = r.target();
            let (matched, node) = if self.cfg.disable_radix_cache {
                (0, RadixTree::ROOT)
            } else {
                let (m, n) = self
                    .tree
                    .match_prefix(&target[..target.len().saturating_sub(1)]);
                (m, n)
            };
            self.tree.lock(node);
            r.node = node;
            r.locked_len = matched;
            r.kv_len = matched;
            let need = target.len() - matched + per_step;
            if used + committed + need > pool {
                if !self.reserve(committed + need) {
                    self.release(&mut r);
                    self.waiting.push_front(r);
                    break;
                }
                used = self.kv_used();
            }
            committed += need;
            if r.output.is_empty() {
                r.cached = matched;
                let wait = r.ns(Instant::now());
                self.shared.truth.update(&r.g.rid, |t| {
                    t.cached_tokens = matched;
                    t.queue_wait_ns = wait;
                });
            }
            self.prefilling.push_back(r);
        }
        !self.prefilling.is_empty()
    }

    fn chunk_budget(&self) -> usize {
        if self.cfg.chunked_prefill_size < 0 {
            usize::MAX
        } else {
            self.cfg.chunked_prefill_size as usize
        }
    }

    async fn prefill_pass(&mut self, start: Instant) -> Option<Instant> {
        let mut budget = self.chunk_budget();
        let mut items: Vec<(usize, usize, usize)> = Vec::new(); // (index, tokens, context_before)
        for i in 0..self.prefilling.len() {
            if budget == 0 {
                break;
            }
            let r = &self.prefilling[i];
            let n = (r.target_len() - r.kv_len).min(budget);
            if n == 0 {
                continue;
            }
            let ctx = r.kv_len;
            // Every chunk makes room for itself. The head-of-line request goes on even when the
            // cache cannot be evicted far enough (its own locked prefix), so it can never stall.
            if !self.reserve(n) && i > 0 {
                break;
            }
            budget -= n;
            items.push((i, n, ctx));
        }
        let extend: usize = items.iter().map(|x| x.1).sum();
        let ctx_end = items.iter().map(|x| x.2 + x.1).max().unwrap_or(0);
        let peak = self.shared.budget.activation_peak(extend, ctx_end);
        let c = &self.cfg;
        let secs = c.prefill_base_s
            + items
                .iter()
                .map(|(_, n, ctx)| {
                    *n as f64
                        * (c.prefill_per_token_s
                            + c.prefill_per_token_pair_s * (*ctx as f64 + *n as f64 / 2.0))
                })
                .sum::<f64>();
        if self.shared.budget.is_oom(peak) {
            self.crash(peak, start, &items);
            return None;
        }
        let deadline = start + self.scaled(secs);
        self.clock.sleep_until(deadline).await;
        self.last_wake = Some(deadline);
        self.shared.truth.count_pass();
        let mut done = Vec::new();
        for (i, n, ctx) in items {
            let radix = !self.cfg.disable_radix_cache;
            let r = &mut self.prefilling[i];
            let pass = PrefillPass {
                tokens: n,
                context_before: ctx,
                start_ns: r.ns(start),
                end_ns: r.ns(deadline),
                activation_peak_bytes: peak,
            };
            self.shared.truth.update(&r.g.rid, |t| {
                t.prefill_passes.push(pass);
                t.memory_peak_bytes = t.memory_peak_bytes.max(peak);
            });
            r.kv_len += n;
            if radix {
                let seq = r.target();
                let (_, node) = self.tree.insert(&seq[..r.kv_len]);
                let r = &mut self.prefilling[i];
                self.tree.unlock(r.node);
                self.tree.lock(node);
                r.node = node;
                r.locked_len = r.kv_len;
            }
            if self.prefilling[i].kv_len >= self.prefilling[i].target_len() {
                done.push(i);
            }
        }
        // Finished prefills in queue order, so the earliest request's first chunk leaves first.
        let mut finished = Vec::new();
        for i in done.into_iter().rev() {
            if let Some(r) = self.prefilling.remove(i) {
                finished.push(r);
            }
        }
        let mut completed = Vec::new();
        let mut stats = PassStats::default();
        let mut events = Vec::new();
        for mut r in finished.into_iter().rev() {
            if !r.emitted_first {
                r.emitted_first = true;
                let (stop, ev) = self.step_tokens(&mut r, deadline, &mut stats);
                events.extend(ev);
                if stop {
                    completed.push((r, true));
                    continue;
                }
            }
            self.running.push(r);
        }
        self.end_pass(stats, events, completed).await;
        Some(deadline)
    }

    /// Ends a pass: its counters first (so no client reads a chunk `/metrics` has not counted),
    /// then its events to the output stage, and only then the requests it drew (`true`: finished)
    /// into the cache or back into the running set, yielding every 32 finished requests so that
    /// the events due meanwhile are not held up.
    async fn end_pass(&mut self, stats: PassStats, events: Vec<Outgoing>, reqs: Vec<(Req, bool)>) {
        stats.apply(&self.shared);
        self.hand_over(events).await;
        let mut completed = 0usize;
        for (r, finished) in reqs {
            if !finished {
                self.running.push(r);
                continue;
            }
            if completed > 0 && completed % 32 == 0 {
                tokio::task::yield_now().await;
            }
            self.complete(r);
            completed += 1;
        }
    }

    /// Hands a pass's events to the output stage, then yields once if there were any. Sending
    /// wakes the stage on this worker, in tokio's LIFO slot, which no other worker can take a
    /// task from: until the engine yields, the events due now would wait behind the rest of the
    /// pass's bookkeeping and the next scheduling step (0.3-2 ms with 2,000 running requests,
    /// BENCHMARKS.md).
    async fn hand_over(&self, events: Vec<Outgoing>) {
        if events.is_empty() {
            return;
        }
        for o in events {
            let _ = self.out_tx.send(o);
        }
        tokio::task::yield_now().await;
    }

    /// KV tokens one decode step can add to a request (a verify step's draft plus one).
    fn tokens_per_step(&self) -> usize {
        if self.cfg.speculative() {
            self.cfg.speculative_num_draft_tokens + 1
        } else {
            1
        }
    }

    async fn decode_step(&mut self, start: Instant) -> Instant {
        let per = self.tokens_per_step();
        while !self.reserve(per * self.running.len()) && self.running.len() > 1 {
            // Retraction under KV pressure: the newest request goes back to the queue.
            if let Some(mut r) = self.running.pop() {
                self.release(&mut r);
                self.waiting.push_front(r);
                if let Ok(mut s) = self.shared.stats.lock() {
                    s.retracted_total += 1;
                }
            }
        }
        let c = &self.cfg;
        let ctx: usize = self.running.iter().map(|r| r.kv_len).sum();
        let secs = c.decode_base_s
            + c.decode_per_context_token_s * ctx as f64
            + c.decode_per_request_s * self.running.len() as f64;
        let deadline = start + self.scaled(secs);
        // The batch is fixed when the pass starts, so its tokens can be drawn before it ends. They
        // are drawn once the previous pass's output has left (or at the end, if that is later),
        // outside the window in which the output stage sends events. Counters, the events, the
        // cache and the running set change only at the pass's end, as they would on the server.
        let draw_at = self
            .output_free
            .map_or(start, |f| f.max(start))
            .min(deadline);
        self.clock.sleep_until(draw_at).await;
        let running = std::mem::take(&mut self.running);
        let mut step_tokens = 0usize;
        let mut stats = PassStats::default();
        let mut drawn = Vec::with_capacity(running.len());
        let mut events = Vec::with_capacity(running.len());
        for (i, mut r) in running.into_iter().enumerate() {
            // Let the output stage and the connections run while a large batch is drawn.
            if i % 32 == 31 {
                tokio::task::yield_now().await;
            }
            let before = r.output.len();
            let (stop, ev) = self.step_tokens(&mut r, deadline, &mut stats);
            r.kv_len += r.output.len() - before;
            step_tokens += r.output.len() - before;
            events.extend(ev);
            drawn.push((r, stop));
        }
        self.clock.sleep_until(deadline).await;
        let since = self.last_wake.replace(deadline).unwrap_or(start);
        self.end_pass(stats, events, drawn).await;
        // Like SGLang, tokens over the clock time they took (here: since the previous pass ended).
        let dt = deadline.saturating_duration_since(since).as_secs_f64();
        if let Ok(mut s) = self.shared.stats.lock() {
            s.last_gen_throughput = if dt > 0.0 {
                step_tokens as f64 / dt
            } else {
                0.0
            };
        }
        deadline
    }

    /// Draws one verify step's tokens for `r`; returns whether it finished and the event to send,
    /// when one is due (always when it finished). The pass ended at `pass_end`. Output processing
    /// is one queue in pass order that takes `output_per_request_s` per event (SGLang's
    /// detokenizer and tokenizer manager): an event leaves when the pass has ended and the events
    /// before it have left.
    fn step_tokens(
        &mut self,
        r: &mut Req,
        pass_end: Instant,
        pass: &mut PassStats,
    ) -> (bool, Option<Outgoing>) {
        let n = if self.cfg.speculative() {
            let mut accepted = 0;
            for k in 0..self.cfg.speculative_num_draft_tokens {
                let p = self
                    .cfg
                    .spec_accept_rates
                    .get(k)
                    .or(self.cfg.spec_accept_rates.last())
                    .copied()
                    .unwrap_or(0.0);
                if self.rng.random::<f64>() < p {
                    accepted += 1;
                } else {
                    break;
                }
            }
            accepted + 1
        } else {
            1
        };
        // `max_new_tokens = 0`: the request ends right after its prefill, with no token.
        let mut finish =
            (r.output.len() >= r.g.max_new_tokens).then_some(Finish::Length(r.output.len()));
        let mut emitted = 0;
        for _ in 0..n {
            if r.output.len() >= r.g.max_new_tokens {
                break;
            }
            let eos = !r.g.ignore_eos
                && r.output.len() >= r.g.min_new_tokens
                && self.cfg.eos_probability > 0.0
                && self.rng.random::<f64>() < self.cfg.eos_probability;
            let mut tok = if eos {
                self.cfg.eos_token_id
            } else {
                let mut t = self.rng.random_range(0..self.cfg.vocab_size);
                if t == self.cfg.eos_token_id {
                    t = (t + 1) % self.cfg.vocab_size;
                }
                t
            };
            if r.g.ignore_eos && tok == self.cfg.eos_token_id {
                tok = (tok + 1) % self.cfg.vocab_size;
            }
            r.output.push(tok);
            r.pending.push(tok);
            emitted += 1;
            // The length first, as SGLang's `Req.check_finished` does: a stop token that is also
            // the last token allowed ends the request by length.
            if r.output.len() >= r.g.max_new_tokens {
                finish = Some(Finish::Length(r.output.len()));
                break;
            }
            let stop_id = tok == self.cfg.eos_token_id
                || (r.output.len() > r.g.min_new_tokens && r.g.stop_token_ids.contains(&tok));
            if stop_id && !r.g.ignore_eos {
                finish = Some(Finish::Stop(tok));
                break;
            }
        }
        if emitted > 0 {
            r.verify_ct += 1;
            if r.hist.len() < emitted {
                r.hist.resize(emitted, 0);
            }
            r.hist[emitted - 1] += 1;
        }
        if emitted > 0 {
            pass.generation_tokens += emitted as u64;
            pass.verify_steps += 1;
        }
        let due = finish.is_some()
            || r.pending.len() >= self.cfg.stream_interval
            || r.last_chunk_at.is_none();
        let mut event = None;
        if due && (!r.pending.is_empty() || finish.is_some()) {
            let new_ids = std::mem::take(&mut r.pending);
            let spec = (finish.is_some() && self.cfg.speculative()).then(|| {
                let (len, rate) = if r.verify_ct == 0 {
                    (0.0, 0.0)
                } else {
                    let len = r.output.len() as f64 / r.verify_ct as f64;
                    let draft = self.cfg.speculative_num_draft_tokens.max(1) as f64;
                    (len, (len - 1.0) / draft)
                };
                SpecStats {
                    verify_ct: r.verify_ct,
                    accept_length: len,
                    accept_rate: rate,
                    histogram: r.hist.clone(),
                }
            });
            let tokens = new_ids.len();
            let model_at = self.output_free.map_or(pass_end, |f| f.max(pass_end));
            self.output_free = Some(model_at + self.scaled(self.cfg.output_per_request_s));
            let at = r.ns(model_at);
            let chunk = r.chunks;
            r.chunks += 1;
            event = Some(Outgoing {
                tx: r.tx.clone(),
                model_ns: at,
                tokens,
                completion: r.output.len(),
                verify_ct: r.verify_ct,
                hist: r.hist.clone(),
                event: StreamEvent::Tokens {
                    chunk,
                    at_ns: at,
                    new_ids,
                    prompt_tokens: r.g.input_ids.len(),
                    cached_tokens: r.cached,
                    completion_tokens: r.output.len(),
                    finish: finish.clone(),
                    spec,
                },
                at: model_at,
                rid: r.g.rid.clone(),
                received: r.g.received,
            });
            let t = model_at
                .saturating_duration_since(r.g.received)
                .as_secs_f64();
            match r.last_chunk_at {
                None => pass.ttft.push(t),
                Some(prev) => pass.itl.push((
                    model_at.saturating_duration_since(prev).as_secs_f64(),
                    tokens as u64,
                )),
            }
            if finish.is_some() {
                pass.e2e.push(t);
            }
            r.last_chunk_at = Some(model_at);
        }
        (finish.is_some(), event)
    }

    /// Puts a finished request away: counters, cache, KV. Its finish goes into the ground truth
    /// with its final chunk, when the output stage sends it (`emit`).
    fn complete(&mut self, mut r: Req) {
        if let Ok(mut s) = self.shared.stats.lock() {
            s.requests_total += 1;
            s.prompt_tokens_total += r.g.input_ids.len() as u64;
            s.cached_tokens_total += r.cached as u64;
        }
        if !self.cfg.disable_radix_cache {
            let mut seq = r.target();
            seq.pop();
            self.tree.insert(&seq);
        }
        self.release(&mut r);
    }

    fn crash(&mut self, peak: u64, start: Instant, items: &[(usize, usize, usize)]) {
        let b = &self.shared.budget;
        let reason = format!(
            "CUDA out of memory. Tried to allocate {:.2} MiB. GPU 0 has a total capacity of {:.2} GiB of which {:.2} MiB is free. (prefill of {} tokens)",
            peak as f64 / 1048576.0,
            b.total_bytes as f64 / 1073741824.0,
            b.free_headroom_bytes as f64 / 1048576.0,
            items.iter().map(|x| x.1).sum::<usize>()
        );
        tracing::error!("{reason}");
        eprintln!("torch.OutOfMemoryError: {reason}");
        for &(i, n, ctx) in items {
            let r = &self.prefilling[i];
            let pass = PrefillPass {
                tokens: n,
                context_before: ctx,
                start_ns: r.ns(start),
                end_ns: r.ns(start),
                activation_peak_bytes: peak,
            };
            self.shared.truth.update(&r.g.rid, |t| {
                t.prefill_passes.push(pass);
                t.memory_peak_bytes = t.memory_peak_bytes.max(peak);
            });
        }
        let all: Vec<Req> = self
            .waiting
            .drain(..)
            .chain(self.prefilling.drain(..))
            .chain(self.running.drain(..))
            .collect();
        // Dead first, so that the output stage sends no event after a stream's crash.
        self.shared
            .dead
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for r in all {
            self.finish_truth(&r, FinishTruth::OomCrash);
            let _ = r.tx.send(StreamEvent::Crash(reason.clone()));
        }
        self.shared.crashed.send_replace(Some(reason));
    }

    fn publish_stats(&self) {
        if let Ok(mut s) = self.shared.stats.lock() {
            s.num_running = self.running.len() + self.prefilling.len();
            s.num_waiting = self.waiting.len();
            s.kv_used_tokens = self.shared.budget.kv_pool_tokens - self.kv_available();
        }
    }
}

/// The server's output processing: hands each event to its stream at its modelled instant, in
/// order, and records the chunk in the ground truth with the instant it really left as `at_ns`.
/// It runs beside the engine, so a pass's events going out never delay the next pass.
///
/// On the real clock, an event that is not due yet first lets this worker write the events
/// already handed over (their connections' tasks are queued here), and a wait ends no sooner than
/// `tick` after the previous one (`output_tick_s`), so the events due meanwhile leave at one
/// wake-up. An OS sleep costs about as much CPU as writing an event (arming the timer exits a
/// virtual machine to its host, and the thread is switched out and back in); with events 30 µs
/// apart, one sleep per event was a fifth of the mock's CPU at 2,000 streams (BENCHMARKS.md).
async fn output_stage(
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
        if finish.is_some() {
            shared.truth.update(&o.rid, |t| {
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
    shared.truth.update(&o.rid, |t| {
        t.chunks.push(chunk);
        t.completion_tokens = completion;
        t.spec_verify_ct = verify_ct;
        t.spec_accept_histogram = hist;
        if let Some(f) = finish {
            t.finish = f;
        }
    });
    let _ = o.tx.send(o.event);
}

/// `at` on the system's real-time clock, in ns since the Unix epoch (0 if the clock is before it).
fn unix_ns_at(at: Instant) -> u64 {
    let ago = Instant::now().saturating_duration_since(at);
    std::time::SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}
