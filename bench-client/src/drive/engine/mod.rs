//! The engine path (`--simulate`): the embedded mock's engine on its exact virtual clock, driven
//! without HTTP. Each request's stream events become the same [`RequestTrace`] the HTTP client
//! would have assembled (instants in integer ns from the send, which is the engine's receipt:
//! the simulated network takes no time), so records, summaries and reports are unchanged.
//! `--simulate-http` keeps every byte on the HTTP path, which is what tests the client.
//!
//! Layout: this file (one server on the virtual clock, streams into traces, sequential sends for
//! sweeps); [`load`] (the load driver: open and closed loops as a discrete-event simulation);
//! `held` (sends the client holds while the server's queue is deep).

mod agenda;
pub mod closed;
mod deadlines;
mod held;
pub mod load;
mod sessions;

use std::time::Duration;

use rustc_hash::FxHashMap;

use mock_server::engine::{Finish, StreamEvent};
use mock_server::{Refusal, SimEvent, SimRequest, Simulator};

use crate::api::{Chunk, ServerTiming, TokenAttribution, Usage};
use crate::drive::duration_ns;
use crate::plan::prompt::Prompt;
use crate::plan::{RequestSpec, Timeouts};
use crate::trace::{Dialect, RequestTrace, StreamEnd, TimeoutPhase};

/// One stream being assembled from engine events.
struct Open {
    trace: RequestTrace,
    sent_ns: u64,
    first_ns: Option<u64>,
    /// The latest event, ns after the send.
    last_ns: u64,
}

/// Streams in flight on the engine path, by the key the engine gave each request.
pub(crate) struct Streams {
    open: FxHashMap<u64, Open>,
    /// Streams whose first output came since [`Streams::take_moved`]: their deadline moved
    /// from the first token's to the gap after a read, which may come earlier.
    moved: Vec<u64>,
    /// The server's way in and out ([`mock_server::Config::way_ns`]): its
    /// `first_token_latency` leaves it out, as the HTTP path's does.
    way_ns: u64,
}

impl Streams {
    pub(crate) fn new(config: &mock_server::Config) -> Self {
        Streams {
            open: FxHashMap::default(),
            moved: Vec::new(),
            way_ns: config.way_ns(),
        }
    }

    fn head(spec_rid: &str, prompt_tokens: u32, max_tokens: u32) -> RequestTrace {
        RequestTrace {
            rid: spec_rid.to_string(),
            dialect: Dialect::Sglang,
            prompt_tokens_sent: Some(prompt_tokens),
            max_tokens,
            status: None,
            headers_ns: None,
            reads: 0,
            chunks: Vec::new(),
            done_ns: None,
            end: StreamEnd::Done,
            end_ns: 0,
            attribution: TokenAttribution::ServerCumulative,
            stamps: Default::default(),
            send_delay_ns: None,
            output_ids: None,
        }
    }

    /// The trace of a request the server took: the response's headers leave as the handler
    /// takes it.
    fn taken(rid: &str, prompt_tokens: u32, max_tokens: u32) -> RequestTrace {
        let mut t = Self::head(rid, prompt_tokens, max_tokens);
        t.status = Some(200);
        t.headers_ns = Some(0);
        t
    }

    /// A request the server did not take: the trace a client over HTTP would have (SGLang's
    /// native API answers a length error inside a 200 stream; a restarting server 503; a dead
    /// one refuses the connection).
    pub(crate) fn refused(
        rid: &str,
        prompt_tokens: u32,
        max_tokens: u32,
        refusal: &Refusal,
    ) -> RequestTrace {
        let mut t = Self::head(rid, prompt_tokens, max_tokens);
        match refusal {
            Refusal::Down => {
                t.end = StreamEnd::ConnectRefused {
                    message: "Connection refused (the simulated server died)".into(),
                };
            }
            Refusal::Starting { .. } => {
                t.status = Some(503);
                t.end = StreamEnd::HttpStatus {
                    status: 503,
                    body: "the server is starting".into(),
                };
            }
            Refusal::DuplicateRid => {
                t.status = Some(400);
                t.end = StreamEnd::HttpStatus {
                    status: 400,
                    body: format!("duplicate request id (rid) {rid:?}"),
                };
            }
            Refusal::Length(message) => {
                t.status = Some(200);
                t.headers_ns = Some(0);
                t.reads = 1;
                t.chunks.push(Chunk {
                    error: Some(message.as_str().into()),
                    ..Chunk::default()
                });
                t.done_ns = Some(0);
            }
        }
        t
    }

    /// A request the engine took at `sent_ns` under key `id`; with `keep_ids` its trace lists
    /// the output ids (a session's next turn sends them back).
    pub(crate) fn opened(
        &mut self,
        id: u64,
        rid: &str,
        prompt_tokens: u32,
        max_tokens: u32,
        sent_ns: u64,
        keep_ids: bool,
    ) {
        let mut trace = Self::taken(rid, prompt_tokens, max_tokens);
        if keep_ids {
            trace.output_ids = Some(Vec::new());
        }
        self.open.insert(
            id,
            Open {
                trace,
                sent_ns,
                first_ns: None,
                last_ns: 0,
            },
        );
    }

    /// One event of a stream, at `at_ns` on the virtual clock; the finished trace when it was
    /// the stream's last.
    pub(crate) fn event(
        &mut self,
        id: u64,
        at_ns: u64,
        event: &StreamEvent,
    ) -> Option<RequestTrace> {
        let way_ns = self.way_ns;
        let o = self.open.get_mut(&id)?;
        let rel = at_ns.saturating_sub(o.sent_ns);
        o.trace.reads += 1;
        o.last_ns = rel;
        let last = match event {
            StreamEvent::Tokens {
                new_ids,
                prompt_tokens,
                cached_tokens,
                completion_tokens,
                finish,
                times,
                ..
            } => {
                if o.trace.chunks.is_empty() {
                    // One event a token at most, and the final one (the engine streams every
                    // `stream_interval` tokens); bounded for a large `max_tokens`. Sized at the
                    // first event, so that requests still waiting hold nothing.
                    let n = (o.trace.max_tokens as usize).min(4096) + 1;
                    o.trace.chunks.reserve_exact(n);
                }
                if o.first_ns.is_none() && finish.is_none() {
                    self.moved.push(id);
                }
                let first = *o.first_ns.get_or_insert(rel);
                if let Some(ids) = &mut o.trace.output_ids {
                    ids.extend_from_slice(new_ids);
                }
                let u = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                let (prompt_tokens, cached_tokens, completion_tokens) =
                    (*prompt_tokens, *cached_tokens, *completion_tokens);
                let queue_s = times.forward_entry_ns.map(|ns| ns as f64 / 1e9);
                let first_token_s = (finish.is_some() && first > 0)
                    .then(|| first.saturating_sub(way_ns) as f64 / 1e9);
                o.trace.chunks.push(Chunk {
                    at_ns: rel,
                    tokens: Some(u(new_ids.len())),
                    usage: Some(Usage {
                        prompt_tokens: Some(u(prompt_tokens)),
                        completion_tokens: Some(u(completion_tokens)),
                        cached_tokens: Some(u(cached_tokens)),
                    }),
                    finish_reason: finish.as_ref().map(|f| {
                        match f {
                            Finish::Length(_) => "length",
                            Finish::Stop(_) => "stop",
                        }
                        .into()
                    }),
                    server_timing: ServerTiming::reported(queue_s, first_token_s)
                        .map(std::sync::Arc::new),
                    ..Chunk::default()
                });
                finish.is_some()
            }
            StreamEvent::Error(message) => {
                o.trace.chunks.push(Chunk {
                    at_ns: rel,
                    error: Some(message.as_str().into()),
                    ..Chunk::default()
                });
                true
            }
            StreamEvent::Crash(_) => {
                o.trace.end = StreamEnd::Reset {
                    message: "connection closed: the simulated server died".into(),
                };
                o.trace.end_ns = rel;
                return self.open.remove(&id).map(|o| o.trace);
            }
        };
        if !last {
            return None;
        }
        let mut o = self.open.remove(&id)?;
        o.trace.done_ns = Some(rel);
        o.trace.end_ns = rel;
        o.trace.end = StreamEnd::Done;
        Some(o.trace)
    }

    /// The streams whose deadline may have come earlier since the last call.
    pub(crate) fn take_moved(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.moved)
    }

    /// When the client gives up stream `id` as it stands, on the virtual clock, and why
    /// ([`Timeouts::deadline`]); `None` once it ended.
    pub(crate) fn deadline(&self, id: u64, timeouts: &Timeouts) -> Option<(u64, TimeoutPhase)> {
        let o = self.open.get(&id)?;
        let read = o.first_ns.map(|_| Duration::from_nanos(o.last_ns));
        let prompt_tokens = o.trace.prompt_tokens_sent.unwrap_or(0);
        let (due, phase) = timeouts.deadline(prompt_tokens, read);
        Some((o.sent_ns.saturating_add(duration_ns(due)), phase))
    }

    /// The client gave up stream `id` at `at_ns` (its deadline): the trace it has so far.
    pub(crate) fn timed_out(
        &mut self,
        id: u64,
        at_ns: u64,
        phase: TimeoutPhase,
    ) -> Option<RequestTrace> {
        let mut o = self.open.remove(&id)?;
        o.trace.end = StreamEnd::Timeout { phase };
        o.trace.end_ns = at_ns.saturating_sub(o.sent_ns);
        Some(o.trace)
    }

    /// A request the client sent at `sent_ns` and gave up at `at_ns` before the engine took it:
    /// on the server it waited in the queue, its response's headers sent.
    pub(crate) fn given_up_waiting(
        rid: &str,
        prompt_tokens: u32,
        max_tokens: u32,
        waited_ns: u64,
        phase: TimeoutPhase,
    ) -> RequestTrace {
        let mut t = Self::taken(rid, prompt_tokens, max_tokens);
        t.end = StreamEnd::Timeout { phase };
        t.end_ns = waited_ns;
        t
    }

    /// The server died at `at_ns`: every open stream is cut there (with its key, in order of
    /// request id).
    pub(crate) fn cut_all(&mut self, at_ns: u64) -> Vec<(u64, RequestTrace)> {
        let mut out: Vec<(u64, RequestTrace)> = self
            .open
            .drain()
            .map(|(id, mut o)| {
                o.trace.end = StreamEnd::Reset {
                    message: "connection closed: the simulated server died".into(),
                };
                o.trace.end_ns = at_ns.saturating_sub(o.sent_ns);
                (id, o.trace)
            })
            .collect();
        out.sort_by(|a, b| a.1.rid.cmp(&b.1.rid));
        out
    }
}

/// The request a spec asks of the engine; `None` for a text prompt (the engine path takes
/// token ids, as load runs send).
pub(crate) fn sim_request(spec: &RequestSpec) -> Option<SimRequest> {
    let Prompt::TokenIds(ids) = &spec.prompt else {
        return None;
    };
    Some(SimRequest {
        rid: spec.rid.clone(),
        input_ids: std::sync::Arc::new(ids.clone()),
        max_new_tokens: spec.max_tokens as usize,
        min_new_tokens: 0,
        ignore_eos: spec.ignore_eos,
        stop_token_ids: Vec::new(),
    })
}

/// One simulated server on the virtual clock, for drivers that send one request at a time
/// (sweeps): each send runs the engine until its stream ends.
pub struct EngineServer {
    sim: Simulator,
    now_ns: u64,
}

impl std::fmt::Debug for EngineServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineServer")
            .field("now_ns", &self.now_ns)
            .finish()
    }
}

impl EngineServer {
    /// A fresh server of `config` at virtual instant 0.
    pub fn new(config: mock_server::Config) -> anyhow::Result<Self> {
        let sim = Simulator::new(config).map_err(|e| anyhow::anyhow!("embedded mock: {e}"))?;
        Ok(Self { sim, now_ns: 0 })
    }

    /// The virtual clock, ns from the start.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Lets `d` pass on the virtual clock (nothing runs: requests go one at a time).
    pub fn sleep(&mut self, d: Duration) {
        self.now_ns = self.now_ns.saturating_add(duration_ns(d));
    }

    /// Sends one request now and runs the engine until its stream ends, or until the client
    /// gives it up ([`Timeouts::deadline`]).
    pub fn send(&mut self, spec: &RequestSpec, timeouts: &Timeouts) -> RequestTrace {
        let prompt_tokens = match &spec.prompt {
            Prompt::TokenIds(ids) => u32::try_from(ids.len()).unwrap_or(u32::MAX),
            Prompt::Text(_) => 0,
        };
        let Some(req) = sim_request(spec) else {
            let mut t = Streams::head(&spec.rid, prompt_tokens, spec.max_tokens);
            t.end = StreamEnd::Invalid {
                message: "the simulated server takes token-id prompts (--api sglang)".into(),
            };
            return t;
        };
        self.settle();
        let sent = self.now_ns;
        let id = match self.sim.submit(sent, req) {
            Ok(id) => id,
            Err(r) => return Streams::refused(&spec.rid, prompt_tokens, spec.max_tokens, &r),
        };
        let mut streams = Streams::new(self.sim.config());
        streams.opened(id, &spec.rid, prompt_tokens, spec.max_tokens, sent, false);
        while let Some(due) = self.sim.next_step_ns() {
            if let Some(t) = self.give_up_before(&mut streams, id, due, timeouts) {
                return t;
            }
            self.now_ns = self.now_ns.max(due);
            for ev in self.sim.step() {
                match ev {
                    SimEvent::Stream { id, at_ns, event } => {
                        if let Some(t) = self.give_up_before(&mut streams, id, at_ns, timeouts) {
                            return t;
                        }
                        if let Some(t) = streams.event(id, at_ns, &event) {
                            self.now_ns = self.now_ns.max(at_ns);
                            return t;
                        }
                    }
                    SimEvent::Died { at_ns, .. } => {
                        self.now_ns = self.now_ns.max(at_ns);
                        if let Some((_, t)) = streams.cut_all(at_ns).pop() {
                            return t;
                        }
                    }
                }
            }
        }
        // The engine went idle without ending the stream: cut it where it stands.
        streams
            .cut_all(self.now_ns)
            .pop()
            .map(|(_, t)| t)
            .unwrap_or_else(|| {
                let mut t = Streams::head(&spec.rid, prompt_tokens, spec.max_tokens);
                t.end = StreamEnd::Eof;
                t
            })
    }

    /// The trace of stream `id` when its deadline comes before `at_ns` (a read at the deadline
    /// still counts): the client gives it up there, and the engine drops it.
    fn give_up_before(
        &mut self,
        streams: &mut Streams,
        id: u64,
        at_ns: u64,
        timeouts: &Timeouts,
    ) -> Option<RequestTrace> {
        let (deadline, phase) = streams.deadline(id, timeouts)?;
        if deadline >= at_ns {
            return None;
        }
        let trace = streams.timed_out(id, deadline, phase)?;
        self.sim.abort(id, &trace.rid);
        self.now_ns = self.now_ns.max(deadline);
        Some(trace)
    }

    /// Runs the steps due before now (held results, a pass after the last stream ended), so a
    /// request sent now finds the engine where an HTTP client would.
    fn settle(&mut self) {
        while let Some(due) = self.sim.next_step_ns() {
            if due >= self.now_ns {
                break;
            }
            let _ = self.sim.step();
        }
    }

    /// `POST /flush_cache`.
    pub fn flush_cache(&mut self) -> Result<(), String> {
        if !self.sim.healthy(self.now_ns) {
            return Err("flush_cache: the simulated server is not up".into());
        }
        if self.sim.flush_cache() {
            Ok(())
        } else {
            Err("flush_cache refused: requests are queued or running".into())
        }
    }

    /// `GET /health`.
    pub fn healthy(&self) -> bool {
        self.sim.healthy(self.now_ns)
    }

    /// `GET /server_info`.
    pub fn server_info(&self) -> serde_json::Value {
        self.sim.server_info()
    }

    /// Why the server last died, if it did.
    pub fn crash_log(&self) -> Option<&str> {
        self.sim.crash_log()
    }
}
