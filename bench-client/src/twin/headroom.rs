//! How close to saturation a simulated load runs, and how far a small error in the simulated
//! server's costs would move what the run predicts. Near the knee a prediction is fragile: a cost
//! a few percent off moves the queue, and so TTFT, many times as much.
//!
//! Two probes on the engine path, each the run's own requests:
//! - **capacity**: the workload as a closed loop that keeps the scheduler full: a quarter more
//!   requests in flight than it admits (`max_running_requests`, or fewer where the KV pool holds
//!   fewer of the workload's mean prompt and output), so that a request waits while a
//!   finished one's successor is on its way in (at most [`SATURATING_CAP`]; at most the run's
//!   `--max-concurrency`, the most its client sends; with a trace, at most a twelfth of its
//!   requests, and then the figure is a lower bound). A loop of `n` requests and one of `3n`
//!   share their start and their drain, so the difference of their requests over the difference
//!   of their durations is the steady throughput.
//! - **sensitivity**: the run again on a server [`SLOWER`] slower in every duration (its
//!   `time_scale`); the move of TTFT p50 and TPOT p50 over the run's.
//!
//! A load is near the knee where its offered rate (open loop; a closed loop: its throughput) is
//! at least [`NEAR_KNEE_SHARE`] of the capacity, or a p50 moves more than [`FRAGILE_GAIN`] times
//! the slowdown.

use std::path::Path;

use mock_server::Config;

use crate::capacity::Level;
use crate::drive::engine::load::run_load_engine;
use crate::drive::load::LoadConfig;
use crate::plan::schedule::Stop;
use crate::plan::workload::Planner;
use crate::plan::{Arrivals, Schedule};
use crate::report::load::LoadSummary;

/// Every duration of the server's this share longer in the sensitivity probe.
pub const SLOWER: f64 = 0.05;

/// A p50 that moves more than this many times [`SLOWER`] is amplified by queueing.
pub const FRAGILE_GAIN: f64 = 3.0;

/// The share of capacity from which a load is near the knee: an M/D/1 queue's wait is twice its
/// service time there, and it doubles again by 0.9.
pub const NEAR_KNEE_SHARE: f64 = 0.8;

/// The most requests in flight the capacity probe keeps (a scheduler that admits more is full
/// long before: its batch's step grows with every request).
pub const SATURATING_CAP: u32 = 2048;

/// Requests in flight of the capacity probe over what the scheduler admits.
const OVERFILL: f64 = 1.25;

/// Waves of the shorter capacity loop; the longer one runs three times as many.
const CAPACITY_WAVES: u64 = 4;

/// What the probes found; each figure `None` where its probe could not run (its reason in
/// `notes`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Headroom {
    /// Requests a second a full server completes on this workload.
    pub capacity_rps: Option<f64>,
    /// The requests in flight of the capacity probe's loops.
    pub capacity_in_flight: u32,
    /// The capacity is a lower bound: a trace too short to fill the scheduler.
    pub capacity_at_least: bool,
    /// The run's arrival rate (open loop: the rate asked, or a trace's) or throughput (closed
    /// loop), requests a second.
    pub offered_rps: Option<f64>,
    /// Whether the run's arrivals were its own (open loop) or waited for completions.
    pub open: bool,
    /// TTFT p50 and TPOT p50 of the slower server over the run's, less 1.
    pub ttft_move: Option<f64>,
    pub tpot_move: Option<f64>,
    /// Why a probe gave nothing.
    pub notes: Vec<String>,
}

impl Headroom {
    /// The offered load over the capacity (none over a lower bound).
    pub fn share(&self) -> Option<f64> {
        match (self.offered_rps, self.capacity_rps) {
            (Some(o), Some(c)) if c > 0.0 && o.is_finite() && !self.capacity_at_least => {
                Some(o / c)
            }
            _ => None,
        }
    }

    /// Whether an open loop offers at least [`NEAR_KNEE_SHARE`] of a capacity known only as a
    /// lower bound: near the knee or past it, the probe cannot tell.
    fn past_the_bound(&self) -> bool {
        match (self.offered_rps, self.capacity_rps) {
            (Some(o), Some(c)) => self.open && self.capacity_at_least && o >= NEAR_KNEE_SHARE * c,
            _ => false,
        }
    }

    /// Whether a p50 moved more than [`FRAGILE_GAIN`] times the slowdown.
    fn amplified(&self) -> bool {
        let far = |m: Option<f64>| m.is_some_and(|m| m.abs() > FRAGILE_GAIN * SLOWER);
        far(self.ttft_move) || far(self.tpot_move)
    }

    /// Whether the load is near the knee (see the module). A closed loop waits for its own
    /// completions: at its capacity it queues, but in proportion to the costs, so only an
    /// amplified move puts it there.
    pub fn near_knee(&self) -> bool {
        self.amplified() || self.open && self.share().is_some_and(|s| s >= NEAR_KNEE_SHARE)
    }

    /// The probes' figures as the run's JSON carries them (`null` where a probe gave none).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "capacity_rps": self.capacity_rps,
            "capacity_in_flight": self.capacity_in_flight,
            "capacity_is_lower_bound": self.capacity_at_least,
            "offered_rps": self.offered_rps,
            "open_loop": self.open,
            "share_of_capacity": self.share(),
            "slower_by": SLOWER,
            "ttft_p50_move": self.ttft_move,
            "tpot_p50_move": self.tpot_move,
            "near_knee": self.near_knee(),
            "knee_unknown": self.past_the_bound(),
            "notes": self.notes,
        })
    }

    /// The lines the run prints.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match (self.share(), self.capacity_rps, self.offered_rps) {
            (Some(s), Some(c), Some(o)) => out.push(format!(
                "saturation: {} {} is {:.0}% of the simulated server's capacity for this workload ({} with {} in flight)",
                if self.open { "offered" } else { "throughput" },
                rate(o),
                100.0 * s,
                rate(c),
                self.capacity_in_flight
            )),
            (_, Some(c), _) => out.push(format!(
                "saturation: the simulated server's capacity for this workload is {}{} (with {} in flight{})",
                if self.capacity_at_least { "at least " } else { "" },
                rate(c),
                self.capacity_in_flight,
                if self.capacity_at_least {
                    ": the trace is too short to fill the scheduler"
                } else {
                    ""
                }
            )),
            _ => {}
        }
        let pct =
            |m: Option<f64>| m.map_or("not measured".into(), |m| format!("{:+.1}%", 100.0 * m));
        if self.ttft_move.is_some() || self.tpot_move.is_some() {
            out.push(format!(
                "sensitivity: with every server duration {:.0}% longer, TTFT p50 moves {} and TPOT p50 {}",
                100.0 * SLOWER,
                pct(self.ttft_move),
                pct(self.tpot_move)
            ));
        }
        let share = self.share();
        if self.open && share.is_some_and(|s| s > 1.0) {
            out.push(
                "over capacity: the queue grows for as long as the run lasts, and its latencies measure the run's length, not the server"
                    .into(),
            );
        } else if self.amplified() {
            out.push(format!(
                "near the knee: a prediction here is fragile (a {:.0}% error in the simulated server's costs moves the latencies {FRAGILE_GAIN:.0} times as much or more)",
                100.0 * SLOWER
            ));
        } else if self.near_knee() {
            out.push(format!(
                "near the knee: a prediction here is fragile (at {:.0}% of the capacity a queue grows fast with the load, and with any error in the costs)",
                100.0 * share.unwrap_or(0.0)
            ));
        } else if !self.open && share.is_some_and(|s| s >= NEAR_KNEE_SHARE) {
            out.push(
                "the scheduler is nearly full: more requests in flight would add waiting, not throughput (the latencies still move with the costs alone)"
                    .into(),
            );
        } else if self.past_the_bound() {
            out.push(
                "knee unknown: the offered rate is above the capacity the trace could show, a lower bound (a longer trace, or a smaller --trace-speedup, measures it)"
                    .into(),
            );
        } else if share.is_some() || self.ttft_move.is_some() {
            out.push(
                "below the knee: the prediction is as good as the simulated server's costs".into(),
            );
        }
        out.extend(self.notes.iter().map(|n| format!("saturation: {n}")));
        out
    }
}

/// A rate as the lines show it: two decimals, three significant digits below 0.1 req/s.
fn rate(v: f64) -> String {
    if v > 0.0 && v < 0.1 {
        Level::Rate.show(v)
    } else {
        format!("{v:.2} req/s")
    }
}

/// The relative move of `p`'s p50 of `metric` from `base` to `other`.
fn p50_move(base: &LoadSummary, other: &LoadSummary, metric: &str) -> Option<f64> {
    let p50 = |s: &LoadSummary| {
        s.metrics
            .get(metric)
            .and_then(|m| m.percentile(50.0))
            .filter(|v| *v > 0)
    };
    Some(p50(other)? as f64 / p50(base)? as f64 - 1.0)
}

/// A probe run of `cfg`'s requests on `mock` with `schedule`, its records in `dir`: its summary.
fn probe(
    cfg: &LoadConfig,
    mock: &Config,
    planner: &Planner,
    schedule: Schedule,
    dir: &Path,
    name: &str,
) -> anyhow::Result<LoadSummary> {
    let mut c = cfg.clone();
    c.schedule = schedule;
    c.out = dir.join(name);
    c.resume = false;
    c.progress = false;
    c.scrape_metrics = false;
    c.prompt_salt = Some(cfg.salt());
    let (outcome, _) = run_load_engine(&c, mock.clone(), planner.clone(), None)?;
    Ok(outcome.summary)
}

/// The probes of a load run `run` made of `cfg` on the engine path of `mock`.
pub fn headroom(
    cfg: &LoadConfig,
    mock: &Config,
    planner: &Planner,
    run: &LoadSummary,
) -> anyhow::Result<Headroom> {
    let dir = tempfile::tempdir()?;
    let open = cfg.schedule.is_open();
    let d = run.derived();
    // The rate asked for, where there is one: a run capped by `--max-concurrency` sends at the
    // rate its requests finish.
    let offered_rps = match cfg.schedule.arrivals {
        Arrivals::Open { rate, .. } => Some(rate),
        Arrivals::Trace { .. } => d.arrival_rate,
        Arrivals::Closed { .. } => d.request_throughput,
    };
    let mut h = Headroom {
        open,
        offered_rps,
        ..Headroom::default()
    };
    let mut slower = mock.clone();
    slower.time_scale = mock.time_scale / (1.0 + SLOWER);
    match probe(
        cfg,
        &slower,
        planner,
        cfg.schedule.clone(),
        dir.path(),
        "slower.jsonl",
    ) {
        Ok(s) => {
            h.ttft_move = p50_move(run, &s, "ttft");
            h.tpot_move = p50_move(run, &s, "tpot");
        }
        Err(e) => h
            .notes
            .push(format!("the sensitivity probe gave no figure: {e:#}")),
    }
    // A trace has its own requests: the longer loop takes at most all of them, and fewer in
    // flight where the trace is short.
    let longest = match &cfg.workload {
        crate::plan::Workload::Trace(t) => t.len() as u64,
        _ => u64::MAX,
    };
    // The scheduler admits at most its cap, and at most what its KV pool holds of these
    // requests: more in flight only wait (and hold their prompts in memory).
    let held = mock.kv_pool_tokens() as f64 / cfg.workload.mean_tokens().max(1.0);
    let admitted = (mock.max_running_requests as f64).min(held).max(1.0);
    let full_c = ((admitted * OVERFILL).ceil() as u64).clamp(1, u64::from(SATURATING_CAP));
    let client_c = cfg
        .max_concurrency
        .map_or(full_c, |m| full_c.min(u64::from(m.max(1))));
    let c = client_c.min(longest / (3 * CAPACITY_WAVES));
    if c == 0 {
        h.notes.push(format!(
            "the capacity probe gave no figure: the trace's {longest} requests are too few for {} waves of a full loop",
            3 * CAPACITY_WAVES
        ));
        return Ok(h);
    }
    h.capacity_at_least = c < client_c;
    let c = u32::try_from(c).unwrap_or(SATURATING_CAP);
    h.capacity_in_flight = c;
    let n = CAPACITY_WAVES * u64::from(c);
    let full = |requests: u64, name: &str| {
        let schedule = Schedule {
            arrivals: Arrivals::Closed { concurrency: c },
            stop: Stop::Requests(requests),
            seed: cfg.schedule.seed,
        };
        let mut cc = cfg.clone();
        cc.warmup = 0;
        cc.max_concurrency = None;
        probe(&cc, mock, planner, schedule, dir.path(), name)
    };
    let steady = full(n, "full-short.jsonl").and_then(|a| {
        let b = full(3 * n, "full-long.jsonl")?;
        let failed = (a.requests - a.succeeded) + (b.requests - b.succeeded);
        if failed > 0 {
            anyhow::bail!(
                "{failed} requests of the full loops failed (the simulated server cannot hold {c} in flight of this workload)"
            );
        }
        let (da, db) = (a.derived().duration_s, b.derived().duration_s);
        let done = b.succeeded.saturating_sub(a.succeeded) as f64;
        match (da, db) {
            (Some(da), Some(db)) if db > da && done > 0.0 => Ok(done / (db - da)),
            _ => anyhow::bail!("the full loops finished no requests apart"),
        }
    });
    match steady {
        Ok(rps) => h.capacity_rps = Some(rps),
        Err(e) => h
            .notes
            .push(format!("the capacity probe gave no figure: {e:#}")),
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_at(share: f64, moves: f64) -> Headroom {
        Headroom {
            capacity_rps: Some(100.0),
            capacity_in_flight: 1280,
            offered_rps: Some(100.0 * share),
            open: true,
            ttft_move: Some(moves),
            tpot_move: Some(SLOWER),
            ..Headroom::default()
        }
    }

    fn verdict(h: &Headroom) -> String {
        h.lines().last().cloned().unwrap_or_default()
    }

    #[test]
    fn the_verdict_follows_the_share_and_the_moves() {
        assert!(verdict(&open_at(0.5, SLOWER)).starts_with("below the knee"));
        let share_only = open_at(0.85, SLOWER);
        assert!(share_only.near_knee());
        assert!(verdict(&share_only).contains("at 85% of the capacity"));
        let amplified = open_at(0.5, 4.0 * SLOWER);
        assert!(amplified.near_knee());
        assert!(verdict(&amplified).contains("3 times as much or more"));
        assert!(verdict(&open_at(1.1, SLOWER)).starts_with("over capacity"));
        // A closed loop at its capacity is full, not fragile.
        let closed = Headroom {
            open: false,
            ..open_at(0.95, SLOWER)
        };
        assert!(!closed.near_knee());
        assert!(verdict(&closed).starts_with("the scheduler is nearly full"));
    }

    #[test]
    fn a_lower_bound_gives_no_share_and_says_so() {
        let h = Headroom {
            capacity_at_least: true,
            ..open_at(1.5, SLOWER)
        };
        assert_eq!(h.share(), None);
        assert!(!h.near_knee());
        let lines = h.lines().join("\n");
        assert!(lines.contains("at least 100.00 req/s"), "{lines}");
        assert!(!lines.contains("over capacity"), "{lines}");
        // At 1.5 times a lower bound the load may be far past the knee: never "below" it.
        assert!(verdict(&h).starts_with("knee unknown"), "{lines}");
        let under = Headroom {
            capacity_at_least: true,
            ..open_at(0.5, SLOWER)
        };
        assert!(
            verdict(&under).starts_with("below the knee"),
            "{:?}",
            under.lines()
        );
        let j = h.to_json();
        assert_eq!(j["share_of_capacity"], serde_json::Value::Null);
        assert_eq!(j["capacity_is_lower_bound"], true);
    }

    #[test]
    fn missing_figures_print_no_nan() {
        let h = Headroom {
            notes: vec!["the capacity probe gave no figure: why".into()],
            ..Headroom::default()
        };
        let text = h.lines().join("\n");
        assert!(!text.to_lowercase().contains("nan"), "{text}");
        assert!(text.contains("gave no figure"));
        assert_eq!(h.to_json()["share_of_capacity"], serde_json::Value::Null);
    }
}
