//! What differs between the manifests beside two sides' results files (server, model,
//! `/server_info`, client settings, command), and the SLO they recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use super::debug_text::debug_value;
use super::workload::{self, num, Arrivals, Prompts, TraceSettings, Workload};
use super::Difference;
use crate::report::load::Slo;
use crate::results::settings::{Recorded, ScheduleRecord, WorkloadRecord};
use crate::results::{manifest_path, Manifest};

/// Manifest keys that [`workload_differences`] says in words.
const WORKLOAD: [&str; 7] = [
    "dialect",
    "schedule",
    "workload",
    "stop",
    "max_concurrency",
    "sessions",
    "settings.output_tokens",
];

/// Manifest keys that differ between every two runs and say nothing about the setup.
const VOLATILE: [&str; 5] = [
    "started_unix_s",
    "invocation",
    "start_unix_ms",
    "resume",
    "settings.resume",
];

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, BTreeSet<String>>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            if !VOLATILE.contains(&prefix) {
                out.entry(prefix.to_string())
                    .or_default()
                    .insert(other.to_string());
            }
        }
    }
}

/// The run lines (those with a `command`) of the manifests beside `files`, flattened to dotted
/// keys; a note for each file without a manifest.
fn manifest_settings(
    files: &[PathBuf],
    notes: &mut Vec<String>,
) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for f in files {
        let path = manifest_path(f);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!("no manifest beside {}", f.display()));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            // A torn or foreign line is no setting; the results themselves are what counts. A
            // run's line has a command (a `/metrics` scrape's has none).
            let Ok(m) = serde_json::from_str::<Manifest>(line) else {
                continue;
            };
            if !m.command.is_empty() {
                flatten("", &m.to_value(), &mut out);
            }
        }
    }
    Ok(out)
}

fn shown(v: Option<&BTreeSet<String>>) -> String {
    let s = v.map_or_else(
        || "-".to_string(),
        |s| s.iter().cloned().collect::<Vec<_>>().join(" | "),
    );
    if s.chars().count() > 160 {
        format!("{}...", s.chars().take(157).collect::<String>())
    } else {
        s
    }
}

/// What differs between the two sides' manifests (server url, model, `/server_info`, client
/// settings, command), and notes for missing manifests.
pub fn manifest_differences(
    base: &[PathBuf],
    new: &[PathBuf],
) -> anyhow::Result<(Vec<Difference>, Vec<String>)> {
    let mut notes = Vec::new();
    let b = manifest_settings(base, &mut notes)?;
    let n = manifest_settings(new, &mut notes)?;
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    let diffs = keys
        .into_iter()
        .filter(|k| b.get(*k) != n.get(*k))
        .filter(|k| {
            !WORKLOAD
                .iter()
                .any(|w| *k == w || k.starts_with(&format!("{w}.")))
        })
        .map(|k| Difference {
            key: k.clone(),
            base: shown(b.get(k)),
            new: shown(n.get(k)),
        })
        .collect();
    Ok((diffs, notes))
}

/// The run lines (those with a `command`) of the manifest beside each file, in order.
fn run_lines(files: &[PathBuf]) -> Vec<Value> {
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(manifest_path(f)) else {
            continue;
        };
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v.get("command").is_some()),
        );
    }
    out
}

/// What differs between the workloads of the two sides, in sentences (none: the same workload, or
/// a side whose manifests are missing), and notes on what could not be checked. A side whose runs
/// had different workloads among themselves is a difference too.
pub fn workload_differences(base: &[PathBuf], new: &[PathBuf]) -> (Vec<String>, Vec<String>) {
    let mut notes = Vec::new();
    let mut side = |name: &str, files: &[PathBuf]| -> Vec<Workload> {
        let mut seen: Vec<Workload> = Vec::new();
        for w in run_lines(files).iter().map(workload_of) {
            if !seen.contains(&w) {
                seen.push(w);
            }
        }
        if seen.is_empty() {
            notes.push(format!(
                "{name}: no manifest, so its workload is not checked"
            ));
        }
        seen
    };
    let (b, n) = (side("BASE", base), side("NEW", new));
    let mut out = Vec::new();
    for (name, runs) in [("BASE", &b), ("NEW", &n)] {
        for w in runs.iter().skip(1) {
            for d in workload::differences(&runs[0], w) {
                out.push(format!("{name}'s runs differ among themselves: {d}"));
            }
        }
    }
    for (name, runs) in [("BASE", &b), ("NEW", &n)] {
        if let Some(what) = runs.first().and_then(Workload::unknown) {
            notes.push(format!(
                "{name}: the manifest does not say {what} (an imported run's does not), so they are not checked"
            ));
        }
    }
    if let (Some(x), Some(y)) = (b.first(), n.first()) {
        // A sweep against a load run is refused by kind, with its own message.
        let sweep = |w: &Workload| w.arrivals == Some(Arrivals::Sweep);
        if sweep(x) == sweep(y) {
            out.extend(workload::differences(x, y));
        }
    }
    (out, notes)
}

/// A run line's workload, from its typed `schedule` and `workload` ([`ScheduleRecord`],
/// [`WorkloadRecord`]); earlier versions wrote them as Rust's debug text of the run's settings
/// (`Closed { concurrency: 64 }`), read back with [`debug_value`].
fn workload_of(line: &Value) -> Workload {
    let text = |k: &str| line.get(k).and_then(Value::as_str).unwrap_or("");
    let dialect = line.get("dialect").and_then(|d| match d {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    });
    let max_concurrency = line.get("max_concurrency").and_then(Value::as_u64);
    let sweep = line
        .get("settings")
        .and_then(|s| s.get("contexts"))
        .is_some();
    if sweep {
        return Workload {
            dialect,
            arrivals: Some(Arrivals::Sweep),
            max_concurrency: None,
            prompts: Prompts::Sweep {
                output_tokens: line["settings"]
                    .get("output_tokens")
                    .and_then(Value::as_u64),
            },
        };
    }
    let schedule = line
        .get("schedule")
        .map(|v| Recorded::<ScheduleRecord>::deserialize(v).ok());
    if let Some(s) = line.get("sessions").filter(|s| !s.is_null()) {
        let arrivals = match schedule {
            Some(Some(r)) => r.describe(),
            _ => text("schedule").to_string(),
        };
        return Workload {
            dialect,
            arrivals: Some(Arrivals::Sessions(arrivals)),
            max_concurrency,
            prompts: Prompts::Sessions(sessions(s)),
        };
    }
    let arrivals = match schedule {
        Some(Some(Recorded::Typed(r))) => Some(arrivals_of(r)),
        _ => arrivals_of_text(text("schedule")),
    };
    let workload = line
        .get("workload")
        .and_then(|v| Recorded::<WorkloadRecord>::deserialize(v).ok());
    let prompts = match workload {
        Some(Recorded::Typed(w)) => prompts_of(w),
        _ => prompts_of_text(text("workload")),
    };
    Workload {
        dialect,
        arrivals,
        max_concurrency,
        prompts,
    }
}

/// The arrivals a manifest records.
fn arrivals_of(r: ScheduleRecord) -> Arrivals {
    match r {
        ScheduleRecord::Closed { concurrency } => Arrivals::Closed(u64::from(concurrency)),
        ScheduleRecord::Open {
            rate,
            arrival,
            burstiness,
        } => Arrivals::Open {
            rate,
            process: format!("{arrival:?}"),
            burstiness,
        },
        ScheduleRecord::Trace { .. } => Arrivals::Trace,
        s @ ScheduleRecord::Sessions { .. } => Arrivals::Sessions(Recorded::Typed(s).describe()),
    }
}

/// The prompts a manifest records.
fn prompts_of(w: WorkloadRecord) -> Prompts {
    let json = |d: &crate::plan::LenDist| lengths(&serde_json::to_value(d).unwrap_or_default());
    match w {
        WorkloadRecord::Random { input, output } => Prompts::Random {
            input: json(&input),
            output: json(&output),
        },
        WorkloadRecord::SharedPrefix {
            groups,
            prefix_len,
            input,
            output,
        } => Prompts::SharedPrefix {
            groups: u64::from(groups),
            prefix_len: u64::from(prefix_len),
            input: json(&input),
            output: json(&output),
        },
        WorkloadRecord::Trace { trace: t } => Prompts::Trace(TraceSettings {
            source: t.source,
            format: format!("{:?}", t.format),
            requests: Some(t.requests),
            speedup: t.speedup,
            limit: t.limit,
            scale: t.scale,
            block_size: u64::from(t.block_size),
            prefix_len: u64::from(t.prefix_len),
        }),
        WorkloadRecord::Sessions => Prompts::Other("multi-turn sessions".into()),
    }
}

/// The arrivals of an earlier version's debug text.
fn arrivals_of_text(text: &str) -> Option<Arrivals> {
    let schedule = debug_value(text);
    if let Some(c) = schedule.pointer("/Closed/concurrency") {
        c.as_u64().map(Arrivals::Closed)
    } else if let Some(o) = schedule.get("Open") {
        Some(Arrivals::Open {
            rate: o["rate"].as_f64().unwrap_or(f64::NAN),
            process: o["kind"].as_str().unwrap_or("?").to_string(),
            burstiness: o["burstiness"].as_f64().unwrap_or(1.0),
        })
    } else if schedule.get("Trace").is_some() {
        Some(Arrivals::Trace)
    } else {
        None
    }
}

/// The prompts of an earlier version's debug text.
fn prompts_of_text(text: &str) -> Prompts {
    let w = debug_value(text);
    if let Some(r) = w.get("Random") {
        Prompts::Random {
            input: lengths(&r["input"]),
            output: lengths(&r["output"]),
        }
    } else if let Some(p) = w.get("SharedPrefix") {
        Prompts::SharedPrefix {
            groups: p["groups"].as_u64().unwrap_or(0),
            prefix_len: p["prefix_len"].as_u64().unwrap_or(0),
            input: lengths(&p["input"]),
            output: lengths(&p["output"]),
        }
    } else if let Some(t) = w.pointer("/Trace/Trace") {
        Prompts::Trace(TraceSettings {
            source: t["source"].as_str().unwrap_or("?").to_string(),
            format: t["format"].as_str().unwrap_or("?").to_string(),
            requests: t["requests"].as_u64(),
            speedup: t["speedup"].as_f64().unwrap_or(f64::NAN),
            limit: t["limit"].as_u64(),
            scale: t["scale"].as_f64().unwrap_or(f64::NAN),
            block_size: t["block_size"].as_u64().unwrap_or(0),
            prefix_len: t["prefix_len"].as_u64().unwrap_or(0),
        })
    } else {
        Prompts::Other(text.to_string())
    }
}

/// A length distribution (`Fixed { n: 256 }`, or its JSON `{"kind": "fixed", "n": 256}`) in words.
fn lengths(v: &Value) -> String {
    let f = |k: &str| v.pointer(k).and_then(Value::as_f64).map(num);
    if let Some(n) = f("/Fixed/n").or(f("/n")) {
        format!("{n} tokens")
    } else if let (Some(lo), Some(hi)) =
        (f("/Uniform/lo").or(f("/lo")), f("/Uniform/hi").or(f("/hi")))
    {
        format!("uniform {lo}-{hi} tokens")
    } else if let (Some(m), Some(s)) = (
        f("/Normal/mean").or(f("/mean")),
        f("/Normal/std").or(f("/std")),
    ) {
        format!("normal, mean {m}, sd {s} tokens")
    } else {
        v.to_string()
    }
}

/// A sessions setting (the manifest's JSON of it) in words.
fn sessions(s: &Value) -> String {
    let think = &s["think"];
    let ms = |k: &str| think[k].as_f64().map(|ns| format!("{} ms", num(ns / 1e6)));
    let think = match think["kind"].as_str() {
        Some("fixed") => ms("ns").unwrap_or_default(),
        Some("uniform") => format!(
            "uniform {}-{}",
            ms("lo_ns").unwrap_or_default(),
            ms("hi_ns").unwrap_or_default()
        ),
        Some("exponential") => format!("exponential, mean {}", ms("mean_ns").unwrap_or_default()),
        _ => think.to_string(),
    };
    format!(
        "{} sessions of {} turns, first turn {} in, later turns {} in, {} out, think time {think}",
        s["sessions"],
        s["turns"],
        lengths(&s["first_input"]),
        lengths(&s["turn_input"]),
        lengths(&s["output"]),
    )
}

/// The SLO recorded in the manifests of load runs, when every run that recorded one agrees.
pub fn manifest_slo(files: &[PathBuf]) -> Option<Slo> {
    let mut seen: Option<Slo> = None;
    for f in files {
        // A missing manifest file gives no SLO; a torn or foreign line is skipped.
        std::fs::metadata(manifest_path(Path::new(f))).ok()?;
        let manifests = crate::results::read_manifests(Path::new(f)).ok()?;
        for m in manifests {
            let Some(s) = m.slo else {
                continue;
            };
            if !s.is_set() {
                continue;
            }
            match seen {
                Some(prev) if prev != s => return None,
                _ => seen = Some(s),
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_show_only_what_differs() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        std::fs::write(
            manifest_path(&a),
            "{\"command\":\"x\",\"url\":\"u\",\"invocation\":1,\"server_info\":{\"decode_base_s\":0.002}}\n",
        )
        .unwrap();
        std::fs::write(
            manifest_path(&b),
            "{\"command\":\"x\",\"url\":\"u\",\"invocation\":2,\"server_info\":{\"decode_base_s\":0.003}}\n{\"torn\n",
        )
        .unwrap();
        let (d, notes) = manifest_differences(&[a], &[b.clone(), dir.path().join("c")]).unwrap();
        assert_eq!(
            d,
            vec![Difference {
                key: "server_info.decode_base_s".into(),
                base: "0.002".into(),
                new: "0.003".into()
            }]
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn manifests_of_earlier_versions_read_as_the_typed_ones() {
        let line = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        // Lines as earlier versions wrote them (the first: a fixture's manifest), and as this
        // one does.
        let fixture = include_str!("../../../../fixtures/results/load-sglang.jsonl.manifest.jsonl");
        let pairs = [
            (
                fixture.lines().next().unwrap(),
                r#"{"dialect":"sglang","schedule":{"concurrency":4,"kind":"closed"},"workload":{"input":{"kind":"fixed","n":256},"kind":"random","output":{"kind":"fixed","n":128}}}"#,
                "a closed loop at 4 in flight",
            ),
            (
                r#"{"schedule":"Open { rate: 2.5, kind: Gamma, burstiness: 0.5 }","workload":"SharedPrefix { groups: 4, prefix_len: 512, input: Uniform { lo: 10, hi: 20 }, output: Normal { mean: 100.0, std: 10.0 } }"}"#,
                r#"{"schedule":{"arrival":"gamma","burstiness":0.5,"kind":"open","rate":2.5},"workload":{"groups":4,"input":{"hi":20,"kind":"uniform","lo":10},"kind":"shared-prefix","output":{"kind":"normal","mean":100.0,"std":10.0},"prefix_len":512}}"#,
                "an open loop at 2.5 req/s (Gamma, burstiness 0.5)",
            ),
            (
                r#"{"schedule":"Trace { offsets_ns: [0, 5] }","workload":"Trace(Trace { format: Mooncake, requests: 2, block_size: 512, prefix_len: 0, speedup: 1.0, limit: None, scale: 1.0, source: \"t.jsonl\", .. })"}"#,
                r#"{"schedule":{"kind":"trace","requests":2},"workload":{"kind":"trace","trace":{"block_size":512,"format":"mooncake","limit":null,"prefix_len":0,"requests":2,"scale":1.0,"source":"t.jsonl","speedup":1.0}}}"#,
                "a trace replayed at its own arrival times",
            ),
        ];
        for (old, new, arrivals) in pairs {
            let (old, new) = (workload_of(&line(old)), workload_of(&line(new)));
            assert_eq!(old, new);
            assert_eq!(
                new.arrivals.as_ref().map(|a| a.to_string()).as_deref(),
                Some(arrivals)
            );
            assert!(!matches!(new.prompts, Prompts::Other(_)), "{new:?}");
        }
        let w = workload_of(&line(pairs[0].1));
        assert_eq!(
            w.prompts,
            Prompts::Random {
                input: "256 tokens".into(),
                output: "128 tokens".into()
            }
        );
    }
}
