//! The run manifest beside a results file (`RESULTS.jsonl.manifest.jsonl`): one [`Manifest`] line
//! per run piece (a resumed run appends another), written and read by this one type.
//!
//! Fields are declared in the order of their JSON names so that a line reads as it always has
//! (sorted keys). Fields a kind of run never writes are skipped; fields a kind writes as `null`
//! stay `null`. Keys this build does not know are kept in [`Manifest::extra`] (and written after
//! the known ones), so older and newer files still read.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

pub use super::settings::{Recorded, ScheduleRecord, StopRecord, WorkloadRecord};
use super::Method;
use crate::api::Dialect;
use crate::measure::Slo;
use crate::net::stamped::Stamping;

/// `kind` of a load run's manifest (and an imported run's).
pub const KIND_LOAD: &str = "load";
/// `kind` of a `/metrics` scrape line in the manifest file (not a run's description).
pub const KIND_LOAD_METRICS: &str = "load-metrics";

/// One run's description.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The bench-client version that wrote the line.
    #[serde(default)]
    pub client_version: String,
    /// The command line.
    #[serde(default)]
    pub command: String,
    /// Wire dialect.
    #[serde(default)]
    pub dialect: Option<Dialect>,
    /// Where an imported run came from (`bench-client import`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<Imported>,
    /// The sweep's random prompt salt (sweeps only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<u64>,
    /// [`KIND_LOAD`] for load runs; absent for sweeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `--max-concurrency` (load runs: `null` when not given; absent elsewhere).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_concurrency: Option<Option<u32>>,
    /// Model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Where a multi-turn run's earlier outputs' token ids came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ids: Option<String>,
    /// Whether this piece was started with `--resume` (load runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<bool>,
    /// What makes this run one run: the same for its shards and its resumed pieces, different for
    /// runs of another seed, schedule or workload. A load record is the request
    /// `(run_id, index)`. Absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The arrivals (load runs).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted"
    )]
    pub schedule: Option<Recorded<ScheduleRecord>>,
    /// Seed of the schedule and workload (or of a sweep's prompts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The server's own description (`/server_info`), as it gave it.
    #[serde(default)]
    pub server_info: Option<Value>,
    /// A multi-turn run's sessions, as the plan serialises them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Value>,
    /// A sweep's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SweepSettings>,
    /// Shard `I/N` (load runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// The run was simulated (embedded mock or engine path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<bool>,
    /// The goodput objective (load runs).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted"
    )]
    pub slo: Option<Slo>,
    /// Where stream times were stamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamping: Option<StampSource>,
    /// This piece's start, unix ms (load and imported runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_unix_ms: Option<u64>,
    /// A sweep's start, unix s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_s: Option<u64>,
    /// The stop condition (load runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Recorded<StopRecord>>,
    /// Server base URL.
    #[serde(default)]
    pub url: Option<String>,
    /// Warm-up requests (load runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    /// The workload (load runs).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "sorted"
    )]
    pub workload: Option<Recorded<WorkloadRecord>>,
    /// Keys this build does not know (from other versions), kept as they were.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// A field that, when present, is `Some` even when its value is `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// `v` with its keys in order, as every other object of the line.
fn sorted<S: Serializer, T: Serialize>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(v)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// Where stream times were stamped: by this client (how), or by another tool (`"imported"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StampSource {
    /// This client's stamping.
    Client(Stamping),
    /// Anything else (`"imported"`).
    Other(String),
}

/// Where an imported run came from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Imported {
    /// The tool's file.
    pub file: String,
    /// The closed loop a file without start times was rebuilt as.
    pub rebuilt_schedule: Option<Value>,
    /// The run's place in the file.
    pub run: usize,
    /// The tool's own settings.
    pub settings: Value,
    /// Where the start time came from.
    pub start_from: String,
    /// How per-chunk token counts are known.
    pub token_attribution: String,
    /// The tool.
    pub tool: String,
    /// The tool's definition of TPOT.
    pub tpot_definition: String,
    /// The tool's version.
    pub version: Option<String>,
    /// A summary-only file's figures ([`crate::results::Figures`]): the run has no records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Value>,
}

/// A sweep's settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SweepSettings {
    /// Context lengths.
    pub contexts: Vec<u32>,
    /// Flush the prefix cache before each point.
    pub flush_cache: bool,
    /// Round-robin over the contexts.
    pub interleave: bool,
    /// Method.
    pub method: Option<Method>,
    /// Crash policy.
    pub on_crash: String,
    /// Output tokens per streaming request.
    pub output_tokens: u32,
    /// Where prompts came from.
    pub prompt: PromptSettings,
    /// Started with `--resume`.
    pub resume: bool,
    /// Runs per context.
    pub runs: u32,
    /// Where stream times were stamped.
    pub stamping: Option<Stamping>,
    /// Deadlines, seconds.
    pub timeouts_s: TimeoutsS,
    /// Token id range of prompts.
    pub token_id_range: [u32; 2],
    /// Two-point output lengths.
    pub two_point_tokens: [u32; 2],
    /// Warm-up requests per context.
    pub warmup: u32,
}

/// A sweep's prompts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptSettings {
    /// `token-ids`, `text-words`, ...
    pub kind: String,
    /// Tokenizer file, when prompts were tokenised.
    pub tokenizer: Option<String>,
}

/// Deadlines in seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimeoutsS {
    /// Connect.
    pub connect: f64,
    /// First token, base.
    pub first_token_base: f64,
    /// First token, per 1k prompt tokens.
    pub first_token_per_1k: f64,
    /// Between chunks.
    pub idle: f64,
    /// Whole request.
    pub total: f64,
}

impl Manifest {
    /// Whether the line describes a run (not a `/metrics` scrape).
    pub fn is_run(&self) -> bool {
        self.kind.as_deref() != Some(KIND_LOAD_METRICS)
    }

    /// The line as a JSON object (for views that walk every key).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A stable id of a run's plan: FNV-1a 64 of `parts`, hex. Shards of one plan share it.
pub fn run_id(parts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0x1f)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_to_the_same_bytes_and_keeps_unknown_keys() {
        let line = r#"{"client_version":"0.1.0","command":"bench-client load","dialect":"sglang","kind":"load","max_concurrency":null,"model":null,"new_key":[1,2],"resume":false,"schedule":"Closed","seed":7,"server_info":null,"shard":"0/1","simulated":false,"slo":{"tpot_ms":null,"ttft_ms":null},"stamping":"kernel","start_unix_ms":5,"stop":"Requests(4)","url":"http://x","warmup":0,"workload":"w"}"#;
        let m: Manifest = serde_json::from_str(line).unwrap();
        assert_eq!(m.max_concurrency, Some(None));
        assert_eq!(m.extra["new_key"], serde_json::json!([1, 2]));
        // Unknown keys are kept (written after the known ones).
        let again: Value = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(line).unwrap());
        let known = line.replace(r#""new_key":[1,2],"#, "");
        let m: Manifest = serde_json::from_str(&known).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), known);
        let sweep = r#"{"client_version":"0.1.0","command":"c","dialect":"sglang","model":null,"server_info":null,"url":"u"}"#;
        let m: Manifest = serde_json::from_str(sweep).unwrap();
        assert_eq!(m.max_concurrency, None);
        assert_eq!(serde_json::to_string(&m).unwrap(), sweep);
    }

    #[test]
    fn run_ids_differ_by_plan() {
        assert_eq!(run_id(&["a", "b"]), run_id(&["a", "b"]));
        assert_ne!(run_id(&["a", "b"]), run_id(&["ab", ""]));
    }
}
