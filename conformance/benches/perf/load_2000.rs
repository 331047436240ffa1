//! `load-2000`: `bench_client::drive::run_load` at 2,000 concurrent streams, TTFT against ground
//! truth.

use anyhow::{anyhow, Result};
use bench_client::plan::Timeouts;
use serde_json::json;
use tokio::time::Instant;

use crate::client::{bench_stamping, multi_thread_runtime, stamping_name, target};
use crate::lags::intake_ms;
use crate::machine::cpu_seconds;
use crate::mock::Mock;
use crate::report::{fmt_counts, fmt_cpu, ns_to_ms, Report};
use crate::DEMO;

const LOAD_CONCURRENCY: u32 = 2000;
const LOAD_REQUESTS: u64 = 8000;

/// `bench_client::drive::run_load`, closed loop at 2,000 concurrent streams, against the mock; each
/// record's TTFT against the mock's ground truth (from the request's arrival at the mock's socket to
/// the instant its HTTP layer sent the first chunk).
pub(crate) fn run(external: bool) -> Result<Report> {
    use bench_client::drive::LoadConfig;
    use bench_client::plan::{Arrivals, LenDist, Schedule, Stop, Workload};

    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        let sets = [("max_running_requests", "2048".to_string())];
        let mock = Mock::start(DEMO, &sets, external).await?;
        let mut r = Report::for_mock("load-2000", external);
        r.note(format!(
            "mock: {}; preset {DEMO} with max_running_requests = 2048; bench_client::drive::run_load, \
             closed loop at concurrency {LOAD_CONCURRENCY}, {LOAD_REQUESTS} requests, input 256 \
             tokens, output uniform 32..96 tokens (so the workers drift apart after the first round); \
             client stamping: {} (PERF_CLIENT_STAMPING); overhead = the record's TTFT (from its \
             send; the time from its scheduled start to the send is client_queue_time) minus the \
             ground truth (from the request's arrival at the mock's socket to the first chunk's \
             sent_ns)",
            mock.label(),
            stamping_name()
        ));
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("load.jsonl");
        let schedule = Schedule::new(
            Arrivals::Closed {
                concurrency: LOAD_CONCURRENCY,
            },
            Stop::Requests(LOAD_REQUESTS),
            5,
        )
        .map_err(|e| anyhow!(e))?;
        let workload = Workload::Random {
            input: LenDist::Fixed { n: 256 },
            output: LenDist::Uniform { lo: 32, hi: 96 },
        };
        let cfg = LoadConfig {
            stamping: bench_stamping(),
            timeouts: Timeouts::default(),
            prompt_salt: Some(5),
            seed: 5,
            token_id_range: (100, 30000),
            scrape_metrics: false,
            command: "perf load-2000".into(),
            ..LoadConfig::new(target(mock.url()), schedule, workload, out.clone())
        };
        let cpu0 = cpu_seconds(None);
        let started = Instant::now();
        let outcome = bench_client::drive::run_load(&cfg).await?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(None).zip(cpu0).map(|(a, b)| a - b);
        let recs = bench_client::results::read_records(&out)?;
        let http = reqwest::Client::new();
        let (mut all, mut steady, mut queue) = (Vec::new(), Vec::new(), Vec::new());
        let mut steady_queue = Vec::new();
        let mut stamps = std::collections::BTreeMap::<String, usize>::new();
        let (mut steady_handler, mut steady_intake) = (Vec::new(), Vec::new());
        let mut first_pacing = Vec::new();
        let mut failed = 0usize;
        for rec in &recs {
            if let Some(t) = &rec.trace {
                *stamps.entry(t.stamps.as_str().to_string()).or_default() += 1;
            }
            let (Some(ttft), Some(load)) = (rec.ttft_ms, rec.load.as_ref()) else {
                failed += 1;
                continue;
            };
            let truth = mock.truth(&http, &rec.rid).await?;
            let Some(first) = truth.chunks.first() else {
                failed += 1;
                continue;
            };
            let lag = ttft - ns_to_ms(first.sent_ns.unwrap_or(first.at_ns));
            let intake = intake_ms(&truth);
            if let Some(i) = intake {
                all.push(lag - i);
            }
            if load.index >= u64::from(LOAD_CONCURRENCY) {
                if let Some(i) = intake {
                    steady.push(lag - i);
                    steady_intake.push(i);
                }
                steady_handler.push(lag);
                if let Some(s) = first.sent_ns {
                    first_pacing.push(ns_to_ms(s) - ns_to_ms(first.model_ns));
                }
            }
            queue.push(ns_to_ms(load.client_queue_ns));
            if load.index >= u64::from(LOAD_CONCURRENCY) {
                steady_queue.push(ns_to_ms(load.client_queue_ns));
            }
        }
        mock.stop().await;
        r.row("requests", format!("{LOAD_REQUESTS}"), format!("{} written, {failed} failed or without a first chunk", outcome.written));
        r.dist_row(
            "TTFT - ground truth, requests after the first 2,000 (steady state)",
            "p99 < 5 ms",
            &steady,
        );
        r.row("  records by stamps", "-", fmt_counts(&stamps));
        r.dist_row(
            "  the same counted from the mock's handler (the previous definition: adds the mock's intake)",
            "-",
            &steady_handler,
        );
        r.dist_row(
            "  the mock's intake: the request in its socket before the handler (received - socket arrival)",
            "-",
            &steady_intake,
        );
        r.dist_row(
            "TTFT - ground truth, all requests (the first 2,000 start at one instant)",
            "-",
            &all,
        );
        r.dist_row(
            "the mock's pacing error of those first chunks (sent - modelled)",
            "-",
            &first_pacing,
        );
        r.dist_row(
            "client_queue_time (scheduled start to send; with socket stamping, to the write of the request's first byte)",
            "-",
            &queue,
            );
        r.dist_row(
            "  the same, requests after the first 2,000 (steady state)",
            "-",
            &steady_queue,
        );
        r.row(
            "achieved concurrency",
            "2000",
            outcome
                .summary
                .derived()
                .achieved_concurrency
                .map_or("n/a".into(), |c| format!("{c:.1}")),
        );
        r.row("run wall time", "-", format!("{wall:.2} s"));
        r.row(
            "CPU of the client (this process)",
            "reported",
            fmt_cpu(cpu, wall),
        );
        r.set_dist("steady", &steady);
        r.set_dist("steady_from_handler", &steady_handler);
        r.set_dist("steady_intake", &steady_intake);
        r.set_dist("all", &all);
        r.set_dist("client_queue", &queue);
        r.set("cpu_s", json!(cpu));
        r.set("wall_s", json!(wall));
        r.set("external", json!(external));
        Ok(r)
    })
}
