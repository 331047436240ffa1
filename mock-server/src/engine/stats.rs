//! Live counters for `/metrics` and `/server_info`, and what one pass adds to them.

use super::Shared;
use crate::metrics::{Histogram, E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS};

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
    /// Decode (verify) steps that drew at least one token, over all requests.
    pub verify_steps_total: u64,
    /// Tokens those steps drew.
    pub verify_tokens_total: u64,
    /// Requests sent back to the queue under KV pressure.
    pub retracted_total: u64,
    /// Requests the latest decode step sent back (SGLang's `sglang:num_retracted_reqs` gauge).
    pub retracted_last: usize,
    pub last_gen_throughput: f64,
    /// Time to first token, one observation per request.
    pub ttft: Histogram,
    /// SGLang's token-weighted inter-token latency: each chunk after the first adds its token
    /// count of observations of (gap since the previous chunk / tokens), and the gap to the sum.
    pub itl: Histogram,
    /// End-to-end latency, one observation per finished request.
    pub e2e: Histogram,
    /// Time in the waiting queue, one observation per request at its first admission.
    pub queue: Histogram,
}

impl Stats {
    /// SGLang's speculative accept rate: accepted draft tokens per drafted token, from the accept
    /// length and `draft_tokens` per step (0 before any step or without drafts).
    pub fn accept_rate(&self, draft_tokens: usize) -> f64 {
        if draft_tokens == 0 || self.verify_steps_total == 0 {
            return 0.0;
        }
        ((self.accept_length() - 1.0) / draft_tokens as f64).max(0.0)
    }

    /// Tokens per verify step (SGLang's speculative accept length); 0 before any step.
    pub fn accept_length(&self) -> f64 {
        if self.verify_steps_total > 0 {
            self.verify_tokens_total as f64 / self.verify_steps_total as f64
        } else {
            0.0
        }
    }
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
            verify_steps_total: 0,
            verify_tokens_total: 0,
            retracted_total: 0,
            retracted_last: 0,
            last_gen_throughput: 0.0,
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            queue: Histogram::new(TTFT_BUCKETS),
        }
    }
}

/// What one pass adds to [`Stats`], applied under one lock when the pass ends.
#[derive(Default)]
pub(super) struct PassStats {
    pub(super) generation_tokens: u64,
    pub(super) verify_steps: u64,
    pub(super) ttft: Vec<f64>,
    /// (gap since the previous chunk, tokens in the chunk)
    pub(super) itl: Vec<(f64, u64)>,
    pub(super) e2e: Vec<f64>,
}

impl PassStats {
    /// Adds the pass to the live counters and empties it (its lists keep their capacity for the
    /// next pass).
    pub(super) fn apply(&mut self, shared: &Shared) {
        if let Ok(mut s) = shared.stats.lock() {
            s.generation_tokens_total += self.generation_tokens;
            s.verify_steps_total += self.verify_steps;
            s.verify_tokens_total += self.generation_tokens;
            for &t in &self.ttft {
                s.ttft.observe(t);
            }
            for &(gap, tokens) in &self.itl {
                s.itl.observe_tokens(gap, tokens);
            }
            for &t in &self.e2e {
                s.e2e.observe(t);
            }
        }
        self.generation_tokens = 0;
        self.verify_steps = 0;
        self.ttft.clear();
        self.itl.clear();
        self.e2e.clear();
    }
}
