//! `bench-client capacity`: the flags, checked into the search's plan before anything starts,
//! and what the search prints. The search, its report and its formats are in `crate::capacity`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::common::{compact, default_out, list_items, parse_duration, Format, ServerArgs};
use super::exit::{self, CliError};
use super::flags::{ArrivalArgs, RunArgs, SloArgs, TimeoutArgs, WorkloadArgs, CAPACITY_TARGET};
use crate::capacity::{self, export, CapacityConfig};
use crate::drive::{self, LoadConfig};
use crate::measure::capacity::{geometric, CapacityPlan, DEFAULT_THROUGHPUT_TOLERANCE};
use crate::plan::schedule::MAX_RATE;

#[derive(Args, Debug)]
pub(super) struct CapacityArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The objective (required) and the share of a step's requests that must meet it for the
    /// step to pass.
    #[command(flatten)]
    slo: SloArgs,
    /// The coarse rates to step through, req/s, e.g. 1,2,4,8 (else --start, --factor, --max-steps).
    #[arg(long, conflicts_with_all = ["start", "factor", "max_steps"])]
    rates: Option<String>,
    /// Search by concurrency instead of rate: closed-loop steps at these numbers of requests in
    /// flight, e.g. 1,2,4,8,16, bisected on whole numbers.
    #[arg(long, value_name = "LIST", conflicts_with_all = ["rates", "start", "factor", "max_steps", "arrival", "burstiness", "max_concurrency"])]
    concurrencies: Option<String>,
    /// First coarse rate, req/s.
    #[arg(long, default_value_t = 1.0)]
    start: f64,
    /// Each coarse rate is the last times this.
    #[arg(long, default_value_t = 2.0)]
    factor: f64,
    /// Coarse steps at most.
    #[arg(long, default_value_t = 8)]
    max_steps: u32,
    /// Bisections between the last passing and the first failing rate.
    #[arg(long, default_value_t = 4)]
    refine: u32,
    /// A step whose failed-request share is above this stops the search (the server is failing).
    #[arg(long, default_value_t = 0.05)]
    max_failed: f64,
    /// A step whose achieved throughput (successful requests per second, first arrival to last
    /// end) is below (1 - this) x the rate its requests arrived at fails: the server fell behind.
    #[arg(long, default_value_t = DEFAULT_THROUGHPUT_TOLERANCE)]
    throughput_tolerance: f64,
    /// Requests per step, at least (default 200). Each step runs long enough for steady state:
    /// its arrivals span at least 20 times the mean request time (send to end), measured by the
    /// steps before it and by itself; a step whose requests met the SLO but that was shorter runs
    /// again, longer (at most twice; then it fails).
    #[arg(long, conflicts_with = "duration")]
    num_requests: Option<u64>,
    /// Length of each step's arrivals, at least, e.g. 60s (lengthened by the same rule).
    #[arg(long)]
    duration: Option<String>,
    #[command(flatten)]
    arrivals: ArrivalArgs,
    #[command(flatten)]
    workload: WorkloadArgs,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// Write an SVG of the latency-throughput curve.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Output format: table, json, or csv (one row per step, in the order the steps ran).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

/// Requests per step when neither --num-requests nor --duration is given (the step rule may ask
/// for more).
const STEP_REQUESTS: u64 = 200;

impl CapacityArgs {
    /// Whether the run is simulated (`--simulate`).
    pub(super) fn simulate(&self) -> bool {
        self.server.paused()
    }
}

/// A coarse rate given by `--{flag}`, in the range an open loop schedules
/// ([`crate::plan::schedule::check_rate`]).
fn rate(flag: &str, v: f64) -> anyhow::Result<f64> {
    crate::plan::schedule::check_rate(flag, v).map_err(anyhow::Error::msg)
}

/// The most coarse steps `--max-steps` may ask for.
const MAX_COARSE_STEPS: u32 = 1000;

fn plan(a: &CapacityArgs) -> anyhow::Result<CapacityPlan> {
    let target = a.slo.target()?.unwrap_or(CAPACITY_TARGET);
    if !(0.0..1.0).contains(&a.throughput_tolerance) {
        anyhow::bail!(
            "--throughput-tolerance must be a share in [0, 1), e.g. 0.1, got {}",
            compact(a.throughput_tolerance)
        );
    }
    if !(0.0..=1.0).contains(&a.max_failed) {
        anyhow::bail!(
            "--max-failed must be a share in [0, 1], got {}",
            compact(a.max_failed)
        );
    }
    let coarse = match (&a.concurrencies, &a.rates) {
        (Some(list), _) => {
            let mut v = Vec::new();
            for c in list_items("concurrencies", list)? {
                let x: u32 = c.trim().parse().map_err(|_| {
                    anyhow::anyhow!("--concurrencies: {c:?} is not a whole number of requests")
                })?;
                if x == 0 {
                    anyhow::bail!("--concurrencies must be at least 1, got 0");
                }
                v.push(f64::from(x));
            }
            if v.windows(2).any(|w| w[1] <= w[0]) {
                anyhow::bail!("--concurrencies must increase, got {list}");
            }
            v
        }
        (None, Some(list)) => {
            let mut v = Vec::new();
            for r in list_items("rates", list)? {
                let x: f64 = r
                    .trim()
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--rates: {r:?} is not a number"))?;
                v.push(rate("rates", x)?);
            }
            if v.windows(2).any(|w| w[1] <= w[0]) {
                anyhow::bail!("--rates must increase, got {list}");
            }
            v
        }
        (None, None) => {
            rate("start", a.start)?;
            if !(a.factor.is_finite() && a.factor > 1.0) {
                anyhow::bail!("--factor must be above 1, got {}", compact(a.factor));
            }
            // Each coarse step is a run of its own: past a thousand the number is a typo, and the
            // rates are listed before the search starts.
            if !(1..=MAX_COARSE_STEPS).contains(&a.max_steps) {
                anyhow::bail!(
                    "--max-steps must be from 1 to {MAX_COARSE_STEPS}, got {}",
                    a.max_steps
                );
            }
            // Every step is checked before the first runs: a step past the most an open loop
            // schedules would end the search midway.
            let rates = geometric(a.start, a.factor, a.max_steps);
            if let Some(k) = rates.iter().position(|&r| r > MAX_RATE) {
                anyhow::bail!(
                    "--start {} times --factor {} reaches {} req/s at step {k} of --max-steps {}, past the most an open loop schedules ({MAX_RATE:.0} req/s): lower --factor, --start or --max-steps",
                    compact(a.start),
                    compact(a.factor),
                    compact(rates[k]),
                    a.max_steps
                );
            }
            rates
        }
    };
    Ok(CapacityPlan {
        coarse,
        refine: a.refine,
        target,
        max_failed: a.max_failed,
        integer: a.concurrencies.is_some(),
        throughput_tolerance: a.throughput_tolerance,
    })
}

/// The search the flags ask for, every flag checked before anything starts: all but where it
/// goes, which [`super::common::destination`] resolves after. A search goes only from its plan
/// ([`CapacityRun::config`]).
struct CapacityRun {
    plan: CapacityPlan,
    stop: crate::plan::Stop,
    /// The first step's schedule; each step has its own level and length.
    schedule: crate::plan::Schedule,
    workload: crate::plan::Workload,
    /// The workload's requests, checked once for every step.
    planner: crate::plan::Planner,
    slo: crate::report::Slo,
    timeouts: crate::plan::Timeouts,
    out: PathBuf,
}

/// The plan of the search the flags ask for (see [`CapacityRun`]); `trace`: the `--trace`
/// file, read.
fn capacity_run(
    a: &CapacityArgs,
    trace: Option<std::sync::Arc<crate::plan::Trace>>,
) -> anyhow::Result<CapacityRun> {
    use crate::plan::{Arrivals, LenDist, Schedule, Stop, Workload};
    a.server.check()?;
    let Some(slo) = a.slo.slo()? else {
        anyhow::bail!("--slo is required, e.g. --slo ttft=500,tpot=50 (ms)");
    };
    let plan = plan(a)?;
    let (wl, arr) = (&a.workload, &a.arrivals);
    let input = LenDist::parse(&wl.input_len).map_err(|e| anyhow::anyhow!("--input-len: {e}"))?;
    let output =
        LenDist::parse(&wl.output_len).map_err(|e| anyhow::anyhow!("--output-len: {e}"))?;
    let stop = match (&a.duration, a.num_requests) {
        (Some(d), None) => Stop::Duration(parse_duration(d)?),
        (None, Some(0)) => anyhow::bail!("--num-requests must be at least 1"),
        (None, Some(n)) => Stop::Requests(n),
        (None, None) => Stop::Requests(STEP_REQUESTS),
        (Some(_), Some(_)) => anyhow::bail!("give --num-requests or --duration, not both"),
    };
    // A trace gives the requests (lengths, prefixes); the steps give the arrivals.
    wl.check_prefix(trace.is_some())?;
    let workload = match (trace, wl.prefix_groups) {
        (Some(t), _) => Workload::Trace(t),
        (None, Some(groups)) => Workload::SharedPrefix {
            groups,
            prefix_len: wl.prefix_len,
            input,
            output,
        },
        (None, None) => Workload::Random { input, output },
    };
    // Checks the arrival settings once, at the first level.
    let arrivals = if plan.integer {
        Arrivals::Closed {
            concurrency: plan.coarse[0] as u32,
        }
    } else {
        Arrivals::Open {
            rate: plan.coarse[0],
            kind: arr.arrival,
            burstiness: arr.burstiness,
        }
    };
    let schedule = Schedule::new(arrivals, stop, a.run.seed).map_err(anyhow::Error::msg)?;
    let out = a.run.out.clone().unwrap_or_else(|| default_out("capacity"));
    // The steps' files go beside the base path: a folder is no base.
    if let Some(what) = crate::results::not_a_file(&out) {
        anyhow::bail!(
            "--out {}: {what}, not a base path for the steps' files (NAME.step-N.jsonl); name a file",
            out.display()
        );
    }
    if let Some(why) = crate::results::not_in_a_folder(&out) {
        anyhow::bail!("--out {}: {why}", out.display());
    }
    let written = super::paths::written(&[("--plot", a.plot.as_ref())]);
    super::paths::refuse_overwrites(
        &super::paths::results_and_manifests("the results file", [&out]),
        &written,
    )?;
    if let Some(p) = &a.plot {
        super::paths::check_writable("--plot", p)?;
    }
    super::paths::refuse_overwriting_named(
        &out,
        &written,
        "a step's results (NAME.step-N.jsonl)",
        |n| capacity::is_step_name(&out, n),
    )?;
    let mut timeouts = a.timeouts.timeouts()?;
    timeouts.caps = a.server.stream_caps()?;
    // The first step's run is checked as a load run is: its file must hold nothing unless
    // resumed.
    let planner = drive::load::check_run(
        a.server.api,
        &workload,
        a.run.seed,
        a.run.ids.range(),
        &capacity::step_path(&out, 0),
        a.run.resume,
    )?;
    Ok(CapacityRun {
        plan,
        stop,
        schedule,
        workload,
        planner,
        slo,
        timeouts,
        out,
    })
}

impl CapacityRun {
    /// The search of this plan at `server` (as [`super::common::destination`] resolved it), with
    /// the flags that needed no check.
    fn config(self, a: &CapacityArgs, server: drive::Destination) -> CapacityConfig {
        // Each step sets its own schedule, results file and command line.
        let load = LoadConfig {
            timeouts: self.timeouts,
            slo: self.slo,
            scrape_metrics: false,
            ..super::load::shared_config(
                &a.server,
                &a.run,
                a.arrivals.max_concurrency,
                server,
                self.schedule,
                self.workload,
                self.out.clone(),
            )
        };
        CapacityConfig {
            load,
            arrival: a.arrivals.arrival,
            burstiness: a.arrivals.burstiness,
            stop: self.stop,
            plan: self.plan,
            planner: self.planner,
            slo_text: a.slo.slo.clone().unwrap_or_default(),
            out: self.out,
            resume: a.run.resume,
        }
    }
}

pub(super) async fn run_capacity(a: CapacityArgs) -> Result<ExitCode, CliError> {
    let trace = a.workload.trace.read(a.workload.prefix_len)?;
    let run = capacity_run(&a, trace).map_err(CliError::Usage)?;
    let (server, mock) = super::common::destination(&a.server, &run.timeouts)
        .await
        .map_err(CliError::connecting)?;
    let cfg = run.config(&a, server);
    eprintln!(
        "capacity search against {} ({}), SLO {} for {:.0}% of requests, step results beside {}",
        cfg.load.target.shown_url(),
        cfg.load.target.dialect.as_str(),
        cfg.slo_text,
        cfg.plan.target * 100.0,
        cfg.out.display()
    );
    let wall0 = std::time::Instant::now();
    let model0 = tokio::time::Instant::now();
    let outcome = capacity::run_capacity(&cfg).await;
    if cfg.load.simulated {
        // The engine path's steps each run on a virtual clock of their own, from instant 0:
        // their durations (completed requests over their throughput) add up.
        let model = match (&outcome, a.server.simulate) {
            (Ok(o), true) => std::time::Duration::from_secs_f64(o.report.steps_duration_s()),
            _ => model0.elapsed(),
        };
        super::common::simulated_note(wall0, model, a.server.simulate);
    }
    if let Some(m) = mock {
        m.shutdown().await;
    }
    let outcome = outcome?;
    if outcome.interrupted {
        eprintln!("interrupted: rerun with --resume (same flags) to continue the search");
        return Ok(ExitCode::from(exit::INTERRUPTED));
    }
    if outcome.resumed_steps > 0 {
        eprintln!(
            "--resume: {} steps read back from their files",
            outcome.resumed_steps
        );
    }
    let r = &outcome.report;
    let gate = r.gate(&cfg.load.slo);
    match a.format {
        Format::Json => {
            let mut v = export::json(r);
            v["slo_gate"] = serde_json::to_value(&gate).map_err(anyhow::Error::from)?;
            v["slo_gate"]["passed"] = serde_json::Value::Bool(gate.passed());
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(anyhow::Error::from)?
            )
        }
        Format::Csv => {
            print!("{}", export::csv(r)?);
            eprintln!("{}", r.answer());
        }
        Format::Table => print!("{}", export::table(r)),
    }
    if let Some(p) = &a.plot {
        let svg = export::svg(r)?;
        super::paths::write_whole(p, &svg)?;
        eprintln!("plot written to {}", p.display());
    }
    if r.capacity.is_none() {
        eprintln!("no {} meets the SLO", r.level.name());
    }
    // The gate's line is the last one printed: passed when some level met the target.
    super::load::print_gate(&gate, a.format);
    if r.capacity.is_none() {
        return Ok(ExitCode::from(exit::SLO_GATE));
    }
    if r.server_failing.is_some() {
        return Ok(ExitCode::from(exit::FAILED_REQUESTS));
    }
    Ok(ExitCode::SUCCESS)
}
