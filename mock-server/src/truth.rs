//! Ground truth: what the engine really did for every request, on the client's timeline.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One prefill pass that processed part of a request's prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefillPass {
    /// Prompt tokens this request extended in the pass.
    pub tokens: usize,
    /// Tokens of this request already in KV before the pass (cached prefix + earlier chunks).
    pub context_before: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Activation peak of the whole pass, fragmentation included.
    pub activation_peak_bytes: u64,
}

/// One stream event that carried output tokens (or the final event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkTruth {
    /// When the engine handed the chunk to the request's stream.
    pub at_ns: u64,
    /// The modelled emission instant: the end of the engine pass that produced the chunk, plus
    /// the server's per-request output processing of the events before it in that pass.
    #[serde(default)]
    pub model_ns: u64,
    pub tokens: usize,
    /// When the HTTP layer handed the event's bytes to the connection (streaming only); the
    /// pacing error of the chunk is `sent_ns - model_ns`.
    #[serde(default)]
    pub sent_ns: Option<u64>,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FinishTruth {
    /// Still running.
    Pending,
    Length,
    Stop,
    Aborted,
    OomCrash,
    /// The server died of something else (an input id outside the vocabulary).
    Crashed,
    Error(String),
}

/// Everything the engine knows about one request. `*_ns` are relative to the instant the HTTP
/// handler received the request, on tokio's clock (time scaling included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestTruth {
    pub rid: String,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub max_new_tokens: usize,
    pub queue_wait_ns: u64,
    pub prefill_passes: Vec<PrefillPass>,
    pub chunks: Vec<ChunkTruth>,
    pub finish: FinishTruth,
    /// Speculative verify steps (one per output chunk of the model, before stream batching).
    pub spec_verify_ct: usize,
    /// `spec_accept_histogram[k]` = verify steps that emitted k + 1 tokens.
    pub spec_accept_histogram: Vec<u64>,
    /// Highest activation peak among this request's prefill passes.
    pub memory_peak_bytes: u64,
    /// Largest pacing error (sent minus modelled instant) among this request's streamed chunks, in ns.
    pub max_pacing_error_ns: u64,
    /// The instant the HTTP handler received the request, on the system's real-time clock (ns since
    /// the Unix epoch). Another process on the same machine can line its own instants up with this
    /// one; meaningless under tokio's paused test clock.
    #[serde(default)]
    pub received_unix_ns: u64,
    /// When the request's last bytes reached the server's socket: the kernel's receive timestamp
    /// on the real-time clock (ns since the Unix epoch; Linux only, else `None`). Under load a
    /// request waits in the socket until a worker reads it; `received_unix_ns` minus this is that
    /// wait, server time a client sees as part of TTFT. The first chunk left the server at
    /// `received_unix_ns + chunks[0].sent_ns`.
    #[serde(default)]
    pub socket_arrival_unix_ns: Option<u64>,
}

impl RequestTruth {
    pub fn new(rid: &str) -> Self {
        RequestTruth {
            rid: rid.to_string(),
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            max_new_tokens: 0,
            queue_wait_ns: 0,
            prefill_passes: Vec::new(),
            chunks: Vec::new(),
            finish: FinishTruth::Pending,
            spec_verify_ct: 0,
            spec_accept_histogram: Vec::new(),
            memory_peak_bytes: 0,
            max_pacing_error_ns: 0,
            received_unix_ns: 0,
            socket_arrival_unix_ns: None,
        }
    }
}

#[derive(Debug, Default)]
struct Store {
    order: Vec<RequestTruth>,
    index: HashMap<String, usize>,
    prefill_passes_total: usize,
    pacing: PacingRecord,
}

/// Most pacing errors kept as samples; past this, a uniform reservoir sample of them.
pub const PACING_RESERVOIR: usize = 65_536;

/// Pacing errors of every engine pass in constant memory: exact count and maximum, plus a
/// uniform sample (Vitter's algorithm R over a fixed-seed generator, so runs repeat) of at most
/// [`PACING_RESERVOIR`] values, which holds every value while fewer have been seen.
#[derive(Debug, Default)]
struct PacingRecord {
    seen: u64,
    max_ns: u64,
    sample: Vec<u64>,
    rng: u64,
}

impl PacingRecord {
    fn record(&mut self, ns: u64) {
        self.seen += 1;
        self.max_ns = self.max_ns.max(ns);
        if self.sample.len() < PACING_RESERVOIR {
            self.sample.push(ns);
            return;
        }
        let j = self.next_u64() % self.seen;
        if let Some(slot) = self.sample.get_mut(j as usize) {
            *slot = ns;
        }
    }

    /// splitmix64.
    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A live, cheaply cloned view of the ground truth.
#[derive(Clone, Default)]
pub struct GroundTruth {
    inner: Arc<Mutex<Store>>,
}

impl GroundTruth {
    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of one request.
    pub fn request(&self, rid: &str) -> Option<RequestTruth> {
        let s = self.lock();
        s.index.get(rid).map(|i| s.order[*i].clone())
    }

    /// Every record, in arrival order.
    pub fn all(&self) -> Vec<RequestTruth> {
        self.lock().order.clone()
    }

    /// Prefill passes the engine ran (a pass may serve several requests).
    pub fn prefill_passes_total(&self) -> usize {
        self.lock().prefill_passes_total
    }

    /// Pacing errors (sent instant minus modelled instant) of streamed chunks, in ns: every one
    /// while at most [`PACING_RESERVOIR`] have been seen, a uniform sample of that size after.
    /// [`GroundTruth::pacing_error_count`] and [`GroundTruth::pacing_error_max_ns`] stay exact.
    pub fn pacing_errors_ns(&self) -> Vec<u64> {
        self.lock().pacing.sample.clone()
    }

    /// How many pacing errors were recorded (one per streamed chunk).
    pub fn pacing_error_count(&self) -> u64 {
        self.lock().pacing.seen
    }

    /// The largest pacing error recorded, in ns (0 before any streamed chunk).
    pub fn pacing_error_max_ns(&self) -> u64 {
        self.lock().pacing.max_ns
    }

    pub(crate) fn insert(&self, t: RequestTruth) {
        let mut s = self.lock();
        if let Some(i) = s.index.get(&t.rid).copied() {
            s.order[i] = t;
        } else {
            let i = s.order.len();
            s.index.insert(t.rid.clone(), i);
            s.order.push(t);
        }
    }

    pub(crate) fn update(&self, rid: &str, f: impl FnOnce(&mut RequestTruth)) {
        let mut s = self.lock();
        if let Some(i) = s.index.get(rid).copied() {
            f(&mut s.order[i]);
        }
    }

    pub(crate) fn count_pass(&self) {
        self.lock().prefill_passes_total += 1;
    }

    /// Records that chunk `chunk` of `rid` was handed to the connection at `sent_ns`, and its
    /// pacing error.
    pub(crate) fn record_sent(&self, rid: &str, chunk: usize, sent_ns: u64) {
        let mut s = self.lock();
        let Some(i) = s.index.get(rid).copied() else {
            return;
        };
        let Some(c) = s.order[i].chunks.get_mut(chunk) else {
            return;
        };
        c.sent_ns = Some(sent_ns);
        let err = sent_ns.saturating_sub(c.model_ns);
        let t = &mut s.order[i];
        t.max_pacing_error_ns = t.max_pacing_error_ns.max(err);
        s.pacing.record(err);
    }

    #[cfg(test)]
    fn record_pacing(&self, pacing_error_ns: u64) {
        self.lock().pacing.record(pacing_error_ns);
    }

    /// Takes `rid`'s record out of the store, in O(1): the last record takes its place, so
    /// [`GroundTruth::all`] is in arrival order only while nothing was taken (the engine path
    /// takes each request's record when it ends, to run in constant memory).
    pub(crate) fn take(&self, rid: &str) -> Option<RequestTruth> {
        let mut s = self.lock();
        let i = s.index.remove(rid)?;
        let t = s.order.swap_remove(i);
        if let Some(moved) = s.order.get(i) {
            let rid = moved.rid.clone();
            s.index.insert(rid, i);
        }
        Some(t)
    }

    pub(crate) fn contains(&self, rid: &str) -> bool {
        self.lock().index.contains_key(rid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_record_is_bounded_and_exact_in_count_and_max() {
        let t = GroundTruth::default();
        for i in 0..10u64 {
            t.record_pacing(i);
        }
        assert_eq!(t.pacing_errors_ns(), (0..10).collect::<Vec<_>>());
        let n = PACING_RESERVOIR as u64 * 3;
        for i in 10..n {
            t.record_pacing(i);
        }
        t.record_pacing(n * 10);
        t.count_pass();
        let sample = t.pacing_errors_ns();
        assert_eq!(sample.len(), PACING_RESERVOIR);
        assert_eq!(t.pacing_error_count(), n + 1);
        assert_eq!(t.pacing_error_max_ns(), n * 10);
        assert_eq!(t.prefill_passes_total(), 1);
        // A uniform sample of 0..n has its mean near n / 2; keeping only the first values
        // would put it near PACING_RESERVOIR / 2 = n / 6.
        let mean = sample.iter().map(|v| *v as f64).sum::<f64>() / sample.len() as f64;
        assert!((mean / n as f64 - 0.5).abs() < 0.02, "{mean} of {n}");
    }
}
