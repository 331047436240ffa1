//! The report of one scenario: a Markdown table (metric, target, measured) on stdout and its numbers
//! as JSON in `<target dir>/perf/<scenario>.json`; the formatting of distributions and sizes.

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use bench_client::measure::percentile;
use serde_json::{json, Value};

use crate::machine::machine_json;

pub(crate) struct Report {
    name: String,
    notes: Vec<String>,
    rows: Vec<[String; 3]>,
    data: Value,
}

impl Report {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            notes: Vec::new(),
            rows: Vec::new(),
            data: json!({ "scenario": name, "machine": machine_json() }),
        }
    }

    /// A scenario that can run the mock as a separate process: its name gains `-external` then.
    pub(crate) fn for_mock(name: &str, external: bool) -> Self {
        if external {
            Self::new(&format!("{name}-external"))
        } else {
            Self::new(name)
        }
    }

    pub(crate) fn row(
        &mut self,
        metric: impl Into<String>,
        target: impl Into<String>,
        measured: impl Into<String>,
    ) {
        self.rows
            .push([metric.into(), target.into(), measured.into()]);
    }

    pub(crate) fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    pub(crate) fn set(&mut self, key: &str, v: Value) {
        self.data[key] = v;
    }

    /// A row whose measurement is the distribution of `ms` (p50, p99, max).
    pub(crate) fn dist_row(
        &mut self,
        metric: impl Into<String>,
        target: impl Into<String>,
        ms: &[f64],
    ) {
        self.row(metric, target, fmt_ms(dist(ms)));
    }

    /// Sets `key` to the distribution of `ms`, as JSON.
    pub(crate) fn set_dist(&mut self, key: &str, ms: &[f64]) {
        self.set(key, dist_json(dist(ms)));
    }

    pub(crate) fn print(&self) {
        println!("\n## {}\n", self.name);
        for n in &self.notes {
            println!("- {n}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        println!("| metric | target | measured |");
        println!("|---|---|---|");
        for [m, t, v] in &self.rows {
            println!("| {m} | {t} | {v} |");
        }
    }

    pub(crate) fn save(&mut self) -> Result<()> {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|[m, t, v]| json!({"metric": m, "target": t, "measured": v}))
            .collect();
        self.data["rows"] = json!(rows);
        self.data["notes"] = json!(self.notes);
        let dir = target_dir()?.join("perf");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.data)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("\n(JSON: {})", path.display());
        Ok(())
    }
}

/// `<target>/release/deps/perf-HASH` -> `<target>`.
pub(crate) fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    exe.ancestors()
        .nth(3)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("unexpected bench executable path {}", exe.display()))
}

/// p50 / p99 / max of a sample, or why there is none.
#[derive(Clone, Copy, Debug)]
struct Dist {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn dist(v: &[f64]) -> Option<Dist> {
    Some(Dist {
        n: v.len(),
        p50: percentile(v, 50.0)?,
        p99: percentile(v, 99.0)?,
        max: percentile(v, 100.0)?,
    })
}

fn fmt_ms(d: Option<Dist>) -> String {
    match d {
        Some(d) => format!(
            "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (n = {})",
            d.p50, d.p99, d.max, d.n
        ),
        None => "no samples".to_string(),
    }
}

fn dist_json(d: Option<Dist>) -> Value {
    match d {
        Some(d) => json!({"n": d.n, "p50_ms": d.p50, "p99_ms": d.p99, "max_ms": d.max}),
        None => Value::Null,
    }
}

pub(crate) fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub(crate) fn fmt_counts(m: &std::collections::BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// CPU seconds and their share of one core over `wall_s`, or "n/a".
pub(crate) fn fmt_cpu(cpu_s: Option<f64>, wall_s: f64) -> String {
    cpu_s.map_or("n/a".into(), |c| {
        format!("{c:.2} s ({:.0}% of one core)", 100.0 * c / wall_s)
    })
}

pub(crate) fn mib(kb: Option<u64>) -> String {
    kb.map_or("unavailable".into(), |k| {
        format!("{:.1} MiB", k as f64 / 1024.0)
    })
}
