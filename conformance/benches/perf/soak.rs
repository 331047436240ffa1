//! `soak`: the mock (always a separate process, so that its RSS is its own) under a long closed
//! loop: `PERF_SOAK_CONCURRENCY` (default 32) clients each send non-streamed native requests of 64
//! prompt tokens and `PERF_SOAK_OUTPUT` (default 512) output tokens, back to back, until
//! `PERF_SOAK_REQUESTS` (default 100,000) have ended or `PERF_SOAK_SECONDS` (default 3,600) of wall
//! time have passed. The mock runs at `PERF_SOAK_TIME_SCALE` (default 100) times real time. Its
//! VmRSS is sampled every second; the target is an RSS at the end, and at its highest after the
//! first minute, within 20% of the RSS after the first minute (the ground truth keeps the last
//! `--truth-window` ended requests, everything else is bounded by the engine's state).
//!
//! The mock binary is `PERF_MOCK_BIN`, else the release build (`cargo build --release -p
//! mock-server`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::json;

use crate::machine::{proc_path, status_field};
use crate::mock::Mock;
use crate::report::Report;
use crate::DEMO;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> Result<T> {
    match std::env::var(key) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a valid number")),
        Err(_) => Ok(default),
    }
}

pub(crate) fn run() -> Result<Report> {
    let requests: u64 = env_or("PERF_SOAK_REQUESTS", 100_000)?;
    let max_s: f64 = env_or("PERF_SOAK_SECONDS", 3_600.0)?;
    let concurrency: u64 = env_or("PERF_SOAK_CONCURRENCY", 32)?;
    let output: u64 = env_or("PERF_SOAK_OUTPUT", 512)?;
    let time_scale: f64 = env_or("PERF_SOAK_TIME_SCALE", 100.0)?;
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if requests == 0 || concurrency == 0 || output == 0 || !positive(max_s) || !positive(time_scale)
    {
        bail!("PERF_SOAK_* must be positive");
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mock = Mock::start(
            DEMO,
            &[
                ("time_scale", time_scale.to_string()),
                ("max_running_requests", concurrency.to_string()),
            ],
            true,
        )
        .await?;
        let status = proc_path(mock.pid(), "status");
        let url = mock.url();
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let issued = Arc::new(AtomicU64::new(0));
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs_f64(max_s);
        let mut clients = Vec::new();
        for _ in 0..concurrency {
            let (url, done, failed, issued) =
                (url.clone(), done.clone(), failed.clone(), issued.clone());
            clients.push(tokio::spawn(async move {
                let http = reqwest::Client::new();
                loop {
                    let i = issued.fetch_add(1, Ordering::SeqCst);
                    if i >= requests || Instant::now() > deadline {
                        return;
                    }
                    // Unique prompts: the first id walks the vocabulary, the rest vary with i.
                    let ids: Vec<u64> = (0..64u64).map(|k| 100 + (i * 7 + k * 13) % 3900).collect();
                    let body = json!({"rid": format!("soak-{i}"), "input_ids": ids, "stream": false,
                        "sampling_params": {"max_new_tokens": output, "ignore_eos": true}});
                    let ok = match http
                        .post(format!("{url}/generate"))
                        .json(&body)
                        .send()
                        .await
                    {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        // (wall seconds, requests ended, VmRSS KiB), every second.
        let mut samples: Vec<(f64, u64, u64)> = Vec::new();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let n = done.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed);
            if let Some(kb) = status_field(&status, "VmRSS") {
                samples.push((t0.elapsed().as_secs_f64(), n, kb));
            }
            if clients.iter().all(|c| c.is_finished()) {
                break;
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        mock.stop().await;
        let ended = done.load(Ordering::Relaxed);
        let fails = failed.load(Ordering::Relaxed);
        let mib = |kb: u64| kb as f64 / 1024.0;
        let first = samples.first().map(|s| mib(s.2));
        let minute = samples.iter().find(|s| s.0 >= 60.0).copied();
        let after: Vec<f64> = samples
            .iter()
            .filter(|s| s.0 >= 60.0)
            .map(|s| mib(s.2))
            .collect();
        let last = samples.last().map(|s| mib(s.2));
        let max_after = after
            .iter()
            .copied()
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let mut r = Report::new("soak");
        r.note(format!(
            "{concurrency} clients, non-streamed /generate, 64 prompt + {output} output tokens, \
             time scale {time_scale}; mock {}",
            mock_label()
        ));
        r.row(
            "requests ended (failed)",
            format!("{requests}"),
            format!("{ended} ({fails})"),
        );
        r.row(
            "wall time / model time",
            "",
            format!("{wall:.0} s / {:.0} s", wall * time_scale),
        );
        let fmt = |v: Option<f64>| v.map_or_else(|| "n/a".into(), |v| format!("{v:.1} MiB"));
        r.row("RSS at the first sample", "", fmt(first));
        r.row(
            "RSS after the first minute",
            "",
            match minute {
                Some(m) => format!("{:.1} MiB ({} requests ended)", mib(m.2), m.1),
                None => "n/a (ran under a minute)".into(),
            },
        );
        let five = samples.iter().find(|s| s.0 >= 300.0);
        r.row(
            "RSS after five minutes",
            "",
            five.map_or_else(
                || "n/a (ran under five minutes)".into(),
                |m| format!("{:.1} MiB ({} requests ended)", mib(m.2), m.1),
            ),
        );
        r.row("RSS at the end", "", fmt(last));
        let ratio = match (minute, max_after) {
            (Some(m), Some(x)) if m.2 > 0 => Some(x / mib(m.2)),
            _ => None,
        };
        r.row(
            "highest RSS after the first minute / RSS after it",
            "<= 1.20",
            ratio.map_or_else(|| "n/a".into(), |x| format!("{x:.3}")),
        );
        r.set(
            "samples",
            json!(samples
                .iter()
                .map(|s| json!({"wall_s": s.0, "requests": s.1, "rss_kib": s.2}))
                .collect::<Vec<_>>()),
        );
        r.set("requests_ended", json!(ended));
        r.set("requests_failed", json!(fails));
        r.set("max_rss_ratio_after_first_minute", json!(ratio));
        Ok(r)
    })
}

fn mock_label() -> String {
    std::env::var("PERF_MOCK_BIN").unwrap_or_else(|_| "release build".into())
}
