//! Load runs on the engine path: the client's side of `load` (open loop at scheduled instants,
//! at most `--max-concurrency` in flight, or a closed loop of N workers) as a discrete-event
//! simulation beside the engine. Client events (arrivals, stream events) are handled in the order
//! of their instants; before the engine runs a pass, every request sent strictly before it is
//! submitted. A closed-loop worker sends its next request at the instant its stream ended, as
//! the HTTP path's does on the paused clock.

use std::collections::VecDeque;
use std::time::Duration;

use mock_server::engine::StreamEvent;
use mock_server::{SimEvent, SimRequest, Simulator};
use rustc_hash::FxHashMap;

use super::agenda::{Agenda, Due};
use super::deadlines::Deadlines;
use super::held::HeldQueue;
use super::Streams;
use crate::drive::load::{LoadConfig, LoadOutcome};
use crate::plan::schedule::Stop;
use crate::plan::session::SessionPlan;
use crate::plan::workload::{Planner, WARMUP_INDEX_BASE};
use crate::report::load::LoadSummary;
use crate::report::server_metrics as metrics;
use crate::results::{load_record_measured, LoadInfo, Record, RecordWriter};
use crate::trace::RequestTrace;

/// Records written with one `write`: a killed run loses at most these (a resumed run sends them
/// again), and a run of short requests makes a system call every few ms of CPU, not every one.
const WRITE_BATCH: usize = 16;

/// A request in flight, as the client knows it.
pub(super) struct InFlight {
    pub(super) index: u64,
    pub(super) scheduled_ns: u64,
    pub(super) sent_ns: u64,
    pub(super) prompt_tokens: u32,
    pub(super) prefix_group: Option<u32>,
    pub(super) warm: bool,
    /// Multi-turn: the slot of the session whose turn this is.
    pub(super) slot: Option<usize>,
}

/// The run: the engine, the client's agenda, and what it has written.
pub(super) struct Run<'a> {
    pub(super) cfg: &'a LoadConfig,
    pub(super) planner: Planner,
    pub(super) sim: Simulator,
    pub(super) agenda: Agenda,
    /// The client's timeouts, by request ([`super::deadlines`]).
    pub(super) deadlines: Deadlines,
    pub(super) streams: Streams,
    pub(super) flight: FxHashMap<u64, InFlight>,
    /// Sends held while the server's queue is deep ([`HeldQueue`]).
    pub(super) held: HeldQueue,
    pub(super) start_unix_ms: u64,
    /// The run's start on the virtual clock (after the warm-up).
    pub(super) base_ns: u64,
    /// Multi-turn: the sessions in flight and to come.
    pub(super) sessions: Option<super::sessions::SessionState>,
    /// Closed loop: the indices still to send, in order; open loop with a limit: arrivals
    /// waiting for a request to finish.
    next_indices: Box<dyn Iterator<Item = u64> + 'a>,
    waiting: VecDeque<(u64, u64)>,
    limit: Option<usize>,
    closed: bool,
    deadline_ns: Option<u64>,
    /// Records are written as their streams end, [`WRITE_BATCH`] at a time (each a few KB: a
    /// long run holds few).
    writer: RecordWriter,
    unwritten: Vec<Record>,
    summary: LoadSummary,
    written: u64,
    /// The first write error; the run stops sending once there is one.
    write_error: Option<anyhow::Error>,
    /// The instant of the last client event handled.
    pub(super) clock_ns: u64,
    /// [`Simulator::next_step_ns`] as of the last submission or step (`None`: not asked since).
    pub(super) next_step: Option<Option<u64>>,
}

impl Run<'_> {
    pub(super) fn rid(&self, index: u64) -> String {
        if index >= WARMUP_INDEX_BASE {
            format!(
                "ld-{:x}-{}-w{}",
                self.cfg.seed,
                self.start_unix_ms,
                index - WARMUP_INDEX_BASE
            )
        } else {
            format!("ld-{:x}-{}-{index}", self.cfg.seed, self.start_unix_ms)
        }
    }

    /// Sends request `index` at `now_ns` (scheduled at `scheduled_ns`), or holds it while the
    /// server's queue is deep ([`HeldQueue`]; the warm-up never waits there).
    fn send(&mut self, index: u64, scheduled_ns: u64, now_ns: u64) {
        if index < WARMUP_INDEX_BASE && self.holds() {
            self.hold(index, scheduled_ns, now_ns);
        } else {
            self.send_now(index, scheduled_ns, now_ns);
        }
    }

    /// Builds request `index` and hands it to the engine as sent at `now_ns`.
    pub(super) fn send_now(&mut self, index: u64, scheduled_ns: u64, now_ns: u64) {
        let warm = index >= WARMUP_INDEX_BASE;
        let plan = if warm {
            self.planner.warmup(index - WARMUP_INDEX_BASE)
        } else {
            self.planner.request(index)
        };
        let Some(plan) = plan else { return };
        let rid = self.rid(index);
        let prompt_tokens = u32::try_from(plan.prompt.len()).unwrap_or(u32::MAX);
        let info = InFlight {
            index,
            scheduled_ns,
            sent_ns: now_ns,
            prompt_tokens,
            prefix_group: plan.prefix_group,
            warm,
            slot: None,
        };
        self.submit(rid, plan.prompt, plan.output_len, info);
    }

    /// Hands a request to the engine at its send instant; a refused one ends at once.
    pub(super) fn submit(
        &mut self,
        rid: String,
        prompt: Vec<u32>,
        output_len: u32,
        info: InFlight,
    ) {
        if self.write_error.is_some() {
            return;
        }
        let now_ns = info.sent_ns;
        let prompt_tokens = info.prompt_tokens;
        let req = SimRequest {
            rid: rid.clone(),
            input_ids: std::sync::Arc::new(prompt),
            max_new_tokens: output_len as usize,
            min_new_tokens: 0,
            ignore_eos: true,
            stop_token_ids: Vec::new(),
        };
        self.next_step = None;
        match self.sim.submit(now_ns, req) {
            Ok(id) => {
                let keep_ids = info.slot.is_some();
                self.streams
                    .opened(id, &rid, prompt_tokens, output_len, now_ns, keep_ids);
                self.flight.insert(id, info);
                self.arm(id);
            }
            Err(r) => {
                let trace = Streams::refused(&rid, prompt_tokens, output_len, &r);
                self.ended(trace, info, now_ns);
            }
        }
    }

    /// A stream ended at `now_ns`: its record, then the client's next send.
    pub(super) fn ended(&mut self, trace: RequestTrace, f: InFlight, now_ns: u64) {
        let mut next_turn = None;
        if !f.warm {
            let ns = |t: u64| t.saturating_sub(self.base_ns);
            let info = LoadInfo {
                index: f.index,
                shard: self.cfg.shard,
                seed: self.cfg.seed,
                start_unix_ms: self.start_unix_ms,
                scheduled_ns: ns(f.scheduled_ns),
                sent_ns: ns(f.sent_ns),
                client_queue_ns: f.sent_ns.saturating_sub(f.scheduled_ns),
                ttft_from_schedule_ms: None,
                prefix_group: f.prefix_group,
                session: None,
            };
            // Measured once, for the record and the summary.
            let (mut rec, measured) = load_record_measured(trace, f.prompt_tokens, info);
            next_turn = f
                .slot
                .and_then(|slot| self.turn_ended(slot, &mut rec, now_ns));
            self.summary.add_measured(&rec, Some(measured));
            self.unwritten.push(rec);
            if self.unwritten.len() >= WRITE_BATCH && !self.write_unwritten() {
                return;
            }
        } else if let Some(fail) = trace.failure() {
            tracing::warn!("warm-up request failed: {}", fail.message);
        }
        if f.warm {
            return;
        }
        if let Some(slot) = f.slot {
            match next_turn {
                Some(at_ns) => self.agenda.push(at_ns, Due::Turn { slot }),
                None => self.begin_session(slot, now_ns),
            }
            return;
        }
        if self.closed {
            self.next_closed(now_ns);
        } else if let Some((index, scheduled_ns)) = self.waiting.pop_front() {
            self.send(index, scheduled_ns, now_ns);
        }
    }

    /// Writes the records held, in one `write`; false after a write error.
    fn write_unwritten(&mut self) -> bool {
        if self.unwritten.is_empty() {
            return true;
        }
        let result = self.writer.write_all(&self.unwritten);
        let n = self.unwritten.len() as u64;
        self.unwritten.clear();
        match result {
            Ok(()) => {
                self.written += n;
                true
            }
            Err(e) => {
                self.write_error.get_or_insert(e);
                false
            }
        }
    }

    /// A closed-loop worker is free at `now_ns`: it sends the next request, unless the run's
    /// duration is over.
    fn next_closed(&mut self, now_ns: u64) {
        if self.deadline_ns.is_some_and(|d| now_ns >= d) {
            return;
        }
        if let Some(index) = self.next_indices.next() {
            self.send(index, now_ns, now_ns);
        }
    }

    fn arrival(&mut self, index: u64, scheduled_ns: u64, now_ns: u64) {
        if self
            .limit
            .is_some_and(|l| self.flight.len() + self.held.len() >= l)
        {
            self.waiting.push_back((index, scheduled_ns));
        } else {
            self.send(index, scheduled_ns, now_ns);
        }
    }

    fn handle(&mut self, now_ns: u64, due: Due) {
        self.clock_ns = self.clock_ns.max(now_ns);
        match due {
            Due::Arrival {
                index,
                scheduled_ns,
            } => self.arrival(index, scheduled_ns, now_ns),
            Due::Turn { slot } => self.send_turn(slot, now_ns),
            Due::Stream { id, event } => self.stream_event(now_ns, id, &event),
            Due::Died => {
                self.open_held_for_death();
                for (id, trace) in self.streams.cut_all(now_ns) {
                    if let Some(f) = self.flight.remove(&id) {
                        self.ended(trace, f, now_ns);
                    }
                }
            }
        }
    }

    fn stream_event(&mut self, now_ns: u64, id: u64, event: &StreamEvent) {
        if let Some(trace) = self.streams.event(id, now_ns, event) {
            self.stream_ended(now_ns, id, trace);
        }
    }

    pub(super) fn stream_ended(&mut self, now_ns: u64, id: u64, trace: RequestTrace) {
        if let Some(f) = self.flight.remove(&id) {
            self.ended(trace, f, now_ns);
        }
    }

    /// Runs until nothing is left to do: client events in order, and the engine's passes when
    /// they are due before the client's next event.
    pub(super) fn run_until_quiet(&mut self) {
        loop {
            if self.held.len() > 0 {
                self.release_held();
            }
            for id in self.streams.take_moved() {
                self.arm(id);
            }
            let engine = match self.next_step {
                Some(n) => n,
                None => *self.next_step.insert(self.sim.next_step_ns()),
            };
            let client = self.agenda.peek_ns();
            // A deadline strictly before the engine's next pass and the client's next event: a
            // read at the deadline's instant still counts, as tokio's timeout polls the stream
            // before its timer.
            if let Some(d) = self.deadlines.peek_ns() {
                if client.is_none_or(|c| d < c) && engine.is_none_or(|e| d < e) {
                    if let Some((at, w)) = self.deadlines.pop() {
                        self.expire(at, w);
                    }
                    continue;
                }
            }
            let client_first = match (client, engine) {
                (Some(c), Some(e)) => c < e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return,
            };
            if client_first {
                if let Some((at, id, event)) = self.agenda.stream_head() {
                    let trace = self.streams.event(id, at, event);
                    self.agenda.drop_stream_head();
                    self.clock_ns = self.clock_ns.max(at);
                    if let Some(trace) = trace {
                        self.stream_ended(at, id, trace);
                    }
                } else if let Some((at, due)) = self.agenda.pop() {
                    self.handle(at, due);
                }
                continue;
            }
            let agenda = &mut self.agenda;
            self.sim.step_with(|ev| match ev {
                SimEvent::Stream { id, at_ns, event } => agenda.push_stream(at_ns, id, event),
                SimEvent::Died { at_ns, .. } => agenda.push(at_ns, Due::Died),
            });
            self.next_step = None;
        }
    }
}

/// The `/metrics` samples the simulated server would answer now.
fn scrape(sim: &Simulator) -> Option<std::collections::BTreeMap<String, f64>> {
    metrics::samples(&sim.metrics_text())
}

/// Runs a load on the engine path: the same requests, records, manifest and summary as
/// [`crate::drive::run_load`] against the embedded mock, on the exact virtual clock. Returns the
/// outcome and the model time the run took.
pub fn run_load_engine(
    cfg: &LoadConfig,
    mock: mock_server::Config,
    planner: Planner,
    sessions: Option<(&crate::drive::SessionsConfig, SessionPlan)>,
) -> anyhow::Result<(LoadOutcome, Duration)> {
    let held = HeldQueue::new(mock.max_running_requests);
    let (outcome, model, _) = run_load_engine_holding(cfg, mock, planner, sessions, held)?;
    Ok((outcome, model))
}

/// [`run_load_engine`] holding sends as `held` says; also returns how many sends it held.
pub(super) fn run_load_engine_holding(
    cfg: &LoadConfig,
    mock: mock_server::Config,
    planner: Planner,
    sessions: Option<(&crate::drive::SessionsConfig, SessionPlan)>,
    held: HeldQueue,
) -> anyhow::Result<(LoadOutcome, Duration, u64)> {
    if sessions.is_some() && cfg.resume {
        anyhow::bail!("--resume of a multi-turn run goes over HTTP: use --simulate-http");
    }
    let (sessions, session_plan) = match sessions {
        Some((sc, plan)) => (Some(sc), Some(plan)),
        None => (None, None),
    };
    let salt = cfg.salt();
    let planner = planner.salted(salt);
    let resumed = crate::drive::piece::resumed(cfg)?;
    let run_id = crate::drive::piece::piece_run_id(cfg, sessions.map(|s| &s.sessions))?;
    let done = resumed.done;
    let streams = Streams::new(&mock);
    let sim = Simulator::new(mock).map_err(|e| anyhow::anyhow!("embedded mock: {e}"))?;
    // Virtual time runs ahead of the wall clock: a resumed piece starts after the last request
    // the file holds ended, so that the pieces of a run never overlap.
    let start_unix_ms = cfg.start_at_unix_ms.unwrap_or_else(|| {
        let now = crate::net::scrape::unix_ms_now();
        resumed
            .last_end_unix_ms
            .map_or(now, |end| now.max(end.saturating_add(1)))
    });
    let closed = !cfg.schedule.is_open();
    let writer = RecordWriter::open(&cfg.out)?;
    let mut run = Run {
        cfg,
        planner,
        sim,
        agenda: Agenda::default(),
        deadlines: Deadlines::default(),
        streams,
        flight: FxHashMap::default(),
        held,
        start_unix_ms,
        base_ns: 0,
        next_indices: Box::new(std::iter::empty()),
        waiting: VecDeque::new(),
        limit: cfg
            .max_concurrency
            .map(|n| cfg.shard.concurrency(n).max(1) as usize),
        closed,
        deadline_ns: None,
        writer,
        unwritten: Vec::with_capacity(WRITE_BATCH),
        summary: LoadSummary::new(cfg.slo),
        written: 0,
        write_error: None,
        clock_ns: 0,
        sessions: None,
        next_step: None,
    };
    if let (Some(sc), Some(plan)) = (sessions, session_plan) {
        let in_flight = match cfg.schedule.arrivals {
            crate::plan::Arrivals::Closed { concurrency } => cfg.shard.concurrency(concurrency),
            _ => 1,
        };
        let owned = (0..sc.sessions.sessions).filter(|s| cfg.shard.owns(*s));
        run.sessions = Some(super::sessions::SessionState::new(
            plan.salted(salt),
            owned,
            in_flight,
        ));
    }

    // Warm-up: all at once, not recorded; the run starts when the last has ended.
    for k in 0..u64::from(cfg.warmup) {
        if run.sessions.is_some() {
            run.send_session_warmup(k);
        } else {
            run.send(WARMUP_INDEX_BASE + k, 0, 0);
        }
    }
    run.run_until_quiet();
    let base_ns = run.clock_ns;
    run.base_ns = base_ns;

    let server_info = run.sim.server_info();
    let before = if cfg.scrape_metrics {
        scrape(&run.sim)
    } else {
        None
    };
    let mut manifest = crate::drive::piece::manifest(cfg, Some(server_info), start_unix_ms, run_id);
    if let Some(sc) = sessions {
        let slots = run.sessions.as_ref().map_or(1, |s| s.slots());
        manifest = crate::drive::sessions::sessions_manifest(
            manifest,
            u32::try_from(slots).unwrap_or(u32::MAX),
            &sc.sessions,
            "engine: output ids",
        );
    }
    crate::results::append_manifest(&cfg.out, &manifest)?;

    if let Some(slots) = run.sessions.as_ref().map(|s| s.slots()) {
        for slot in 0..slots {
            run.begin_session(slot, base_ns);
        }
    } else if closed {
        let concurrency = match cfg.schedule.arrivals {
            crate::plan::Arrivals::Closed { concurrency } => cfg.shard.concurrency(concurrency),
            _ => 1,
        };
        let skip = done.clone();
        run.next_indices = Box::new(
            cfg.schedule
                .closed_indices(cfg.shard)
                .filter(move |i| !skip.contains(i)),
        );
        run.deadline_ns = match cfg.schedule.stop {
            Stop::Duration(d) => Some(base_ns + crate::drive::duration_ns(d)),
            Stop::Requests(_) => None,
        };
        for _ in 0..concurrency {
            run.next_closed(base_ns);
        }
    } else {
        let slots: Vec<_> = cfg
            .schedule
            .shard_slots(cfg.shard)
            .into_iter()
            .filter(|s| !done.contains(&s.index))
            .collect();
        // A resumed run starts its remaining requests at once, keeping their spacing.
        let shift = if done.is_empty() {
            0
        } else {
            slots.first().map_or(0, |s| s.offset_ns)
        };
        for s in slots {
            let at = base_ns + (s.offset_ns - shift);
            run.agenda.push(
                at,
                Due::Arrival {
                    index: s.index,
                    scheduled_ns: at,
                },
            );
        }
    }
    run.run_until_quiet();
    run.write_unwritten();

    if let Some(e) = run.write_error.take() {
        return Err(e);
    }
    run.writer.sync()?;
    let (summary, written) = (run.summary, run.written);
    let end_ns = run.clock_ns;
    let metrics = match (
        before,
        cfg.scrape_metrics.then(|| scrape(&run.sim)).flatten(),
    ) {
        (Some(before), Some(after)) => {
            let after_unix_ms = start_unix_ms + (end_ns - base_ns) / 1_000_000;
            Some(crate::drive::run::keep_metrics(
                cfg,
                (before, start_unix_ms),
                (after, after_unix_ms),
                start_unix_ms,
            )?)
        }
        _ => None,
    };
    let outcome = LoadOutcome {
        summary,
        written,
        skipped: done.len() as u64,
        interrupted: false,
        metrics,
        out: cfg.out.clone(),
        model_time: Some(Duration::from_nanos(end_ns)),
        server_gone: None,
    };
    Ok((outcome, Duration::from_nanos(end_ns), run.held.total()))
}
