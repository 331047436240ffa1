//! The prefix cache over a load run, seen two ways: from the responses (each request's reported
//! cached and prompt tokens, with TTFT split by hit and miss) and from the server's own `/metrics`
//! counters (their change over the run).
//!
//! [`CacheSplit`] is a mergeable accumulator (`add`, `merge`), so a summary can keep one per group
//! (the whole run, a prefix group, a turn number) and merge them across files exactly.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::load::Metric;

/// What the hit ratio and the split mean, for the table's and the JSON's definitions.
pub const DEFINITION: &str = "sum of cached_tokens / sum of prompt_tokens over the successful requests that reported a cached count; a hit is a request with cached_tokens > 0, a miss one with 0; TTFT from the scheduled start";

/// A successful request's `(cached, prompt, hit)` tokens: a hit has `cached > 0`. `None` when it
/// did not report both counts: neither hit nor miss, and left out of the ratio. The one rule of
/// the summary and of `compare`.
pub fn reported(
    prompt_tokens: Option<u32>,
    cached_tokens: Option<u32>,
) -> Option<(u32, u32, bool)> {
    let (p, c) = (prompt_tokens?, cached_tokens?);
    Some((c, p, c > 0))
}

/// Cached and prompt tokens of the requests that reported a cached count, and their TTFT split
/// by hit and miss (nanoseconds, HdrHistograms so that merges stay exact).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheSplit {
    /// Successful requests that reported both a cached and a prompt count.
    pub reported: u64,
    /// Successful requests that did not (the server or the API does not report it).
    pub unreported: u64,
    /// Prompt tokens of the reporting requests.
    pub prompt_tokens: u64,
    /// Cached tokens they reported.
    pub cached_tokens: u64,
    /// TTFT of the hits.
    pub hit: Metric,
    /// TTFT of the misses.
    pub miss: Metric,
}

impl CacheSplit {
    /// Add one successful request: its prompt and cached token counts as reported, and its TTFT.
    pub fn add(&mut self, prompt_tokens: Option<u32>, cached_tokens: Option<u32>, ttft_ns: u64) {
        let Some((c, p, hit)) = reported(prompt_tokens, cached_tokens) else {
            self.unreported += 1;
            return;
        };
        self.reported += 1;
        self.prompt_tokens += u64::from(p);
        self.cached_tokens += u64::from(c);
        if hit {
            self.hit.record(ttft_ns);
        } else {
            self.miss.record(ttft_ns);
        }
    }

    /// Merge another split into this one.
    pub fn merge(&mut self, o: &CacheSplit) {
        self.reported += o.reported;
        self.unreported += o.unreported;
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.hit.merge(&o.hit);
        self.miss.merge(&o.miss);
    }

    /// Cached / prompt tokens of the reporting requests; `None` when none reported.
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }

    /// The split as JSON, latencies in ms.
    pub fn to_json(&self) -> Value {
        let ttft = |m: &Metric| {
            let ms = |v: Option<u64>| v.map(|v| v as f64 / 1e6);
            json!({
                "count": m.count(),
                "mean_ms": m.mean().map(|v| v / 1e6),
                "p50_ms": ms(m.percentile(50.0)),
                "p90_ms": ms(m.percentile(90.0)),
                "p99_ms": ms(m.percentile(99.0)),
                "max_ms": ms(m.max()),
            })
        };
        json!({
            "definition": DEFINITION,
            "requests_reported": self.reported,
            "requests_unreported": self.unreported,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "hit_ratio": self.hit_ratio(),
            "ttft_hit": ttft(&self.hit),
            "ttft_miss": ttft(&self.miss),
        })
    }
}

/// Hit and query counters of a server's prefix cache, in tokens, first match wins. Names as
/// exported (prometheus_client appends `_total` to a counter):
/// - SGLang 0.5.x: `sglang:cached_tokens_total` (one series per `cache_source`) and
///   `sglang:prompt_tokens_total`, both counted at each request's finish
///   (sgl-project/sglang `python/sglang/srt/metrics/collector.py`; recorded from 0.5.23 in
///   `fixtures/streams/real/sglang_info_metrics.json`).
/// - vLLM 0.9 and later (V1): `vllm:prefix_cache_hits_total` and `vllm:prefix_cache_queries_total`,
///   counted at scheduling, so a preempted request's prompt is queried again
///   (vllm-project/vllm `vllm/v1/metrics/loggers.py`).
/// - vLLM before 0.9: `vllm:gpu_prefix_cache_hits_total` / `..._queries_total`. 0.9 and 0.10
///   export these as well, with the same values: taking the first pair found counts them once.
pub const COUNTERS: [(&str, &str); 3] = [
    ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    ),
    (
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
];

/// Hit-rate gauges: a rate, not a count, so never differenced; shown as read after the run.
/// SGLang's `sglang:cache_hit_rate` is the last logged prefill batch's rate (0.997 in the 0.5.23
/// recording, where the counters give 0.098 since start); vLLM V0's is a gauge too.
pub const GAUGES: [&str; 2] = ["sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate"];

/// Whether the sample `key` (`name` or `name{labels}`) is one of [`GAUGES`].
pub fn is_rate_gauge(key: &str) -> bool {
    key.split('{').next().is_some_and(|n| GAUGES.contains(&n))
}

/// The server's prefix cache over a run, from its counters' changes.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerCache {
    /// The hit counter used.
    pub hits_counter: &'static str,
    /// The query counter used.
    pub queries_counter: &'static str,
    /// Change of the hit counter (all label sets), tokens.
    pub hit_tokens: f64,
    /// Change of the query counter, tokens.
    pub queried_tokens: f64,
}

impl ServerCache {
    /// The first pair of [`COUNTERS`] present in `deltas` (after - before by sample).
    pub fn from_deltas(deltas: &BTreeMap<String, f64>) -> Option<Self> {
        COUNTERS.iter().find_map(|&(hits, queries)| {
            Some(Self {
                hits_counter: hits,
                queries_counter: queries,
                hit_tokens: super::server_metrics::by_name(deltas, hits)?,
                queried_tokens: super::server_metrics::by_name(deltas, queries)?,
            })
        })
    }

    /// Hit tokens / queried tokens; `None` when nothing was queried or a counter went down.
    pub fn ratio(&self) -> Option<f64> {
        (self.queried_tokens > 0.0 && self.hit_tokens >= 0.0)
            .then(|| self.hit_tokens / self.queried_tokens)
    }

    /// One line for the text views.
    pub fn line(&self) -> String {
        let r = self
            .ratio()
            .map_or_else(|| "-".to_string(), |r| format!("{r:.4}"));
        format!(
            "server prefix cache hit ratio {r}: {} {} / {} {}, after - before",
            self.hit_tokens, self.hits_counter, self.queried_tokens, self.queries_counter
        )
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "hit_ratio": self.ratio(),
            "hits_counter": self.hits_counter,
            "queries_counter": self.queries_counter,
            "hit_tokens": self.hit_tokens,
            "queried_tokens": self.queried_tokens,
        })
    }
}

/// The [`GAUGES`] samples among `samples` (a scrape after the run).
pub fn rate_gauges(samples: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|(k, _)| is_rate_gauge(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(reqs: &[(Option<u32>, Option<u32>, u64)]) -> CacheSplit {
        let mut s = CacheSplit::default();
        for &(p, c, t) in reqs {
            s.add(p, c, t);
        }
        s
    }

    #[test]
    fn hits_misses_and_unreported_requests_are_kept_apart() {
        let s = split(&[
            (Some(100), Some(60), 5_000_000),
            (Some(100), Some(0), 9_000_000),
            (Some(50), Some(40), 3_000_000),
            (Some(80), None, 1_000_000),
            (None, Some(5), 1_000_000),
        ]);
        assert_eq!((s.reported, s.unreported), (3, 2));
        assert_eq!((s.prompt_tokens, s.cached_tokens), (250, 100));
        assert_eq!(s.hit_ratio(), Some(0.4));
        assert_eq!((s.hit.count(), s.miss.count()), (2, 1));
        assert_eq!(s.hit.mean(), Some(4_000_000.0));
        assert_eq!(s.miss.max(), Some(9_000_000));
        assert_eq!(CacheSplit::default().hit_ratio(), None);
        let j = s.to_json();
        assert_eq!(j["ttft_hit"]["count"], 2);
        assert_eq!(j["ttft_miss"]["p50_ms"], 9.0);
    }

    #[test]
    fn a_merge_equals_the_whole() {
        let reqs: Vec<(Option<u32>, Option<u32>, u64)> = (0..40u32)
            .map(|i| {
                let cached = (i % 5 != 4).then_some((i % 3) * 10);
                (Some(30 + i), cached, u64::from(i) * 1_234_567)
            })
            .collect();
        let whole = split(&reqs);
        let (a, b) = reqs.split_at(17);
        let mut merged = split(a);
        merged.merge(&split(b));
        assert_eq!(merged, whole);
        assert_eq!(merged.reported + merged.unreported, 40);
        assert_eq!(merged.hit.count() + merged.miss.count(), merged.reported);
    }

    #[test]
    fn server_counters_first_pair_wins_and_gauges_are_told_apart() {
        let d = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let sglang = d(&[
            ("sglang:cached_tokens_total{cache_source=\"device\"}", 30.0),
            ("sglang:cached_tokens_total{cache_source=\"host\"}", 10.0),
            ("sglang:prompt_tokens_total{is_streaming=\"true\"}", 90.0),
            ("sglang:prompt_tokens_total{is_streaming=\"false\"}", 10.0),
        ]);
        let s = ServerCache::from_deltas(&sglang).unwrap();
        assert_eq!(s.ratio(), Some(0.4));
        assert_eq!(s.hits_counter, "sglang:cached_tokens_total");
        // vLLM 0.10 exports the new and the deprecated pair with the same values: counted once.
        let vllm = d(&[
            ("vllm:prefix_cache_hits_total{engine=\"0\"}", 25.0),
            ("vllm:prefix_cache_queries_total{engine=\"0\"}", 100.0),
            ("vllm:gpu_prefix_cache_hits_total{engine=\"0\"}", 25.0),
            ("vllm:gpu_prefix_cache_queries_total{engine=\"0\"}", 100.0),
            ("vllm:prompt_tokens_total{engine=\"0\"}", 100.0),
        ]);
        let v = ServerCache::from_deltas(&vllm).unwrap();
        assert_eq!(v.ratio(), Some(0.25));
        assert_eq!((v.hit_tokens, v.queried_tokens), (25.0, 100.0));
        assert_eq!(v.queries_counter, "vllm:prefix_cache_queries_total");
        let old = d(&[
            ("vllm:gpu_prefix_cache_hits_total", 5.0),
            ("vllm:gpu_prefix_cache_queries_total", 50.0),
        ]);
        assert_eq!(ServerCache::from_deltas(&old).unwrap().ratio(), Some(0.1));
        // A hit counter alone, or nothing queried, gives no ratio.
        assert!(ServerCache::from_deltas(&d(&[("vllm:prefix_cache_hits_total", 5.0)])).is_none());
        let idle = d(&[
            ("vllm:prefix_cache_hits_total", 0.0),
            ("vllm:prefix_cache_queries_total", 0.0),
        ]);
        assert_eq!(ServerCache::from_deltas(&idle).unwrap().ratio(), None);
        assert!(is_rate_gauge("sglang:cache_hit_rate{tp_rank=\"0\"}"));
        assert!(!is_rate_gauge("sglang:cached_tokens_total"));
    }
}
