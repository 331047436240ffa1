//! The load driver: warm-up (not recorded), then the shard's requests at their scheduled instants
//! (open loop, optionally at most `--max-concurrency` in flight) or by N workers (closed loop); every
//! request goes through `net::send`, is timed from its scheduled start with the client-side wait
//! recorded apart, and its record is written at once (synced in groups). `/metrics` is scraped before and
//! after and the pair kept in the manifest for `merge`. Ctrl-C stops cleanly; `--resume` skips the
//! indices already in the results file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::net::stamped::Stamping;
use crate::net::{self, Target};
use crate::plan::prompt::Prompt;
use crate::plan::{RequestSpec, Timeouts};
use crate::results::{load_record, LoadInfo, Record, RecordWriter};
use crate::trace::Dialect;

use super::pacer::{clock_is_paused, wait_until, Pacer, OPEN_LOOP_LEAD};
use super::piece::{manifest, piece_run_id, resumed};
use super::run::{collect, outcome_after, run_start};
use crate::net::scrape;
use crate::plan::schedule::{Schedule, Shard, Stop};
use crate::plan::workload::{Planner, Workload};
use crate::report::load::{LoadSummary, Slo};
use crate::report::server_metrics::{self as metrics, MetricsDelta};

/// A validated load run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Server.
    pub target: Target,
    /// Deadlines per request.
    pub timeouts: Timeouts,
    /// Where reads take their stamps from (kernel receive timestamps unless on a paused clock).
    pub stamping: Stamping,
    /// When requests start.
    pub schedule: Schedule,
    /// What requests send.
    pub workload: Workload,
    /// Warm-up requests (not recorded), sent before the run starts.
    pub warmup: u32,
    /// Open loop: at most this many requests in flight (over all shards together; each shard takes
    /// its share, at least 1). An arrival that finds them all in flight waits, in client_queue_time.
    pub max_concurrency: Option<u32>,
    /// This process's slice of the schedule.
    pub shard: Shard,
    /// Shared run start, unix ms (all shards of one run pass the same value).
    pub start_at_unix_ms: Option<u64>,
    /// Salt of the prompt contents; `None`: [`LoadConfig::fixed_salt`], else random (a real
    /// server's prefix cache may be warm from an earlier run with the same seed). Lengths, groups
    /// and the schedule depend on the seed alone.
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
    /// The run is simulated: the embedded mock on a paused clock (said in the manifest).
    pub simulated: bool,
    /// Run on the engine path: this mock's engine on its exact virtual clock, no HTTP.
    pub engine: Option<super::MockConfig>,
}

/// Warm-up requests before a load run when none are asked for.
pub const DEFAULT_WARMUP: u32 = 0;

impl LoadConfig {
    /// A load run of `workload` on `schedule` against `target` into `out`, with the command line's
    /// defaults: the default deadlines, no warm-up, one shard, the default seed, no SLO,
    /// `/metrics` scraped, kernel stamps, no progress bar.
    pub fn new(target: Target, schedule: Schedule, workload: Workload, out: PathBuf) -> Self {
        Self {
            target,
            timeouts: Timeouts::default(),
            stamping: Stamping::Kernel,
            schedule,
            workload,
            warmup: DEFAULT_WARMUP,
            max_concurrency: None,
            shard: Shard::default(),
            start_at_unix_ms: None,
            prompt_salt: None,
            out,
            resume: false,
            seed: crate::plan::DEFAULT_SEED,
            token_id_range: crate::plan::DEFAULT_ID_RANGE,
            slo: Slo::default(),
            scrape_metrics: true,
            progress: false,
            command: String::new(),
            simulated: false,
            engine: None,
        }
    }
}

/// The prompt salt of a simulated run that names none: each run starts a fresh embedded mock,
/// whose prefix cache no earlier run warmed, so its prompts are the seed's alone and the same
/// flags give the same records.
pub const SIMULATED_SALT: u64 = 0;

impl LoadConfig {
    /// The prompt salt that does not change from one invocation to the next: `prompt_salt`, else
    /// `--start-at` (which all shards of a run share), else [`SIMULATED_SALT`] for a simulated run
    /// (either path).
    pub fn fixed_salt(&self) -> Option<u64> {
        self.prompt_salt
            .or(self.start_at_unix_ms)
            .or((self.simulated || self.engine.is_some()).then_some(SIMULATED_SALT))
    }

    /// The run's prompt salt: [`LoadConfig::fixed_salt`], else random.
    pub fn salt(&self) -> u64 {
        self.fixed_salt().unwrap_or_else(rand::random)
    }

    /// Checks everything a load run needs before anything is sent or started ([`check_run`] of
    /// its dialect). Returns the planner of the run's requests.
    pub fn validate(&self) -> anyhow::Result<Planner> {
        check_run(
            Some(self.target.dialect),
            &self.workload,
            self.seed,
            self.token_id_range,
            &self.out,
            self.resume,
        )
    }
}

/// A load run's dialect must take token-id prompts: `openai-chat` takes only text.
pub fn check_dialect(dialect: Dialect) -> anyhow::Result<()> {
    if dialect == Dialect::OpenAiChat {
        anyhow::bail!("--api openai-chat: load runs send token-id prompts of exact length, and the openai-chat dialect takes only text (use --api openai or sglang)");
    }
    Ok(())
}

/// The checks of a load run before it starts: its dialect, where known, takes token-id prompts
/// ([`check_dialect`]; a probed server is never openai-chat), the workload and its prompt id
/// range, and `out` holds no results unless resumed. Returns the planner of the run's requests
/// (not yet salted), which [`run_load_with`] runs from.
pub fn check_run(
    dialect: Option<Dialect>,
    workload: &Workload,
    seed: u64,
    token_id_range: (u32, u32),
    out: &std::path::Path,
    resume: bool,
) -> anyhow::Result<Planner> {
    if let Some(d) = dialect {
        check_dialect(d)?;
    }
    let planner =
        Planner::new(workload.clone(), seed, token_id_range).map_err(anyhow::Error::msg)?;
    crate::results::existing_results(out, resume, " (with the same --seed)")?;
    Ok(planner)
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
    /// On the engine path, the model time the run took.
    pub model_time: Option<Duration>,
    /// Why the server counts as gone ([`super::backoff::Gate::verdict`]), when it does.
    pub server_gone: Option<String>,
}

/// What every request of a run shares: the client, the target, the plan and the run's start.
pub(super) struct LoadRun {
    pub(super) http: net::Http,
    pub(super) target: Target,
    pub(super) timeouts: Timeouts,
    pub(super) planner: Planner,
    pub(super) shard: Shard,
    pub(super) seed: u64,
    pub(super) start_unix_ms: u64,
    pub(super) base: Instant,
    /// Backs requests off a refusing server and stops the run when it went away.
    pub(super) gate: Arc<super::backoff::Gate>,
}

/// A request ready to go: its prompt built and its id chosen.
pub(super) struct Prepared {
    pub(super) index: u64,
    pub(super) spec: RequestSpec,
    pub(super) prompt_tokens: u32,
    pub(super) prefix_group: Option<u32>,
}

fn prepare(ctx: &LoadRun, index: u64, warm: bool) -> Option<Prepared> {
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
            index - crate::plan::workload::WARMUP_INDEX_BASE
        )
    } else {
        format!("ld-{:x}-{}-{index}", ctx.seed, ctx.start_unix_ms)
    };
    let prompt_tokens = u32::try_from(plan.prompt.len()).unwrap_or(u32::MAX);
    Some(Prepared {
        index,
        spec: RequestSpec::new(rid, Prompt::TokenIds(plan.prompt), plan.output_len),
        prompt_tokens,
        prefix_group: plan.prefix_group,
    })
}

/// Send a prepared request and build its record; `scheduled` is its scheduled start.
pub(super) async fn fire(ctx: &LoadRun, p: Prepared, scheduled: Instant) -> Record {
    // The trace's times count from its send: the write of the request's first byte when the
    // connection stamped it, else the instant the request was handed to the HTTP client. Everything
    // before it is the client's (`client_queue_time`).
    let net::Sent {
        trace,
        origin: sent,
        retry_after,
    } = net::send_full(&ctx.http, &ctx.target, &p.spec, &ctx.timeouts).await;
    ctx.gate.observe(&trace, retry_after);
    let sent = sent.max(scheduled);
    let info = LoadInfo {
        index: p.index,
        shard: ctx.shard,
        seed: ctx.seed,
        start_unix_ms: ctx.start_unix_ms,
        scheduled_ns: super::duration_ns(scheduled.saturating_duration_since(ctx.base)),
        sent_ns: super::duration_ns(sent.saturating_duration_since(ctx.base)),
        client_queue_ns: super::duration_ns(sent.saturating_duration_since(scheduled)),
        ttft_from_schedule_ms: None,
        prefix_group: p.prefix_group,
        session: None,
    };
    load_record(trace, p.prompt_tokens, info)
}

async fn warm_up(ctx: Arc<LoadRun>, index: u64) {
    let Some(p) = prepare(&ctx, index, true) else {
        return;
    };
    let trace = net::send(&ctx.http, &ctx.target, &p.spec, &ctx.timeouts).await;
    if let Some(f) = trace.failure() {
        tracing::warn!("warm-up request failed: {}", f.message);
    }
}

/// The server's `/metrics` samples and the unix ms they arrived at, when it has any.
pub(super) async fn scrape_samples(
    http: &reqwest::Client,
    target: &Target,
) -> Option<(std::collections::BTreeMap<String, f64>, u64)> {
    let (text, at) = scrape::scrape(http, target).await?;
    metrics::samples(&text).map(|m| (m, at))
}

/// Run a load test, appending each record to `cfg.out` as it finishes (on the engine path when
/// the config asks for it).
pub async fn run_load(cfg: &LoadConfig) -> anyhow::Result<LoadOutcome> {
    run_load_with(cfg, cfg.validate()?).await
}

/// [`run_load`] of a run already checked: `planner` is what [`LoadConfig::validate`] (or
/// [`check_run`]) gave for `cfg`.
pub async fn run_load_with(cfg: &LoadConfig, planner: Planner) -> anyhow::Result<LoadOutcome> {
    // One writer per results file, taken before the file is read and anything is sent.
    let _lock = crate::results::lock_results(&cfg.out)?;
    #[cfg(feature = "embedded-mock")]
    if let Some(mock) = &cfg.engine {
        let (mut outcome, model) =
            super::engine::load::run_load_engine(cfg, mock.clone(), planner, None)?;
        outcome.model_time = Some(model);
        return Ok(outcome);
    }
    let planner = planner.salted(cfg.salt());
    let done = resumed(cfg)?.done;
    let run_id = piece_run_id(cfg, None)?;
    let http =
        net::http_client_with(&cfg.timeouts, cfg.stamping).context("building the HTTP client")?;
    let writer = RecordWriter::open(&cfg.out)?;

    // Warm-up: all at once up to the shard's concurrency share (closed loop) or together (open loop).
    if cfg.warmup > 0 {
        let ctx = Arc::new(LoadRun {
            http: http.clone(),
            target: cfg.target.clone(),
            timeouts: cfg.timeouts.clone(),
            planner: planner.clone(),
            shard: cfg.shard,
            seed: cfg.seed,
            start_unix_ms: scrape::unix_ms_now(),
            base: Instant::now(),
            gate: Default::default(),
        });
        let mut set = JoinSet::new();
        for k in 0..u64::from(cfg.warmup) {
            let index = crate::plan::workload::WARMUP_INDEX_BASE + k;
            set.spawn(warm_up(ctx.clone(), index));
        }
        while set.join_next().await.is_some() {}
    }

    // The server's description, for the manifest (`calibrate` reads its chunked prefill size and
    // KV pool), before the run's clock starts.
    let server_info =
        net::server_info(&http, &cfg.target.base_url, cfg.target.api_key.as_deref()).await;
    let before = if cfg.scrape_metrics {
        scrape_samples(&http, &cfg.target).await
    } else {
        None
    };

    let (start_unix_ms, base) = run_start(cfg.start_at_unix_ms);
    crate::results::append_manifest(&cfg.out, &manifest(cfg, server_info, start_unix_ms, run_id))?;

    let ctx = Arc::new(LoadRun {
        http: http.clone(),
        target: cfg.target.clone(),
        timeouts: cfg.timeouts.clone(),
        planner,
        shard: cfg.shard,
        seed: cfg.seed,
        start_unix_ms,
        base,
        gate: Default::default(),
    });
    let gate = ctx.gate.clone();
    let (tx, rx) = mpsc::unbounded_channel::<Record>();
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
    let bar = super::progress::bar(total, cfg.progress);

    let skipped = done.len() as u64;
    let driver = {
        let ctx = ctx.clone();
        let schedule = cfg.schedule.clone();
        let shard = cfg.shard;
        let done = done.clone();
        let max_concurrency = cfg.max_concurrency.map(|n| shard.concurrency(n).max(1));
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
                // At most `limit` requests in flight: the dispatcher takes a permit for each slot in
                // schedule order, so an arrival that finds the limit reached waits for a request to
                // finish, and that wait shows in its client_queue_time.
                let limit = max_concurrency.map(|n| Arc::new(Semaphore::new(n as usize)));
                // Slots are woken by a thread of their own when tokio's clock is the real one.
                let paused = clock_is_paused().await;
                let pacer = if paused { None } else { Pacer::start() };
                let mut set = JoinSet::new();
                for s in slots {
                    if ctx.gate.stopped() {
                        break;
                    }
                    let at = ctx.base + Duration::from_nanos(s.offset_ns - shift);
                    tokio::time::sleep_until(at.checked_sub(OPEN_LOOP_LEAD).unwrap_or(at)).await;
                    let permit = match &limit {
                        Some(l) => match l.clone().acquire_owned().await {
                            Ok(p) => Some(p),
                            Err(_) => break,
                        },
                        None => None,
                    };
                    let woken = pacer.as_ref().map(|p| p.wake_at(at));
                    let (ctx, tx) = (ctx.clone(), tx.clone());
                    set.spawn(async move {
                        let Some(p) = prepare(&ctx, s.index, false) else {
                            return;
                        };
                        // The pacer thread only ends with the run; if it is gone, the timer.
                        let paced = match woken {
                            Some(w) => w.await.is_ok(),
                            None => false,
                        };
                        if paced {
                            // Woken PACER_EARLY before the slot: the last stretch on this worker.
                            while Instant::now() < at {
                                tokio::task::yield_now().await;
                            }
                        } else {
                            wait_until(at, paused).await;
                        }
                        // A refusing server holds the slot back (in its client_queue_time).
                        if !ctx.gate.pass().await {
                            return;
                        }
                        let r = fire(&ctx, p, at).await;
                        drop(permit);
                        let _ = tx.send(r);
                    });
                    while set.try_join_next().is_some() {}
                }
                while set.join_next().await.is_some() {}
            } else {
                let concurrency = match schedule.arrivals {
                    crate::plan::Arrivals::Closed { concurrency } => shard.concurrency(concurrency),
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
                            let Some(p) = prepare(&ctx, index, false) else {
                                continue;
                            };
                            if !ctx.gate.pass().await {
                                break;
                            }
                            if tx.send(fire(&ctx, p, now).await).is_err() {
                                break;
                            }
                        }
                    });
                }
                while set.join_next().await.is_some() {}
            }
        }
    };

    let collected = collect(rx, driver, writer, &bar, cfg.slo).await?;
    outcome_after(
        cfg,
        &http,
        before,
        start_unix_ms,
        (collected, skipped),
        gate.verdict(),
    )
    .await
}
