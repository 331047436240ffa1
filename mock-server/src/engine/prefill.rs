//! Prefill passes: chunked prefill under `chunked_prefill_size`, the activation peak of each
//! pass, and the CUDA out-of-memory death when the peak exceeds the free headroom.

use super::output::Drawn;
use super::{Engine, RequestState, StreamEvent};
use crate::truth::{FinishTruth, PrefillPass};
use tokio::time::Instant;

/// One request's share of a prefill pass.
#[derive(Debug, Clone, Copy)]
pub(super) struct PrefillChunk {
    /// Position of the request in the prefill set.
    index: usize,
    /// Tokens it extends in the pass.
    tokens: usize,
    /// Its tokens already in KV before the pass.
    context_before: usize,
}

impl Engine {
    pub(super) fn chunk_budget(&self) -> usize {
        if self.cfg.chunked_prefill_size < 0 {
            usize::MAX
        } else {
            self.cfg.chunked_prefill_size as usize
        }
    }

    /// Whether a pass can prefill: always, except in a mixed pass whose running batch's decode
    /// tokens take the whole token budget (vLLM's scheduler then decodes only).
    pub(super) fn prefill_has_room(&self) -> bool {
        !self.cfg.mixed_batches || self.chunk_budget() > self.running.len() * self.tokens_per_step()
    }

    /// A prefill pass, or with `mixed_batches` and a running batch a mixed pass: the batch's
    /// decode step in the same forward, its tokens first in the budget, its cost beside the
    /// prefill's (no `decode_base_s`: one forward), its events before those of the first tokens.
    pub(super) async fn prefill_pass(&mut self, start: Instant) -> Option<Instant> {
        let mixed = self.cfg.mixed_batches && !self.running.is_empty();
        if mixed {
            self.retract_for_decode();
        }
        let mut budget = self.chunk_budget();
        if mixed {
            budget = budget.saturating_sub(self.running.len() * self.tokens_per_step());
        }
        let mut items: Vec<PrefillChunk> = Vec::new();
        for i in 0..self.prefilling.len() {
            if budget == 0 {
                break;
            }
            let r = &self.prefilling[i];
            let n = (r.target_len() - r.kv_len).min(budget);
            if n == 0 {
                continue;
            }
            let ctx = r.kv_len;
            // Every chunk makes room for itself. The head-of-line request goes on even when the
            // cache cannot be evicted far enough (its own locked prefix), so it can never stall.
            if !self.reserve(n) && i > 0 {
                break;
            }
            budget -= n;
            items.push(PrefillChunk {
                index: i,
                tokens: n,
                context_before: ctx,
            });
        }
        let extend: usize = items.iter().map(|x| x.tokens).sum();
        let ctx_end = items
            .iter()
            .map(|x| x.context_before + x.tokens)
            .max()
            .unwrap_or(0);
        if let Some(reason) = self.out_of_vocabulary(&items) {
            tracing::error!(target: "mock_server::engine", "{reason}");
            eprintln!("{reason}");
            self.die(reason, FinishTruth::Crashed);
            return None;
        }
        let peak = self.shared.budget.activation_peak(extend, ctx_end);
        let batch_s = if mixed { self.batch_cost_s() } else { 0.0 };
        let c = &self.cfg;
        let secs = batch_s
            + c.prefill_base_s
            + items
                .iter()
                .map(|x| {
                    let (n, ctx) = (x.tokens, x.context_before);
                    n as f64
                        * (c.prefill_per_token_s
                            + c.prefill_per_token_pair_s * (ctx as f64 + n as f64 / 2.0))
                })
                .sum::<f64>();
        if self.shared.budget.is_oom(peak) {
            self.crash(peak, start, &items);
            return None;
        }
        let deadline = start + self.scaled(secs);
        self.wait_until(deadline).await;
        let since = self.last_wake.replace(deadline).unwrap_or(start);
        self.shared.truth.count_pass();
        let mut done = Vec::new();
        for chunk in items {
            let PrefillChunk {
                index: i,
                tokens: n,
                ..
            } = chunk;
            self.record_pass(&chunk, start, deadline, peak);
            let radix = !self.cfg.disable_radix_cache;
            let r = &mut self.prefilling[i];
            r.kv_len += n;
            if radix {
                // Its locked node holds the sequence's first `locked_len` tokens.
                debug_assert_eq!(self.tree.depth(r.node), r.locked_len);
                let key = r.target_key(r.locked_len..r.kv_len);
                let (_, node) = self.tree.insert_below(r.node, key);
                let r = &mut self.prefilling[i];
                self.tree.unlock(r.node);
                self.tree.lock(node);
                r.node = node;
                r.locked_len = r.kv_len;
            }
            if self.prefilling[i].kv_len >= self.prefilling[i].target_len() {
                done.push(i);
            }
        }
        // Finished prefills in queue order, so the earliest request's first chunk leaves first.
        let mut finished = Vec::new();
        for i in done.into_iter().rev() {
            if let Some(r) = self.prefilling.remove(i) {
                finished.push(r);
            }
        }
        let mut drawn = std::mem::take(&mut self.spare_drawn);
        let mut stats = std::mem::take(&mut self.spare_stats);
        let mut events = std::mem::take(&mut self.spare_events);
        let step_tokens = if mixed {
            self.draw_running(deadline, &mut stats, &mut events, &mut drawn)
                .await
        } else {
            0
        };
        for mut r in finished.into_iter().rev() {
            let done_ns = r.ns(deadline);
            r.times.prefill_finished_ns.get_or_insert(done_ns);
            if !r.emitted_first {
                r.emitted_first = true;
                if self.step_tokens(&mut r, deadline, &mut stats, &mut events) {
                    drawn.push(Drawn::Finished(r));
                    continue;
                }
            }
            drawn.push(Drawn::Running(r));
        }
        self.end_pass(stats, events, drawn, deadline).await;
        if mixed {
            self.gen_throughput(step_tokens, since, deadline);
        }
        Some(deadline)
    }

    /// An input id at or above the vocabulary size, in a prompt this pass would prefill: SGLang's
    /// embedding lookup raises `IndexError` and its scheduler, then the whole server, exits.
    fn out_of_vocabulary(&self, items: &[PrefillChunk]) -> Option<String> {
        let vocab = self.cfg.vocab_size;
        items.iter().find_map(|x| {
            let r = &self.prefilling[x.index];
            // The tokens this pass embeds: the prompt's part of the chunk (output ids are the
            // model's own, inside the vocabulary).
            let ids = &r.request.input_ids;
            let from = x.context_before.min(ids.len());
            let to = (x.context_before + x.tokens).min(ids.len());
            let ids = &ids[from..to];
            // The largest id first (a loop without an early exit, which vectorises); the
            // offending id only when there is one.
            if ids.iter().fold(0, |m, &id| m.max(id)) < vocab {
                return None;
            }
            let id = ids.iter().find(|&&id| id >= vocab)?;
            let what = if *id == u32::MAX {
                "a negative input id".to_string()
            } else {
                format!("input id {id} >= vocabulary size {vocab}")
            };
            Some(format!(
                "IndexError: index out of range in self (request {}: {what}); the scheduler died",
                r.request.rid
            ))
        })
    }

    pub(super) fn crash(&mut self, peak: u64, start: Instant, items: &[PrefillChunk]) {
        let b = &self.shared.budget;
        let reason = format!(
            "CUDA out of memory. Tried to allocate {:.2} MiB. GPU 0 has a total capacity of {:.2} GiB of which {:.2} MiB is free. (prefill of {} tokens)",
            peak as f64 / 1048576.0,
            b.total_bytes as f64 / 1073741824.0,
            b.free_headroom_bytes as f64 / 1048576.0,
            items.iter().map(|x| x.tokens).sum::<usize>()
        );
        // The target the engine logged under before it became a folder of modules.
        tracing::error!(target: "mock_server::engine", "{reason}");
        eprintln!("torch.OutOfMemoryError: {reason}");
        for chunk in items {
            // The pass never ran: it ends where it started.
            self.record_pass(chunk, start, start, peak);
        }
        self.die(reason, FinishTruth::OomCrash);
    }

    /// The server dies: every request's stream is cut and the server stops (or restarts).
    pub(super) fn die(&mut self, reason: String, finish: FinishTruth) {
        let all: Vec<Box<RequestState>> = self
            .waiting
            .drain(..)
            .chain(self.prefilling.drain(..))
            .chain(self.running.drain(..))
            .collect();
        // Dead first, so that the output stage sends no event after a stream's crash.
        self.shared
            .dead
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for r in all {
            self.finish_truth(&r, finish.clone());
            let _ = r.tx.send(StreamEvent::Crash(reason.clone()));
        }
        self.shared.crashed.send_replace(Some(reason));
    }

    /// Records `chunk`'s share of a pass from `start` to `end` (activation peak `peak`) in its
    /// request's ground truth.
    fn record_pass(&self, chunk: &PrefillChunk, start: Instant, end: Instant, peak: u64) {
        let r = &self.prefilling[chunk.index];
        let pass = PrefillPass {
            tokens: chunk.tokens,
            context_before: chunk.context_before,
            start_ns: r.ns(start),
            end_ns: r.ns(end),
            activation_peak_bytes: peak,
        };
        self.shared.truth.update(&r.request.rid, |t| {
            t.prefill_passes.push(pass);
            t.memory_peak_bytes = t.memory_peak_bytes.max(peak);
        });
    }
}
