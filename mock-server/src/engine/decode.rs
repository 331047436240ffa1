//! Decode passes and speculative verify steps: the batch's cost, the tokens each request draws
//! (accepted drafts, EOS, stop tokens), and putting finished requests away.

use super::events::{Finish, SpeculativeStats, StreamEvent};
use super::output::{Drawn, OutQueue, Outgoing};
use super::stats::PassStats;
use super::{Engine, RequestState};
use crate::clock::Clock;
use rand::Rng;
use tokio::time::Instant;

impl Engine {
    pub(super) async fn decode_step(&mut self, start: Instant) -> Instant {
        let retracted = self.retract_for_decode();
        self.update_new_token_ratio(retracted, 1);
        let secs = self.cfg.decode_base_s + self.batch_cost_s();
        let deadline = start + self.scaled(secs);
        // The batch is fixed when the pass starts, so its tokens can be drawn before it ends. They
        // are drawn once the previous pass's output has left (or at the end, if that is later),
        // outside the window in which the output stage sends events. Counters, the events, the
        // cache and the running set change only at the pass's end, as they would on the server.
        // On the paused clock drawing takes no time: they are drawn at once, so that no wait of
        // the engine's stands beside the output stage's (which would then end late).
        if self.clock == Clock::Precise && self.vnow.is_none() {
            let draw_at = self
                .output_free
                .map_or(start, |f| f.max(start))
                .min(deadline);
            self.wait_until(draw_at).await;
        }
        let mut stats = std::mem::take(&mut self.spare_stats);
        let mut drawn = std::mem::take(&mut self.spare_drawn);
        drawn.reserve(self.running.len());
        let mut events = std::mem::take(&mut self.spare_events);
        events.reserve(self.running.len());
        let step_tokens = self
            .draw_running(deadline, &mut stats, &mut events, &mut drawn)
            .await;
        self.wait_until(deadline).await;
        let since = self.last_wake.replace(deadline).unwrap_or(start);
        self.end_pass(stats, events, drawn, deadline).await;
        self.gen_throughput(step_tokens, since, deadline);
        deadline
    }

    /// Like SGLang, a pass's decoded tokens over the clock time they took (here: since the
    /// previous pass ended).
    pub(super) fn gen_throughput(&self, tokens: usize, since: Instant, end: Instant) {
        let dt = end.saturating_duration_since(since).as_secs_f64();
        if let Ok(mut s) = self.shared.stats.lock() {
            s.last_gen_throughput = if dt > 0.0 { tokens as f64 / dt } else { 0.0 };
        }
    }

    /// The running batch's model cost in a pass beside `decode_base_s`: its summed context and
    /// its size.
    pub(super) fn batch_cost_s(&self) -> f64 {
        let c = &self.cfg;
        let ctx: usize = self.running.iter().map(|r| r.kv_len).sum();
        c.decode_per_context_token_s * ctx as f64 + c.decode_batch_cost_s(self.running.len())
    }

    /// Draws one step's tokens for every running request (the pass ends at `deadline`), taking
    /// them out of the running set into `drawn` and their events into `events`; returns the
    /// tokens drawn.
    pub(super) async fn draw_running(
        &mut self,
        deadline: Instant,
        stats: &mut PassStats,
        events: &mut Vec<Outgoing>,
        drawn: &mut Vec<Drawn>,
    ) -> usize {
        // The emptied set keeps its capacity for the requests `end_pass` puts back.
        let mut running = std::mem::take(&mut self.running);
        let mut step_tokens = 0usize;
        for (i, mut r) in running.drain(..).enumerate() {
            // Let the output stage and the connections run while a large batch is drawn.
            if i % 32 == 31 {
                self.let_others_run().await;
            }
            let before = r.output.len();
            let finished = self.step_tokens(&mut r, deadline, stats, events);
            r.kv_len += r.output.len() - before;
            step_tokens += r.output.len() - before;
            drawn.push(if finished {
                Drawn::Finished(r)
            } else {
                Drawn::Running(r)
            });
        }
        self.running = running;
        step_tokens
    }

    /// Tokens one verify step may emit: with speculation, the accepted prefix of the draft (each
    /// position accepted with its rate given that those before it were) plus the verified token.
    /// `verify_ct` is the request's verify steps so far (its first token's included): its
    /// `warmup` steps after the first token accept nothing, and with `spec_first_token_alone`
    /// the first token's step too.
    fn verify_step_len(&mut self, verify_ct: usize, warmup: usize) -> usize {
        let warming = (1..=warmup).contains(&verify_ct);
        let first_alone = verify_ct == 0 && self.cfg.spec_first_token_alone;
        if !self.cfg.speculative() || warming || first_alone {
            return 1;
        }
        let mut accepted = 0;
        for k in 0..self.cfg.speculative_num_draft_tokens {
            let p = self
                .cfg
                .spec_accept_rates
                .get(k)
                .or(self.cfg.spec_accept_rates.last())
                .copied()
                .unwrap_or(0.0);
            if self.rng.random::<f64>() < p {
                accepted += 1;
            } else {
                break;
            }
        }
        accepted + 1
    }

    /// A request's warm-up steps, drawn from `spec_warmup_shares`.
    fn draw_warmup(&mut self) -> usize {
        let shares = &self.cfg.spec_warmup_shares;
        let mut u = self.rng.random::<f64>() * shares.iter().sum::<f64>();
        for (i, w) in shares.iter().enumerate() {
            if u < *w {
                return i;
            }
            u -= w;
        }
        // Rounding left `u` past the last share: the last step count with a share.
        shares.iter().rposition(|w| *w > 0.0).unwrap_or(0)
    }

    /// Draws one verify step's tokens for `r`: whether it finished; the event to send, when one
    /// is due (always when it finished), goes onto `events` (built in place: it is large). The
    /// pass ended at `pass_end`. Output processing is one queue in pass order that takes
    /// `output_per_request_s` per event (SGLang's detokenizer and tokenizer manager): an event
    /// leaves when the pass has ended and the events before it have left.
    pub(super) fn step_tokens(
        &mut self,
        r: &mut RequestState,
        pass_end: Instant,
        pass: &mut PassStats,
        events: &mut Vec<Outgoing>,
    ) -> bool {
        if r.verify_ct == 0 && !self.cfg.spec_warmup_shares.is_empty() && self.cfg.speculative() {
            r.warmup_steps = self.draw_warmup();
        }
        let n = self.verify_step_len(r.verify_ct, r.warmup_steps);
        if r.output.capacity() == 0 {
            // Sized at the first step, bounded for a large `max_new_tokens`.
            r.output.reserve_exact(r.request.max_new_tokens.min(4096));
        }
        // `max_new_tokens = 0`: the request ends right after its prefill, with no token.
        let mut finish =
            (r.output.len() >= r.request.max_new_tokens).then_some(Finish::Length(r.output.len()));
        let mut emitted = 0;
        for _ in 0..n {
            if r.output.len() >= r.request.max_new_tokens {
                break;
            }
            let eos = !r.request.ignore_eos
                && r.output.len() >= r.request.min_new_tokens
                && self.cfg.eos_probability > 0.0
                && self.rng.random::<f64>() < self.cfg.eos_probability;
            let mut tok = if eos {
                self.cfg.eos_token_id
            } else {
                let mut t = self.rng.random_range(0..self.cfg.vocab_size);
                if t == self.cfg.eos_token_id {
                    t = (t + 1) % self.cfg.vocab_size;
                }
                t
            };
            if r.request.ignore_eos && tok == self.cfg.eos_token_id {
                tok = (tok + 1) % self.cfg.vocab_size;
            }
            r.output.push(tok);
            r.pending.push(tok);
            emitted += 1;
            // The length first, as SGLang's `RequestState.check_finished` does: a stop token that is also
            // the last token allowed ends the request by length.
            if r.output.len() >= r.request.max_new_tokens {
                finish = Some(Finish::Length(r.output.len()));
                break;
            }
            let stop_id = tok == self.cfg.eos_token_id
                || (r.output.len() > r.request.min_new_tokens
                    && r.request.stop_token_ids.contains(&tok));
            if stop_id && !r.request.ignore_eos {
                finish = Some(Finish::Stop(tok));
                break;
            }
        }
        if emitted > 0 {
            r.verify_ct += 1;
            if r.hist.len() < emitted {
                r.hist.resize(emitted, 0);
            }
            r.hist[emitted - 1] += 1;
        }
        if emitted > 0 {
            pass.generation_tokens += emitted as u64;
            pass.verify_steps += 1;
        }
        let due = finish.is_some()
            || r.pending.len() >= self.cfg.stream_interval
            || r.last_chunk_at.is_none();
        if due && (!r.pending.is_empty() || finish.is_some()) {
            let new_ids = std::mem::take(&mut r.pending);
            let speculative = (finish.is_some() && self.cfg.speculative()).then(|| {
                let (len, rate) = if r.verify_ct == 0 {
                    (0.0, 0.0)
                } else {
                    let len = r.output.len() as f64 / r.verify_ct as f64;
                    let draft = self.cfg.speculative_num_draft_tokens.max(1) as f64;
                    (len, (len - 1.0) / draft)
                };
                Box::new(SpeculativeStats {
                    verify_ct: r.verify_ct,
                    accept_length: len,
                    accept_rate: rate,
                    histogram: r.hist.clone(),
                })
            });
            let tokens = new_ids.len();
            // Held for the next pass, the event is timed when it is released (`time_events`);
            // until then it carries the instant its token was drawn.
            let model_at = if self.cfg.results_after_next_pass {
                pass_end + self.stream_latency
            } else {
                self.output_at(pass_end)
            };
            let since_received = model_at.saturating_duration_since(r.request.received);
            let at = since_received.as_nanos() as u64;
            let chunk = r.chunks;
            r.chunks += 1;
            // The engine path's driver reads the event itself: no stream, no ground-truth chunk.
            let stage = matches!(self.out, OutQueue::Stage(_));
            events.push(Outgoing {
                tx: stage.then(|| r.tx.clone()),
                model_ns: at,
                tokens,
                completion: r.output.len(),
                verify_ct: r.verify_ct,
                hist: if stage { r.hist.clone() } else { Vec::new() },
                event: StreamEvent::Tokens {
                    chunk,
                    at_ns: at,
                    new_ids,
                    prompt_tokens: r.request.input_ids.len(),
                    cached_tokens: r.cached,
                    completion_tokens: r.output.len(),
                    finish: finish.clone(),
                    speculative,
                    times: r.times,
                },
                at: model_at,
                rid: (stage || finish.is_some()).then(|| r.rid.clone()),
                key: r.key,
                received: r.request.received,
            });
            let t = since_received.as_secs_f64();
            match r.last_chunk_at {
                None => pass.ttft.push(t),
                Some(prev) => pass.itl.push((
                    model_at.saturating_duration_since(prev).as_secs_f64(),
                    tokens as u64,
                )),
            }
            if finish.is_some() {
                pass.e2e.push(t);
            }
            r.last_chunk_at = Some(model_at);
        }
        finish.is_some()
    }

    /// Puts a finished request away: counters, cache, KV. Its finish goes into the ground truth
    /// with its final chunk, when the output stage sends it (`emit`).
    pub(super) fn complete(&mut self, mut r: Box<RequestState>) {
        if let Ok(mut s) = self.shared.stats.lock() {
            s.requests_total += 1;
            s.prompt_tokens_total += r.request.input_ids.len() as u64;
            s.cached_tokens_total += r.cached as u64;
        }
        if !self.cfg.disable_radix_cache {
            // Prompt and output but the last token, inserted below the request's locked node
            // (which holds its first `locked_len` tokens): only the rest, as a cache key.
            let len = r.target_len().saturating_sub(1);
            let from = if r.locked_len <= len { r.locked_len } else { 0 };
            let rest = r.target_key(from..len);
            debug_assert!(from == 0 || self.tree.depth(r.node) == from);
            if from == 0 {
                self.tree.insert(rest);
            } else {
                self.tree.insert_below(r.node, rest);
            }
        }
        self.release(&mut r);
    }
}
