//! A lean closed loop on the engine path for `calibrate --table` and `predict`: `concurrency`
//! workers send fixed-length requests, and only the mean TTFT and TPOT come back, read from the
//! [`SimEvent`]s directly (no traces, records or files). The loop is the one `load --simulate`
//! runs: a warm-up of `concurrency` requests sent at once and waited out, then each worker sends
//! its next request at the instant its last stream ended, until the measured count is sent.
//!
//! TPOT is (e2e - TTFT) / (output tokens - 1) per request, as AIPerf and bench_serving define it.
//!
//! Where the scheduler mixes prefill into decode steps (vLLM's), each request's output length is
//! drawn within [`MIXED_OUTPUT_SPREAD`] of the row's, its mean ([`output_len`]): requests of one
//! length stay locked in waves (a wave's prompts are prefilled a pass apart, so they decode a
//! token apart and come back together), where the measured rows show them apart after the first
//! wave: at low concurrency a request's TTFT is a lone request's, and its TPOT holds each other
//! request's prefill once. With SGLang's scheduler (a prefill pass or a decode step) the waves fit
//! the rows better, and every length is the row's.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use mock_server::engine::StreamEvent;
use mock_server::radix::Tokens;
use mock_server::{Config, Refusal, SimEvent, SimRequest, Simulator};

/// One closed-loop point: every request `isl` tokens in and `osl` out, `concurrency` in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
}

/// The means over the measured requests of one closed loop.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClosedMeans {
    pub ttft_s: f64,
    /// `None` with one output token (no gap to time).
    pub tpot_s: Option<f64>,
    pub requests: u64,
    /// Model seconds from the first measured send to the last stream's end.
    pub span_s: f64,
}

/// Why a closed loop gave no means.
#[derive(Debug, thiserror::Error)]
pub enum ClosedError {
    #[error("the mock configuration is not valid: {0}")]
    Config(String),
    #[error("the server refused a request of {isl} + {osl} tokens: {why}")]
    Refused { isl: u32, osl: u32, why: String },
    #[error("the server died: {0}")]
    Died(String),
    #[error("a request failed: {0}")]
    Failed(String),
    #[error("concurrency and output tokens must be at least 1")]
    Empty,
}

pub use crate::measure::table::measured_requests;

/// The share by which output lengths spread around the row's with a mixed scheduler: a quarter,
/// so that a loop's requests are apart from its second wave on (the held-out rows of vLLM's
/// deployments fit best there: docs/twin.md, the loop on vLLM's scheduler).
pub const MIXED_OUTPUT_SPREAD: f64 = 0.25;

/// The spread of output lengths of a loop on `config`'s scheduler: [`MIXED_OUTPUT_SPREAD`] with
/// mixed passes, else none.
pub fn output_spread(config: &Config) -> f64 {
    if config.mixed_batches {
        MIXED_OUTPUT_SPREAD
    } else {
        0.0
    }
}

/// The output length of the loop's request `index`: `osl` with no spread, else uniform within
/// `spread` of it (rounded, at least 2), from the index alone.
pub fn output_len(osl: u32, spread: f64, index: u64) -> u32 {
    if spread == 0.0 || osl < 2 {
        return osl;
    }
    // splitmix64 of the index, its top 53 bits a uniform draw in [0, 1).
    let mut z = index.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let u = (z >> 11) as f64 / (1u64 << 53) as f64;
    let len = f64::from(osl) * (1.0 + spread * (2.0 * u - 1.0));
    (len.round() as u32).max(2)
}

/// The measured requests of a point while a fit searches. A loop of fixed lengths settles within
/// its first waves: two (at least 16 requests), so that the search's objective moves as the full
/// count's does at a fifth of the cost. A loop whose lengths spread comes apart over its waves:
/// the full count. The fit's result is run at the full count.
pub fn search_requests(config: &Config, concurrency: u32) -> u64 {
    if output_spread(config) > 0.0 {
        return measured_requests(concurrency);
    }
    let c = u64::from(concurrency.max(1));
    (2 * c).max(16).div_ceil(c) * c
}

/// What the loop knows of a request in flight.
struct Flight {
    /// Its output tokens.
    osl: u32,
    sent_ns: u64,
    first_ns: Option<u64>,
    warm: bool,
}

/// Runs the closed loop of `shape` on a server of `config`: `concurrency` warm-up requests, then
/// `measured` measured ones. The radix cache is off: the rows AIPerf and bench_serving measure
/// send random prompts that share no prefix, where the cache changes no instant (admission evicts
/// it as needed), so every request may send the same ids. With `output_per_request_s` 0 the
/// stream sends its first and last events only (`stream_interval`), which moves no instant.
pub fn run_closed(
    config: &Config,
    shape: Shape,
    measured: u64,
) -> Result<ClosedMeans, ClosedError> {
    closed_loop(config, shape, measured, true, output_spread(config))
}

/// The loop, with the engine's jump over quiet decode steps (`jump`) or step by step, and
/// output lengths spread by `spread`.
fn closed_loop(
    config: &Config,
    shape: Shape,
    measured: u64,
    jump: bool,
    spread: f64,
) -> Result<ClosedMeans, ClosedError> {
    if shape.concurrency == 0 || shape.osl == 0 {
        return Err(ClosedError::Empty);
    }
    let mut cfg = config.clone();
    cfg.disable_radix_cache = true;
    cfg.enable_metrics = false;
    if cfg.output_per_request_s == 0.0 {
        // No request's stream is longer: its first and last events only.
        cfg.stream_interval = (f64::from(shape.osl) * (1.0 + spread)).ceil() as usize + 1;
    }
    // A row the server refuses is refused before its prompt is built (a prompt of billions of
    // tokens would not fit in memory).
    mock_server::config::check_lengths(
        config.context_length,
        shape.isl as usize,
        shape.osl as usize,
    )
    .map_err(|why| ClosedError::Refused {
        isl: shape.isl,
        osl: shape.osl,
        why,
    })?;
    let sim = Simulator::new(cfg).map_err(|e| ClosedError::Config(e.to_string()))?;
    let vocab = config.vocab_size.max(2);
    let prompt: Tokens = std::sync::Arc::new((0..shape.isl).map(|i| 1 + i % (vocab - 1)).collect());
    let mut run = Loop {
        sim,
        shape,
        prompt,
        jump,
        spread,
        longest: u32::try_from(config.context_length.saturating_sub(shape.isl as usize))
            .unwrap_or(u32::MAX)
            .max(shape.osl),
        agenda: BinaryHeap::new(),
        seq: 0,
        flight: HashMap::new(),
        next: 0,
        to_send: 0,
        clock_ns: 0,
        sum_ttft_ns: 0,
        sum_tpot_s: 0.0,
        done: 0,
        first_sent_ns: None,
    };
    for _ in 0..shape.concurrency {
        run.send(0, true)?;
    }
    run.until_quiet()?;
    let base = run.clock_ns;
    run.to_send = measured;
    for _ in 0..shape.concurrency {
        run.next_measured(base)?;
    }
    run.until_quiet()?;
    let n = run.done.max(1);
    Ok(ClosedMeans {
        ttft_s: run.sum_ttft_ns as f64 / 1e9 / n as f64,
        tpot_s: (shape.osl > 1).then(|| run.sum_tpot_s / n as f64),
        requests: run.done,
        span_s: run
            .clock_ns
            .saturating_sub(run.first_sent_ns.unwrap_or(base)) as f64
            / 1e9,
    })
}

/// The loop's state: the engine, the client's pending stream events (by instant, then order of
/// arrival), the requests in flight and the sums of the measured ones.
struct Loop {
    sim: Simulator,
    shape: Shape,
    prompt: Tokens,
    jump: bool,
    spread: f64,
    /// The longest output a request asks for: a spread length stays within the context the
    /// server takes, and never below the row's (a row too long for it is refused, as sent).
    longest: u32,
    agenda: BinaryHeap<Reverse<(u64, u64, u64, bool)>>,
    seq: u64,
    flight: HashMap<u64, Flight>,
    next: u64,
    to_send: u64,
    clock_ns: u64,
    sum_ttft_ns: u64,
    sum_tpot_s: f64,
    done: u64,
    first_sent_ns: Option<u64>,
}

impl Loop {
    fn send(&mut self, at_ns: u64, warm: bool) -> Result<(), ClosedError> {
        let id = self.next;
        self.next += 1;
        let osl = output_len(self.shape.osl, self.spread, id).min(self.longest);
        let req = SimRequest {
            rid: id.to_string(),
            input_ids: std::sync::Arc::clone(&self.prompt),
            max_new_tokens: osl as usize,
            min_new_tokens: 0,
            ignore_eos: true,
            stop_token_ids: Vec::new(),
        };
        let key = self
            .sim
            .submit(at_ns, req)
            .map_err(|r| ClosedError::Refused {
                isl: self.shape.isl,
                osl: self.shape.osl,
                why: match r {
                    Refusal::Length(m) => m,
                    Refusal::Down => "the server is down".into(),
                    Refusal::Starting { .. } => "the server is starting".into(),
                    Refusal::DuplicateRid => "duplicate request id".into(),
                },
            })?;
        if !warm {
            self.first_sent_ns.get_or_insert(at_ns);
        }
        self.flight.insert(
            key,
            Flight {
                osl,
                sent_ns: at_ns,
                first_ns: None,
                warm,
            },
        );
        Ok(())
    }

    fn next_measured(&mut self, at_ns: u64) -> Result<(), ClosedError> {
        if self.to_send == 0 {
            return Ok(());
        }
        self.to_send -= 1;
        self.send(at_ns, false)
    }

    /// A stream event of request `id` at `at_ns` (`last`: its final one).
    fn event(&mut self, at_ns: u64, id: u64, last: bool) -> Result<(), ClosedError> {
        self.clock_ns = self.clock_ns.max(at_ns);
        let Some(f) = self.flight.get_mut(&id) else {
            return Ok(());
        };
        let first = *f.first_ns.get_or_insert(at_ns);
        if !last {
            return Ok(());
        }
        let Some(f) = self.flight.remove(&id) else {
            return Ok(());
        };
        if f.warm {
            return Ok(());
        }
        let ttft = first - f.sent_ns;
        self.sum_ttft_ns += ttft;
        if self.shape.osl > 1 {
            self.sum_tpot_s += (at_ns - first) as f64 / 1e9 / f64::from(f.osl.max(2) - 1);
        }
        self.done += 1;
        self.next_measured(at_ns)
    }

    /// Client events in order of their instants, and the engine's passes when due before the
    /// client's next event (a send at the instant a pass begins waits for the next pass).
    fn until_quiet(&mut self) -> Result<(), ClosedError> {
        loop {
            let engine = self.sim.next_step_ns();
            let client = self.agenda.peek().map(|Reverse((t, ..))| *t);
            let client_first = match (client, engine) {
                (Some(c), Some(e)) => c < e,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return Ok(()),
            };
            if client_first {
                if let Some(Reverse((at, _, id, last))) = self.agenda.pop() {
                    self.event(at, id, last)?;
                }
                continue;
            }
            if self.jump && self.sim.skip_decode(client) {
                continue;
            }
            for ev in self.sim.step() {
                match ev {
                    SimEvent::Stream { id, at_ns, event } => {
                        let last = match event {
                            StreamEvent::Tokens { finish, .. } => finish.is_some(),
                            StreamEvent::Error(m) | StreamEvent::Crash(m) => {
                                return Err(ClosedError::Failed(m))
                            }
                        };
                        self.seq += 1;
                        self.agenda.push(Reverse((at_ns, self.seq, id, last)));
                    }
                    SimEvent::Died { reason, .. } => return Err(ClosedError::Died(reason)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Config {
        let mut c = Config::default();
        c.speculative_algorithm = "none".into();
        c.output_per_request_s = 0.0;
        c.stream_latency_s = 0.003;
        c.prefill_base_s = 0.01;
        c.prefill_per_token_s = 1e-4;
        c.prefill_per_token_pair_s = 1e-8;
        c.decode_base_s = 0.002;
        c.decode_per_context_token_s = 1e-6;
        c.decode_per_request_s = 1e-4;
        c
    }

    /// The loop of `shape` with the engine's jump and step by step, `extra` requests past the
    /// search's count: every instant, so every mean, the same.
    fn assert_jump_equal(c: &Config, shape: Shape, extra: u64, what: &str) {
        let n = search_requests(c, shape.concurrency) + extra;
        let fast = closed_loop(c, shape, n, true, output_spread(c)).unwrap();
        let slow = closed_loop(c, shape, n, false, output_spread(c)).unwrap();
        assert_eq!(fast, slow, "{what} {shape:?}");
    }

    #[test]
    fn a_lone_request_is_its_prefill_and_its_steps() {
        let mut c = plain();
        c.prefill_per_token_pair_s = 0.0;
        let shape = Shape {
            isl: 100,
            osl: 5,
            concurrency: 1,
        };
        let m = run_closed(&c, shape, 10).unwrap();
        assert_eq!(m.requests, 10);
        // way + one pass of 100 tokens
        assert!(
            (m.ttft_s - (0.003 + 0.01 + 100.0 * 1e-4)).abs() < 1e-8,
            "{m:?}"
        );
        // four decode steps at contexts 100..=103 (the first token's KV is added by its step)
        let step = 0.002 + 1e-4 + 1e-6 * 101.5;
        assert!((m.tpot_s.unwrap() - step).abs() < 1e-8, "{m:?}");
    }

    #[test]
    fn jumping_over_quiet_steps_moves_no_instant() {
        for (mixed, exponent) in [(false, 1.0), (true, 1.0), (false, 0.6), (true, 0.6)] {
            let mut c = plain();
            c.mixed_batches = mixed;
            c.decode_batch_exponent = exponent;
            c.chunked_prefill_size = 700;
            for (isl, osl, conc) in [(300, 40, 3), (1000, 64, 8), (50, 7, 5)] {
                let shape = Shape {
                    isl,
                    osl,
                    concurrency: conc,
                };
                assert_jump_equal(&c, shape, 3, &format!("mixed {mixed}, exponent {exponent}"));
            }
        }
    }

    #[test]
    fn jumping_while_requests_wait_moves_no_instant() {
        // Saturated loops, whose queue never empties: by `max_running_requests`, and by a KV
        // pool that holds about seven of the twelve requests (each 340 tokens at its end).
        for mixed in [false, true] {
            let mut c = plain();
            c.mixed_batches = mixed;
            c.chunked_prefill_size = 700;
            c.max_running_requests = 3;
            let shape = Shape {
                isl: 300,
                osl: 40,
                concurrency: 8,
            };
            assert_jump_equal(&c, shape, 3, &format!("mixed {mixed}, max running 3"));

            let mut c = plain();
            c.mixed_batches = mixed;
            c.chunked_prefill_size = 700;
            c.kv_bytes_per_token =
                ((c.static_bytes() - c.weights_bytes as f64) / 2400.0).ceil() as u64;
            assert!(
                (2300..2400).contains(&c.kv_pool_tokens()),
                "{}",
                c.kv_pool_tokens()
            );
            let shape = Shape {
                isl: 300,
                osl: 40,
                concurrency: 12,
            };
            assert_jump_equal(&c, shape, 5, &format!("mixed {mixed}, KV-bound"));
        }
    }

    #[test]
    fn spread_lengths_keep_their_mean_and_bounds() {
        assert_eq!(output_len(300, 0.0, 7), 300);
        assert_eq!(output_len(1, 0.1, 7), 1);
        let lens: Vec<u32> = (0..10_000).map(|i| output_len(1000, 0.1, i)).collect();
        assert!(lens.iter().all(|l| (900..=1100).contains(l)));
        let mean = lens.iter().map(|&l| f64::from(l)).sum::<f64>() / lens.len() as f64;
        assert!((mean / 1000.0 - 1.0).abs() < 0.005, "{mean}");
        assert!(lens.iter().filter(|&&l| l < 950).count() > 2000);
    }

    #[test]
    fn a_mixed_loop_comes_apart_where_one_length_stays_in_waves() {
        // Prefill of one prompt (80 ms) far above a decode step (2-3 ms): four prompts arriving
        // together wait for each other's prefill; apart, each is prefilled as it arrives.
        let mut c = plain();
        c.mixed_batches = true;
        c.chunked_prefill_size = 1000;
        c.prefill_base_s = 0.0;
        c.prefill_per_token_pair_s = 0.0;
        let shape = Shape {
            isl: 800,
            osl: 300,
            concurrency: 4,
        };
        let lone = run_closed(
            &c,
            Shape {
                concurrency: 1,
                ..shape
            },
            20,
        )
        .unwrap()
        .ttft_s;
        assert!((lone - 0.083).abs() < 1e-9, "{lone}");
        let n = measured_requests(4);
        let apart = run_closed(&c, shape, n).unwrap();
        let waves = closed_loop(&c, shape, n, true, 0.0).unwrap();
        assert!(apart.ttft_s < 1.2 * lone, "apart {apart:?}, lone {lone}");
        assert!(waves.ttft_s > 1.5 * lone, "waves {waves:?}, lone {lone}");
        // Apart, a request's decode meets each other prompt's prefill once: 3 x 80 ms over its
        // 299 gaps; in waves, none after its own first token but those of its wave still queued.
        assert!(
            apart.tpot_s.unwrap() > waves.tpot_s.unwrap(),
            "{apart:?} {waves:?}"
        );
    }

    #[test]
    fn measured_counts_are_whole_waves() {
        assert_eq!(measured_requests(1), 200);
        assert_eq!(measured_requests(16), 208);
        assert_eq!(measured_requests(64), 640);
    }
}
