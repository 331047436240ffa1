//! Ground truth: what the engine really did for every request, on the client's timeline.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

mod packed;
use packed::PackedChunks;

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

/// Ended requests whose records [`GroundTruth::default`] keeps: a client reads a request's record
/// once it has ended, long before this many later requests have ended too.
pub const DEFAULT_TRUTH_WINDOW: usize = 4096;

#[derive(Debug)]
struct Entry {
    /// The record; once the request has ended, its `chunks` are empty and held in `packed`.
    truth: RequestTruth,
    /// Whether the request has ended and sits in [`Store::ended`].
    ended: bool,
    packed: PackedChunks,
}

impl Entry {
    fn new(truth: RequestTruth) -> Self {
        Entry {
            truth,
            ended: false,
            packed: PackedChunks::default(),
        }
    }

    /// The whole record.
    fn record(&self) -> RequestTruth {
        let mut t = self.truth.clone();
        if self.ended {
            t.chunks = self.packed.unpack();
        }
        t
    }

    /// Ends the record: its chunks packed, its lists no larger than they need be.
    fn seal(&mut self) {
        self.ended = true;
        let t = &mut self.truth;
        self.packed = PackedChunks::pack(&t.chunks);
        t.chunks = Vec::new();
        t.rid.shrink_to_fit();
        t.prefill_passes.shrink_to_fit();
        t.spec_accept_histogram.shrink_to_fit();
    }

    /// Changes the record (an ended one is unpacked for it and packed again).
    fn change<R>(&mut self, f: impl FnOnce(&mut RequestTruth) -> R) -> R {
        if !self.ended {
            return f(&mut self.truth);
        }
        self.truth.chunks = self.packed.unpack();
        let r = f(&mut self.truth);
        self.seal();
        r
    }
}

/// Records by arrival number; every running request, and the last `window` that ended.
#[derive(Debug)]
struct Store {
    records: BTreeMap<u64, Entry>,
    index: HashMap<String, u64>,
    next_seq: u64,
    /// Arrival numbers of ended requests, in the order they ended (a record taken out of the
    /// store leaves its number here until it reaches the front).
    ended: VecDeque<u64>,
    /// Records in `records` that have ended.
    ended_kept: usize,
    window: usize,
    prefill_passes_total: usize,
    pacing: PacingRecord,
}

impl Store {
    fn new(window: usize) -> Self {
        Store {
            records: BTreeMap::new(),
            index: HashMap::new(),
            next_seq: 0,
            ended: VecDeque::new(),
            ended_kept: 0,
            window: window.max(1),
            prefill_passes_total: 0,
            pacing: PacingRecord::default(),
        }
    }

    /// Notes that `seq`'s request has ended (once), then drops the oldest ended records past the
    /// window.
    fn note_end(&mut self, seq: u64) {
        let Some(e) = self.records.get_mut(&seq) else {
            return;
        };
        if e.ended || e.truth.finish == FinishTruth::Pending {
            return;
        }
        e.seal();
        self.ended.push_back(seq);
        self.ended_kept += 1;
        while self.ended_kept > self.window {
            let Some(old) = self.ended.pop_front() else {
                break;
            };
            if let Some(gone) = self.records.remove(&old) {
                self.index.remove(&gone.truth.rid);
                self.ended_kept -= 1;
            }
        }
        // Taken records leave stale numbers behind; keep the queue within twice the window.
        if self.ended.len() > 2 * self.window {
            let records = &self.records;
            self.ended.retain(|q| records.contains_key(q));
        }
    }

    fn remove(&mut self, rid: &str) -> Option<RequestTruth> {
        let seq = self.index.remove(rid)?;
        let e = self.records.remove(&seq)?;
        if e.ended {
            self.ended_kept -= 1;
        }
        Some(e.record())
    }
}

impl Default for Store {
    fn default() -> Self {
        Store::new(DEFAULT_TRUTH_WINDOW)
    }
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
    /// A store that keeps every running request's record and those of the last `window` requests
    /// that ended (at least 1); older ones are dropped, so a long run holds constant memory.
    pub fn with_window(window: usize) -> Self {
        GroundTruth {
            inner: Arc::new(Mutex::new(Store::new(window))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The record of one request: running, or among the last ended ones the window keeps.
    pub fn request(&self, rid: &str) -> Option<RequestTruth> {
        let s = self.lock();
        let seq = s.index.get(rid)?;
        s.records.get(seq).map(Entry::record)
    }

    /// Every record kept, in arrival order.
    pub fn all(&self) -> Vec<RequestTruth> {
        self.lock().records.values().map(Entry::record).collect()
    }

    /// How many records the store holds.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether the store holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    /// Stores `t`, replacing the record of the same rid if there is one.
    pub(crate) fn insert(&self, t: RequestTruth) {
        let mut s = self.lock();
        let seq = match s.index.get(&t.rid).copied() {
            Some(seq) => seq,
            None => {
                let seq = s.next_seq;
                s.next_seq += 1;
                s.index.insert(t.rid.clone(), seq);
                seq
            }
        };
        match s.records.get_mut(&seq) {
            Some(e) => e.change(|old| *old = t),
            None => {
                s.records.insert(seq, Entry::new(t));
            }
        }
        s.note_end(seq);
    }

    pub(crate) fn update(&self, rid: &str, f: impl FnOnce(&mut RequestTruth)) {
        let mut s = self.lock();
        let Some(seq) = s.index.get(rid).copied() else {
            return;
        };
        if let Some(e) = s.records.get_mut(&seq) {
            e.change(f);
        }
        s.note_end(seq);
    }

    pub(crate) fn count_pass(&self) {
        self.lock().prefill_passes_total += 1;
    }

    /// Records that chunk `chunk` of `rid` was handed to the connection at `sent_ns`, and its
    /// pacing error.
    pub(crate) fn record_sent(&self, rid: &str, chunk: usize, sent_ns: u64) {
        let mut s = self.lock();
        let Some(seq) = s.index.get(rid).copied() else {
            return;
        };
        let Some(e) = s.records.get_mut(&seq) else {
            return;
        };
        let err = e.change(|t| {
            let c = t.chunks.get_mut(chunk)?;
            c.sent_ns = Some(sent_ns);
            let err = sent_ns.saturating_sub(c.model_ns);
            t.max_pacing_error_ns = t.max_pacing_error_ns.max(err);
            Some(err)
        });
        if let Some(err) = err {
            s.pacing.record(err);
        }
    }

    #[cfg(test)]
    fn record_pacing(&self, pacing_error_ns: u64) {
        self.lock().pacing.record(pacing_error_ns);
    }

    /// Takes `rid`'s record out of the store (the engine path takes each request's record when
    /// it ends, to run in constant memory).
    pub(crate) fn take(&self, rid: &str) -> Option<RequestTruth> {
        self.lock().remove(rid)
    }

    /// Whether the store holds a record of `rid` (a running request, or a recently ended one).
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

    fn ended(rid: &str) -> RequestTruth {
        let mut t = RequestTruth::new(rid);
        t.finish = FinishTruth::Length;
        t
    }

    #[test]
    fn the_store_keeps_running_requests_and_the_last_ended_ones() {
        let t = GroundTruth::with_window(3);
        t.insert(RequestTruth::new("running"));
        for i in 0..10_000 {
            let rid = format!("r{i}");
            t.insert(RequestTruth::new(&rid));
            t.update(&rid, |r| r.finish = FinishTruth::Stop);
        }
        // The running request, and the three that ended last, in arrival order.
        let rids: Vec<String> = t.all().into_iter().map(|r| r.rid).collect();
        assert_eq!(rids, ["running", "r9997", "r9998", "r9999"]);
        assert!(t.request("r9996").is_none() && !t.contains("r9996"));
        assert!(t.request("running").is_some());
        // A record still reachable takes its late updates (the last chunk's hand-off).
        t.update("r9999", |r| r.completion_tokens = 7);
        assert_eq!(t.request("r9999").unwrap().completion_tokens, 7);
        // The running request ends: the oldest ended one goes.
        t.update("running", |r| r.finish = FinishTruth::Aborted);
        let rids: Vec<String> = t.all().into_iter().map(|r| r.rid).collect();
        assert_eq!(rids, ["running", "r9998", "r9999"]);
        // A taken record frees its place; the queue of ended numbers stays bounded.
        assert!(t.take("r9998").is_some());
        t.insert(ended("late"));
        assert_eq!(t.len(), 3);
        assert!(t.lock().ended.len() <= 6);
    }

    #[test]
    fn the_default_store_is_bounded() {
        let t = GroundTruth::default();
        for i in 0..DEFAULT_TRUTH_WINDOW + 100 {
            t.insert(ended(&format!("e{i}")));
        }
        assert_eq!(t.len(), DEFAULT_TRUTH_WINDOW);
        assert!(t.request("e99").is_none() && t.request("e100").is_some());
    }

    #[test]
    fn an_ended_record_reads_whole_and_takes_late_hand_offs() {
        let t = GroundTruth::with_window(2);
        t.insert(RequestTruth::new("a"));
        let chunks: Vec<ChunkTruth> = (0..300u64)
            .map(|k| ChunkTruth {
                at_ns: 5_000 + k * 1_000,
                model_ns: 4_990 + k * 1_000,
                tokens: 1 + (k % 3) as usize,
                sent_ns: Some(5_100 + k * 1_000),
            })
            .collect();
        for c in &chunks[..299] {
            t.update("a", |r| r.chunks.push(c.clone()));
        }
        let last = ChunkTruth {
            sent_ns: None,
            ..chunks[299].clone()
        };
        t.update("a", |r| {
            r.chunks.push(last);
            r.finish = FinishTruth::Length;
        });
        assert!(t
            .lock()
            .records
            .values()
            .all(|e| e.ended && e.truth.chunks.is_empty()));
        // The last chunk leaves after the request ended.
        t.record_sent("a", 299, 5_100 + 299 * 1_000);
        let r = t.request("a").unwrap();
        assert_eq!(r.chunks, chunks);
        assert_eq!(r.max_pacing_error_ns, 110);
        assert_eq!(t.all(), vec![r.clone()]);
        assert_eq!(t.take("a"), Some(r));
    }
}
