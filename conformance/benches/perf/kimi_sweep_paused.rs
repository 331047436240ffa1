//! `kimi-sweep-paused`: a full context sweep of the Kimi preset on a paused clock, in wall time.

use std::time::Duration;

use anyhow::{anyhow, Result};
use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::measure::percentile;
use bench_client::net::stamped::Stamping;
use bench_client::plan::{parse_contexts, DEFAULT_CONTEXTS};
use serde_json::json;
use tokio::time::Instant;

use crate::client::{paused_runtime, target};
use crate::machine::cpu_seconds;
use crate::mock::Mock;
use crate::report::Report;
use crate::KIMI;

const SWEEP_REPEATS: usize = 3;

pub(crate) fn run() -> Result<Report> {
    let mut r = Report::new("kimi-sweep-paused");
    let contexts = parse_contexts(DEFAULT_CONTEXTS).map_err(|e| anyhow!(e))?;
    r.note(format!(
        "preset {KIMI} with mem_fraction_static 0.93, chunked_prefill_size 4096, expandable_segments; \
         contexts {DEFAULT_CONTEXTS}; runs 1, warm-up 1 (the CLI default), 64 output tokens; \
         bench_client::drive::sweep::run_sweep (net::send over loopback HTTP, JSONL records) on a \
         current-thread runtime with a paused clock; wall time includes mock start-up; {SWEEP_REPEATS} repeats"
    ));
    let mut walls = Vec::new();
    let mut simulated = Vec::new();
    let mut records = 0;
    let mut failures = 0;
    let mut decode = Vec::new();
    let mut errors = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..SWEEP_REPEATS {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("kimi.jsonl");
        let rt = paused_runtime()?;
        // Outside the runtime tokio's clock is the real one.
        let wall0 = Instant::now();
        let cpu0 = cpu_seconds(None);
        let (sim, recs) = rt.block_on(async {
            let sim0 = Instant::now();
            let sets = [
                ("mem_fraction_static", "0.93".to_string()),
                ("chunked_prefill_size", "4096".to_string()),
                ("expandable_segments", "true".to_string()),
            ];
            let mock = Mock::start(KIMI, &sets, false).await?;
            let cfg = SweepConfig {
                // The paused clock: the kernel's real-time stamps mean nothing on it.
                stamping: Stamping::Socket,
                contexts: contexts.clone(),
                runs: 1,
                seed: 7,
                crash_wait: Duration::from_secs(0),
                command: "perf kimi-sweep-paused".into(),
                simulated: true,
                ..SweepConfig::new(out.clone())
            };
            let outcome = run_sweep(&Destination::server(target(mock.url())), &cfg).await?;
            mock.stop().await;
            anyhow::Ok((sim0.elapsed().as_secs_f64(), outcome.records))
        })?;
        walls.push(wall0.elapsed().as_secs_f64());
        if let Some(c) = cpu_seconds(None).zip(cpu0).map(|(a, b)| a - b) {
            cpus.push(c);
        }
        errors = recs
            .iter()
            .filter_map(|x| {
                x.error
                    .as_ref()
                    .map(|e| format!("{}: {} ({})", x.context_tokens, e.kind, e.message))
            })
            .collect::<Vec<_>>();
        simulated.push(sim);
        records = recs.len();
        failures = recs.iter().filter(|x| x.error.is_some()).count();
        decode = recs
            .iter()
            .map(|x| (x.context_tokens, x.decode_tok_s))
            .collect::<Vec<_>>();
    }
    let wd = percentile(&walls, 50.0);
    let wmax = percentile(&walls, 100.0);
    r.row(
        "wall time of the full sweep",
        "< 1 s",
        format!(
            "median {}, max {} over {SWEEP_REPEATS} runs",
            wd.map_or("n/a".into(), |w| format!("{w:.3} s")),
            wmax.map_or("n/a".into(), |w| format!("{w:.3} s"))
        ),
    );
    r.row(
        "CPU time of the process (user + system) per sweep",
        "-",
        percentile(&cpus, 50.0).map_or("n/a".into(), |c| format!("median {c:.2} s")),
    );
    for e in &errors {
        r.note(format!("failed point: {e}"));
    }
    r.row(
        "simulated (paused-clock) time",
        "-",
        percentile(&simulated, 50.0).map_or("n/a".into(), |s| format!("{s:.1} s")),
    );
    r.row(
        "records / failed",
        format!("{}", contexts.len()),
        format!("{records} / {failures}"),
    );
    let at = |c: u32| {
        decode
            .iter()
            .find(|(x, _)| *x == c)
            .and_then(|(_, d)| *d)
            .map_or("n/a".to_string(), |d| format!("{d:.1} tok/s"))
    };
    r.row(
        "decode rate at 1k / 8k (sanity: story says ~109 / ~13.8)",
        "-",
        format!("{} / {}", at(1000), at(8000)),
    );
    r.set("wall_s", json!(walls));
    r.set("simulated_s", json!(simulated));
    r.set("records", json!(records));
    r.set("errors", json!(errors));
    r.set("cpu_s", json!(cpus));
    r.set("failed", json!(failures));
    r.set(
        "decode_tok_s",
        json!(decode
            .iter()
            .map(|(c, d)| json!({"context": c, "decode_tok_s": d}))
            .collect::<Vec<_>>()),
    );
    Ok(r)
}
