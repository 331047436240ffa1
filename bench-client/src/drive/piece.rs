//! One piece of a load run (a shard, or an invocation that `--resume` continues): its manifest
//! line, the run id its pieces share, and what `--resume` finds in its results file.

use std::collections::HashSet;

use super::load::LoadConfig;
use crate::results::manifest::{self, Manifest, StampSource};
use crate::results::settings::{Recorded, ScheduleRecord, StopRecord, WorkloadRecord};
use crate::results::{each_record, ForeignRun};

/// The manifest line of a load run piece (`run_id`: see [`run_identity`]).
pub(crate) fn manifest(
    cfg: &LoadConfig,
    server_info: Option<serde_json::Value>,
    start_unix_ms: u64,
    run_id: String,
) -> Manifest {
    Manifest {
        command: cfg.command.clone(),
        simulated: Some(cfg.simulated),
        client_version: env!("CARGO_PKG_VERSION").to_string(),
        kind: Some(manifest::KIND_LOAD.to_string()),
        url: Some(cfg.target.shown_url()),
        dialect: Some(cfg.target.dialect),
        model: cfg.target.model.clone(),
        server_info,
        seed: Some(cfg.seed),
        shard: Some(cfg.shard.to_string()),
        start_unix_ms: Some(start_unix_ms),
        schedule: Some(Recorded::<ScheduleRecord>::of(&cfg.schedule.arrivals)),
        stop: Some(Recorded::<StopRecord>::of(cfg.schedule.stop)),
        workload: Some(Recorded::<WorkloadRecord>::of(&cfg.workload)),
        warmup: Some(cfg.warmup),
        max_concurrency: Some(cfg.max_concurrency),
        resume: Some(cfg.resume),
        run_id: Some(run_id),
        slo: Some(cfg.slo),
        stamping: Some(StampSource::Client(cfg.stamping)),
        ..Manifest::default()
    }
}

/// What makes a load run one run: its seed, arrivals and workload (or sessions). Its shards and
/// resumed pieces share it (neither the shard, the start nor the stop is part of it: a resumed run
/// may go on past its first stop); another seed, rate or workload gives another. The hash is of
/// the settings' debug text in full (a trace's every arrival), whatever form the manifest
/// records them in, so that the files of every version keep their run's id.
pub(crate) fn run_identity(cfg: &LoadConfig, sessions: Option<&crate::plan::Sessions>) -> String {
    manifest::run_id(&[
        &cfg.seed.to_string(),
        &format!("{:?}", cfg.schedule.arrivals),
        &match sessions {
            Some(s) => format!("{s:?}"),
            None => format!("{:?}", cfg.workload),
        },
    ])
}

/// What `--resume` found in a results file: the requests done (by index) and the run id it
/// keeps.
#[derive(Debug, Default)]
pub(crate) struct Resumed {
    /// Indices of the requests the file holds.
    pub(crate) done: HashSet<u64>,
    /// The latest stream end of those requests, unix ms (a resumed piece starts after it).
    pub(crate) last_end_unix_ms: Option<u64>,
}

/// The run id of this piece: the one of the file being resumed, which must be this run's (the
/// same seed, schedule and workload), else this run's own.
pub(crate) fn piece_run_id(
    cfg: &LoadConfig,
    sessions: Option<&crate::plan::Sessions>,
) -> anyhow::Result<String> {
    let mine = run_identity(cfg, sessions);
    if !cfg.resume {
        return Ok(mine);
    }
    let manifests = crate::results::read_manifests(&cfg.out)?;
    if let Some(theirs) = manifests.iter().find_map(|m| m.run_id.clone()) {
        if theirs != mine {
            return Err(ForeignRun::other_plan(&cfg.out, &theirs, &mine).into());
        }
    }
    Ok(mine)
}

/// What `--resume` finds in the results file (nothing without it); a file of another seed or
/// shard, of multi-turn records, or holding a request twice, is refused.
pub(crate) fn resumed(cfg: &LoadConfig) -> anyhow::Result<Resumed> {
    let mut found = Resumed::default();
    if crate::results::existing_results(&cfg.out, cfg.resume, " (with the same --seed)")? {
        // One record at a time: a file of millions holds only their indices here.
        each_record(&cfg.out, |r| {
            let Some(l) = &r.load else { return Ok(()) };
            let foreign = |why: String| ForeignRun {
                file: cfg.out.clone(),
                why,
            };
            if l.session.is_some() {
                return Err(foreign(
                    "holds multi-turn records: --resume continues it with the same --sessions and --turns".into(),
                ).into());
            }
            if l.seed != cfg.seed || l.shard != cfg.shard {
                return Err(foreign(format!(
                    "holds records of seed {} shard {}, this run is seed {} shard {}: --resume needs the same --seed and --shard",
                    l.seed, l.shard, cfg.seed, cfg.shard
                )).into());
            }
            if !found.done.insert(l.index) {
                return Err(crate::results::NotOneRun::Twice {
                    file: cfg.out.clone(),
                    index: l.index,
                }
                .into());
            }
            if let Some(t) = &r.trace {
                let end = crate::report::load::Instants::of(l, t)
                    .end
                    .div_ceil(1_000_000);
                found.last_end_unix_ms = Some(found.last_end_unix_ms.map_or(end, |e| e.max(end)));
            }
            Ok(())
        })?;
    }
    Ok(found)
}
