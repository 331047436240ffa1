//! Load runs: many streaming requests under a closed-loop concurrency or an open-loop arrival rate,
//! each timed from its scheduled start, appended to the results file at once, summarised with
//! mergeable histograms, and split into shards of one seeded schedule for several machines.
//!
//! `schedule` (when) -> `workload` (what) -> `run` (the driver, reusing `client::send` and
//! `RecordWriter`) -> `summary` (per run or merged over files); `metrics` scrapes the server's
//! `/metrics` around a run and merges the shards' scrapes without counting a shared server twice.

pub mod metrics;
pub mod run;
pub mod schedule;
pub mod summary;
pub mod workload;

use serde::{Deserialize, Serialize};

pub use metrics::{MergedMetrics, MetricsDelta};
pub use run::{run_load, LoadConfig, LoadOutcome};
pub use schedule::{ArrivalKind, Arrivals, Schedule, Shard, Slot, Stop};
pub use summary::{LoadSummary, Slo};
pub use workload::{LenDist, Planner, TraceEntry, Workload};

/// The load-run fields of a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadInfo {
    /// Request index in the whole (unsharded) schedule.
    pub index: u64,
    /// Shard that sent it.
    pub shard: Shard,
    /// Schedule and workload seed.
    pub seed: u64,
    /// Run start, unix ms (shared by all shards of a run started with `--start-at`).
    pub start_unix_ms: u64,
    /// Scheduled start, ns after the run start.
    pub scheduled_ns: u64,
    /// Actual send, ns after the run start (the instant the trace's times count from: the write of
    /// the request's first byte when stamped at the socket).
    pub sent_ns: u64,
    /// client_queue_time: actual send - scheduled start, ns. Client-side delay, kept out of TTFT's
    /// server part.
    pub client_queue_ns: u64,
    /// TTFT from the scheduled start: client_queue_time + TTFT after the send, ms.
    pub ttft_from_schedule_ms: Option<f64>,
    /// Prefix group (shared-prefix and replay workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_group: Option<u32>,
}

/// Read load records from several results files and summarise them as one run.
pub fn merge_files(files: &[std::path::PathBuf], slo: Slo) -> anyhow::Result<(LoadSummary, usize)> {
    let mut summary = LoadSummary::new(slo);
    let mut ignored = 0usize;
    for f in files {
        let recs = crate::record::read_records(f)?;
        ignored += recs.iter().filter(|r| r.load.is_none()).count();
        summary = summary.merge(&LoadSummary::from_records(&recs, slo));
    }
    Ok((summary, ignored))
}

/// User + system CPU seconds this process has used so far (Linux `/proc/self/stat`, whose clock
/// ticks are USER_HZ = 100); `None` elsewhere.
pub fn process_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}
