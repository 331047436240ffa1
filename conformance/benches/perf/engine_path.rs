//! `engine-path`: the engine path (`--simulate`) at full speed, in wall time: the Kimi sweep
//! 1k..185k, a closed loop of 2,000 requests at 512 in flight (1k in, 1k out), and the whole
//! Mooncake conversation trace replayed open-loop (`PERF_MOONCAKE`, default
//! `shared/data/traces/mooncake-conversation.jsonl` beside the checkout; skipped when absent). Each run writes its
//! results file as the CLI does. Peak memory is the process's (`VmHWM`): run this scenario alone.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use bench_client::drive::{run_load, run_sweep, Destination, LoadConfig, SweepConfig, ENGINE_URL};
use bench_client::plan::schedule::{Arrivals, Schedule, Stop};
use bench_client::plan::workload::{LenDist, Workload};
use bench_client::plan::{parse_contexts, Trace, TraceOptions, DEFAULT_CONTEXTS};
use serde_json::json;
use std::sync::Arc;

use crate::client::{paused_runtime, target};
use crate::machine::{cpu_seconds, proc_path, status_field};
use crate::report::{mib, Report};
use crate::{DEMO, KIMI};

const REPEATS: usize = 3;

fn mock(preset: &str, sets: &[(&str, &str)]) -> Result<mock_server::Config> {
    let mut c = mock_server::Config::preset(preset).map_err(|e| anyhow!("{e}"))?;
    c.enable_metrics = true;
    for (k, v) in sets {
        c.set(k, v).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(c)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Wall and CPU seconds of `f`, run `REPEATS` times.
fn timed(mut f: impl FnMut() -> Result<Duration>) -> Result<(Vec<f64>, Vec<f64>, Duration)> {
    let (mut walls, mut cpus, mut model) = (Vec::new(), Vec::new(), Duration::ZERO);
    for _ in 0..REPEATS {
        let (w0, c0) = (Instant::now(), cpu_seconds(None));
        model = f()?;
        walls.push(w0.elapsed().as_secs_f64());
        if let (Some(a), Some(b)) = (cpu_seconds(None), c0) {
            cpus.push(a - b);
        }
    }
    Ok((walls, cpus, model))
}

fn load(cfg: &LoadConfig) -> Result<Duration> {
    let rt = paused_runtime()?;
    let o = rt.block_on(run_load(cfg))?;
    Ok(o.model_time.unwrap_or_default())
}

pub(crate) fn run() -> Result<Report> {
    let mut r = Report::new("engine-path");
    r.note(
        "the embedded mock's engine on its exact virtual clock (bench_client::drive::engine), \
         records written to a results file; wall and CPU time of the whole call, median of 3",
    );
    let dir = tempfile::tempdir()?;

    // The Kimi story's sweep, the configuration that survives.
    let contexts = parse_contexts(DEFAULT_CONTEXTS).map_err(|e| anyhow!(e))?;
    let kimi = mock(
        KIMI,
        &[
            ("mem_fraction_static", "0.93"),
            ("chunked_prefill_size", "4096"),
            ("expandable_segments", "true"),
        ],
    )?;
    let mut n = 0;
    let (walls, _, model) = timed(|| {
        n += 1;
        let out = dir.path().join(format!("kimi-{n}.jsonl"));
        let cfg = SweepConfig {
            contexts: contexts.clone(),
            runs: 1,
            seed: 7,
            ..SweepConfig::new(out)
        };
        let engine = Destination {
            target: target(ENGINE_URL.into()),
            engine: Some(kimi.clone()),
        };
        let rt = paused_runtime()?;
        let o = rt.block_on(run_sweep(&engine, &cfg))?;
        Ok(o.model_time.unwrap_or_default())
    })?;
    r.row(
        format!(
            "Kimi sweep {DEFAULT_CONTEXTS}, wall s ({:.1} s of model time)",
            model.as_secs_f64()
        ),
        "<= 0.05 s (30)",
        format!("{:.4}", median(walls.clone())),
    );
    r.set("kimi_sweep_wall_s", json!(walls));

    // A closed loop at GPU scale.
    let big = mock(
        DEMO,
        &[
            ("max_running_requests", "512"),
            ("mem_fraction_static", "0.9"),
        ],
    )?;
    let closed = |out: PathBuf| LoadConfig {
        prompt_salt: Some(1),
        scrape_metrics: false,
        engine: Some(big.clone()),
        ..LoadConfig::new(
            target(ENGINE_URL.into()),
            Schedule {
                arrivals: Arrivals::Closed { concurrency: 512 },
                stop: Stop::Requests(2000),
                seed: 1,
            },
            Workload::Random {
                input: LenDist::Fixed { n: 1000 },
                output: LenDist::Fixed { n: 1000 },
            },
            out,
        )
    };
    let mut n = 0;
    let (walls, cpus, model) = timed(|| {
        n += 1;
        load(&closed(dir.path().join(format!("closed-{n}.jsonl"))))
    })?;
    r.row(
        format!(
            "closed loop 2,000 x (1k in, 1k out) at 512 in flight, wall s ({:.1} s of model time)",
            model.as_secs_f64()
        ),
        "<= 1 s (30)",
        format!("{:.3} (CPU {:.3})", median(walls.clone()), median(cpus)),
    );
    r.set("closed_512_wall_s", json!(walls));

    trace_replay(&mut r, dir.path())?;
    let hwm = status_field(&proc_path(None, "status"), "VmHWM");
    r.row(
        "peak memory of the process (VmHWM)",
        "<= 300 MB (30)",
        mib(hwm),
    );
    Ok(r)
}

/// The whole Mooncake conversation trace, open loop at its own arrivals, on the default preset
/// (`small-cpu-demo`, whose prefill keeps up with the trace's ~40k prompt tokens a second;
/// `PERF_MOONCAKE_PRESET` for another).
fn trace_replay(r: &mut Report, dir: &std::path::Path) -> Result<()> {
    let path = std::env::var_os("PERF_MOONCAKE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // The shared data beside the repository's checkout.
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/data/traces/mooncake-conversation.jsonl")
        });
    let read0 = Instant::now();
    let trace = match Trace::read(&path, &TraceOptions::default()) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            r.note(format!("trace replay skipped: {e}"));
            return Ok(());
        }
    };
    let read_s = read0.elapsed().as_secs_f64();
    let preset = std::env::var("PERF_MOONCAKE_PRESET").unwrap_or_else(|_| DEMO.to_string());
    let engine = mock(&preset, &[])?;
    let mut n = 0;
    let mut hit = None;
    let (walls, cpus, model) = timed(|| {
        n += 1;
        let out = dir.join(format!("trace-{n}.jsonl"));
        let cfg = LoadConfig {
            prompt_salt: Some(1),
            scrape_metrics: false,
            engine: Some(engine.clone()),
            ..LoadConfig::new(
                target(ENGINE_URL.into()),
                Schedule {
                    arrivals: Arrivals::Trace {
                        offsets_ns: trace.offsets_ns(),
                    },
                    stop: Stop::Requests(trace.len() as u64),
                    seed: 1,
                },
                Workload::Trace(trace.clone()),
                out,
            )
        };
        let rt = paused_runtime()?;
        let o = rt.block_on(run_load(&cfg))?;
        hit = o.summary.derived().cache_hit_rate;
        Ok(o.model_time.unwrap_or_default())
    })?;
    r.row(
        format!(
            "{} ({} requests) replayed on {preset}, wall s ({:.0} s of model time; cache hit ratio {})",
            path.display(),
            trace.len(),
            model.as_secs_f64(),
            hit.map_or("-".into(), |h| format!("{h:.3}"))
        ),
        "<= 1 s, one core (30)",
        format!(
            "{:.3} (CPU {:.3}; reading the trace {read_s:.3})",
            median(walls.clone()),
            median(cpus)
        ),
    );
    r.set("mooncake_wall_s", json!(walls));
    Ok(())
}
