//! `bench-client load`: the flags of a load run and its run.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::exit::{self, CliError};
use crate::report::export::csv::LoadRequests;

use super::common::{
    compact, default_out, parse_duration, redact_args, Format, ServerArgs, MAX_FLAG_SECS,
};
use super::flags::{ArrivalArgs, RunArgs, SloArgs, TimeoutArgs, WorkloadArgs, LOAD_WARMUP};
use crate::drive::{self, LoadConfig, SessionsConfig};
use crate::plan::{Planner, SessionPlan, Sessions, Trace};

#[derive(Args, Debug)]
pub(super) struct LoadArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    sessions: super::sessions::SessionArgs,
    /// Closed loop: keep N requests (with --sessions: sessions) in flight (over all shards together).
    #[arg(long, conflicts_with_all = ["request_rate", "trace"])]
    concurrency: Option<u32>,
    /// Open loop: requests per second (over all shards together).
    #[arg(long, conflicts_with = "trace")]
    request_rate: Option<f64>,
    #[command(flatten)]
    arrivals: ArrivalArgs,
    /// Measured requests (over all shards together).
    #[arg(long, conflicts_with = "duration")]
    num_requests: Option<u64>,
    /// Run length, e.g. 60s, 5m, 500ms (no request is started or scheduled after it).
    #[arg(long)]
    duration: Option<String>,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Run the I-th of N slices of the same schedule (0-based), e.g. 0/4.
    #[arg(long, default_value = "0/1")]
    shard: String,
    /// Shared start time, unix ms, at most 30 days ahead; every shard of a run gets the same value.
    #[arg(long)]
    start_at: Option<u64>,
    #[command(flatten)]
    slo: SloArgs,
    #[command(flatten)]
    run: RunArgs,
    /// Do not scrape /metrics before and after.
    #[arg(long)]
    no_metrics: bool,
    /// With --simulate: skip the saturation probes (the run again 5% slower, and the capacity of a
    /// full scheduler) that end a simulated run.
    #[arg(long)]
    no_saturation: bool,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// Summary format: table, json, or csv (one row per request of the run).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

impl LoadArgs {
    /// Whether the run is simulated (`--simulate`).
    pub(super) fn simulate(&self) -> bool {
        self.server.paused()
    }
}

/// Prints a load summary as a table or JSON; CSV is one row per request, of `records`.
pub(super) fn print_load(
    summary: &crate::report::LoadSummary,
    format: Format,
    csv_rows: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    match format {
        Format::Table => print!("{}", crate::report::export::table::load(summary)),
        Format::Json => println!("{}", crate::report::export::json::load(summary)),
        Format::Csv => print!("{}", csv_rows()?),
    }
    Ok(())
}

/// Prints the SLO gate's line and says whether it failed: on stdout after a table, on stderr
/// after JSON or CSV (so that stdout stays one document), last either way.
pub(super) fn print_gate(gate: &crate::report::gate::SloGate, format: Format) -> bool {
    match format {
        Format::Table => println!("{}", gate.line()),
        Format::Json | Format::Csv => eprintln!("{}", gate.line()),
    }
    !gate.passed()
}

/// The load run the flags ask for, every flag checked before anything starts: all but where
/// it goes, which [`super::common::destination`] resolves after. A run goes only from its
/// plan ([`LoadPlan::config`]).
struct LoadPlan {
    schedule: crate::plan::Schedule,
    workload: crate::plan::Workload,
    shard: crate::plan::Shard,
    slo: crate::report::Slo,
    timeouts: crate::plan::Timeouts,
    out: std::path::PathBuf,
    /// The planner of the run's requests, from the run's one check.
    planner: Planner,
    /// With `--sessions`: the sessions and their plan.
    sessions: Option<(Sessions, SessionPlan)>,
}

/// Refuses a `--start-at` (unix ms) more than 30 days after `now_ms`, as every time flag is
/// ([`MAX_FLAG_SECS`]): a start that far ahead is a typo (seconds in ns, a wrong year).
fn check_start_at(start_at: Option<u64>, now_ms: u64) -> anyhow::Result<()> {
    let Some(at) = start_at else {
        return Ok(());
    };
    let ahead_s = at.saturating_sub(now_ms) as f64 / 1e3;
    if ahead_s > MAX_FLAG_SECS {
        anyhow::bail!(
            "--start-at {at} is {} days from now: it may be at most 30 days ahead (unix ms, e.g. $(( $(date +%s) * 1000 + 60000 )) for a minute from now)",
            compact((ahead_s / 86_400.0).round())
        );
    }
    Ok(())
}

/// The plan of the load run the flags ask for (see [`LoadPlan`]); `trace`: the `--trace` file,
/// read.
fn load_plan(a: &LoadArgs, trace: Option<Arc<Trace>>) -> anyhow::Result<LoadPlan> {
    use crate::plan::{Arrivals, LenDist, Schedule, Shard, Stop, Workload};
    a.server.check()?;
    let slo = a.slo.slo()?.unwrap_or_default();
    if a.slo.target()?.is_some() && !slo.is_set() {
        anyhow::bail!("--slo-target needs --slo, e.g. --slo ttft=500,tpot=50 --slo-target 0.95");
    }
    if a.concurrency.is_some() && a.arrivals.max_concurrency.is_some() {
        anyhow::bail!("--max-concurrency limits an open loop: leave it out with --concurrency");
    }
    check_start_at(a.start_at, crate::net::unix::unix_ms_now())?;
    let (wl, arr) = (&a.workload, &a.arrivals);
    let shard = Shard::parse(&a.shard).map_err(anyhow::Error::msg)?;
    let input = LenDist::parse(&wl.input_len).map_err(|e| anyhow::anyhow!("--input-len: {e}"))?;
    let output =
        LenDist::parse(&wl.output_len).map_err(|e| anyhow::anyhow!("--output-len: {e}"))?;
    let sessions = a.sessions.sessions(&input, &output)?;
    if sessions.is_some() && a.server.simulate && a.run.resume {
        anyhow::bail!("--resume of a multi-turn run goes over HTTP only: use --simulate-http instead of --simulate");
    }
    wl.check_prefix(trace.is_some())?;
    let (workload, arrivals) = match (trace, wl.prefix_groups) {
        // A closed loop of sessions (by default all of them at once); the workload is the first
        // turn's shape.
        _ if sessions.is_some() => {
            let all = sessions
                .as_ref()
                .map_or(1, |s| u32::try_from(s.sessions).unwrap_or(u32::MAX));
            let concurrency = a.concurrency.unwrap_or(all);
            (
                Workload::Random { input, output },
                Arrivals::Closed { concurrency },
            )
        }
        (Some(t), _) => {
            let offsets_ns = t.offsets_ns();
            (Workload::Trace(t), Arrivals::Trace { offsets_ns })
        }
        (None, groups) => {
            let w = match groups {
                Some(groups) => Workload::SharedPrefix {
                    groups,
                    prefix_len: wl.prefix_len,
                    input,
                    output,
                },
                None => Workload::Random { input, output },
            };
            let arr = match (a.concurrency, a.request_rate) {
                (Some(c), None) => Arrivals::Closed { concurrency: c },
                (None, Some(rate)) => Arrivals::Open {
                    rate,
                    kind: arr.arrival,
                    burstiness: arr.burstiness,
                },
                _ => anyhow::bail!("give --concurrency N (closed loop) or --request-rate R (open loop), or --trace"),
            };
            (w, arr)
        }
    };
    let turns = sessions
        .as_ref()
        .map_or(0, |s| s.sessions.saturating_mul(u64::from(s.turns)));
    let stop = match (&a.duration, a.num_requests, &arrivals) {
        _ if sessions.is_some() => Stop::Requests(turns),
        (Some(d), None, _) => Stop::Duration(parse_duration(d)?),
        (None, Some(n), _) => Stop::Requests(n),
        (None, None, Arrivals::Trace { offsets_ns }) => Stop::Requests(offsets_ns.len() as u64),
        (None, None, _) => anyhow::bail!("give --num-requests N or --duration (e.g. 60s)"),
        (Some(_), Some(_), _) => anyhow::bail!("give --num-requests or --duration, not both"),
    };
    let schedule = Schedule::new(arrivals, stop, a.run.seed).map_err(anyhow::Error::msg)?;
    // Shard i of N sends requests i, i + N, ...: past the last request it would send none.
    if let Stop::Requests(n) = schedule.stop {
        if n <= u64::from(shard.index) {
            anyhow::bail!(
                "--shard {}: of {n} requests this shard would send none; give more requests or fewer shards",
                a.shard
            );
        }
    }
    let mut timeouts = a.timeouts.timeouts()?;
    timeouts.caps = a.server.stream_caps()?;
    let out = a.run.out.clone().unwrap_or_else(|| default_out("load"));
    // The run's one check, of the dialect given.
    let planner = drive::load::check_run(
        a.server.api,
        &workload,
        a.run.seed,
        a.run.ids.range(),
        &out,
        a.run.resume,
    )?;
    let sessions = match sessions {
        Some(s) => {
            let plan = drive::sessions::check_sessions(
                &s,
                &schedule.arrivals,
                arr.max_concurrency,
                a.run.seed,
                a.run.ids.range(),
            )?;
            Some((s, plan))
        }
        None => None,
    };
    Ok(LoadPlan {
        schedule,
        workload,
        shard,
        slo,
        timeouts,
        out,
        planner,
        sessions,
    })
}

impl LoadPlan {
    /// The run of this plan at `server` (as [`super::common::destination`] resolved it), with
    /// the flags that needed no check; the planner and sessions it runs from.
    fn config(
        self,
        a: &LoadArgs,
        server: drive::Destination,
    ) -> (LoadConfig, Planner, Option<(Sessions, SessionPlan)>) {
        let cfg = LoadConfig {
            timeouts: self.timeouts,
            shard: self.shard,
            start_at_unix_ms: a.start_at,
            slo: self.slo,
            scrape_metrics: !a.no_metrics,
            ..shared_config(
                &a.server,
                &a.run,
                a.arrivals.max_concurrency,
                server,
                self.schedule,
                self.workload,
                self.out,
            )
        };
        (cfg, self.planner, self.sessions)
    }
}

/// The load run of what `load` and every `capacity` step take from the same flags: the server's
/// stamping and clock, the run's warm-up, resume, seed, prompt ids and progress bar, the open
/// loop's concurrency cap and the command line; the caller sets the rest.
pub(super) fn shared_config(
    server_args: &ServerArgs,
    run: &RunArgs,
    max_concurrency: Option<u32>,
    server: drive::Destination,
    schedule: crate::plan::Schedule,
    workload: crate::plan::Workload,
    out: std::path::PathBuf,
) -> LoadConfig {
    LoadConfig {
        stamping: server_args.stamping(),
        simulated: server_args.paused(),
        warmup: run.warmup(LOAD_WARMUP),
        max_concurrency,
        resume: run.resume,
        seed: run.seed,
        token_id_range: run.ids.range(),
        progress: run.progress(),
        command: redact_args(std::env::args()),
        engine: server.engine,
        ..LoadConfig::new(server.target, schedule, workload, out)
    }
}

pub(super) async fn run_load(a: LoadArgs) -> Result<ExitCode, CliError> {
    // A trace that cannot be used is a data error (65); the flags around it are usage errors (64).
    let trace = a.workload.trace.read(a.workload.prefix_len)?;
    let plan = load_plan(&a, trace).map_err(CliError::Usage)?;
    let (server, mock) = super::common::destination(&a.server, &plan.timeouts)
        .await
        .map_err(CliError::connecting)?;
    let (cfg, planner, sessions) = plan.config(&a, server);
    // The saturation probes run the same requests again on the engine path (a whole run: not a
    // shard's slice, a resumed piece or a multi-turn run), with the run's prompt salt.
    #[cfg(feature = "embedded-mock")]
    let probe = cfg
        .engine
        .clone()
        .filter(|_| !a.no_saturation && sessions.is_none() && cfg.shard.count == 1 && !cfg.resume)
        .map(|mock| (mock, planner.clone()));
    let out = cfg.out.clone();
    eprintln!(
        "load run against {} ({}), shard {}, results in {}",
        cfg.target.shown_url(),
        cfg.target.dialect.as_str(),
        cfg.shard,
        out.display()
    );
    let cpu0 = drive::process_cpu_seconds();
    let wall0 = std::time::Instant::now();
    let model0 = tokio::time::Instant::now();
    let outcome = match sessions {
        Some((sessions, plan)) => {
            let run = SessionsConfig {
                run: cfg.clone(),
                sessions,
            };
            drive::run_sessions_with(&run, planner, plan).await
        }
        None => drive::run_load_with(&cfg, planner).await,
    };
    if cfg.simulated {
        let model = outcome
            .as_ref()
            .ok()
            .and_then(|o| o.model_time)
            .unwrap_or_else(|| model0.elapsed());
        super::common::simulated_note(wall0, model, a.server.simulate);
    }
    let cpu = drive::process_cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let wall = wall0.elapsed().as_secs_f64();
    let embedded = mock.is_some();
    if let Some(m) = mock {
        m.shutdown().await;
    }
    let outcome = outcome?;
    // The saturation probes' lines, and their figures for the JSON.
    #[cfg(not(feature = "embedded-mock"))]
    let saturate = || -> Option<(Vec<String>, serde_json::Value)> { None };
    #[cfg(feature = "embedded-mock")]
    let saturate = || {
        probe
            .as_ref()
            .filter(|_| outcome.summary.succeeded > 0)
            .map(|(mock, planner)| {
                eprintln!("saturation: probing (the run again 5% slower, and a full scheduler; --no-saturation skips it)");
                match crate::twin::headroom::headroom(&cfg, mock, planner, &outcome.summary) {
                    Ok(h) => (h.lines(), h.to_json()),
                    Err(e) => (
                        vec![format!("saturation: not measured: {e:#}")],
                        serde_json::json!({ "error": format!("{e:#}") }),
                    ),
                }
            })
    };
    // The JSON carries the probes' figures; a table or CSV is out before they run, so that an
    // interrupted probe loses nothing of the run's.
    let json = matches!(a.format, Format::Json);
    let saturation = if json { saturate() } else { None };
    match a.format {
        // The server's /metrics in the JSON too, as `merge --format json` gives them; and the
        // saturation probes of a simulated run.
        Format::Json => {
            let mut v = crate::report::export::json::load(&outcome.summary);
            if let Some(m) = &outcome.metrics {
                v["server_metrics"] = m.to_json();
            }
            if let Some((_, j)) = &saturation {
                v["saturation"] = j.clone();
            }
            println!("{v}");
        }
        // CSV is one row per request: the records of this run, read back from its file.
        _ => print_load(&outcome.summary, a.format, || {
            LoadRequests::of_files(std::slice::from_ref(&out), outcome.summary.slo)
        })?,
    }
    let saturation = if json { saturation } else { saturate() };
    for l in saturation.iter().flat_map(|(lines, _)| lines) {
        eprintln!("{l}");
    }
    if let crate::plan::Workload::Trace(t) = &cfg.workload {
        if let Some((cached, prompt)) = t.predicted_hits(1).filter(|(_, p)| *p > 0) {
            let run = outcome
                .summary
                .derived()
                .cache_hit_rate
                .map_or("not reported".into(), |r| format!("{r:.3}"));
            eprintln!(
                "prefix cache: the trace's block ids predict a hit ratio of {:.3} (requests served in order, nothing evicted, page size 1); this run: {run}",
                cached as f64 / prompt as f64
            );
        }
    }
    match cpu {
        Some(c) if wall > 0.0 => eprintln!(
            "client CPU: {c:.2} s user + system over {wall:.2} s wall ({:.0}% of one core){}",
            100.0 * c / wall,
            if embedded {
                "; this process also ran the embedded mock server"
            } else {
                ""
            }
        ),
        _ => eprintln!("client CPU: not available on this system"),
    }
    if let Some(m) = &outcome.metrics {
        if matches!(a.format, Format::Table) {
            print!("{}", m.render());
        } else {
            eprint!("{}", m.render());
        }
    }
    if outcome.skipped > 0 {
        eprintln!(
            "--resume: skipped {} requests already in {}; `bench-client merge {}` summarises the whole file",
            outcome.skipped,
            out.display(),
            out.display()
        );
    }
    eprintln!("{} records written to {}", outcome.written, out.display());
    if outcome.interrupted {
        eprintln!("interrupted: rerun with --resume (same --seed and --shard) to continue");
        return Ok(ExitCode::from(exit::INTERRUPTED));
    }
    let s = &outcome.summary;
    let failed = s.requests.saturating_sub(s.succeeded);
    if let Some(why) = &outcome.server_gone {
        eprintln!("{why}");
    }
    // The gate judges every request of the run (a resumed run: of this invocation); its line
    // is the last one printed.
    let gate = a
        .slo
        .target()?
        .map(|t| crate::report::gate::SloGate::new(&s.slo, t, s.good, s.requests));
    let gate_failed = || gate.as_ref().is_some_and(|g| print_gate(g, a.format));
    if failed > 0 {
        let server_gone = outcome.server_gone.is_some()
            || s.succeeded == 0
                && s.failures.keys().all(|k| {
                    crate::results::ErrorKind::parse(k)
                        .request()
                        .is_some_and(|k| k.server_may_be_down())
                });
        eprintln!(
            "{failed} of {} requests failed ({}); their errors are in {}",
            s.requests,
            s.failures
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", "),
            out.display()
        );
        gate_failed();
        return Ok(ExitCode::from(if server_gone {
            exit::SERVER_GONE
        } else {
            exit::FAILED_REQUESTS
        }));
    }
    if gate_failed() {
        return Ok(ExitCode::from(exit::SLO_GATE));
    }
    Ok(ExitCode::SUCCESS)
}
