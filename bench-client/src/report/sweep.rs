//! Reports from records: per-context statistics, mergeable, rendered as a table, JSON, CSV or an SVG plot.
//! Percentiles use [`crate::measure::percentile`] (linear interpolation, type 7).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::measure::percentile;
use crate::results::{Method, Record};

/// Raw values of one context length; merging concatenates, so merged reports are exact.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PointData {
    /// Streaming requests seen (ok + failed).
    pub requests: u64,
    /// TTFT of successful streaming requests.
    pub ttft_ms: Vec<f64>,
    /// Prefill rates.
    pub prefill_tok_s: Vec<f64>,
    /// Decode rates.
    pub decode_tok_s: Vec<f64>,
    /// Naive decode rates.
    pub naive_decode_tok_s: Vec<f64>,
    /// TTFT parts by the server's own timing (where it reported them): its queue, its prefill
    /// to the first token, and the rest (network and client).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_queue_ms: Vec<f64>,
    /// The server's work from the end of its queue to the first token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_prefill_ms: Vec<f64>,
    /// The client's TTFT less the server's first-token latency.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ttft_rest_ms: Vec<f64>,
    /// Every chunk's token count.
    pub tokens_per_chunk: Vec<f64>,
    /// Cached tokens reported.
    pub cached_tokens: Vec<f64>,
    /// Reasons the decode rate could not be measured, counted.
    pub decode_unavailable: BTreeMap<String, u64>,
    /// Token attribution methods seen, counted.
    pub attribution: BTreeMap<String, u64>,
    /// Where the successful requests' instants were taken (`trace.stamps`), counted.
    #[serde(default)]
    pub stamps: BTreeMap<String, u64>,
    /// Contaminated points.
    pub contaminated: u64,
    /// Streaming failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// Two-point pairs seen.
    pub two_point_pairs: u64,
    /// Two-point solved prefill rates.
    pub two_point_prefill_tok_s: Vec<f64>,
    /// Two-point solved decode rates.
    pub two_point_decode_tok_s: Vec<f64>,
    /// Two-point errors by kind.
    pub two_point_errors: BTreeMap<String, u64>,
}

/// A median with its p10-p90 band ([`percentile`]'s definition).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Band {
    /// 10th percentile.
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

impl Band {
    /// The band of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Band> {
        Some(Band {
            p10: percentile(values, 10.0)?,
            p50: percentile(values, 50.0)?,
            p90: percentile(values, 90.0)?,
        })
    }
}

/// A report: raw data per context length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// By context length (tokens).
    pub points: BTreeMap<u32, PointData>,
}

fn add_map(a: &mut BTreeMap<String, u64>, b: BTreeMap<String, u64>) {
    for (k, v) in b {
        *a.entry(k).or_default() += v;
    }
}

fn push(v: &mut Vec<f64>, x: Option<f64>) {
    if let Some(x) = x.filter(|x| x.is_finite()) {
        v.push(x);
    }
}

impl PointData {
    fn merge(&mut self, o: PointData) {
        self.requests += o.requests;
        self.ttft_ms.extend(o.ttft_ms);
        self.prefill_tok_s.extend(o.prefill_tok_s);
        self.decode_tok_s.extend(o.decode_tok_s);
        self.naive_decode_tok_s.extend(o.naive_decode_tok_s);
        self.server_queue_ms.extend(o.server_queue_ms);
        self.server_prefill_ms.extend(o.server_prefill_ms);
        self.ttft_rest_ms.extend(o.ttft_rest_ms);
        self.tokens_per_chunk.extend(o.tokens_per_chunk);
        self.cached_tokens.extend(o.cached_tokens);
        add_map(&mut self.decode_unavailable, o.decode_unavailable);
        add_map(&mut self.attribution, o.attribution);
        self.contaminated += o.contaminated;
        add_map(&mut self.failures, o.failures);
        self.two_point_pairs += o.two_point_pairs;
        self.two_point_prefill_tok_s
            .extend(o.two_point_prefill_tok_s);
        self.two_point_decode_tok_s.extend(o.two_point_decode_tok_s);
        add_map(&mut self.two_point_errors, o.two_point_errors);
        add_map(&mut self.stamps, o.stamps);
    }
}

impl Report {
    /// Requests by where their instants were stamped, over all points.
    pub fn stamps(&self) -> BTreeMap<String, u64> {
        let mut stamps = BTreeMap::new();
        for p in self.points.values() {
            add_map(&mut stamps, p.stamps.clone());
        }
        stamps
    }

    /// Build from records.
    pub fn from_records(records: &[Record]) -> Report {
        let mut r = Report::default();
        for rec in records {
            r.add(rec);
        }
        r
    }

    /// Add one record.
    pub fn add(&mut self, rec: &Record) {
        let p = self.points.entry(rec.context_tokens).or_default();
        match rec.method {
            Method::Streaming => {
                p.requests += 1;
                if rec.contaminated {
                    p.contaminated += 1;
                }
                if let Some(e) = &rec.error {
                    *p.failures.entry(e.kind.to_string()).or_default() += 1;
                    return;
                }
                *p.attribution
                    .entry(rec.token_attribution.as_str().to_string())
                    .or_default() += 1;
                if let Some(t) = &rec.trace {
                    *p.stamps.entry(t.stamps.as_str().to_string()).or_default() += 1;
                }
                push(&mut p.ttft_ms, rec.ttft_ms);
                push(&mut p.prefill_tok_s, rec.prefill_tok_s);
                push(&mut p.decode_tok_s, rec.decode_tok_s);
                push(&mut p.naive_decode_tok_s, rec.naive_decode_tok_s);
                if let Some(s) = &rec.ttft_split {
                    push(&mut p.server_queue_ms, s.server_queue_ms);
                    push(&mut p.server_prefill_ms, s.server_prefill_ms);
                    push(&mut p.ttft_rest_ms, s.rest_ms);
                }
                p.tokens_per_chunk
                    .extend(rec.tokens_per_chunk.iter().map(|&t| f64::from(t)));
                push(&mut p.cached_tokens, rec.cached_tokens.map(f64::from));
                if let Some(d) = &rec.decode_unavailable {
                    *p.decode_unavailable.entry(d.clone()).or_default() += 1;
                }
            }
            Method::TwoPoint => {
                p.two_point_pairs += 1;
                if let Some(e) = &rec.error {
                    *p.two_point_errors.entry(e.kind.to_string()).or_default() += 1;
                    return;
                }
                push(&mut p.two_point_prefill_tok_s, rec.prefill_tok_s);
                push(&mut p.two_point_decode_tok_s, rec.decode_tok_s);
            }
        }
    }

    /// Merge another report into this one (exact: raw values are concatenated).
    pub fn merge(mut self, other: Report) -> Report {
        for (k, v) in other.points {
            self.points.entry(k).or_default().merge(v);
        }
        self
    }

    /// Summary rows, one per context length.
    pub fn summary(&self) -> Vec<Summary> {
        self.points
            .iter()
            .map(|(&ctx, p)| {
                let mean =
                    |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
                let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
                let total_fail: u64 = p.failures.values().sum();
                Summary {
                    context_tokens: ctx,
                    requests: p.requests,
                    ok: p.requests - total_fail,
                    ttft_ms_p50: percentile(&p.ttft_ms, 50.0),
                    ttft_ms_p90: percentile(&p.ttft_ms, 90.0),
                    prefill_tok_s_p50: percentile(&p.prefill_tok_s, 50.0),
                    decode_tok_s_p50: percentile(&p.decode_tok_s, 50.0),
                    decode_tok_s_p10: percentile(&p.decode_tok_s, 10.0),
                    naive_decode_tok_s_p50: percentile(&p.naive_decode_tok_s, 50.0),
                    server_queue_ms_p50: percentile(&p.server_queue_ms, 50.0),
                    server_prefill_ms_p50: percentile(&p.server_prefill_ms, 50.0),
                    ttft_rest_ms_p50: percentile(&p.ttft_rest_ms, 50.0),
                    tokens_per_chunk_mean: mean(&p.tokens_per_chunk),
                    cached_tokens_max: max(&p.cached_tokens).map(|c| c as u64),
                    contaminated: p.contaminated,
                    failures: p.failures.clone(),
                    decode_unavailable: p.decode_unavailable.clone(),
                    token_attribution: p.attribution.keys().cloned().collect::<Vec<_>>().join("+"),
                    two_point_pairs: p.two_point_pairs,
                    two_point_prefill_tok_s_p50: percentile(&p.two_point_prefill_tok_s, 50.0),
                    two_point_decode_tok_s_p50: percentile(&p.two_point_decode_tok_s, 50.0),
                    two_point_errors: p.two_point_errors.clone(),
                }
            })
            .collect()
    }

    /// Whether any two-point pair ran.
    pub fn has_two_point(&self) -> bool {
        self.points.values().any(|p| p.two_point_pairs > 0)
    }

    /// Whether any request's TTFT could be split by the server's own timing.
    pub fn has_server_timing(&self) -> bool {
        self.points
            .values()
            .any(|p| !p.server_prefill_ms.is_empty() || !p.ttft_rest_ms.is_empty())
    }
}

/// Summary of one context length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Context length.
    pub context_tokens: u32,
    /// Streaming requests.
    pub requests: u64,
    /// Successful streaming requests.
    pub ok: u64,
    /// Median TTFT.
    pub ttft_ms_p50: Option<f64>,
    /// 90th percentile TTFT.
    pub ttft_ms_p90: Option<f64>,
    /// Median prefill rate.
    pub prefill_tok_s_p50: Option<f64>,
    /// Median decode rate.
    pub decode_tok_s_p50: Option<f64>,
    /// 10th percentile decode rate (slow tail).
    pub decode_tok_s_p10: Option<f64>,
    /// Median of the common (completion-1)/time formula.
    pub naive_decode_tok_s_p50: Option<f64>,
    /// Median server queue time, where the server reported its timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_queue_ms_p50: Option<f64>,
    /// Median server time from the queue's end to the first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_prefill_ms_p50: Option<f64>,
    /// Median rest of TTFT: the client's TTFT less the server's first-token latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_rest_ms_p50: Option<f64>,
    /// Mean tokens per chunk.
    pub tokens_per_chunk_mean: Option<f64>,
    /// Largest cached-token count reported.
    pub cached_tokens_max: Option<u64>,
    /// Contaminated requests.
    pub contaminated: u64,
    /// Failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// Decode-unmeasurable reasons by count.
    pub decode_unavailable: BTreeMap<String, u64>,
    /// Attribution methods seen.
    pub token_attribution: String,
    /// Two-point pairs.
    pub two_point_pairs: u64,
    /// Two-point median prefill.
    pub two_point_prefill_tok_s_p50: Option<f64>,
    /// Two-point median decode.
    pub two_point_decode_tok_s_p50: Option<f64>,
    /// Two-point errors by kind.
    pub two_point_errors: BTreeMap<String, u64>,
}
