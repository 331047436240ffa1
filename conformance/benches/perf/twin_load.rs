//! `twin-load`: a 10,000-request open-loop load run against a preset on the paused clock (what
//! `load --simulate` runs), its wall time against the model time it covered, and its summary
//! against a real-clock run of the same schedule against the same mock.

use anyhow::{anyhow, Result};
use bench_client::drive::{run_load, LoadConfig, LoadOutcome};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{ArrivalKind, Arrivals, LenDist, Schedule, Stop, Workload};
use serde_json::json;
use tokio::time::Instant;

use crate::client::{bench_stamping, multi_thread_runtime, paused_runtime, target};
use crate::mock::Mock;
use crate::report::Report;
use crate::DEMO;

/// Requests (`PERF_TWIN_REQUESTS` overrides, for a quick look).
const REQUESTS: u64 = 10_000;
const RATE: f64 = 10.0;

fn sets() -> [(&'static str, String); 3] {
    // Passes long enough that neither the paused clock's late reads (up to 1 ms, a pass's events
    // after its first) nor the real clock's timer move the medians much.
    [
        ("prefill_base_s", "0.05".to_string()),
        ("decode_base_s", "0.01".to_string()),
        ("max_running_requests", "512".to_string()),
    ]
}

async fn one(stamping: Stamping, simulated: bool, requests: u64) -> Result<(LoadOutcome, f64)> {
    let mock = Mock::start(DEMO, &sets(), false).await?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("load.jsonl");
    let schedule = Schedule::new(
        Arrivals::Open {
            rate: RATE,
            kind: ArrivalKind::Poisson,
            burstiness: 1.0,
        },
        Stop::Requests(requests),
        5,
    )
    .map_err(|e| anyhow!(e))?;
    let workload = Workload::Random {
        input: LenDist::Fixed { n: 256 },
        output: LenDist::Fixed { n: 32 },
    };
    let cfg = LoadConfig {
        stamping,
        prompt_salt: Some(5),
        seed: 5,
        token_id_range: (100, 30000),
        scrape_metrics: false,
        command: "perf twin-load".into(),
        simulated,
        ..LoadConfig::new(target(mock.url()), schedule, workload, out)
    };
    let model0 = Instant::now();
    let outcome = run_load(&cfg).await?;
    let model_s = model0.elapsed().as_secs_f64();
    mock.stop().await;
    Ok((outcome, model_s))
}

fn p50_ms(o: &LoadOutcome, metric: &str) -> Option<f64> {
    o.summary
        .metrics
        .get(metric)
        .and_then(|m| m.percentile(50.0))
        .map(|ns| ns as f64 / 1e6)
}

pub(crate) fn run() -> Result<Report> {
    let requests = std::env::var("PERF_TWIN_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(REQUESTS);
    let mut r = Report::new("twin-load");
    r.note(format!(
        "preset {DEMO} with prefill_base_s 0.05, decode_base_s 0.01, max_running_requests 512; open \
         loop, Poisson arrivals at {RATE} req/s, {requests} requests, input 256 tokens, output 32; \
         bench_client::drive::run_load against the mock in-process: once on a current-thread \
         runtime with a paused clock (load --simulate), once on the real clock (multi-thread runtime)"
    ));
    // Outside the runtime tokio's clock is the real one.
    let wall0 = Instant::now();
    let (sim, sim_model_s) = paused_runtime()?.block_on(one(Stamping::Socket, true, requests))?;
    let sim_wall = wall0.elapsed().as_secs_f64();
    let wall1 = Instant::now();
    let (real, _) = multi_thread_runtime()?.block_on(one(bench_stamping(), false, requests))?;
    let real_wall = wall1.elapsed().as_secs_f64();
    r.row(
        "simulated run: model time / wall time",
        ">= 100x",
        format!(
            "{:.0}x ({sim_model_s:.1} s of model time in {sim_wall:.2} s)",
            sim_model_s / sim_wall
        ),
    );
    r.row("real-clock run wall time", "-", format!("{real_wall:.1} s"));
    r.row(
        "requests written (simulated, real)",
        format!("{requests}"),
        format!("{}, {}", sim.written, real.written),
    );
    let mut diffs = serde_json::Map::new();
    for (metric, label) in [("ttft", "TTFT p50"), ("tpot", "TPOT p50")] {
        let (a, b) = (p50_ms(&sim, metric), p50_ms(&real, metric));
        let d = a.zip(b).map(|(a, b)| 100.0 * (a - b) / b);
        r.row(
            format!("{label}: simulated vs real clock"),
            "within 2%",
            match (a, b, d) {
                (Some(a), Some(b), Some(d)) => format!("{a:.3} ms vs {b:.3} ms ({d:+.2}%)"),
                _ => "n/a".into(),
            },
        );
        diffs.insert(
            metric.into(),
            json!({ "simulated_ms": a, "real_ms": b, "diff_pct": d }),
        );
    }
    r.set("p50", json!(diffs));
    r.set("sim_model_s", json!(sim_model_s));
    r.set("sim_wall_s", json!(sim_wall));
    r.set("real_wall_s", json!(real_wall));
    Ok(r)
}
