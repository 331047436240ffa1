//! The load driver: warm-up (not recorded), then the shard's requests at their scheduled instants
//! (open loop) or by N workers (closed loop); every request goes through `client::send`, is timed from
//! its scheduled start with the client-side wait recorded apart, and its record is appended and
//! flushed at once. `/metrics` is scraped before and after. Ctrl-C stops cleanly; `--resume` skips the
//! indices already in the results file.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::{self, RequestSpec, Target, Timeouts};
use crate::prompt::Prompt;
use crate::record::{read_records, Record, RecordWriter};
use crate::Dialect;

use super::schedule::{Schedule, Shard, Stop};
use super::summary::{LoadSummary, Slo};
use super::workload::{Planner, Workload};
use super::LoadInfo;

/// A validated load run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server.
    pub target: Target,
    /// Deadlines per request.
    pub timeouts: Timeouts,
    /// When requests start.
    pub schedule: Schedule,
    /// What requests send.
    pub workload: Workload,
    /// Warm-up requests (not recorded), sent before the run starts.
    pub warmup: u32,
    /// This process's slice of the schedule.
    pub shard: Shard,
    /// Shared run start, unix ms (all shards of one run pass the same value).
    pub start_at_unix_ms: Option<u64>,
    /// Salt of the prompt contents; `None`: `start_at_unix_ms` when given (shards share it), else random.
    /// Lengths, groups and the schedule depend on the seed alone.
    pub prompt_salt: Option<u64>,
    /// Results file (JSONL).
    pub out: PathBuf,
    /// Skip request indices already in `out`.
    pub resume: bool,
    /// Seed of the schedule and the prompts.
    pub seed: u64,
    /// Prompt token ids, `[min, max)`.
    pub token_id_range: (u32, u32),
    /// Goodput objective.
    pub slo: Slo,
    /// Scrape `/metrics` before and after.
    pub scrape_metrics: bool,
    /// Draw a progress bar.
    pub progress: bool,
    /// Command line, for the manifest.
    pub command: String,
}

/// Counter and gauge changes in the server's Prometheus metrics over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MetricsDelta {
    /// Samples before the run.
    pub before: BTreeMap<String, f64>,
    /// Samples after the run.
    pub after: BTreeMap<String, f64>,
}

impl MetricsDelta {
    /// after - before for samples present in both (histogram buckets left out), plus the derived
    /// cache hit rate over the run when the counters are there.
    pub fn deltas(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = self
            .after
            .iter()
            .filter(|(k, _)| !k.contains("_bucket"))
            .filter_map(|(k, a)| self.before.get(k).map(|b| (k.clone(), a - b)))
            .filter(|(_, v)| v.is_finite())
            .collect();
        let find = |suffix: &str| {
            out.iter()
                .find(|(k, _)| k.split('{').next().is_some_and(|n| n.ends_with(suffix)))
                .map(|(_, v)| *v)
        };
        if let (Some(c), Some(p)) = (find("cached_tokens_total"), find("prompt_tokens_total")) {
            if p > 0.0 {
                out.insert("run_cache_hit_rate (cached/prompt delta)".into(), c / p);
            }
        }
        out
    }

    /// The deltas as text lines, the cache, speculative and retraction ones first.
    pub fn render(&self) -> String {
        let d = self.deltas();
        let mut lines = vec!["server /metrics, after - before:".to_string()];
        let key = |k: &str| !(k.contains("cache") || k.contains("spec") || k.contains("retract"));
        let mut keys: Vec<&String> = d.keys().collect();
        keys.sort_by_key(|k| (key(k), (*k).clone()));
        for k in keys {
            lines.push(format!("  {k:<60} {:+.6}", d[k]));
        }
        lines.join("\n") + "\n"
    }
}

/// Parse Prometheus text exposition: `name{labels} value` per sample line.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, rest) = match l.find('}') {
                Some(i) if l.contains('{') => (&l[..=i], &l[i + 1..]),
                _ => l.split_once(char::is_whitespace)?,
            };
            let v: f64 = rest.split_whitespace().next()?.parse().ok()?;
            v.is_finite().then(|| (name.trim().to_string(), v))
        })
        .collect()
}

async fn scrape(http: &reqwest::Client, target: &Target) -> Option<BTreeMap<String, f64>> {
    let mut r = http
        .get(target.url("/metrics"))
        .timeout(Duration::from_secs(10));
    if let Some(k) = &target.api_key {
        r = r.bearer_auth(k);
    }
    let resp = r.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let m = parse_prometheus(&resp.text().await.ok()?);
    (!m.is_empty()).then_some(m)
}

/// What a load run did.
#[derive(Debug)]
pub struct LoadOutcome {
    /// Summary of the records written by this invocation.
    pub summary: LoadSummary,
    /// Records written.
    pub written: u64,
    /// Requests skipped because `--resume` found them in the file.
    pub skipped: u64,
    /// Ctrl-C ended the run.
    pub interrupted: bool,
    /// `/metrics` before and after, when the server has them.
    pub metrics: Option<MetricsDelta>,
    /// Results file.
    pub out: PathBuf,
}

struct Ctx {
    http: reqwest::Client,
    target: Target,
    timeouts: Timeouts,
    planner: Planner,
    shard: Shard,
    seed: u64,
    start_unix_ms: u64,
    base: Instant,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Build the record of one finished request. `returned` is the instant `client::send` returned; the
/// trace's times count from the send, so the send instant is `returned - trace.end_ns` (the code
/// between the last read and the return does no I/O).
pub fn load_record(
    trace: crate::trace::RequestTrace,
    prompt_tokens: u32,
    info: LoadInfo,
) -> Record {
    let mut rec = Record::streaming(
        trace,
        prompt_tokens,
        u32::try_from(info.index).unwrap_or(u32::MAX),
    );
    let ttft = rec
        .trace
        .as_ref()
        .and_then(|t| {
            t.chunks
                .iter()
                .find(|c| c.carries_output())
                .map(|c| c.at_ns)
        })
        .filter(|_| rec.error.is_none());
    rec.load = Some(LoadInfo {
        ttft_from_schedule_ms: ttft.map(|t| info.client_queue_ns.saturating_add(t) as f64 / 1e6),
        ..info
    });
    rec
}

async fn one(ctx: Arc<Ctx>, index: u64, scheduled: Instant, warm: bool) -> Option<Record> {
    let plan = if warm {
        ctx.planner.warmup(index)?
    } else {
        ctx.planner.request(index)?
    };
    let rid = if warm {
        format!(
            "ld-{:x}-{}-w{}",
            ctx.seed,
            ctx.start_unix_ms,
            index - super::workload::WARMUP_INDEX_BASE
        )
    } else {
        format!("ld-{:x}-{}-{index}", ctx.seed, ctx.start_unix_ms)
    };
    let prompt_tokens = plan.prompt.len() as u32;
    let spec = RequestSpec::new(rid, Prompt::TokenIds(plan.prompt), plan.output_len);
    let trace = client::send(&ctx.http, &ctx.target, &spec, &ctx.timeouts).await;
    if warm {
        if let Some(f) = trace.failure() {
            tracing::warn!("warm-up request failed: {}", f.message);
        }
        return None;
    }
    let returned = Instant::now();
    let sent = returned
        .checked_sub(Duration::from_nanos(trace.end_ns))
        .unwrap_or(scheduled)
        .max(scheduled);
    let info = LoadInfo {
        index,
        shard: ctx.shard,
        seed: ctx.seed,
        start_unix_ms: ctx.start_unix_ms,
        scheduled_ns: ns(scheduled.saturating_duration_since(ctx.base)),
        sent_ns: ns(sent.saturating_duration_since(ctx.base)),
        client_queue_ns: ns(sent.saturating_duration_since(scheduled)),
        ttft_from_schedule_ms: None,
        prefix_group: plan.prefix_group,
    };
    Some(load_record(trace, prompt_tokens, info))
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Wait until `at` more precisely than tokio's timer, whose deadlines round up to the next whole
/// millisecond: sleep to 1 ms before `at`, then yield until the clock passes `at`. If the clock does
/// not move across a yield (tokio's paused clock, in tests), the timer finishes the wait instead.
async fn wait_until(at: Instant) {
    let coarse = at.checked_sub(Duration::from_millis(1)).unwrap_or(at);
    tokio::time::sleep_until(coarse).await;
    let mut last = Instant::now();
    while last < at {
        tokio::task::yield_now().await;
        let now = Instant::now();
        if now == last {
            tokio::time::sleep_until(at).await;
            return;
        }
        last = now;
    }
}

/// Run a load test, appending each record to `cfg.out` as it finishes.
pub async fn run_load(cfg: &LoadConfig) -> anyhow::Result<LoadOutcome> {
    if cfg.target.dialect == Dialect::OpenAiChat {
        anyhow::bail!("load runs send token-id prompts of exact length; the openai-chat dialect takes only text (use --api openai or sglang)");
    }
    let planner = Planner::new(cfg.workload.clone(), cfg.seed, cfg.token_id_range)
        .map_err(anyhow::Error::msg)?
        .salted(
            cfg.prompt_salt
                .or(cfg.start_at_unix_ms)
                .unwrap_or_else(rand::random),
        );
    let mut done: HashSet<u64> = HashSet::new();
    if crate::record::existing_results(&cfg.out, cfg.resume, " (with the same --seed)")? {
        for r in read_records(&cfg.out)? {
            let Some(l) = r.load else { continue };
            if l.seed != cfg.seed || l.shard != cfg.shard {
                anyhow::bail!(
                    "{} holds records of seed {} shard {}, this run is seed {} shard {}: --resume needs the same --seed and --shard",
                    cfg.out.display(), l.seed, l.shard, cfg.seed, cfg.shard
                );
            }
            done.insert(l.index);
        }
    }
    let http = client::http_client(&cfg.timeouts).context("building the HTTP client")?;
    let mut writer = RecordWriter::open(&cfg.out)?;

    // Warm-up: all at once up to the shard's concurrency share (closed loop) or together (open loop).
    if cfg.warmup > 0 {
        let ctx = Arc::new(Ctx {
            http: http.clone(),
            target: cfg.target.clone(),
            timeouts: cfg.timeouts.clone(),
            planner: planner.clone(),
            shard: cfg.shard,
            seed: cfg.seed,
            start_unix_ms: unix_ms_now(),
            base: Instant::now(),
        });
        let mut set = JoinSet::new();
        for k in 0..u64::from(cfg.warmup) {
            let index = super::workload::WARMUP_INDEX_BASE + k;
            set.spawn(one(ctx.clone(), index, Instant::now(), true));
        }
        while set.join_next().await.is_some() {}
    }

    let before = if cfg.scrape_metrics {
        scrape(&http, &cfg.target).await
    } else {
        None
    };

    // The shared start: unix ms -> an instant on tokio's clock.
    let now_ms = unix_ms_now();
    let now = Instant::now();
    let start_unix_ms = cfg.start_at_unix_ms.unwrap_or(now_ms);
    let base = if start_unix_ms >= now_ms {
        now + Duration::from_millis(start_unix_ms - now_ms)
    } else {
        let late = Duration::from_millis(now_ms - start_unix_ms);
        tracing::warn!("--start-at is {late:?} in the past: the first requests start late and their client_queue_time shows it");
        now.checked_sub(late).unwrap_or(now)
    };
    let manifest_path = PathBuf::from(format!("{}.manifest.jsonl", cfg.out.display()));
    {
        use std::io::Write;
        let manifest = json!({
            "command": cfg.command,
            "client_version": env!("CARGO_PKG_VERSION"),
            "kind": "load",
            "url": cfg.target.base_url,
            "dialect": cfg.target.dialect,
            "model": cfg.target.model,
            "seed": cfg.seed,
            "shard": cfg.shard.to_string(),
            "start_unix_ms": start_unix_ms,
            "schedule": format!("{:?}", cfg.schedule.arrivals).chars().take(400).collect::<String>(),
            "stop": format!("{:?}", cfg.schedule.stop),
            "workload": format!("{:?}", cfg.workload).chars().take(400).collect::<String>(),
            "warmup": cfg.warmup,
            "resume": cfg.resume,
            "slo": cfg.slo,
        });
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&manifest_path)
            .with_context(|| format!("opening {}", manifest_path.display()))?;
        writeln!(f, "{manifest}")
            .with_context(|| format!("writing {}", manifest_path.display()))?;
    }

    let ctx = Arc::new(Ctx {
        http: http.clone(),
        target: cfg.target.clone(),
        timeouts: cfg.timeouts.clone(),
        planner,
        shard: cfg.shard,
        seed: cfg.seed,
        start_unix_ms,
        base,
    });
    let (tx, mut rx) = mpsc::unbounded_channel::<Record>();
    let total = match cfg.schedule.stop {
        Stop::Requests(n) => {
            let mine = (0..n).filter(|i| cfg.shard.owns(*i)).count() as u64;
            Some(mine.saturating_sub(done.len() as u64))
        }
        Stop::Duration(_) if cfg.schedule.is_open() => Some(
            cfg.schedule
                .shard_slots(cfg.shard)
                .iter()
                .filter(|s| !done.contains(&s.index))
                .count() as u64,
        ),
        Stop::Duration(_) => None,
    };
    let bar = if cfg.progress {
        ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    let skipped = done.len() as u64;
    let driver = {
        let ctx = ctx.clone();
        let schedule = cfg.schedule.clone();
        let shard = cfg.shard;
        let done = done.clone();
        async move {
            if schedule.is_open() {
                let slots: Vec<_> = schedule
                    .shard_slots(shard)
                    .into_iter()
                    .filter(|s| !done.contains(&s.index))
                    .collect();
                // A resumed run starts its remaining requests at once, keeping their spacing.
                let shift = if done.is_empty() {
                    0
                } else {
                    slots.first().map_or(0, |s| s.offset_ns)
                };
                let mut set = JoinSet::new();
                for s in slots {
                    let at = ctx.base + Duration::from_nanos(s.offset_ns - shift);
                    wait_until(at).await;
                    let (ctx, tx) = (ctx.clone(), tx.clone());
                    set.spawn(async move {
                        if let Some(r) = one(ctx, s.index, at, false).await {
                            let _ = tx.send(r);
                        }
                    });
                    while set.try_join_next().is_some() {}
                }
                while set.join_next().await.is_some() {}
            } else {
                let concurrency = match schedule.arrivals {
                    super::Arrivals::Closed { concurrency } => shard.concurrency(concurrency),
                    _ => 1,
                };
                tokio::time::sleep_until(ctx.base).await;
                let deadline = match schedule.stop {
                    Stop::Duration(d) => Some(ctx.base + d),
                    Stop::Requests(_) => None,
                };
                let indices = Arc::new(Mutex::new(
                    schedule
                        .closed_indices(shard)
                        .filter(move |i| !done.contains(i)),
                ));
                let mut set = JoinSet::new();
                for _ in 0..concurrency {
                    let (ctx, tx, indices) = (ctx.clone(), tx.clone(), indices.clone());
                    set.spawn(async move {
                        loop {
                            let now = Instant::now();
                            if deadline.is_some_and(|d| now >= d) {
                                break;
                            }
                            let next = indices.lock().unwrap_or_else(|p| p.into_inner()).next();
                            let Some(index) = next else { break };
                            if let Some(r) = one(ctx.clone(), index, now, false).await {
                                if tx.send(r).is_err() {
                                    break;
                                }
                            }
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            }
        }
    };

    let mut summary = LoadSummary::new(cfg.slo);
    let mut written = 0u64;
    let mut interrupted = false;
    // Appending syncs to disk; a thread of its own keeps that off the runtime that times requests.
    let (to_writer, from_driver) = std::sync::mpsc::channel::<Record>();
    let writer_thread = std::thread::spawn(move || -> anyhow::Result<()> {
        for rec in from_driver {
            writer.append(&rec)?;
        }
        Ok(())
    });
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
    let metrics = if cfg.scrape_metrics && !interrupted {
        match (before, scrape(&http, &cfg.target).await) {
            (Some(before), Some(after)) => Some(MetricsDelta { before, after }),
            _ => None,
        }
    } else {
        None
    };
    Ok(LoadOutcome {
        summary,
        written,
        skipped,
        interrupted,
        metrics,
        out: cfg.out.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_parses() {
        let m = parse_prometheus(
            "# HELP x\n# TYPE x counter\nsglang:cached_tokens_total 5\nsglang:prompt_tokens_total{model=\"a b\"} 10\nbad line\nh_bucket{le=\"+Inf\"} 3\n",
        );
        assert_eq!(m.get("sglang:cached_tokens_total"), Some(&5.0));
        assert_eq!(
            m.get("sglang:prompt_tokens_total{model=\"a b\"}"),
            Some(&10.0)
        );
        let d = MetricsDelta {
            before: m.clone(),
            after: parse_prometheus(
                "sglang:cached_tokens_total 8\nsglang:prompt_tokens_total{model=\"a b\"} 16\n",
            ),
        };
        let deltas = d.deltas();
        assert_eq!(deltas.get("sglang:cached_tokens_total"), Some(&3.0));
        assert_eq!(
            deltas.get("run_cache_hit_rate (cached/prompt delta)"),
            Some(&0.5)
        );
    }
}
