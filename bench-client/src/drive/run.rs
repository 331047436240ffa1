//! What a load run and a multi-turn run share around their drivers: the run's start on tokio's
//! clock, the collection of records (summary, the writer thread, progress, Ctrl-C) and the
//! `/metrics` scrape after the run.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::load::{scrape_samples, LoadConfig, LoadOutcome};
use crate::net::scrape;
use crate::report::load::{LoadSummary, Slo};
use crate::report::server_metrics::{self as metrics, MetricsDelta, ShardMetrics};
use crate::results::{write_records, Record, RecordWriter};

/// The run's start in unix ms (`--start-at`, else now) and as an instant on tokio's clock.
pub(super) fn run_start(start_at_unix_ms: Option<u64>) -> (u64, Instant) {
    let now_ms = scrape::unix_ms_now();
    let now = Instant::now();
    let start_unix_ms = start_at_unix_ms.unwrap_or(now_ms);
    let base = if start_unix_ms >= now_ms {
        let wait = Duration::from_millis(start_unix_ms - now_ms);
        // A wait the user would notice is said, with its end, so a run that seems stuck is not.
        if wait > Duration::from_secs(1) {
            let until = i64::try_from(start_unix_ms)
                .ok()
                .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
                .map_or_else(|| format!("unix ms {start_unix_ms}"), |t| t.to_string());
            let s = wait.as_secs_f64();
            let long = match s {
                s if s < 120.0 => format!("{s:.1} s"),
                s if s < 7_200.0 => format!("{:.1} min", s / 60.0),
                s if s < 172_800.0 => format!("{:.1} h", s / 3_600.0),
                s => format!("{:.1} days", s / 86_400.0),
            };
            eprintln!("--start-at: waiting {long}, until {until}, before the first request");
        }
        now + wait
    } else {
        let late = Duration::from_millis(now_ms - start_unix_ms);
        tracing::warn!("--start-at is {late:?} in the past: the first requests start late and their client_queue_time shows it");
        now.checked_sub(late).unwrap_or(now)
    };
    (start_unix_ms, base)
}

/// What collecting a run's records gave.
pub(super) struct Collected {
    pub(super) summary: LoadSummary,
    pub(super) written: u64,
    pub(super) interrupted: bool,
}

/// Summarise and write every record `rx` brings while `driver` runs, until the driver is done and
/// the channel drained, or Ctrl-C.
pub(super) async fn collect(
    mut rx: mpsc::UnboundedReceiver<Record>,
    driver: impl std::future::Future<Output = ()>,
    writer: RecordWriter,
    bar: &indicatif::ProgressBar,
    slo: Slo,
) -> anyhow::Result<Collected> {
    let mut summary = LoadSummary::new(slo);
    let mut written = 0u64;
    let mut interrupted = false;
    // A thread of its own serialises and writes each record as it finishes, off the runtime that
    // times requests, and syncs in groups (`results::write_records`).
    let (to_writer, from_driver) = std::sync::mpsc::channel::<Record>();
    let writer_thread = std::thread::spawn(move || write_records(writer, &from_driver));
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    tokio::pin!(driver);
    let mut driver_done = false;
    loop {
        tokio::select! {
            biased;
            r = rx.recv() => {
                let Some(rec) = r else { break };
                summary.add(&rec);
                let failure = rec.error.as_ref().map(|e| e.kind.clone());
                if to_writer.send(rec).is_err() {
                    // The writer thread stopped on an error; it is returned below.
                    break;
                }
                written += 1;
                bar.inc(1);
                if let Some(kind) = failure {
                    bar.set_message(format!("last failure: {kind}"));
                }
            }
            _ = &mut driver, if !driver_done => {
                // The driver's senders are dropped with it; the channel closes once drained.
                driver_done = true;
            }
            _ = &mut ctrl_c => { interrupted = true; break; }
        }
    }
    bar.finish_and_clear();
    drop(to_writer);
    match writer_thread.join() {
        Ok(r) => r?,
        Err(_) => anyhow::bail!("the results writer thread panicked"),
    }
    Ok(Collected {
        summary,
        written,
        interrupted,
    })
}

/// A run over HTTP once its driver is done: what [`collect`] gathered, the `skipped` requests a
/// resumed file already held, and the server's verdict (`server_gone`); `/metrics` is scraped
/// after the run and the pair kept beside the results for `merge` (none without both scrapes,
/// or after Ctrl-C).
pub(super) async fn outcome_after(
    cfg: &LoadConfig,
    http: &reqwest::Client,
    before: Option<(std::collections::BTreeMap<String, f64>, u64)>,
    start_unix_ms: u64,
    (collected, skipped): (Collected, u64),
    server_gone: Option<String>,
) -> anyhow::Result<LoadOutcome> {
    let Collected {
        summary,
        written,
        interrupted,
    } = collected;
    let metrics = match (cfg.scrape_metrics && !interrupted, before) {
        (true, Some(before)) => match scrape_samples(http, &cfg.target).await {
            Some(after) => Some(keep_metrics(cfg, before, after, start_unix_ms)?),
            None => None,
        },
        _ => None,
    };
    Ok(LoadOutcome {
        summary,
        written,
        skipped,
        interrupted,
        metrics,
        out: cfg.out.clone(),
        model_time: None,
        server_gone,
    })
}

/// The `/metrics` samples before and after a run (each with the unix ms it was read at), kept
/// beside the results so that `merge` can combine the shards' scrapes.
pub(super) fn keep_metrics(
    cfg: &LoadConfig,
    (before, before_unix_ms): (std::collections::BTreeMap<String, f64>, u64),
    (after, after_unix_ms): (std::collections::BTreeMap<String, f64>, u64),
    start_unix_ms: u64,
) -> anyhow::Result<MetricsDelta> {
    let delta = MetricsDelta {
        before,
        after,
        before_unix_ms,
        after_unix_ms,
    };
    metrics::store(
        &cfg.out,
        &ShardMetrics {
            kind: metrics::MANIFEST_KIND.into(),
            url: cfg.target.shown_url(),
            shard: cfg.shard.to_string(),
            seed: cfg.seed,
            start_unix_ms,
            delta: delta.clone(),
        },
    )?;
    Ok(delta)
}
