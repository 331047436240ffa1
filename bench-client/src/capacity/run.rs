//! The capacity search end to end: one open-loop load run per step, at the rate the search
//! ([`CapacityPlan::next`]) asks for, until it is done.
//!
//! The step rule: a step's arrivals span at least [`STEADY_SPANS`] times the mean request time
//! (send to end), so that it measures the server in steady state rather than a burst it absorbs.
//! Before a step that time is not known: the step is given the user's minimum length (`--duration`
//! or `--num-requests`), lengthened to [`STEADY_SPANS`] x [`MARGIN`] times the mean request time
//! of the steps that ran before it (a rerun: of the short step at its level; else the longest
//! of the steps at lower levels that kept up). After it, its own mean request time decides: a step
//! whose requests met the target but that was too short, or whose queue grew over it, is run
//! again at least twice as long ([`CapacityPlan::next`]).
//!
//! Each step's records go to a results file of their own beside `out` (`NAME.step-N.jsonl`): a load run's file holds one schedule, and
//! `--resume` of a step needs its own seed and schedule. A resumed search replays the steps whose
//! files are complete, continues a partial one, and goes on from there.

use std::path::{Path, PathBuf};

use super::report::{rate_digits, CapacityReport, CapacityRow, Level};
use crate::measure::capacity::{CapacityPlan, Next, RequestSpan, StepTiming, STEADY_SPANS};
use crate::plan::schedule::{ArrivalKind, Arrivals, Schedule, Stop};
use crate::plan::Planner;
use crate::report::load::{LoadSummary, Slo};
use crate::results::each_record;
use crate::results::settings::{Recorded, ScheduleRecord};

use crate::drive::load::{run_load_with, LoadConfig};

/// A validated capacity search.
#[derive(Clone, Debug)]
pub struct CapacityConfig {
    /// Every step's load run, but for its schedule and results file.
    pub load: LoadConfig,
    /// How requests arrive at each step's rate.
    pub arrival: ArrivalKind,
    /// Gamma shape of the arrivals.
    pub burstiness: f64,
    /// The shortest a step runs; the step rule lengthens it (see the module's comment).
    pub stop: Stop,
    /// The search.
    pub plan: CapacityPlan,
    /// Every step's requests, from the workload checked once (each step's file is checked as
    /// its run opens it).
    pub planner: Planner,
    /// The SLO as given, for the report.
    pub slo_text: String,
    /// The base results path; steps go beside it.
    pub out: PathBuf,
    /// Continue a search whose step files exist.
    pub resume: bool,
}

/// What a capacity search did.
#[derive(Debug)]
pub struct CapacityOutcome {
    /// The curve and the answer.
    pub report: CapacityReport,
    /// Steps taken from files of an earlier search (`--resume`).
    pub resumed_steps: usize,
    /// Ctrl-C ended the search.
    pub interrupted: bool,
}

/// A step is made this much longer than steady state needs by the mean request time measured
/// before it: requests take longer as the rate grows.
pub const MARGIN: f64 = 1.25;

/// The results file of step `n` beside `out`: `NAME.step-N.jsonl`.
pub fn step_path(out: &Path, n: usize) -> PathBuf {
    out.with_file_name(format!("{}{n}.jsonl", step_prefix(out)))
}

/// What the names of the steps' files of base `out` begin with: `NAME.step-`.
fn step_prefix(out: &Path) -> String {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "capacity".into());
    format!("{stem}.step-")
}

/// Whether `name` is the name of a step's results file of base `out` (`NAME.step-N.jsonl`) or of
/// its manifest, whatever N: a search writes as many steps as it needs.
pub fn is_step_name(out: &Path, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(&step_prefix(out)) else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && matches!(&rest[digits..], ".jsonl" | ".jsonl.manifest.jsonl")
}

impl CapacityConfig {
    /// What the search steps: request rates, or concurrencies (`plan.integer`).
    pub fn level(&self) -> Level {
        if self.plan.integer {
            Level::Concurrency
        } else {
            Level::Rate
        }
    }

    /// The search's outcome: the steps so far and how it ended.
    fn outcome(
        &self,
        rows: Vec<CapacityRow>,
        answer: &crate::measure::capacity::CapacityAnswer,
        resumed_steps: usize,
        interrupted: bool,
    ) -> CapacityOutcome {
        let (slo, target) = (self.slo_text.clone(), self.plan.target);
        CapacityOutcome {
            report: CapacityReport::new(slo, target, self.level(), rows, answer),
            resumed_steps,
            interrupted,
        }
    }

    /// How long a step at `level` runs after the steps `rows`: the step rule of the module's
    /// comment.
    pub fn step_stop(&self, level: f64, rows: &[CapacityRow]) -> Stop {
        let (reference, rerun_span) = match rows.last() {
            Some(r) if r.rate == level && !r.steady => (r.mean_request_s, r.arrival_span_s),
            _ => (
                rows.iter()
                    .filter(|r| r.rate < level && r.kept_up)
                    .filter_map(|r| r.mean_request_s)
                    .reduce(f64::max),
                None,
            ),
        };
        // A rerun is at least twice as long as the step it repeats: a queue that grew over that
        // step either settles or shows over the longer one.
        let need_s = reference
            .map_or(0.0, |m| STEADY_SPANS * MARGIN * m)
            .max(rerun_span.map_or(0.0, |s| 2.0 * s));
        let closed = self.level() == Level::Concurrency;
        // An open loop schedules at most so many requests: a longer step is still too short,
        // and fails once its reruns are spent.
        let most = crate::plan::schedule::MAX_OPEN_REQUESTS as f64;
        let need_s = if closed {
            need_s
        } else {
            need_s.min(most / level)
        };
        match self.stop {
            Stop::Duration(d) => Stop::Duration(d.max(std::time::Duration::from_secs_f64(need_s))),
            // A closed loop of c workers sends c requests per mean request time.
            Stop::Requests(n) if closed => {
                Stop::Requests(n.max((level * (STEADY_SPANS * MARGIN + 1.0)).ceil() as u64))
            }
            Stop::Requests(n) => Stop::Requests(
                n.max((level * need_s).ceil() as u64 + 1)
                    .min(crate::plan::schedule::MAX_OPEN_REQUESTS),
            ),
        }
    }

    /// The load run of step `n` at `rate` (open loop), or at `rate` requests in flight (closed
    /// loop) for a search by concurrency, `stop` long.
    pub fn step_config(&self, n: usize, rate: f64, stop: Stop) -> anyhow::Result<LoadConfig> {
        let arrivals = match self.level() {
            Level::Concurrency => Arrivals::Closed {
                concurrency: rate as u32,
            },
            Level::Rate => Arrivals::Open {
                rate,
                kind: self.arrival,
                burstiness: self.burstiness,
            },
        };
        let schedule = Schedule::new(arrivals, stop, self.load.seed).map_err(anyhow::Error::msg)?;
        Ok(LoadConfig {
            schedule,
            out: step_path(&self.out, n),
            resume: self.resume,
            command: format!(
                "{} (capacity step {n}, {rate} {})",
                self.load.command,
                self.level().unit()
            ),
            ..self.load.clone()
        })
    }
}

/// What the search needs of a step's load records, read from its file a record at a time: a
/// step of thousands of long requests is never held.
struct StepRecords {
    /// Load records in the file.
    count: u64,
    summary: LoadSummary,
    /// The requests on one clock: a step resumed after a kill is several pieces, each timed from
    /// its own start ([`StepRecords::read`] joins them).
    spans: Vec<RequestSpan>,
}

impl StepRecords {
    /// The load records of `path` (none where it is missing or empty).
    fn read(path: &Path, slo: Slo) -> anyhow::Result<Self> {
        let mut out = Self {
            count: 0,
            summary: LoadSummary::new(slo),
            spans: Vec::new(),
        };
        if !std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            return Ok(out);
        }
        let mut pieces: std::collections::BTreeMap<u64, Vec<RequestSpan>> = Default::default();
        each_record(path, |r| {
            let Some(load) = &r.load else { return Ok(()) };
            out.count += 1;
            if let Some(trace) = &r.trace {
                pieces
                    .entry(load.start_unix_ms)
                    .or_default()
                    .push(RequestSpan {
                        scheduled_ns: load.scheduled_ns,
                        sent_ns: load.sent_ns,
                        end_ns: load.sent_ns.saturating_add(trace.end_ns),
                        ok: r.error.is_none(),
                    });
            }
            out.summary.add(&r);
            Ok(())
        })?;
        out.spans = joined(pieces.into_values());
        Ok(out)
    }
}

/// The pieces of a resumed step on one clock, in order: each later piece shifted so that its
/// first arrival comes at the last arrival of the piece before (a resumed open loop sends its
/// remaining requests with their spacing), so the time between the kill and the resume is no part
/// of the step's arrivals or its duration.
fn joined(pieces: impl Iterator<Item = Vec<RequestSpan>>) -> Vec<RequestSpan> {
    let mut out: Vec<RequestSpan> = Vec::new();
    for piece in pieces {
        let first = piece.iter().map(|r| r.scheduled_ns).min().unwrap_or(0);
        let at = out.iter().map(|r| r.scheduled_ns).max().unwrap_or(first);
        out.extend(piece.into_iter().map(|r| RequestSpan {
            scheduled_ns: r.scheduled_ns - first + at,
            sent_ns: r.sent_ns.saturating_sub(first) + at,
            end_ns: r.end_ns.saturating_sub(first) + at,
            ok: r.ok,
        }));
    }
    out
}

/// A step file being resumed must be of the step's schedule: the same rate and arrivals (a search
/// resumed with other flags would otherwise read steps of another search as its own).
fn check_step_file(step: &LoadConfig) -> anyhow::Result<()> {
    let arrivals = &step.schedule.arrivals;
    let manifest = crate::results::read_manifest(&step.out)?;
    let got = manifest.and_then(|m| m.schedule);
    if !got.as_ref().is_some_and(|g| g.records(arrivals)) {
        anyhow::bail!(
            "--resume: {} holds a step of another search (schedule {}, this step is {}): resume with the flags of the search that wrote it, or choose another --out",
            step.out.display(),
            got.map_or_else(|| "unknown".into(), |g| g.describe()),
            Recorded::<ScheduleRecord>::of(arrivals).describe()
        );
    }
    Ok(())
}

/// Run the search.
pub async fn run_capacity(cfg: &CapacityConfig) -> anyhow::Result<CapacityOutcome> {
    let mut rows: Vec<CapacityRow> = Vec::new();
    let mut resumed_steps = 0;
    loop {
        let results: Vec<_> = rows.iter().map(CapacityRow::result).collect();
        let rate = match cfg.plan.next(&results) {
            Next::Run(r) => r,
            Next::Done(answer) => return Ok(cfg.outcome(rows, &answer, resumed_steps, false)),
        };
        let n = rows.len();
        let stop = cfg.step_stop(rate, &rows);
        let step = cfg.step_config(n, rate, stop)?;
        let existing = if cfg.resume {
            Some(StepRecords::read(&step.out, cfg.load.slo)?)
        } else {
            None
        };
        let had = existing.as_ref().map_or(0, |e| e.count);
        if had > 0 {
            check_step_file(&step)?;
        }
        let complete = matches!(stop, Stop::Requests(k) if had >= k);
        if complete {
            resumed_steps += 1;
        } else {
            let length = match stop {
                Stop::Requests(k) => format!("{k} requests"),
                Stop::Duration(d) => format!("{:.1} s", d.as_secs_f64()),
            };
            eprintln!(
                "capacity step {n}: {} {}, {length}, into {}",
                rate_digits(rate),
                cfg.level().unit(),
                step.out.display()
            );
            let outcome = run_load_with(&step, cfg.planner.clone()).await?;
            if outcome.interrupted {
                let answer = crate::measure::capacity::CapacityAnswer {
                    rate: None,
                    achieved: None,
                    first_fail: None,
                    server_failing: None,
                };
                return Ok(cfg.outcome(rows, &answer, resumed_steps, true));
            }
        }
        // A complete resumed step's records are those just read; a run step's, its file now.
        let records = match existing {
            Some(e) if complete => e,
            _ => StepRecords::read(&step.out, cfg.load.slo)?,
        };
        let summary = records.summary;
        let t = StepTiming::of(&records.spans);
        let open = cfg.level() == Level::Rate;
        let mut row = CapacityRow::new(
            n,
            rate,
            &summary,
            t.as_ref(),
            open,
            step.out.display().to_string(),
        );
        row.kept_up = cfg.plan.keeps_up(&row.result());
        row.passed = cfg.plan.passes(&row.result());
        row.too_short = cfg.plan.too_short(&row.result());
        let achieved = match (row.request_throughput, row.offered_rate) {
            (Some(a), Some(o)) => format!(
                ", {} req/s achieved of {} arrived",
                rate_digits(a),
                rate_digits(o)
            ),
            _ => String::new(),
        };
        eprintln!(
            "capacity step {n}: {} {}, {}/{} requests met the SLO ({:.1}%){achieved}: {}",
            rate_digits(rate),
            cfg.level().unit(),
            row.good,
            row.requests,
            row.goodput_share * 100.0,
            row.verdict()
        );
        rows.push(row);
    }
}
