//! The prefix-cache rows of a load comparison: the hit ratio (cached over prompt tokens, a ratio of
//! totals resampled by request) and TTFT p50/p99 of the hits and of the misses. They appear when
//! either side has a hit; without one there is nothing to compare.

use super::{row, sample, LoadValues, Spec};
use crate::measure::compare::{Direction, Run, Statistic};

/// A run's prefix-cache values, from its successful requests that reported a cached count.
#[derive(Default)]
pub(super) struct CacheValues {
    /// `[cached, prompt]` tokens per request.
    pub pairs: Vec<Vec<f64>>,
    /// TTFT from the scheduled start of the hits, ms.
    pub ttft_hit_ms: Vec<f64>,
    /// Of the misses.
    pub ttft_miss_ms: Vec<f64>,
}

impl CacheValues {
    /// Add a request by [`crate::report::cache::reported`]'s rule.
    pub fn add(&mut self, prompt: Option<u32>, cached: Option<u32>, ttft_ms: f64) {
        if let Some((c, p, hit)) = crate::report::cache::reported(prompt, cached) {
            self.pairs.push(vec![f64::from(c), f64::from(p)]);
            if hit {
                self.ttft_hit_ms.push(ttft_ms);
            } else {
                self.ttft_miss_ms.push(ttft_ms);
            }
        }
    }
}

/// The rows, or none when neither side hit the cache.
pub(super) fn cache_rows(x: &[LoadValues], y: &[LoadValues]) -> Vec<Spec> {
    let hit = |v: &[LoadValues]| v.iter().any(|r| !r.cache.ttft_hit_ms.is_empty());
    if !hit(x) && !hit(y) {
        return Vec::new();
    }
    let mut rows = Vec::new();
    // More of the same workload served from the cache is better: less to prefill.
    let pairs = |v: &LoadValues| Run::clustered(v.cache.pairs.clone());
    rows.push(row(
        None,
        "cache_hit_ratio",
        Direction::HigherIsBetter,
        sample(
            "BASE",
            x.iter().map(pairs).collect(),
            Statistic::RatioOfSums,
        ),
        sample("NEW", y.iter().map(pairs).collect(), Statistic::RatioOfSums),
    ));
    type Pick = fn(&LoadValues) -> Run;
    let split: [([&'static str; 2], Pick); 2] = [
        (["ttft_cache_hit_p50_ms", "ttft_cache_hit_p99_ms"], |v| {
            Run::scalar(&v.cache.ttft_hit_ms)
        }),
        (["ttft_cache_miss_p50_ms", "ttft_cache_miss_p99_ms"], |v| {
            Run::scalar(&v.cache.ttft_miss_ms)
        }),
    ];
    for (names, pick) in split {
        for (name, p) in names.into_iter().zip([50.0, 99.0]) {
            let st = Statistic::Percentile(p);
            rows.push(row(
                None,
                name,
                Direction::LowerIsBetter,
                sample("BASE", x.iter().map(pick).collect(), st),
                sample("NEW", y.iter().map(pick).collect(), st),
            ));
        }
    }
    rows
}
