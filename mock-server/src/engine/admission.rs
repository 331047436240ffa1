//! Admission into the prefill set under the KV budget, retraction of running requests under KV
//! pressure, and removal of requests whose client went away.

use super::{Engine, RequestState};
use crate::radix::RadixTree;
use crate::truth::FinishTruth;
use tokio::time::Instant;

/// SGLang's bound on the output tokens the admission budget reserves for one request.
pub(super) const OUTPUT_RESERVATION_CLIP: usize = 4096;
/// SGLang's new-token ratio: its value when the server starts or goes idle, its floor, and the
/// decode steps it takes to fall from one to the other.
pub(super) const NEW_TOKEN_RATIO_INIT: f64 = 0.7;
const NEW_TOKEN_RATIO_MIN: f64 = 0.7 * 0.14;
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;
/// After a retraction the ratio is the batch's decoded share of its outputs, counting this
/// many more steps for each request.
const RETRACT_DECODE_STEPS: usize = 20;

/// The rest of a request's output, as the admission budget counts it.
fn output_left(r: &RequestState) -> usize {
    r.request
        .max_new_tokens
        .saturating_sub(r.output.len())
        .min(OUTPUT_RESERVATION_CLIP)
}

impl Engine {
    /// The output tokens the admission budget reserves for the requests already admitted
    /// (`reserve_output_tokens`; 0 without it): each prefilling request's rest in full, each
    /// running request's times the new-token ratio unless it ignores EOS.
    pub(super) fn reserved_output(&self) -> usize {
        if !self.cfg.reserve_output_tokens {
            return 0;
        }
        let prefilling: usize = self.prefilling.iter().map(|r| output_left(r)).sum();
        let running: f64 = self
            .running
            .iter()
            .map(|r| {
                let ratio = if r.request.ignore_eos {
                    1.0
                } else {
                    self.new_token_ratio
                };
                output_left(r) as f64 * ratio
            })
            .sum();
        prefilling + running.ceil() as usize
    }

    /// The output tokens the admission budget reserves for `r` when it is admitted.
    pub(super) fn own_reservation(&self, r: &RequestState) -> usize {
        if self.cfg.reserve_output_tokens {
            output_left(r)
        } else {
            0
        }
    }

    /// The new-token ratio after a decode step: after `retracted` requests went back to the
    /// queue, the running batch's decoded share of its outputs; else one step lower. Only
    /// `reserve_output_tokens` reads it.
    pub(super) fn update_new_token_ratio(&mut self, retracted: usize, steps: usize) {
        if !self.cfg.reserve_output_tokens {
            return;
        }
        if retracted > 0 {
            let decoded: usize = self.running.iter().map(|r| r.output.len()).sum();
            let max_new: usize = self.running.iter().map(|r| r.request.max_new_tokens).sum();
            let n = self.running.len();
            self.new_token_ratio =
                ((decoded + RETRACT_DECODE_STEPS * n) as f64 / (max_new + 1) as f64).min(1.0);
        } else {
            let decay = (NEW_TOKEN_RATIO_INIT - NEW_TOKEN_RATIO_MIN) / NEW_TOKEN_RATIO_DECAY_STEPS;
            self.new_token_ratio =
                (self.new_token_ratio - decay * steps as f64).max(NEW_TOKEN_RATIO_MIN);
        }
    }

    /// Admits waiting requests into the prefill set; true when a prefill pass should run.
    ///
    /// A request is admitted only when the KV pool (after evicting cache) holds the rest of its
    /// prompt together with the rest of every request already admitted, and one more decode step
    /// for the running batch and for it, as SGLang's prefill adder budgets a batch as a whole;
    /// with `reserve_output_tokens`, also the outputs [`Engine::reserved_output`] counts and its
    /// own.
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
            + per_step * (self.running.len() + self.prefilling.len())
            + self.reserved_output();
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
            let own = self.own_reservation(&r);
            let need = target_len - matched + per_step + own;
            // Alone, a request is admitted as without the reservation (a prompt the pool holds is
            // never refused for its output); its output is reserved all the same.
            let checked = if nothing_else { need - own } else { need };
            if used + committed + checked > pool {
                if !self.reserve(committed + checked) {
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
    pub(super) fn retract_for_decode(&mut self) -> usize {
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
        retracted
    }
}
