//! The load-run summary, built from records alone so that it merges exactly: integer counters,
//! nanosecond HdrHistograms (3 significant digits) and a per-second timeline keyed by unix second.
//! `merge(summary(a), summary(b)) == summary(a ++ b)` for any split of the records.
//!
//! Percentiles here are HdrHistogram's `value_at_quantile`: the smallest recorded value (to 3
//! significant digits) at or below which the given fraction of samples lie. `max` is exact.

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::cache::CacheSplit;
pub use crate::measure::Slo;
use crate::measure::{load_numbers, measure, MeasureError, Measurement};
use crate::results::Record;

mod span;
use span::union_ns;
pub use span::{Instants, Piece};

/// A histogram with its exact maximum.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    hist: Histogram<u64>,
    max: u64,
    sum: u128,
}

impl Default for Metric {
    fn default() -> Self {
        Self {
            // Auto-resizing; 3 significant digits cannot fail.
            hist: Histogram::new(3).unwrap_or_else(|_| unreachable_hist()),
            max: 0,
            sum: 0,
        }
    }
}

fn unreachable_hist() -> Histogram<u64> {
    // Only reached if hdrhistogram refused 3 significant digits, which it accepts (1..=5).
    Histogram::new_with_bounds(1, u64::MAX / 2, 2).unwrap_or_else(|_| std::process::abort())
}

impl Metric {
    pub(crate) fn record(&mut self, v: u64) {
        // Auto-resize makes recording infallible for u64 values the histogram can hold.
        if self.hist.record(v).is_ok() {
            self.max = self.max.max(v);
            self.sum += u128::from(v);
        }
    }

    /// Records each of `vs`: a run of equal values as one count (a stream's gaps often repeat).
    pub(crate) fn record_all(&mut self, vs: impl IntoIterator<Item = u64>) {
        let mut run: Option<(u64, u64)> = None;
        for v in vs {
            run = match run {
                Some((w, n)) if w == v => Some((w, n + 1)),
                other => {
                    if let Some((w, n)) = other {
                        self.record_n(w, n);
                    }
                    Some((v, 1))
                }
            };
        }
        if let Some((w, n)) = run {
            self.record_n(w, n);
        }
    }

    fn record_n(&mut self, v: u64, n: u64) {
        if self.hist.record_n(v, n).is_ok() {
            self.max = self.max.max(v);
            self.sum += u128::from(v) * u128::from(n);
        }
    }

    pub(crate) fn merge(&mut self, o: &Metric) {
        if self.hist.add(&o.hist).is_ok() {
            self.max = self.max.max(o.max);
            self.sum += o.sum;
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// Value at percentile `p` (0..=100), `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        (!self.hist.is_empty()).then(|| self.hist.value_at_quantile(p / 100.0).min(self.max))
    }

    /// Exact maximum.
    pub fn max(&self) -> Option<u64> {
        (!self.hist.is_empty()).then_some(self.max)
    }

    /// Exact mean.
    pub fn mean(&self) -> Option<f64> {
        (!self.hist.is_empty()).then(|| self.sum as f64 / self.hist.len() as f64)
    }
}

/// Requests in one second of the run (unix second of the event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Second {
    /// Requests sent.
    pub sent: u64,
    /// Requests that finished successfully.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Output tokens of requests finished in this second.
    pub output_tokens: u64,
}

/// Latency metrics, in nanoseconds, each with its definition.
pub const METRICS: [(&str, &str); 11] = [
    (
        "ttft",
        "TTFT from the scheduled start: client queue time + first output chunk after send",
    ),
    (
        "ttft_server",
        "TTFT from the send (the write of the request's first byte when stamped at the socket) to the first output chunk's arrival",
    ),
    (
        "client_queue",
        "client_queue_time: actual send - scheduled start (the client's own delay, connecting included)",
    ),
    (
        "tpot",
        "TPOT: (t_last_chunk - t_first_chunk) / tokens after the first chunk",
    ),
    (
        "inter_chunk",
        "gap between successive output chunks (one sample per gap)",
    ),
    (
        "per_token",
        "each chunk gap divided over its tokens (one sample per token after the first chunk)",
    ),
    (
        "e2e",
        "end-to-end latency from the send to the end of the stream",
    ),
    (
        "sglang_vllm_ttft",
        "SGLang bench_serving / vLLM bench serve TTFT: first chunk after the send",
    ),
    (
        "sglang_vllm_tpot",
        "SGLang bench_serving / vLLM bench serve TPOT: (e2e - ttft) / (output tokens - 1)",
    ),
    (
        "sglang_vllm_itl",
        "SGLang bench_serving / vLLM bench serve ITL: per-chunk gap (not per token)",
    ),
    (
        "sglang_vllm_e2e",
        "SGLang bench_serving / vLLM bench serve E2E latency",
    ),
];

/// A mergeable summary of load records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadSummary {
    /// Goodput objective.
    pub slo: Slo,
    /// Measured requests.
    pub requests: u64,
    /// Successful requests.
    pub succeeded: u64,
    /// Failed requests by failure kind.
    pub failures: BTreeMap<String, u64>,
    /// Prompt tokens (server-reported, else sent) of successful requests.
    pub prompt_tokens: u64,
    /// The prefix cache from the responses: cached over prompt tokens, TTFT by hit and miss.
    pub cache: CacheSplit,
    /// Output tokens of successful requests.
    pub output_tokens: u64,
    /// Output-carrying chunks of successful requests whose per-chunk counts are known.
    pub chunks_counted: u64,
    /// Output tokens in those chunks.
    pub chunk_tokens: u64,
    /// Successful requests whose per-chunk token counts were unknown.
    pub counts_unknown: u64,
    /// Successful requests imported from another tool's results (`bench-client import`).
    pub imported: u64,
    /// Successful requests meeting the SLO.
    pub good: u64,
    /// Successful requests of several output tokens without a TPOT of their own, while the SLO has
    /// a TPOT objective: judged on the benchmarks' stand-in ([`crate::measure::Slo::met`]).
    pub tpot_unmeasured: u64,
    /// Earliest scheduled start, unix ns.
    pub first_scheduled_ns: Option<u64>,
    /// Earliest send, unix ns.
    pub first_sent_ns: Option<u64>,
    /// Latest send, unix ns.
    pub last_sent_ns: Option<u64>,
    /// Latest end, unix ns.
    pub last_end_ns: Option<u64>,
    /// Each run piece's instants, by the piece's start (unix ms): a run resumed after a kill is
    /// several pieces, and the time between them is no part of its span.
    pub pieces: BTreeMap<u64, Piece>,
    /// Sum over requests of send-to-end time, ns.
    pub busy_ns: u128,
    /// Latency metrics by name (see [`METRICS`]).
    pub metrics: BTreeMap<&'static str, Metric>,
    /// Tokens per output chunk.
    pub tokens_per_chunk: Metric,
    /// Per-second timeline.
    pub timeline: BTreeMap<u64, Second>,
    /// Shards seen (`I/N`).
    pub shards: BTreeSet<String>,
    /// Multi-turn runs: TTFT and cache hits by turn number.
    pub turns: super::turns::Turns,
}

impl LoadSummary {
    /// An empty summary with an SLO.
    pub fn new(slo: Slo) -> Self {
        Self {
            slo,
            ..Self::default()
        }
    }

    /// Summary of the load records among `records` (records without load fields are ignored).
    pub fn from_records(records: &[Record], slo: Slo) -> Self {
        let mut s = Self::new(slo);
        for r in records {
            s.add(r);
        }
        s
    }

    fn metric(&mut self, name: &'static str) -> &mut Metric {
        self.metrics.entry(name).or_default()
    }

    /// Add one record.
    pub fn add(&mut self, rec: &Record) {
        let trace = rec.load.as_ref().and(rec.trace.as_ref());
        self.add_measured(rec, trace.map(measure));
    }

    /// [`LoadSummary::add`] of a record whose trace `m` measured.
    pub fn add_measured(&mut self, rec: &Record, m: Option<Result<Measurement, MeasureError>>) {
        let (Some(load), Some(trace), Some(m)) = (&rec.load, &rec.trace, m) else {
            return;
        };
        let instants = Instants::of(load, trace);
        let Instants {
            scheduled,
            sent,
            end,
        } = instants;
        let piece = Piece::of(instants);
        self.pieces
            .entry(load.start_unix_ms)
            .and_modify(|p| *p = p.join(piece))
            .or_insert(piece);
        self.requests += 1;
        self.turns.add(rec);
        self.shards.insert(load.shard.to_string());
        self.first_scheduled_ns = Some(
            self.first_scheduled_ns
                .map_or(scheduled, |v| v.min(scheduled)),
        );
        self.first_sent_ns = Some(self.first_sent_ns.map_or(sent, |v| v.min(sent)));
        self.last_sent_ns = Some(self.last_sent_ns.map_or(sent, |v| v.max(sent)));
        self.last_end_ns = Some(self.last_end_ns.map_or(end, |v| v.max(end)));
        self.busy_ns += u128::from(trace.end_ns);
        self.timeline.entry(sent / 1_000_000_000).or_default().sent += 1;
        self.metric("client_queue").record(load.client_queue_ns);
        let m = match (&rec.error, m) {
            (None, Ok(m)) => m,
            (err, _) => {
                let kind = err.as_ref().map_or("no-output", |e| e.kind.as_str());
                *self.failures.entry(kind.to_string()).or_default() += 1;
                self.timeline.entry(end / 1_000_000_000).or_default().failed += 1;
                return;
            }
        };
        self.succeeded += 1;
        if m.token_attribution.is_imported() {
            self.imported += 1;
        }
        let n = load_numbers(trace, &m, load.client_queue_ns);
        let output = u64::from(m.completion_tokens.unwrap_or(0));
        self.output_tokens += output;
        if let Some(p) = m.prompt_tokens {
            self.prompt_tokens += u64::from(p);
        }
        self.cache
            .add(m.prompt_tokens, m.cached_tokens, n.ttft_from_schedule_ns);
        let sec = self.timeline.entry(end / 1_000_000_000).or_default();
        sec.completed += 1;
        sec.output_tokens += output;
        self.metric("ttft").record(n.ttft_from_schedule_ns);
        self.metric("ttft_server").record(n.ttft_ns);
        self.metric("sglang_vllm_ttft").record(n.ttft_ns);
        self.metric("e2e").record(n.e2e_ns);
        self.metric("sglang_vllm_e2e").record(n.e2e_ns);
        // One look-up per metric, not per sample (and none without samples).
        if !n.inter_chunk_ns.is_empty() {
            for name in ["inter_chunk", "sglang_vllm_itl"] {
                self.metric(name)
                    .record_all(n.inter_chunk_ns.iter().copied());
            }
        }
        if m.token_attribution.counts_known() {
            self.tokens_per_chunk
                .record_all(m.tokens_per_chunk.iter().map(|&t| u64::from(t)));
            self.chunks_counted += m.tokens_per_chunk.len() as u64;
            self.chunk_tokens += m
                .tokens_per_chunk
                .iter()
                .map(|&t| u64::from(t))
                .sum::<u64>();
            if !n.per_token_ns.is_empty() {
                self.metric("per_token")
                    .record_all(n.per_token_ns.iter().copied());
            }
            if let Some(v) = n.tpot_ns {
                self.metric("tpot").record(v);
            }
        } else {
            self.counts_unknown += 1;
        }
        if let Some(v) = n.naive_tpot_ns {
            self.metric("sglang_vllm_tpot").record(v);
        }
        if self.slo.met(&n, output) {
            self.good += 1;
        }
        if self.slo.tpot_unmeasured(&n, output) {
            self.tpot_unmeasured += 1;
        }
    }

    /// Merge two summaries (same SLO expected; `self`'s is kept).
    pub fn merge(mut self, o: &LoadSummary) -> Self {
        self.requests += o.requests;
        self.succeeded += o.succeeded;
        for (k, v) in &o.failures {
            *self.failures.entry(k.clone()).or_default() += v;
        }
        self.prompt_tokens += o.prompt_tokens;
        self.cache.merge(&o.cache);
        self.output_tokens += o.output_tokens;
        self.chunks_counted += o.chunks_counted;
        self.chunk_tokens += o.chunk_tokens;
        self.counts_unknown += o.counts_unknown;
        self.imported += o.imported;
        self.good += o.good;
        self.tpot_unmeasured += o.tpot_unmeasured;
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        let max = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        self.first_scheduled_ns = min(self.first_scheduled_ns, o.first_scheduled_ns);
        self.first_sent_ns = min(self.first_sent_ns, o.first_sent_ns);
        self.last_sent_ns = max(self.last_sent_ns, o.last_sent_ns);
        self.last_end_ns = max(self.last_end_ns, o.last_end_ns);
        for (k, p) in &o.pieces {
            self.pieces
                .entry(*k)
                .and_modify(|q| *q = q.join(*p))
                .or_insert(*p);
        }
        self.busy_ns += o.busy_ns;
        for (k, m) in &o.metrics {
            self.metrics.entry(k).or_default().merge(m);
        }
        self.tokens_per_chunk.merge(&o.tokens_per_chunk);
        for (k, s) in &o.timeline {
            let e = self.timeline.entry(*k).or_default();
            e.sent += s.sent;
            e.completed += s.completed;
            e.failed += s.failed;
            e.output_tokens += s.output_tokens;
        }
        self.shards.extend(o.shards.iter().cloned());
        self.turns.merge(&o.turns);
        self
    }

    /// The run's span, seconds (`None` when empty or zero): first scheduled start to last end of
    /// each piece, the pieces' union (a resumed run's is the sum of its pieces, without the time
    /// it was down; the shards of one run overlap and count once).
    pub fn duration_s(&self) -> Option<f64> {
        let ns = union_ns(
            self.pieces
                .values()
                .map(|p| (p.first_scheduled, p.last_end))
                .collect(),
        );
        (ns > 0).then(|| ns as f64 / 1e9)
    }

    /// Rates and ratios derived from the counters; `None` where undefined.
    pub fn derived(&self) -> Derived {
        let d = self.duration_s();
        let per_s = |n: u64| d.map(|d| n as f64 / d);
        // Sends over the pieces' send spans: a resumed run's down time is no gap in its arrivals.
        let sending = union_ns(
            self.pieces
                .values()
                .map(|p| (p.first_sent, p.last_sent))
                .collect(),
        );
        let arrival = (sending > 0 && self.requests >= 2)
            .then(|| (self.requests - 1) as f64 / (sending as f64 / 1e9));
        Derived {
            duration_s: d,
            request_throughput: per_s(self.succeeded),
            output_throughput: per_s(self.output_tokens),
            input_throughput: per_s(self.prompt_tokens),
            goodput: if self.slo.is_set() {
                per_s(self.good)
            } else {
                None
            },
            arrival_rate: arrival,
            achieved_concurrency: d.map(|d| self.busy_ns as f64 / 1e9 / d),
            cache_hit_rate: self.cache.hit_ratio(),
            tokens_per_chunk_mean: (self.chunks_counted > 0)
                .then(|| self.chunk_tokens as f64 / self.chunks_counted as f64),
        }
    }
}

/// Derived figures of a summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Derived {
    /// First scheduled start to last end.
    pub duration_s: Option<f64>,
    /// Successful requests per second.
    pub request_throughput: Option<f64>,
    /// Output tokens per second.
    pub output_throughput: Option<f64>,
    /// Prompt tokens per second.
    pub input_throughput: Option<f64>,
    /// Requests meeting the SLO per second.
    pub goodput: Option<f64>,
    /// (requests - 1) / (last send - first send).
    pub arrival_rate: Option<f64>,
    /// Mean requests in flight: sum of send-to-end times / duration.
    pub achieved_concurrency: Option<f64>,
    /// Cached prompt tokens / prompt tokens of the requests that reported a cached count.
    pub cache_hit_rate: Option<f64>,
    /// Output tokens / output chunks.
    pub tokens_per_chunk_mean: Option<f64>,
}

/// Read load records from several results files and summarise them as one run: the files must
/// be pieces of one run, each request once ([`crate::results::OneRun`]). One record at a time: a
/// run of millions of requests is never held whole.
pub fn merge_files(files: &[std::path::PathBuf], slo: Slo) -> anyhow::Result<(LoadSummary, usize)> {
    let mut run_ids = Vec::with_capacity(files.len());
    for f in files {
        run_ids.push(
            crate::results::read_manifests(f)?
                .into_iter()
                .find_map(|m| m.run_id),
        );
    }
    let mut one_run = crate::results::OneRun::new(
        files
            .iter()
            .zip(&run_ids)
            .map(|(f, id)| (f.as_path(), id.as_deref()))
            .collect(),
    )?;
    let mut summary = LoadSummary::new(slo);
    let mut ignored = 0usize;
    for (i, f) in files.iter().enumerate() {
        let mut piece = LoadSummary::new(slo);
        crate::results::each_record(f, |r| {
            match &r.load {
                Some(load) => one_run.request(i, load)?,
                None => ignored += 1,
            }
            piece.add(&r);
            Ok(())
        })?;
        summary = summary.merge(&piece);
    }
    Ok((summary, ignored))
}

#[cfg(test)]
mod tests;
