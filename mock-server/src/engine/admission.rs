//! Admission into the prefill set under the KV budget, retraction of running requests under KV
//! pressure, and removal of requests whose client went away.

use super::Engine;
use crate::radix::RadixTree;
use crate::truth::FinishTruth;
use tokio::time::Instant;

impl Engine {
    /// Admits waiting requests into the prefill set; true when a prefill pass should run.
    ///
    /// A request is admitted only when the KV pool (after evicting cache) holds the rest of its
    /// prompt together with the rest of every request already admitted, and one more decode step
    /// for the running batch and for it, as SGLang's prefill adder budgets a batch as a whole.
    ///
    /// A pass starting at `start` admits only requests received before it: a request received at
    /// or after `start` reached the scheduler once the pass had begun and waits for the next one.
    /// On the paused clock no time passes between a send and its arrival, so a request sent at the
    /// instant a pass begins (a closed loop's reply to the pass before, or two sends at once) ties
    /// with it; it counts as after it, as the real servers see them (the sends are tens of
    /// microseconds apart). The one exception keeps an engine from idling while
    /// a request waits: with nothing admitted or running, the oldest waiting request is admitted.
    pub(super) fn plan_prefill(&mut self, start: Instant) -> bool {
        let per_step = self.tokens_per_step();
        let mut committed: usize = self
            .prefilling
            .iter()
            .map(|r| r.target_len() - r.kv_len)
            .sum::<usize>()
            + per_step * (self.running.len() + self.prefilling.len());
        // Admitting a request changes no KV use (it holds only cached, locked tokens until its
        // first pass), so the use is read once and again only after eviction: thousands of
        // requests can arrive at once.
        let mut used = self.kv_used();
        let pool = self.shared.budget.kv_pool_tokens;
        while self.running.len() + self.prefilling.len() < self.cfg.max_running_requests {
            let Some(head) = self.waiting.front() else {
                break;
            };
            let nothing_else = self.running.is_empty() && self.prefilling.is_empty();
            if head.request.received >= start && !nothing_else {
                break;
            }
            let Some(mut r) = self.waiting.pop_front() else {
                break;
            };
            let (matched, node, target_len) = {
                let target = r.target();
                let (m, n) = if self.cfg.disable_radix_cache {
                    (0, RadixTree::ROOT)
                } else {
                    self.tree
                        .match_prefix(&target[..target.len().saturating_sub(1)])
                };
                (m, n, target.len())
            };
            self.tree.lock(node);
            r.node = node;
            r.locked_len = matched;
            r.kv_len = matched;
            let need = target_len - matched + per_step;
            if used + committed + need > pool {
                if !self.reserve(committed + need) {
                    self.release(&mut r);
                    self.waiting.push_front(r);
                    break;
                }
                used = self.kv_used();
            }
            committed += need;
            if r.output.is_empty() {
                r.cached = matched;
                let wait = r.ns(self.now());
                r.times.forward_entry_ns.get_or_insert(wait);
                if let Ok(mut s) = self.shared.stats.lock() {
                    s.queue.observe(wait as f64 / 1e9);
                }
                self.shared.truth.update(&r.request.rid, |t| {
                    t.cached_tokens = matched;
                    t.queue_wait_ns = wait;
                });
            }
            self.prefilling.push_back(r);
        }
        !self.prefilling.is_empty()
    }

    pub(super) fn reap_closed(&mut self) {
        let mut gone = Vec::new();
        for q in [&mut self.waiting, &mut self.prefilling] {
            let mut i = 0;
            while i < q.len() {
                if q[i].tx.is_closed() {
                    if let Some(r) = q.remove(i) {
                        gone.push(r);
                    }
                } else {
                    i += 1;
                }
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].tx.is_closed() {
                gone.push(self.running.swap_remove(i));
            } else {
                i += 1;
            }
        }
        for mut r in gone {
            self.finish_truth(&r, FinishTruth::Aborted);
            self.release(&mut r);
        }
    }

    /// Retraction under KV pressure: while the KV pool cannot hold one more decode step for the
    /// running batch, the newest request goes back to the head of the queue (one always stays).
    pub(super) fn retract_for_decode(&mut self) {
        let per = self.tokens_per_step();
        let mut retracted = 0;
        while !self.reserve(per * self.running.len()) && self.running.len() > 1 {
            if let Some(mut r) = self.running.pop() {
                self.release(&mut r);
                r.times.retractions += 1;
                retracted += 1;
                self.waiting.push_front(r);
                if let Ok(mut s) = self.shared.stats.lock() {
                    s.retracted_total += 1;
                }
            }
        }
        if let Ok(mut s) = self.shared.stats.lock() {
            s.retracted_last = retracted;
        }
    }
}
