//! Constant-memory Prometheus histograms (fixed buckets, sum, count) behind `GET /metrics`.
//!
//! Bucket bounds are the mock's own choice, in the spirit of SGLang's defaults (`metrics/collector.py`):
//! fine steps where an interactive deployment lives, coarse ones up to the minutes a 185k-token prefill
//! can take. Values above the last bound land in `+Inf` only.

/// Upper bounds (seconds) of `sglang:time_to_first_token_seconds`.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 480.0,
];

/// Upper bounds (seconds per token) of `sglang:inter_token_latency_seconds`.
pub const ITL_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
    0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.0, 5.0,
];

/// Upper bounds (seconds) of `sglang:e2e_request_latency_seconds`.
pub const E2E_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
    100.0, 200.0, 400.0, 800.0, 1600.0, 3200.0,
];

/// A Prometheus histogram: a count per bucket (not cumulative; the last slot is `+Inf`), a sum
/// and a count. Its memory never grows with the number of observations.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over ascending upper `bounds` (`+Inf` is implied).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one value. Non-finite values are ignored, negative ones count as 0.
    pub fn observe(&mut self, v: f64) {
        self.observe_weighted(v, 1, v);
    }

    /// SGLang's token-weighted inter-token latency: a chunk of `tokens` tokens that arrived
    /// `interval` seconds after the previous chunk adds `tokens` observations of
    /// `interval / tokens` to the buckets and `interval` to the sum.
    pub fn observe_tokens(&mut self, interval: f64, tokens: u64) {
        if tokens == 0 {
            return;
        }
        self.observe_weighted(interval / tokens as f64, tokens, interval);
    }

    fn observe_weighted(&mut self, bucket_value: f64, weight: u64, sum_add: f64) {
        if !bucket_value.is_finite() || !sum_add.is_finite() {
            return;
        }
        let v = bucket_value.max(0.0);
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += weight;
        self.count += weight;
        self.sum += sum_add.max(0.0);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observed values.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// `(upper bound, cumulative count)` per bucket, `+Inf` (as `f64::INFINITY`) last.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.counts)
            .map(|(b, n)| {
                acc += n;
                (b, acc)
            })
            .collect()
    }

    /// Appends the Prometheus text exposition of this histogram.
    /// Appends the histogram in Prometheus text format; `labels` (e.g. `model_name="m"`) go on
    /// every series, after `le` on the buckets as Python's prometheus_client writes them.
    pub fn render(&self, out: &mut String, labels: &str, name: &str, help: &str) {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        let sep = if labels.is_empty() { "" } else { "," };
        for (b, n) in self.cumulative() {
            let le = if b.is_finite() {
                b.to_string()
            } else {
                "+Inf".to_string()
            };
            out.push_str(&format!("{name}_bucket{{le=\"{le}\"{sep}{labels}}} {n}\n"));
        }
        out.push_str(&format!(
            "{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}\n",
            self.sum, self.count
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ascending() {
        for b in [TTFT_BUCKETS, ITL_BUCKETS, E2E_BUCKETS] {
            assert!(b.windows(2).all(|w| w[0] < w[1]));
        }
    }

    #[test]
    fn observe_counts_cumulatively_and_ignores_non_finite() {
        let mut h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 3.0, f64::NAN, f64::INFINITY, -1.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 5);
        assert_eq!(h.sum(), 6.0);
        assert_eq!(h.cumulative(), vec![(1.0, 3), (2.0, 4), (f64::INFINITY, 5)]);
        let mut s = String::new();
        h.render(&mut s, "model_name=\"m\"", "x", "help");
        assert!(s.contains("x_bucket{le=\"1\",model_name=\"m\"} 3\n"), "{s}");
        assert!(
            s.contains(
                "x_bucket{le=\"+Inf\",model_name=\"m\"} 5\nx_sum{model_name=\"m\"} 6\nx_count{model_name=\"m\"} 5\n"
            ),
            "{s}"
        );
    }

    #[test]
    fn token_weighted_observation_matches_sglang() {
        let mut h = Histogram::new(&[0.01, 0.1]);
        // A chunk of 4 tokens 0.02 s after the previous one: 4 observations of 0.005 s.
        h.observe_tokens(0.02, 4);
        h.observe_tokens(0.5, 0);
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum(), 0.02);
        assert_eq!(h.cumulative()[0], (0.01, 4));
    }

    #[test]
    fn memory_is_constant() {
        let mut h = Histogram::new(TTFT_BUCKETS);
        for i in 0..100_000 {
            h.observe(f64::from(i) * 1e-3);
        }
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.counts.len(), TTFT_BUCKETS.len() + 1);
    }
}
