//! The engine path's jump over decode steps that change nothing but the clock and the counts:
//! a closed loop of long outputs spends almost all its steps there, and the fit by simulation
//! (`calibrate --table`) runs thousands of such loops.
//!
//! Rule: the jump ends where a step would do anything else (send an event, finish a request,
//! need cache evicted or a request retracted, meet a request received meanwhile), so every
//! instant is the one step-by-step decoding gives, to the nanosecond: each step's duration is
//! computed and rounded as `decode_step` does. Only the jumped steps' token ids are not drawn
//! (a fixed id stands in; no one reads them in a run with `ignore_eos`).

use super::stats::PassStats;
use super::Engine;
use tokio::time::Instant;

impl Engine {
    /// Whether the next steps can be jumped: plain decoding (no speculation, no held results)
    /// of a running batch, every request ignoring EOS and already streaming, with no request
    /// waiting that a step's admission could take ([`Engine::waiting_stays`]).
    fn jumpable(&self) -> bool {
        !self.cfg.speculative()
            && self.waiting_stays()
            && self.prefilling.is_empty()
            && !self.running.is_empty()
            && self.lagged.is_empty()
            && self
                .running
                .iter()
                .all(|r| r.request.ignore_eos && r.last_chunk_at.is_some())
    }

    /// Whether no request leaves the waiting queue in the coming steps, and trying to admit it
    /// changes nothing: none waits, or the running batch is at `max_running_requests` (no
    /// admission is tried), or, with the radix cache off (nothing to evict, no prefix to match),
    /// the KV pool cannot hold the head of the queue beside the batch's next step now, and so
    /// neither after any later step (each adds KV). This is a saturated closed loop, whose
    /// queue is never empty.
    fn waiting_stays(&self) -> bool {
        let Some(head) = self.waiting.front() else {
            return true;
        };
        if self.running.len() + self.prefilling.len() >= self.cfg.max_running_requests {
            return true;
        }
        // `plan_prefill`'s sum for the head alone: the KV in use, one step for the batch, the
        // head's whole sequence and its first step (one token each: no speculation here).
        // With `reserve_output_tokens`, the running requests' reservation too: `jumpable` lets
        // only requests that ignore EOS run, whose reservation shrinks as fast as their KV grows.
        let per_step = self.tokens_per_step();
        self.cfg.disable_radix_cache
            && self.tree.size() == 0
            && self.kv_used()
                + per_step * self.running.len()
                + self.reserved_output()
                + head.target_len()
                + per_step
                + self.own_reservation(head)
                > self.shared.budget.kv_pool_tokens
    }

    /// Runs as one the decode steps from `start` that send nothing, each starting no later than
    /// `limit` (a request received after it would change the next pass). Returns the end of the
    /// last step jumped, or `None` when not one can be.
    pub(super) fn jump_decode(
        &mut self,
        start: Instant,
        limit: Option<Instant>,
    ) -> Option<Instant> {
        if !self.jumpable() {
            return None;
        }
        // Steps before the first that sends an event: a request sends when it finishes or when
        // its pending tokens reach `stream_interval`.
        let quiet = self
            .running
            .iter()
            .map(|r| {
                let left = r.request.max_new_tokens.saturating_sub(r.output.len());
                let flush = self.cfg.stream_interval.saturating_sub(r.pending.len());
                left.min(flush)
            })
            .min()
            .unwrap_or(0)
            .saturating_sub(1);
        let b = self.running.len();
        let ctx0: usize = self.running.iter().map(|r| r.kv_len).sum();
        let used0 = self.kv_used();
        let pool = self.shared.budget.kv_pool_tokens;
        let c = &self.cfg;
        let batch = c.decode_batch_cost_s(b);
        let (mut t, mut step_start, mut steps) = (start, start, 0usize);
        while steps < quiet {
            if limit.is_some_and(|l| t > l) || used0 + (steps + 1) * b > pool {
                break;
            }
            // The same expression, in the same order, as `decode_step` and `batch_cost_s`.
            let ctx = ctx0 + steps * b;
            let secs = c.decode_base_s + (c.decode_per_context_token_s * ctx as f64 + batch);
            step_start = t;
            t += self.scaled(secs);
            steps += 1;
        }
        if steps == 0 {
            return None;
        }
        let token = (self.cfg.eos_token_id + 1) % self.cfg.vocab_size.max(1);
        for r in &mut self.running {
            r.output.resize(r.output.len() + steps, token);
            r.pending.resize(r.pending.len() + steps, token);
            r.kv_len += steps;
            r.verify_ct += steps;
            if r.hist.is_empty() {
                r.hist.push(0);
            }
            r.hist[0] += steps as u64;
        }
        let tokens = (steps * b) as u64;
        PassStats {
            generation_tokens: tokens,
            verify_steps: tokens,
            ..PassStats::default()
        }
        .apply(&self.shared);
        if let Ok(mut s) = self.shared.stats.lock() {
            s.retracted_last = 0;
        }
        self.update_new_token_ratio(0, steps);
        if let Some(v) = &mut self.vnow {
            *v = (*v).max(t);
        }
        self.last_wake = Some(t);
        self.gen_throughput(b, step_start, t);
        Some(t)
    }
}
