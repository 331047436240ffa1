//! The multi-turn driver: `--sessions` conversations of `--turns` turns, at most `--concurrency`
//! sessions in flight. Turn k of a session starts when turn k-1's stream ended plus a think time;
//! that instant is its scheduled start, so the think time is never in its TTFT, and a late client
//! shows in `client_queue_time`. Every turn is a load record with its session and turn, written at
//! once; the output ids each turn sends back are kept in its trace, so `--resume` rebuilds every
//! conversation from the results file and continues it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::load::{fire, scrape_samples, LoadConfig, LoadOutcome, LoadRun, Prepared};
use super::pacer::{clock_is_paused, wait_until};
use super::run::{collect, outcome_after, run_start};
use crate::net;
use crate::plan::prompt::Prompt;
use crate::plan::schedule::Arrivals;
use crate::plan::session::{Conversation, SessionPlan, Sessions, TurnOutput};
use crate::plan::workload::Planner;
use crate::plan::RequestSpec;
use crate::results::settings::{Recorded, ScheduleRecord, WorkloadRecord};
use crate::results::{each_record, Record, RecordWriter, SessionTurn};
use crate::trace::Dialect;

/// A validated multi-turn run.
#[derive(Clone, Debug)]
pub struct SessionsConfig {
    /// The target, deadlines, results file, seed, shard, warm-up, SLO and the rest. Its schedule
    /// must be a closed loop, whose concurrency is the number of sessions in flight (over all
    /// shards together); its workload is not read (`sessions` says what every turn sends).
    pub run: LoadConfig,
    /// What every session sends.
    pub sessions: Sessions,
}

impl SessionsConfig {
    /// Checks everything before anything is sent: the load run's checks, a closed loop without
    /// `--max-concurrency`, and the sessions. Returns the load run's planner (its warm-up shape is
    /// not used) and the sessions' plan (not yet salted).
    fn checked(&self) -> anyhow::Result<(Planner, SessionPlan)> {
        let planner = self.run.validate()?;
        let run = &self.run;
        let plan = check_sessions(
            &self.sessions,
            &run.schedule.arrivals,
            run.max_concurrency,
            run.seed,
            run.token_id_range,
        )?;
        Ok((planner, plan))
    }

    /// This shard's sessions in flight (at least one).
    fn concurrency(&self) -> u32 {
        match self.run.schedule.arrivals {
            Arrivals::Closed { concurrency } => self.run.shard.concurrency(concurrency).max(1),
            _ => 1,
        }
    }

    /// The salt of sessions this invocation begins: [`LoadConfig::fixed_salt`], else this run's
    /// start. A session's prompts keep the salt of the run that began it (its turn records'
    /// `start_unix_ms` without a fixed salt), so that a resumed run rebuilds them.
    fn salt(&self, start_unix_ms: u64) -> u64 {
        self.run.fixed_salt().unwrap_or(start_unix_ms)
    }
}

/// Where the output ids of the dialect come from, for the manifest.
fn output_ids_source(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sglang => "server: output_ids",
        _ => "server: token_ids (vLLM return_token_ids), else a stand-in of the output's length",
    }
}

/// A session to run: its plan (salted as when it began), its conversation so far.
struct Pending {
    session: u64,
    plan: Arc<SessionPlan>,
    conversation: Conversation,
}

/// What a turn got back, to send in the next turn: the server's ids, else a stand-in of the
/// output's length (the asked length when the server reported none).
/// `got` is the turn's listed output ids and its completion tokens.
fn output_of(
    plan: &SessionPlan,
    got: (Option<&[u32]>, Option<u32>),
    session: u64,
    k: u32,
    asked: u32,
) -> TurnOutput {
    match got.0 {
        Some(ids) if !ids.is_empty() => TurnOutput::Server(ids.to_vec()),
        _ => TurnOutput::StandIn(plan.stand_in(session, k, got.1.unwrap_or(asked))),
    }
}

/// What the next turn needs of a turn's record (its chunks are not kept: a resumed run reads
/// its file a record at a time and holds this much of each).
struct Turned {
    /// The prompt's length as sent.
    context_tokens: u32,
    failed: bool,
    /// The output ids the server listed.
    output_ids: Option<Vec<u32>>,
    completion_tokens: Option<u32>,
    /// When the run that sent it began: a session's prompts keep that run's salt.
    start_unix_ms: u64,
}

impl Turned {
    fn of(rec: Record) -> Self {
        Turned {
            context_tokens: rec.context_tokens,
            failed: rec.error.is_some(),
            start_unix_ms: rec.load.as_ref().map_or(0, |l| l.start_unix_ms),
            completion_tokens: rec.completion_tokens,
            output_ids: rec.trace.and_then(|t| t.output_ids),
        }
    }
}

/// The sessions in `out` rebuilt from their turn records: each session's conversation after its
/// last recorded turn, or `None` for a session that ended (all turns sent, or a failed turn).
/// Returns them with the number of turn records found. The file is read a record at a time.
fn restore(
    cfg: &SessionsConfig,
    plan: &SessionPlan,
) -> anyhow::Result<(HashMap<u64, Option<Pending>>, u64)> {
    let out = cfg.run.out.display();
    let mut by_session: BTreeMap<u64, BTreeMap<u32, Turned>> = BTreeMap::new();
    let mut found = 0u64;
    each_record(&cfg.run.out, |r| {
        let Some(l) = &r.load else { return Ok(()) };
        let foreign = |why: String| crate::results::ForeignRun {
            file: cfg.run.out.clone(),
            why,
        };
        if l.seed != cfg.run.seed || l.shard != cfg.run.shard {
            return Err(foreign(format!(
                "holds records of seed {} shard {}, this run is seed {} shard {}: --resume needs the same --seed and --shard",
                l.seed, l.shard, cfg.run.seed, cfg.run.shard
            )).into());
        }
        let Some(st) = l.session else {
            return Err(foreign("holds load records without sessions: --resume continues a run with the same flags (no --sessions here)".into()).into());
        };
        found += 1;
        let index = l.index;
        if by_session
            .entry(st.id)
            .or_default()
            .insert(st.turn, Turned::of(r))
            .is_some()
        {
            return Err(crate::results::NotOneRun::Twice {
                file: cfg.run.out.clone(),
                index,
            }
            .into());
        }
        Ok(())
    })?;
    let mut restored = HashMap::new();
    for (session, turns) in by_session {
        // Turns are written in order: a session's later turns without its first is not a file
        // this run wrote.
        let Some(first) = turns.get(&0) else {
            anyhow::bail!("{out}: session {session} has turn records but not its first turn");
        };
        let plan = Arc::new(
            plan.clone()
                .salted(cfg.run.fixed_salt().unwrap_or(first.start_unix_ms)),
        );
        let mut conv = Conversation::new();
        let mut ended = false;
        while let Some(rec) = turns.get(&conv.turns()) {
            let k = conv.turns();
            let Some(turn) = plan.turn(session, k, &conv) else {
                anyhow::bail!(
                    "{out}: session {session} has a turn {k}, beyond this run's --sessions/--turns"
                );
            };
            if turn.prompt.len() != rec.context_tokens as usize {
                anyhow::bail!(
                    "{out}: session {session} turn {k} was sent with {} prompt tokens, this run's plan gives {}: --resume needs the same --seed, lengths and token id range",
                    rec.context_tokens,
                    turn.prompt.len()
                );
            }
            if rec.failed {
                ended = true;
                break;
            }
            let got = (rec.output_ids.as_deref(), rec.completion_tokens);
            let output = output_of(&plan, got, session, k, turn.output_len);
            conv.close(&turn, output);
        }
        ended |= conv.turns() >= plan.sessions().turns;
        let pending = (!ended).then_some(Pending {
            session,
            plan,
            conversation: conv,
        });
        restored.insert(session, pending);
    }
    Ok((restored, found))
}

/// Run one session's remaining turns, sending each record as it finishes; false once the
/// collector is gone.
async fn run_session(
    ctx: &LoadRun,
    p: Pending,
    paused: bool,
    stand_in_warned: &AtomicBool,
    tx: &mpsc::UnboundedSender<Record>,
) -> bool {
    let Pending {
        session,
        plan,
        mut conversation,
    } = p;
    // A session's first turn here starts when a worker takes it up; each later one when the turn
    // before ended, plus its think time.
    let mut scheduled = Instant::now().max(ctx.base);
    let first = conversation.turns();
    while let Some(turn) = plan.turn(session, conversation.turns(), &conversation) {
        let k = turn.turn;
        if k > first {
            wait_until(scheduled, paused).await;
        }
        let rid = format!("ld-{:x}-{}-s{session}-t{k}", ctx.seed, ctx.start_unix_ms);
        let spec = RequestSpec {
            keep_output_ids: true,
            // vLLM lists each chunk's ids only when asked; other servers ignore the field.
            return_token_ids: ctx.target.dialect == Dialect::OpenAi,
            ..RequestSpec::new(rid, Prompt::TokenIds(turn.prompt.clone()), turn.output_len)
        };
        let prepared = Prepared {
            index: turn.index,
            prompt_tokens: u32::try_from(turn.prompt.len()).unwrap_or(u32::MAX),
            spec,
            prefix_group: None,
        };
        if !ctx.gate.pass().await {
            return false;
        }
        let mut rec = fire(ctx, prepared, scheduled).await;
        // The turn ended when its stream did: its send plus the trace's end.
        let end_ns = rec.trace.as_ref().map_or(0, |t| t.end_ns);
        let sent_ns = rec.load.as_ref().map_or(0, |l| l.sent_ns);
        let ended_at = ctx.base + Duration::from_nanos(sent_ns.saturating_add(end_ns));
        if let Some(l) = rec.load.as_mut() {
            l.session = Some(SessionTurn {
                id: session,
                turn: k,
                stand_in_tokens: turn.stand_in_tokens,
            });
        }
        let failed = rec.error.is_some();
        let got = (
            rec.trace.as_ref().and_then(|t| t.output_ids.as_deref()),
            rec.completion_tokens,
        );
        let output = (!failed).then(|| output_of(&plan, got, session, k, turn.output_len));
        if tx.send(rec).is_err() {
            return false;
        }
        // A failed turn ends its session: there is no answer to continue the conversation with.
        let Some(output) = output else { break };
        if matches!(output, TurnOutput::StandIn(_))
            && !stand_in_warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!("the server listed no output token ids (session {session} turn {k}): the next turns carry a stand-in of the output's length, which its prefix cache cannot hit (records: session.stand_in_tokens)");
        }
        conversation.close(&turn, output);
        scheduled = ended_at + plan.think_time(session, k + 1);
    }
    true
}

/// Warm-up request `k` (not recorded): a unique prompt of a first turn's length.
async fn warm_up(ctx: Arc<LoadRun>, plan: Arc<SessionPlan>, k: u64) {
    let w = plan.warmup(k);
    let rid = format!("ld-{:x}-{}-w{k}", ctx.seed, ctx.start_unix_ms);
    let spec = RequestSpec::new(rid, Prompt::TokenIds(w.prompt), w.output_len);
    let trace = net::send(&ctx.http, &ctx.target, &spec, &ctx.timeouts).await;
    if let Some(f) = trace.failure() {
        tracing::warn!("warm-up request failed: {}", f.message);
    }
}

/// The checks of a multi-turn run beyond a load run's ([`crate::drive::load::check_run`]): a closed
/// loop (`arrivals`) without `--max-concurrency`, and sessions that the seed and prompt id range
/// can plan. Returns the plan (not yet salted).
pub fn check_sessions(
    sessions: &Sessions,
    arrivals: &Arrivals,
    max_concurrency: Option<u32>,
    seed: u64,
    token_id_range: (u32, u32),
) -> anyhow::Result<SessionPlan> {
    if !matches!(arrivals, Arrivals::Closed { .. }) {
        anyhow::bail!("--sessions runs a closed loop of sessions: give --concurrency (sessions in flight), not --request-rate or --trace");
    }
    if max_concurrency.is_some() {
        anyhow::bail!("--max-concurrency bounds an open loop; with --sessions, --concurrency bounds the sessions in flight");
    }
    SessionPlan::new(sessions.clone(), seed, token_id_range).map_err(anyhow::Error::msg)
}

/// Run a multi-turn load test, appending each turn's record to `cfg.run.out` as it finishes.
pub async fn run_sessions(cfg: &SessionsConfig) -> anyhow::Result<LoadOutcome> {
    let (planner, plan) = cfg.checked()?;
    run_sessions_with(cfg, planner, plan).await
}

/// [`run_sessions`] of a run already checked: `planner` and `plan` are what
/// [`crate::drive::load::check_run`] and [`check_sessions`] gave for `cfg`.
pub async fn run_sessions_with(
    cfg: &SessionsConfig,
    planner: Planner,
    plan: SessionPlan,
) -> anyhow::Result<LoadOutcome> {
    // One writer per results file, taken before the file is read and anything is sent.
    let _lock = crate::results::lock_results(&cfg.run.out)?;
    #[cfg(feature = "embedded-mock")]
    if let Some(mock) = &cfg.run.engine {
        let (mut outcome, model) = super::engine::load::run_load_engine(
            &cfg.run,
            mock.clone(),
            planner,
            Some((cfg, plan)),
        )?;
        outcome.model_time = Some(model);
        return Ok(outcome);
    }
    let run = &cfg.run;
    let (restored, skipped) =
        if crate::results::existing_results(&run.out, run.resume, " (with the same --seed)")? {
            restore(cfg, &plan)?
        } else {
            (HashMap::new(), 0)
        };
    let run_id = super::piece::piece_run_id(run, Some(&cfg.sessions))?;
    let http =
        net::http_client_with(&run.timeouts, run.stamping).context("building the HTTP client")?;
    let writer = RecordWriter::open(&run.out)?;
    let gate = Arc::new(super::backoff::Gate::default());
    let ctx_at = |start_unix_ms, base| {
        Arc::new(LoadRun {
            http: http.clone(),
            target: run.target.clone(),
            timeouts: run.timeouts.clone(),
            planner: planner.clone(),
            shard: run.shard,
            seed: run.seed,
            start_unix_ms,
            base,
            gate: gate.clone(),
        })
    };

    if run.warmup > 0 {
        let now_ms = net::scrape::unix_ms_now();
        let ctx = ctx_at(now_ms, Instant::now());
        // The sessions' salt where it is known now, so that no session begins like a warm-up.
        let salt = run.fixed_salt().unwrap_or(now_ms);
        let warm = Arc::new(plan.clone().salted(salt));
        let mut set = JoinSet::new();
        for k in 0..u64::from(run.warmup) {
            set.spawn(warm_up(ctx.clone(), warm.clone(), k));
        }
        while set.join_next().await.is_some() {}
    }

    let server_info =
        net::server_info(&http, &run.target.base_url, run.target.api_key.as_deref()).await;
    let before = if run.scrape_metrics {
        scrape_samples(&http, &run.target).await
    } else {
        None
    };
    let (start_unix_ms, base) = run_start(run.start_at_unix_ms);
    let fresh = Arc::new(plan.clone().salted(cfg.salt(start_unix_ms)));
    let concurrency = cfg.concurrency();
    // A load run's manifest, saying what the sessions send and where their output ids come from.
    let manifest = sessions_manifest(
        super::piece::manifest(run, server_info, start_unix_ms, run_id),
        concurrency,
        &cfg.sessions,
        output_ids_source(run.target.dialect),
    );
    crate::results::append_manifest(&run.out, &manifest)?;

    // Sessions in order; a resumed one continues from its last recorded turn.
    let mut restored = restored;
    let queue: VecDeque<Pending> = (0..cfg.sessions.sessions)
        .filter(|s| run.shard.owns(*s))
        .filter_map(|session| match restored.remove(&session) {
            Some(p) => p,
            None => Some(Pending {
                session,
                plan: fresh.clone(),
                conversation: Conversation::new(),
            }),
        })
        .collect();
    let total: u64 = queue
        .iter()
        .map(|p| u64::from(cfg.sessions.turns - p.conversation.turns()))
        .sum();
    let bar = super::progress::bar(Some(total), run.progress);
    let ctx = ctx_at(start_unix_ms, base);
    let (tx, rx) = mpsc::unbounded_channel::<Record>();
    let driver = async move {
        tokio::time::sleep_until(ctx.base).await;
        let paused = clock_is_paused().await;
        let queue = Arc::new(Mutex::new(queue));
        let warned = Arc::new(AtomicBool::new(false));
        let mut set = JoinSet::new();
        for _ in 0..concurrency {
            let (ctx, tx, queue, warned) = (ctx.clone(), tx.clone(), queue.clone(), warned.clone());
            set.spawn(async move {
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                    let Some(p) = next else { break };
                    if !run_session(&ctx, p, paused, &warned, &tx).await {
                        break;
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
    };
    let collected = collect(rx, driver, writer, &bar, run.slo).await?;
    outcome_after(
        run,
        &http,
        before,
        start_unix_ms,
        (collected, skipped),
        gate.verdict(),
    )
    .await
}

/// A load manifest made a multi-turn run's: what the sessions send, `in_flight` of them in this
/// shard, and where their earlier outputs' token ids come from.
pub(crate) fn sessions_manifest(
    load: crate::results::Manifest,
    in_flight: u32,
    sessions: &Sessions,
    output_ids: &str,
) -> crate::results::Manifest {
    crate::results::Manifest {
        schedule: Some(Recorded::Typed(ScheduleRecord::Sessions {
            shard_in_flight: in_flight,
        })),
        workload: Some(Recorded::Typed(WorkloadRecord::Sessions)),
        sessions: serde_json::to_value(sessions).ok(),
        output_ids: Some(output_ids.to_string()),
        ..load
    }
}
