//! Comparing the results of two runs: rows of NEW against BASE (per context length and metric for
//! sweeps, per metric for load runs), each with the bootstrap ratio and verdict of
//! [`crate::measure::compare`], and what differs between the runs' manifests.
//!
//! Every row is computed from per-request values read from the records (never from merged
//! histograms): sweeps from `ttft_ms`, `decode_tok_s` and `prefill_tok_s` of successful streaming
//! records; load runs from [`crate::measure::load_numbers`] of each successful request.

mod manifest;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use super::load::{LoadSummary, Slo};
use crate::measure::compare::{
    compare, Bootstrap, Comparison, Direction, Sample, Statistic, Verdict,
};
use crate::measure::{load_numbers, measure};
use crate::results::{read_records, Method, Record};

pub use manifest::{manifest_differences, manifest_slo};

/// What kind of run a side holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `bench-client sweep` records.
    Sweep,
    /// `bench-client load` records.
    Load,
}

impl Kind {
    /// Name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::Sweep => "sweep",
            Kind::Load => "load",
        }
    }
}

/// One row: one statistic of NEW against BASE.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Context length (sweeps).
    pub context_tokens: Option<u32>,
    /// Machine name, e.g. `ttft_p50_ms`.
    pub metric: &'static str,
    /// Which way is better.
    pub direction: Direction,
    /// Requests on BASE's side.
    pub n_base: usize,
    /// Requests on NEW's side.
    pub n_new: usize,
    /// The comparison, or why there is none (that row's verdict is `unclear`).
    pub outcome: Result<Comparison, String>,
}

impl Row {
    /// The verdict; a row that could not be compared is `unclear`.
    pub fn verdict(&self) -> Verdict {
        self.outcome
            .as_ref()
            .map_or(Verdict::Unclear, |c| c.verdict)
    }
}

/// A manifest setting whose values differ between the sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Dotted key, e.g. `server_info.decode_base_s`.
    pub key: String,
    /// BASE's values (`-` when absent), several joined by ` | `.
    pub base: String,
    /// NEW's values.
    pub new: String,
}

/// A whole comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareReport {
    /// Kind of both sides.
    pub kind: Kind,
    /// Bootstrap settings used.
    pub bootstrap: Bootstrap,
    /// Manifest differences, printed first.
    pub differences: Vec<Difference>,
    /// The rows.
    pub rows: Vec<Row>,
    /// Remarks: contexts on one side only, missing manifests, failures.
    pub notes: Vec<String>,
}

impl CompareReport {
    /// Whether any row is `worse`.
    pub fn any_worse(&self) -> bool {
        self.rows.iter().any(|r| r.verdict() == Verdict::Worse)
    }

    /// Rows by verdict.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut m = BTreeMap::new();
        for r in &self.rows {
            *m.entry(r.verdict().as_str()).or_default() += 1;
        }
        m
    }
}

/// Read one side's records from its files.
pub fn read_side(side: &str, files: &[PathBuf]) -> anyhow::Result<Vec<Record>> {
    let mut all = Vec::new();
    for f in files {
        let recs = read_records(f).with_context(|| format!("{side}: reading {}", f.display()))?;
        all.extend(recs);
    }
    Ok(all)
}

/// The kind of a side's records; an empty, failed-only or mixed side is refused.
pub fn kind_of(side: &str, records: &[Record]) -> anyhow::Result<Kind> {
    if records.is_empty() {
        anyhow::bail!("{side} has no records");
    }
    let load = records.iter().filter(|r| r.load.is_some()).count();
    let kind = match load {
        0 => Kind::Sweep,
        n if n == records.len() => Kind::Load,
        _ => anyhow::bail!(
            "{side} mixes sweep and load records ({load} of {} are load records); compare one kind at a time",
            records.len()
        ),
    };
    let ok = records
        .iter()
        .filter(|r| r.error.is_none() && r.method == Method::Streaming)
        .count();
    if ok == 0 {
        anyhow::bail!(
            "{side} has no successful streaming requests ({} records, all failed or two-point)",
            records.len()
        );
    }
    Ok(kind)
}

fn row(
    context_tokens: Option<u32>,
    metric: &'static str,
    direction: Direction,
    base: Result<Sample, String>,
    new: Result<Sample, String>,
    b: &Bootstrap,
) -> Row {
    let n_base = base.as_ref().map_or(0, Sample::len);
    let n_new = new.as_ref().map_or(0, Sample::len);
    let outcome = base.and_then(|bs| {
        new.and_then(|ns| compare(&bs, &ns, direction, b).map_err(|e| e.to_string()))
    });
    Row {
        context_tokens,
        metric,
        direction,
        n_base,
        n_new,
        outcome,
    }
}

fn scalar(side: &'static str, v: &[f64], st: Statistic) -> Result<Sample, String> {
    Sample::scalar(side, v, st).map_err(|e| e.to_string())
}

/// Per context length: the successful streaming requests' TTFT, decode and prefill rates.
#[derive(Default)]
struct SweepValues {
    ttft_ms: Vec<f64>,
    decode_tok_s: Vec<f64>,
    prefill_tok_s: Vec<f64>,
}

fn sweep_values(records: &[Record]) -> BTreeMap<u32, SweepValues> {
    let mut m: BTreeMap<u32, SweepValues> = BTreeMap::new();
    let fin = |x: Option<f64>| x.filter(|v| v.is_finite());
    for r in records
        .iter()
        .filter(|r| r.method == Method::Streaming && r.error.is_none())
    {
        let p = m.entry(r.context_tokens).or_default();
        p.ttft_ms.extend(fin(r.ttft_ms));
        p.decode_tok_s.extend(fin(r.decode_tok_s));
        p.prefill_tok_s.extend(fin(r.prefill_tok_s));
    }
    m
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Sweep rows: per shared context length, TTFT p50, decode p50 and prefill p50.
fn sweep_rows(
    base: &[Record],
    new: &[Record],
    b: &Bootstrap,
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Row>> {
    let (bv, nv) = (sweep_values(base), sweep_values(new));
    let shared: Vec<u32> = bv.keys().filter(|k| nv.contains_key(k)).copied().collect();
    let only = |a: &BTreeMap<u32, SweepValues>, o: &BTreeMap<u32, SweepValues>| -> Vec<u32> {
        a.keys().filter(|k| !o.contains_key(k)).copied().collect()
    };
    if shared.is_empty() {
        anyhow::bail!(
            "no context length in common: BASE has {}, NEW has {}",
            list(&bv.keys().copied().collect::<Vec<_>>()),
            list(&nv.keys().copied().collect::<Vec<_>>())
        );
    }
    for (side, ctxs) in [("BASE", only(&bv, &nv)), ("NEW", only(&nv, &bv))] {
        if !ctxs.is_empty() {
            notes.push(format!(
                "context lengths only in {side} (not compared): {}",
                list(&ctxs)
            ));
        }
    }
    let p50 = Statistic::Percentile(50.0);
    let mut rows = Vec::new();
    for ctx in shared {
        let (x, y) = (&bv[&ctx], &nv[&ctx]);
        let metrics: [(&'static str, Direction, &Vec<f64>, &Vec<f64>); 3] = [
            (
                "ttft_p50_ms",
                Direction::LowerIsBetter,
                &x.ttft_ms,
                &y.ttft_ms,
            ),
            (
                "decode_p50_tok_s",
                Direction::HigherIsBetter,
                &x.decode_tok_s,
                &y.decode_tok_s,
            ),
            (
                "prefill_p50_tok_s",
                Direction::HigherIsBetter,
                &x.prefill_tok_s,
                &y.prefill_tok_s,
            ),
        ];
        for (metric, dir, xb, yn) in metrics {
            rows.push(row(
                Some(ctx),
                metric,
                dir,
                scalar("BASE", xb, p50),
                scalar("NEW", yn, p50),
                b,
            ));
        }
    }
    Ok(rows)
}

/// One side of a load comparison: per-request figures (ms), per-request rate contributions and
/// the run's duration.
#[derive(Default)]
struct LoadValues {
    ttft_ms: Vec<f64>,
    tpot_ms: Vec<f64>,
    inter_chunk_ms: Vec<Vec<f64>>,
    e2e_ms: Vec<f64>,
    /// One entry per measured request (0 for a failed one).
    output_tokens: Vec<f64>,
    succeeded: Vec<f64>,
    good: Vec<f64>,
    duration_s: Option<f64>,
}

fn load_values(records: &[Record], slo: Slo) -> LoadValues {
    let mut v = LoadValues::default();
    let ms = |ns: u64| ns as f64 / 1e6;
    for r in records {
        let (Some(info), Some(trace)) = (&r.load, &r.trace) else {
            continue;
        };
        let m = match (&r.error, measure(trace)) {
            (None, Ok(m)) => m,
            _ => {
                v.output_tokens.push(0.0);
                v.succeeded.push(0.0);
                v.good.push(0.0);
                continue;
            }
        };
        let n = load_numbers(trace, &m, info.client_queue_ns);
        let output = u64::from(m.completion_tokens.unwrap_or(0));
        v.ttft_ms.push(ms(n.ttft_from_schedule_ns));
        v.tpot_ms.extend(n.tpot_ns.map(ms));
        v.inter_chunk_ms
            .push(n.inter_chunk_ns.iter().map(|&g| ms(g)).collect());
        v.e2e_ms.push(ms(n.e2e_ns));
        v.output_tokens.push(output as f64);
        v.succeeded.push(1.0);
        v.good.push(if slo.met(&n, output) { 1.0 } else { 0.0 });
    }
    // Shards of one run share its start; repeats are separate runs, and their durations add up
    // (the time between two repeats is no part of either).
    let mut runs: BTreeMap<u64, Vec<Record>> = BTreeMap::new();
    for r in records {
        if let Some(info) = &r.load {
            runs.entry(info.start_unix_ms).or_default().push(r.clone());
        }
    }
    let durations: Option<Vec<f64>> = runs
        .values()
        .map(|rs| LoadSummary::from_records(rs, slo).duration_s())
        .collect();
    v.duration_s = durations
        .map(|d| d.iter().sum::<f64>())
        .filter(|d| *d > 0.0);
    v
}

/// Requests, each with its values.
type Units = Vec<Vec<f64>>;

/// Load rows: TTFT, TPOT, inter-chunk and end-to-end p50/p90/p99, then output and request
/// throughput and goodput (with an SLO).
fn load_rows(base: &[Record], new: &[Record], slo: Slo, b: &Bootstrap) -> Vec<Row> {
    let (x, y) = (load_values(base, slo), load_values(new, slo));
    let units = |v: &[f64]| -> Vec<Vec<f64>> { v.iter().map(|&x| vec![x]).collect() };
    let latencies: [([&'static str; 3], Units, Units); 4] = [
        (
            ["ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"],
            units(&x.ttft_ms),
            units(&y.ttft_ms),
        ),
        (
            ["tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms"],
            units(&x.tpot_ms),
            units(&y.tpot_ms),
        ),
        (
            [
                "inter_chunk_p50_ms",
                "inter_chunk_p90_ms",
                "inter_chunk_p99_ms",
            ],
            x.inter_chunk_ms.clone(),
            y.inter_chunk_ms.clone(),
        ),
        (
            ["e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms"],
            units(&x.e2e_ms),
            units(&y.e2e_ms),
        ),
    ];
    let mut rows = Vec::new();
    for (names, xb, yn) in &latencies {
        for (name, p) in names.iter().zip([50.0, 90.0, 99.0]) {
            let st = Statistic::Percentile(p);
            rows.push(row(
                None,
                name,
                Direction::LowerIsBetter,
                Sample::clustered("BASE", xb, st).map_err(|e| e.to_string()),
                Sample::clustered("NEW", yn, st).map_err(|e| e.to_string()),
                b,
            ));
        }
    }
    let rate = |side: &'static str, v: &LoadValues, vals: &[f64]| -> Result<Sample, String> {
        let d = v
            .duration_s
            .ok_or_else(|| format!("{side}: the run's duration is undefined"))?;
        scalar(side, vals, Statistic::Rate { duration_s: d })
    };
    let higher = Direction::HigherIsBetter;
    rows.push(row(
        None,
        "output_throughput_tok_s",
        higher,
        rate("BASE", &x, &x.output_tokens),
        rate("NEW", &y, &y.output_tokens),
        b,
    ));
    rows.push(row(
        None,
        "request_throughput_req_s",
        higher,
        rate("BASE", &x, &x.succeeded),
        rate("NEW", &y, &y.succeeded),
        b,
    ));
    if slo.is_set() {
        rows.push(row(
            None,
            "goodput_req_s",
            higher,
            rate("BASE", &x, &x.good),
            rate("NEW", &y, &y.good),
            b,
        ));
    }
    rows
}

/// Compare NEW's records with BASE's: refuses sides that are empty, failed-only, of different
/// kinds or (sweeps) with no context length in common.
pub fn compare_records(
    base: &[Record],
    new: &[Record],
    slo: Slo,
    b: &Bootstrap,
) -> anyhow::Result<CompareReport> {
    let kb = kind_of("BASE", base)?;
    let kn = kind_of("NEW", new)?;
    if kb != kn {
        anyhow::bail!(
            "BASE holds {} records and NEW {} records: nothing to compare",
            kb.as_str(),
            kn.as_str()
        );
    }
    let mut notes = Vec::new();
    for (side, recs) in [("BASE", base), ("NEW", new)] {
        let failed = recs.iter().filter(|r| r.error.is_some()).count();
        if failed > 0 {
            notes.push(format!(
                "{side}: {failed} of {} records failed and are left out of the latencies",
                recs.len()
            ));
        }
    }
    let rows = match kb {
        Kind::Sweep => sweep_rows(base, new, b, &mut notes)?,
        Kind::Load => {
            let rows = load_rows(base, new, slo, b);
            if !slo.is_set() {
                notes.push("no SLO (--slo or in the manifests): goodput not compared".into());
            }
            notes.push(
                "throughputs: requests resampled, each run's duration held fixed (the interval covers the request mix, not the run length)".into(),
            );
            rows
        }
    };
    Ok(CompareReport {
        kind: kb,
        bootstrap: *b,
        differences: Vec::new(),
        rows,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_sides_are_refused() {
        assert!(compare_records(&[], &[], Slo::default(), &Bootstrap::default()).is_err());
    }
}
