//! Requests the client holds on the engine path while the server's queue is deep: an open loop
//! past the server's pace queues without bound, and a queued prompt is its token ids (four bytes
//! a token; BENCHMARKS.md, section 11). The scheduler admits the head of its queue, in order of
//! arrival, at most `max_running_requests` a pass; so while more than that wait, a request sent
//! behind them is kept as its index and instants, and built and submitted at its own send instant
//! once the queue is shorter ([`mock_server::Simulator::submit`]). Every instant and record is
//! the one the engine would give holding them all (`held_requests_change_nothing` below).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::deadlines::Waiter;
use super::load::{InFlight, Run};

/// A request sent (on the client's clock) and not yet handed to the engine.
pub(super) struct Held {
    pub(super) scheduled_ns: u64,
    pub(super) sent_ns: u64,
    pub(super) prompt_tokens: u32,
}

/// The requests held, and the queue depth from which a send is held.
pub(super) struct HeldQueue {
    /// The held sends' indices in the order they were sent; an index no longer in `held` was
    /// given up while held (its deadline passed) and is skipped.
    order: VecDeque<u64>,
    held: FxHashMap<u64, Held>,
    /// A send is held while the engine's queue holds this many or any request is held.
    depth: usize,
    /// The server's deaths handed on to the client: none is submitted between a death and its
    /// handling (the held ones die with the server).
    deaths: u32,
    /// Sends held over the run.
    total: u64,
}

impl HeldQueue {
    /// Holds sends past a queue of `max_running_requests` + 1: one pass admits at most
    /// `max_running_requests` of them.
    pub(super) fn new(max_running_requests: usize) -> Self {
        Self::with_depth(max_running_requests.saturating_add(1))
    }

    pub(super) fn with_depth(depth: usize) -> Self {
        HeldQueue {
            order: VecDeque::new(),
            held: FxHashMap::default(),
            depth: depth.max(1),
            deaths: 0,
            total: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// The held send `index`, taken out: the client gave it up.
    pub(super) fn give_up(&mut self, index: u64) -> Option<Held> {
        self.held.remove(&index)
    }

    /// The oldest send still held, taken out.
    fn pop_front(&mut self) -> Option<(u64, Held)> {
        while let Some(index) = self.order.pop_front() {
            if let Some(h) = self.held.remove(&index) {
                return Some((index, h));
            }
        }
        None
    }
}

impl Run<'_> {
    /// Whether a send now is held ([`HeldQueue`]).
    pub(super) fn holds(&self) -> bool {
        !self.held.held.is_empty() || self.sim.queued() >= self.held.depth
    }

    /// Holds send `index`, its deadline armed: it may time out in the server's queue.
    pub(super) fn hold(&mut self, index: u64, scheduled_ns: u64, sent_ns: u64) {
        let Some(prompt_tokens) = self.planner.prompt_len(index) else {
            return;
        };
        self.held.total += 1;
        self.held.order.push_back(index);
        self.held.held.insert(
            index,
            Held {
                scheduled_ns,
                sent_ns,
                prompt_tokens,
            },
        );
        let due = self.held_deadline(sent_ns, prompt_tokens);
        self.deadlines.push(due, Waiter::Held(index));
    }

    /// Hands held requests to the engine, oldest first, while its queue is short; before each
    /// pass, so that no pass misses one it would admit.
    pub(super) fn release_held(&mut self) {
        if self.sim.crashes() != self.held.deaths {
            return;
        }
        while self.sim.queued() < self.held.depth {
            let Some((index, h)) = self.held.pop_front() else {
                break;
            };
            self.send_now(index, h.scheduled_ns, h.sent_ns);
        }
    }

    /// The server died: the held requests were in its queue, so their streams open where they
    /// were sent and are cut with the rest (keys past any the engine gives).
    pub(super) fn open_held_for_death(&mut self) {
        self.held.deaths = self.sim.crashes();
        let mut key = u64::MAX;
        while let Some((index, h)) = self.held.pop_front() {
            let Some(plan) = self.planner.request(index) else {
                continue;
            };
            let prompt_tokens = u32::try_from(plan.prompt.len()).unwrap_or(u32::MAX);
            let rid = self.rid(index);
            self.streams
                .opened(key, &rid, prompt_tokens, plan.output_len, h.sent_ns, false);
            self.flight.insert(
                key,
                InFlight {
                    index,
                    scheduled_ns: h.scheduled_ns,
                    sent_ns: h.sent_ns,
                    prompt_tokens,
                    prefix_group: plan.prefix_group,
                    warm: false,
                    slot: None,
                },
            );
            key -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::HeldQueue;
    use crate::drive::engine::load::run_load_engine_holding;
    use crate::drive::LoadConfig;
    use crate::net::Target;
    use crate::plan::{ArrivalKind, Arrivals, LenDist, Schedule, Stop, Timeouts, Workload};
    use crate::trace::Dialect;
    use std::time::Duration;

    /// The record lines of an open loop at `rate` on `mock` (at most `limit` in flight), sends
    /// held past a queue of `depth`; and how many were held.
    fn run(
        mock: &mock_server::Config,
        (rate, limit): (f64, Option<u32>),
        input: LenDist,
        (depth, timeouts): (usize, &Timeouts),
    ) -> (String, u64) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.jsonl");
        let schedule = Schedule::new(
            Arrivals::Open {
                rate,
                kind: ArrivalKind::Poisson,
                burstiness: 1.0,
            },
            Stop::Requests(160),
            7,
        )
        .unwrap();
        let workload = Workload::Random {
            input,
            output: LenDist::Uniform { lo: 8, hi: 64 },
        };
        let target = Target {
            base_url: crate::drive::ENGINE_URL.into(),
            dialect: Dialect::Sglang,
            model: None,
            api_key: None,
        };
        let cfg = LoadConfig {
            prompt_salt: Some(1),
            start_at_unix_ms: Some(1_700_000_000_000),
            scrape_metrics: false,
            max_concurrency: limit,
            engine: Some(mock.clone()),
            timeouts: timeouts.clone(),
            ..LoadConfig::new(target, schedule, workload, out.clone())
        };
        let planner = cfg.validate().unwrap();
        let held = HeldQueue::with_depth(depth);
        let (_, _, total) =
            run_load_engine_holding(&cfg, mock.clone(), planner, None, held).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        let records: Vec<&str> = text.lines().filter(|l| l.contains("\"load\":{")).collect();
        assert_eq!(records.len(), 160);
        (records.join("\n"), total)
    }

    #[test]
    fn held_requests_change_nothing() {
        // Far past the server's pace, so the queue runs deep, and a server that dies of a
        // long prefill and restarts with requests held.
        let mut calm = mock_server::Config::preset("small-cpu-demo").unwrap();
        calm.set("max_running_requests", "3").unwrap();
        let mut dying = mock_server::Config::preset("kimi-k2.6-dflash-8xrtx-pro-6000").unwrap();
        dying.set("max_running_requests", "3").unwrap();
        dying.set("restart_on_oom", "true").unwrap();
        let short = LenDist::Uniform { lo: 64, hi: 512 };
        let cases = [
            (&calm, (200.0, None), short.clone(), false),
            (&calm, (200.0, Some(40)), short, false),
            (
                &dying,
                (20.0, None),
                LenDist::Uniform {
                    lo: 2000,
                    hi: 40000,
                },
                true,
            ),
        ];
        let none = Timeouts::default();
        for (mock, load, input, dies) in cases {
            let (all, none_held) = run(mock, load, input.clone(), (usize::MAX, &none));
            let depth = HeldQueue::new(3).depth;
            let (held, total) = run(mock, load, input, (depth, &none));
            assert_eq!(none_held, 0);
            assert_eq!(all.contains("the simulated server died"), dies);
            assert!(total > 20, "the queue ran past {depth}: {total} sends held");
            assert!(held == all, "the same records, in the same order");
        }
    }

    #[test]
    fn held_requests_time_out_where_queued_ones_do() {
        // Past the pace of a server of 3 running requests: sends wait, and the client gives up
        // those that wait past a second, held or queued; some run, some are given up running.
        let mut mock = mock_server::Config::preset("qwen3-32b-h100-tp2-sglang").unwrap();
        mock.set("max_running_requests", "3").unwrap();
        let timeouts = Timeouts {
            first_token_base: Duration::from_secs(1),
            first_token_per_1k: Duration::ZERO,
            idle: Duration::from_millis(400),
            ..Timeouts::default()
        };
        let input = LenDist::Uniform { lo: 1000, hi: 4000 };
        let load = (6.0, None);
        let (all, none_held) = run(&mock, load, input.clone(), (usize::MAX, &timeouts));
        let (held, total) = run(&mock, load, input, (HeldQueue::new(3).depth, &timeouts));
        assert_eq!(none_held, 0);
        assert!(total > 20, "{total} sends held");
        for phase in ["\"first-token\"", "\"idle\""] {
            assert!(all.contains(phase), "some requests time out at {phase}");
        }
        assert!(all.contains("\"kind\":\"done\""), "some requests end");
        let lines = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
        let (mut a, mut h) = (lines(&all), lines(&held));
        // Deadlines at one instant may end in another order; each record is the same.
        a.sort();
        h.sort();
        assert!(a == h, "the same records");
    }
}
