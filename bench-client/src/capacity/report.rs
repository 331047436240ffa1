//! The capacity curve: one row per step of the search (rate, throughput, TTFT and TPOT p50/p99,
//! goodput, prefix cache hit ratio), and the answer.

use serde::Serialize;

use crate::measure::capacity::{CapacityAnswer, StepResult, StepTiming};
use crate::measure::ms;
use crate::report::gate::SloGate;
use crate::report::load::LoadSummary;

/// What a search steps through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// Open-loop request rates.
    Rate,
    /// Closed-loop numbers of requests in flight.
    Concurrency,
}

impl Level {
    /// The level's name: "rate" or "concurrency".
    pub fn name(self) -> &'static str {
        match self {
            Level::Rate => "rate",
            Level::Concurrency => "concurrency",
        }
    }

    /// The unit a level is given in.
    pub fn unit(self) -> &'static str {
        match self {
            Level::Rate => "req/s",
            Level::Concurrency => "in flight",
        }
    }

    /// A level with its unit, as the answer prints it.
    pub fn show(self, v: f64) -> String {
        match self {
            Level::Rate => format!("{} req/s", rate_digits(v)),
            Level::Concurrency if v == 1.0 => "1 request in flight".to_string(),
            Level::Concurrency => format!("{v:.0} requests in flight"),
        }
    }
}

/// A rate in req/s: three decimals, or three significant digits below 0.1 (0.000625, 0.00125).
pub fn rate_digits(v: f64) -> String {
    let decimals = if v > 0.0 && v < 0.1 {
        (2 - v.log10().floor() as i32).clamp(3, 12) as usize
    } else {
        3
    };
    format!("{v:.decimals$}")
}

#[cfg(test)]
#[test]
fn low_rates_keep_three_significant_digits() {
    assert_eq!(Level::Rate.show(0.000625), "0.000625 req/s");
    assert_eq!(Level::Rate.show(0.00125), "0.00125 req/s");
    assert_eq!(Level::Rate.show(0.05), "0.0500 req/s");
    assert_eq!(Level::Rate.show(12.5), "12.500 req/s");
}

/// One step of the search.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityRow {
    /// The order the step ran in (0-based).
    pub step: usize,
    /// Offered rate, requests per second; for a search by concurrency, the requests in flight.
    pub rate: f64,
    /// Requests sent, succeeded and meeting the SLO.
    pub requests: u64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// Requests that met the SLO.
    pub good: u64,
    /// Requests without a TPOT of their own (all their output arrived with the first token, or
    /// the tokens per chunk are unknown), judged on the benchmarks' stand-in.
    pub tpot_unmeasured: u64,
    /// `good / requests`.
    pub goodput_share: f64,
    /// Whether the step met the target, kept up with its rate and ran in steady state.
    pub passed: bool,
    /// Open loop: the rate the requests arrived at, (n - 1) / arrival span.
    pub offered_rate: Option<f64>,
    /// Whether the achieved throughput was within the tolerance of the offered rate.
    pub kept_up: bool,
    /// First to last arrival, seconds.
    pub arrival_span_s: Option<f64>,
    /// Mean send-to-end time of the step's requests, seconds.
    pub mean_request_s: Option<f64>,
    /// Whether the arrivals spanned enough mean request times, and the queue did not grow, for
    /// steady state.
    pub steady: bool,
    /// The last quarter's median time in the system over the second quarter's (a growing queue
    /// is not steady state: [`crate::measure::capacity::GROWTH_LIMIT`]).
    pub queue_growth: Option<f64>,
    /// The step's requests met the target but it was too short for steady state: no verdict, its
    /// level runs again longer (after the last rerun allowed, it fails).
    pub too_short: bool,
    /// Completed requests per second.
    pub request_throughput: Option<f64>,
    /// Output tokens per second.
    pub output_throughput: Option<f64>,
    /// Requests meeting the SLO per second.
    pub goodput: Option<f64>,
    /// TTFT p50, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// TPOT p50, ms.
    pub tpot_p50_ms: Option<f64>,
    /// TPOT p99, ms.
    pub tpot_p99_ms: Option<f64>,
    /// Cached / prompt tokens of the requests that reported a cached count.
    pub cache_hit_rate: Option<f64>,
    /// The step's results file.
    pub file: String,
}

impl CapacityRow {
    /// The row of a step at `rate` summarised by `s`, timed by `t`; `open`: an open-loop step
    /// (its offered rate is judged).
    pub fn new(
        step: usize,
        rate: f64,
        s: &LoadSummary,
        t: Option<&StepTiming>,
        open: bool,
        file: String,
    ) -> Self {
        let d = s.derived();
        let p = |key: &str, q: f64| s.metrics.get(key).and_then(|m| m.percentile(q)).map(ms);
        let r = StepResult {
            rate,
            requests: s.requests,
            succeeded: s.succeeded,
            good: s.good,
            offered: None,
            achieved: None,
            steady: false,
        };
        CapacityRow {
            step,
            rate,
            requests: s.requests,
            succeeded: s.succeeded,
            good: s.good,
            tpot_unmeasured: s.tpot_unmeasured,
            goodput_share: r.goodput_share(),
            passed: false,
            offered_rate: t.filter(|_| open).and_then(StepTiming::offered),
            kept_up: false,
            arrival_span_s: t.map(|t| t.arrival_span_s),
            mean_request_s: t.map(|t| t.mean_request_s),
            steady: t.is_some_and(StepTiming::steady),
            queue_growth: t.and_then(|t| t.queue_growth),
            too_short: false,
            request_throughput: d.request_throughput,
            output_throughput: d.output_throughput,
            goodput: d.goodput,
            ttft_p50_ms: p("ttft", 50.0),
            ttft_p99_ms: p("ttft", 99.0),
            tpot_p50_ms: p("tpot", 50.0),
            tpot_p99_ms: p("tpot", 99.0),
            cache_hit_rate: d.cache_hit_rate,
            file,
        }
    }

    /// What the search needs of the row.
    pub fn result(&self) -> StepResult {
        StepResult {
            rate: self.rate,
            requests: self.requests,
            succeeded: self.succeeded,
            good: self.good,
            offered: self.offered_rate,
            achieved: self.request_throughput,
            steady: self.steady,
        }
    }

    /// The step's verdict in a word or two: pass, FAIL and why, or too short (run again).
    pub fn verdict(&self) -> &'static str {
        let grows = self
            .queue_growth
            .is_some_and(|g| g > crate::measure::capacity::GROWTH_LIMIT);
        match (self.passed, self.too_short, self.kept_up, grows) {
            (true, ..) => "pass",
            (false, true, _, true) => "queue grows",
            (false, true, _, false) => "too short",
            (false, false, false, _) => "FAIL: fell behind",
            (false, false, true, true) => "FAIL: queue grows",
            (false, false, true, false) => "FAIL",
        }
    }
}

/// A finished search: its steps and its answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacityReport {
    /// The SLO, as given.
    pub slo: String,
    /// The goodput share a step must reach.
    pub target: f64,
    /// What the steps' `rate` is: a request rate or a concurrency.
    pub level: Level,
    /// The steps in the order they ran.
    pub steps: Vec<CapacityRow>,
    /// The answer: the highest passing rate, or the throughput achieved there when that is
    /// lower (never above it); `None` when no step passed.
    pub capacity: Option<f64>,
    /// The highest passing rate as offered.
    pub passing_rate: Option<f64>,
    /// The lowest failing rate above it, `None` when every step passed.
    pub first_fail: Option<f64>,
    /// The step whose failed-request share stopped the search.
    pub server_failing: Option<usize>,
}

impl CapacityReport {
    /// The steps' durations added up, seconds: each step's completed requests over its
    /// throughput (first scheduled start to last end).
    pub fn steps_duration_s(&self) -> f64 {
        self.steps
            .iter()
            .filter_map(|r| {
                r.request_throughput
                    .filter(|t| *t > 0.0)
                    .map(|t| r.succeeded as f64 / t)
            })
            .sum::<f64>()
            .min(1e12)
    }

    /// The report of `steps` ending in `answer`.
    pub fn new(
        slo: String,
        target: f64,
        level: Level,
        steps: Vec<CapacityRow>,
        answer: &CapacityAnswer,
    ) -> Self {
        CapacityReport {
            slo,
            target,
            level,
            steps,
            capacity: answer.rate.map(|r| answer.achieved.map_or(r, |a| a.min(r))),
            passing_rate: answer.rate,
            first_fail: answer.first_fail,
            server_failing: answer.server_failing,
        }
    }

    /// The steps ordered by rate: the curve.
    pub fn curve(&self) -> Vec<&CapacityRow> {
        let mut v: Vec<_> = self.steps.iter().collect();
        v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        v
    }

    /// ", achieved at an offered R" when the answer is the throughput achieved below the
    /// passing rate.
    fn offered_note(&self) -> String {
        match (self.capacity, self.passing_rate) {
            (Some(c), Some(r)) if c < r => {
                format!(" achieved at an offered {}", self.level.show(r))
            }
            _ => String::new(),
        }
    }

    /// The step that passed at `rate` (a level that passed is not run again).
    pub fn passed_at(&self, rate: f64) -> Option<&CapacityRow> {
        self.steps.iter().rev().find(|s| s.passed && s.rate == rate)
    }

    /// The SLO gate of the search: over the step at the highest passing level; when none passed,
    /// failed, over the step at the lowest level tried.
    pub fn gate(&self, slo: &crate::measure::Slo) -> SloGate {
        let passing = self.passing_rate.and_then(|r| self.passed_at(r));
        let lowest = self.steps.iter().min_by(|a, b| a.rate.total_cmp(&b.rate));
        let Some(row) = passing.or(lowest) else {
            let mut g = SloGate::new(slo, self.target, 0, 0);
            g.failed_because = Some("no step ran".into());
            return g;
        };
        let mut g = SloGate::new(slo, self.target, row.good, row.requests);
        if passing.is_some() {
            g.scope = Some(format!(
                "at {}, the highest passing",
                self.level.show(row.rate)
            ));
        } else {
            g.scope = Some(format!(
                "at {}, the lowest tried",
                self.level.show(row.rate)
            ));
            g.failed_because = Some(format!(
                "no {} passed: {}",
                self.level.name(),
                row.verdict()
            ));
        }
        g
    }

    /// The answer in one line.
    pub fn answer(&self) -> String {
        let pct = self.target * 100.0;
        let (l, name) = (self.level, self.level.name());
        let mut s = match (self.capacity, self.first_fail) {
            (None, _) => format!(
                "no {name} meets the SLO ({}) for {pct:.0}% of requests",
                self.slo
            ),
            (Some(r), Some(f)) => format!(
                "capacity: {}{} ({pct:.0}% of requests meet {}; {} does not)",
                l.show(r),
                self.offered_note(),
                self.slo,
                l.show(f)
            ),
            (Some(r), None) => format!(
                "capacity: at least {}{} ({pct:.0}% of requests meet {} at every {name} tried; try higher)",
                l.show(r),
                self.offered_note(),
                self.slo
            ),
        };
        let unmeasured: u64 = self.steps.iter().map(|r| r.tpot_unmeasured).sum();
        if unmeasured > 0 {
            let sent: u64 = self.steps.iter().map(|r| r.requests).sum();
            s.push_str(&format!(
                "; {unmeasured} of {sent} requests had no TPOT of their own (all their output arrived with the first token: the server merged the events, as vLLM does when its API process falls behind its engine, or a proxy buffered them) and were judged on (end - first token) / (tokens - 1), as SGLang's and vLLM's benchmarks do"
            ));
        }
        if let Some(i) = self.server_failing {
            if let Some(row) = self.steps.get(i) {
                s.push_str(&format!(
                    "; stopped early: the server failed {} of {} requests at {}",
                    row.requests - row.succeeded,
                    row.requests,
                    l.show(row.rate)
                ));
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: usize, rate: f64, good: u64, unmeasured: u64, passed: bool) -> CapacityRow {
        CapacityRow {
            step,
            rate,
            requests: 12,
            succeeded: 12,
            good,
            tpot_unmeasured: unmeasured,
            goodput_share: good as f64 / 12.0,
            passed,
            offered_rate: None,
            kept_up: true,
            arrival_span_s: None,
            mean_request_s: None,
            steady: true,
            queue_growth: None,
            too_short: false,
            request_throughput: Some(6.0),
            output_throughput: Some(192.0),
            goodput: Some(good as f64 / 2.0),
            ttft_p50_ms: Some(130.0),
            ttft_p99_ms: Some(160.0),
            tpot_p50_ms: Some(2.5),
            tpot_p99_ms: Some(4.0),
            cache_hit_rate: None,
            file: String::new(),
        }
    }

    fn report(steps: Vec<CapacityRow>, capacity: Option<f64>, first_fail: Option<f64>) -> String {
        CapacityReport {
            slo: "ttft=3000,tpot=150".into(),
            target: 0.95,
            level: Level::Concurrency,
            steps,
            capacity,
            passing_rate: capacity,
            first_fail,
            server_failing: None,
        }
        .answer()
    }

    #[test]
    fn the_answer_counts_requests_without_a_tpot_of_their_own() {
        let a = report(vec![row(0, 1.0, 2, 10, false)], None, None);
        assert!(a.starts_with("no concurrency meets the SLO"), "{a}");
        assert!(
            a.contains("10 of 12 requests had no TPOT of their own"),
            "{a}"
        );
        let a = report(
            vec![
                row(0, 1.0, 12, 0, true),
                row(1, 4.0, 3, 5, false),
                row(2, 2.0, 8, 1, false),
            ],
            Some(1.0),
            Some(2.0),
        );
        assert!(a.contains("6 of 36 requests"), "{a}");
        let clean = report(vec![row(0, 1.0, 2, 0, false)], None, None);
        assert!(!clean.contains("TPOT"), "{clean}");
    }
}
