//! Comparing the results of two runs: rows of NEW against BASE (per context length and metric for
//! sweeps, per metric for load runs), each with the bootstrap ratio and verdict of
//! [`crate::measure::compare`], and what differs between the runs' manifests.
//!
//! Every row is computed from per-request values read from the records (never from merged
//! histograms): sweeps from `ttft_ms`, `decode_tok_s` and `prefill_tok_s` of successful streaming
//! records; load runs from [`crate::measure::load_numbers`] of each successful request, and the
//! prefix-cache rows from the cached and prompt tokens each reported.
//!
//! A side's runs: each file of a sweep is one run; load records are grouped by the run's start
//! (`start_unix_ms`), so the shards of one run (which share it) are one run and repeats are
//! several, whichever files hold them; a resumed piece (its manifest line says `resume`) joins
//! the run it continues, and a run's span is its pieces' ([`Side`]). Several runs a side are
//! resampled by run ([`crate::measure::compare`]).

mod cache;
mod debug_text;
pub mod html;
mod manifest;
mod side;
pub mod summary;
pub mod truth;
pub mod workload;

use std::collections::BTreeMap;

use super::load::{Instants, Slo};
use crate::measure::compare::{
    compare_many, Bootstrap, CompareError, Comparison, Direction, Pair, Run, Sample, Statistic,
    Verdict,
};
use crate::measure::{load_numbers, measure};
use crate::results::{Method, Record};

pub use manifest::{manifest_differences, manifest_slo, workload_differences};
use side::sweep_runs;
pub use side::{kind_of, read_side, Side};

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
    /// Runs on BASE's side.
    pub runs_base: usize,
    /// Runs on NEW's side.
    pub runs_new: usize,
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
    /// How the workloads differ, in sentences (compared anyway only when the user allowed it),
    /// printed first.
    pub workload: Vec<String>,
    /// Manifest differences.
    pub differences: Vec<Difference>,
    /// The rows.
    pub rows: Vec<Row>,
    /// Remarks: contexts on one side only, missing manifests, failures.
    pub notes: Vec<String>,
    /// The mock's ground truth beside an imported tool's figures and this client's (the HTML page).
    pub truth: Option<truth::Truth>,
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

/// A row before its comparison: the samples of both sides, or why a side has none.
pub(super) struct Spec {
    context_tokens: Option<u32>,
    metric: &'static str,
    direction: Direction,
    base: Result<Sample, String>,
    new: Result<Sample, String>,
}

fn row(
    context_tokens: Option<u32>,
    metric: &'static str,
    direction: Direction,
    base: Result<Sample, String>,
    new: Result<Sample, String>,
) -> Spec {
    Spec {
        context_tokens,
        metric,
        direction,
        base,
        new,
    }
}

/// The rows of `specs`, compared together ([`compare_many`]: statistics of one shape share their
/// resamples); `progress` is told the rounds done and in all.
fn compare_rows(specs: Vec<Spec>, b: &Bootstrap, progress: &(dyn Fn(u64, u64) + Sync)) -> Vec<Row> {
    let pairs: Vec<Pair> = specs
        .iter()
        .filter_map(|s| match (&s.base, &s.new) {
            (Ok(base), Ok(new)) => Some(Pair {
                base,
                new,
                direction: s.direction,
            }),
            _ => None,
        })
        .collect();
    let mut compared = compare_many(&pairs, b, progress).into_iter();
    specs
        .into_iter()
        .map(|s| {
            let n_base = s.base.as_ref().map_or(0, Sample::len);
            let n_new = s.new.as_ref().map_or(0, Sample::len);
            let runs_base = s.base.as_ref().map_or(0, Sample::runs);
            let runs_new = s.new.as_ref().map_or(0, Sample::runs);
            let outcome = match (s.base, s.new) {
                (Ok(_), Ok(_)) => compared
                    .next()
                    .unwrap_or(Err(CompareError::Empty("a side")))
                    .map_err(|e| e.to_string()),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
            Row {
                context_tokens: s.context_tokens,
                metric: s.metric,
                direction: s.direction,
                n_base,
                n_new,
                runs_base,
                runs_new,
                outcome,
            }
        })
        .collect()
}

fn sample(side: &'static str, runs: Vec<Run>, st: Statistic) -> Result<Sample, String> {
    Sample::new(side, runs, st).map_err(|e| e.to_string())
}

/// A percentile sample's values at percentile `p` ([`Sample::at`]: shared, not copied).
fn at_percentile(s: &Result<Sample, String>, p: f64) -> Result<Sample, String> {
    s.clone().and_then(|s| s.at(p).map_err(|e| e.to_string()))
}

/// Per context length: the successful streaming requests' TTFT, decode and prefill rates.
#[derive(Default)]
struct SweepValues {
    ttft_ms: Vec<f64>,
    decode_tok_s: Vec<f64>,
    prefill_tok_s: Vec<f64>,
}

/// Per context length, a [`SweepValues`] per run (runs without that context left out).
fn sweep_values(runs: &[Vec<&Record>]) -> BTreeMap<u32, Vec<SweepValues>> {
    let mut m: BTreeMap<u32, Vec<SweepValues>> = BTreeMap::new();
    for run in runs {
        for (ctx, v) in sweep_values_of(run) {
            m.entry(ctx).or_default().push(v);
        }
    }
    m
}

fn sweep_values_of(records: &[&Record]) -> BTreeMap<u32, SweepValues> {
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
    base: &[Vec<&Record>],
    new: &[Vec<&Record>],
    notes: &mut Vec<String>,
) -> anyhow::Result<Vec<Spec>> {
    let (bv, nv) = (sweep_values(base), sweep_values(new));
    let shared: Vec<u32> = bv.keys().filter(|k| nv.contains_key(k)).copied().collect();
    type PerRun = BTreeMap<u32, Vec<SweepValues>>;
    let only = |a: &PerRun, o: &PerRun| -> Vec<u32> {
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
        type Pick = fn(&SweepValues) -> &Vec<f64>;
        let metrics: [(&'static str, Direction, Pick); 3] = [
            ("ttft_p50_ms", Direction::LowerIsBetter, |v| &v.ttft_ms),
            ("decode_p50_tok_s", Direction::HigherIsBetter, |v| {
                &v.decode_tok_s
            }),
            ("prefill_p50_tok_s", Direction::HigherIsBetter, |v| {
                &v.prefill_tok_s
            }),
        ];
        let runs = |side: &[SweepValues], pick: Pick| -> Vec<Run> {
            side.iter().map(|v| Run::scalar(pick(v))).collect()
        };
        for (metric, dir, pick) in metrics {
            rows.push(row(
                Some(ctx),
                metric,
                dir,
                sample("BASE", runs(x, pick), p50),
                sample("NEW", runs(y, pick), p50),
            ));
        }
    }
    Ok(rows)
}

/// One run of a load comparison: per-request figures (ms), per-request rate contributions and
/// the run's duration, gathered a record at a time ([`LoadValues::add`]).
#[derive(Default)]
pub(super) struct LoadValues {
    ttft_ms: Vec<f64>,
    tpot_ms: Vec<f64>,
    inter_chunk_ms: Vec<Vec<f64>>,
    e2e_ms: Vec<f64>,
    /// One entry per measured request (0 for a failed one).
    output_tokens: Vec<f64>,
    succeeded: Vec<f64>,
    good: Vec<f64>,
    duration_s: Option<f64>,
    /// Each request's piece (its `start_unix_ms`) and instants, until [`LoadValues::finish`].
    spans: Vec<(u64, Instants)>,
    /// The requests that reported a cached count.
    cache: cache::CacheValues,
}

impl LoadValues {
    /// Add one load record of the run (others are left out), judged against `slo`.
    fn add(&mut self, r: &Record, slo: Slo) {
        let ms = |ns: u64| ns as f64 / 1e6;
        let (Some(info), Some(trace)) = (&r.load, &r.trace) else {
            return;
        };
        self.spans
            .push((info.start_unix_ms, Instants::of(info, trace)));
        let m = match (&r.error, measure(trace)) {
            (None, Ok(m)) => m,
            _ => {
                self.output_tokens.push(0.0);
                self.succeeded.push(0.0);
                self.good.push(0.0);
                return;
            }
        };
        let n = load_numbers(trace, &m, info.client_queue_ns);
        let output = u64::from(m.completion_tokens.unwrap_or(0));
        self.ttft_ms.push(ms(n.ttft_from_schedule_ns));
        self.cache.add(
            m.prompt_tokens,
            m.cached_tokens,
            ms(n.ttft_from_schedule_ns),
        );
        self.tpot_ms.extend(n.tpot_ns.map(ms));
        self.inter_chunk_ms
            .push(n.inter_chunk_ns.iter().map(|&g| ms(g)).collect());
        self.e2e_ms.push(ms(n.e2e_ns));
        self.output_tokens.push(output as f64);
        self.succeeded.push(1.0);
        self.good.push(if slo.met(&n, output) { 1.0 } else { 0.0 });
    }

    /// The run is whole: its duration, over its pieces.
    fn finish(&mut self) {
        self.duration_s = Instants::pieces_span_s(std::mem::take(&mut self.spans));
    }
}

/// Load rows: TTFT, TPOT, inter-chunk and end-to-end p50/p90/p99, then output and request
/// throughput and goodput (with an SLO), then the prefix cache (when either side hit it).
fn load_rows(x: &[LoadValues], y: &[LoadValues], slo: Slo) -> Vec<Spec> {
    type Units = fn(&LoadValues) -> Run;
    let latencies: [([&'static str; 3], Units); 4] = [
        (["ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"], |v| {
            Run::scalar(&v.ttft_ms)
        }),
        (["tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms"], |v| {
            Run::scalar(&v.tpot_ms)
        }),
        (
            [
                "inter_chunk_p50_ms",
                "inter_chunk_p90_ms",
                "inter_chunk_p99_ms",
            ],
            |v| Run::clustered(v.inter_chunk_ms.clone()),
        ),
        (["e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms"], |v| {
            Run::scalar(&v.e2e_ms)
        }),
    ];
    let mut rows = Vec::new();
    for (names, units) in &latencies {
        // One sample a side; its three percentiles share its values.
        let p50 = Statistic::Percentile(50.0);
        let base = sample("BASE", x.iter().map(units).collect(), p50);
        let new = sample("NEW", y.iter().map(units).collect(), p50);
        for (name, p) in names.iter().zip([50.0, 90.0, 99.0]) {
            rows.push(row(
                None,
                name,
                Direction::LowerIsBetter,
                at_percentile(&base, p),
                at_percentile(&new, p),
            ));
        }
    }
    type Pick = fn(&LoadValues) -> &Vec<f64>;
    let rate = |side: &'static str, v: &[LoadValues], pick: Pick| -> Result<Sample, String> {
        let runs = v
            .iter()
            .map(|r| {
                let d = r
                    .duration_s
                    .ok_or_else(|| format!("{side}: a run's duration is undefined"))?;
                Ok(Run::scalar(pick(r)).lasting(d))
            })
            .collect::<Result<Vec<Run>, String>>()?;
        sample(side, runs, Statistic::Rate)
    };
    let higher = Direction::HigherIsBetter;
    let mut rates: Vec<(&'static str, Pick)> = vec![
        ("output_throughput_tok_s", |v| &v.output_tokens),
        ("request_throughput_req_s", |v| &v.succeeded),
    ];
    if slo.is_set() {
        rates.push(("goodput_req_s", |v| &v.good));
    }
    for (name, pick) in rates {
        rows.push(row(
            None,
            name,
            higher,
            rate("BASE", x, pick),
            rate("NEW", y, pick),
        ));
    }
    rows.extend(cache::cache_rows(x, y));
    rows
}

/// Compare NEW's records with BASE's, each side read with the goodput SLO ([`read_side`]):
/// refuses sides that are empty, failed-only, of different kinds or SLOs, or (sweeps) with no
/// context length in common.
pub fn compare_records(base: &Side, new: &Side, b: &Bootstrap) -> anyhow::Result<CompareReport> {
    compare_records_with(base, new, b, &|_, _| {})
}

/// [`compare_records`], telling `progress` the bootstrap rounds done and in all.
pub fn compare_records_with(
    base: &Side,
    new: &Side,
    b: &Bootstrap,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> anyhow::Result<CompareReport> {
    if base.slo != new.slo {
        anyhow::bail!("BASE and NEW were read with different SLOs: read both with the same");
    }
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
    for (side, s) in [("BASE", base), ("NEW", new)] {
        if s.failed > 0 {
            notes.push(format!(
                "{side}: {} of {} records failed and are left out of the latencies",
                s.failed, s.total
            ));
        }
    }
    let (specs, runs) = match kb {
        Kind::Sweep => {
            let (rb, rn) = (sweep_runs(base), sweep_runs(new));
            (sweep_rows(&rb, &rn, &mut notes)?, (rb.len(), rn.len()))
        }
        Kind::Load => {
            let rows = load_rows(&base.load_runs, &new.load_runs, base.slo);
            if !base.slo.is_set() {
                notes.push("no SLO (--slo or in the manifests): goodput not compared".into());
            }
            (rows, (base.load_runs.len(), new.load_runs.len()))
        }
    };
    let rows = compare_rows(specs, b, progress);
    notes.extend(runs_note(kb, runs.0, runs.1));
    Ok(CompareReport {
        kind: kb,
        bootstrap: *b,
        workload: Vec::new(),
        differences: Vec::new(),
        rows,
        notes,
        truth: None,
    })
}

/// What the intervals cover, given the runs on each side.
fn runs_note(kind: Kind, base: usize, new: usize) -> Option<String> {
    if base > 1 && new > 1 {
        return Some(format!(
            "runs: BASE {base}, NEW {new}: each side's runs resampled (R - 1 of R), then their requests; the intervals carry the run-to-run variance"
        ));
    }
    let rates = match kind {
        Kind::Load => {
            "; throughputs need several runs a side for a verdict (one run is one throughput)"
        }
        Kind::Sweep => "",
    };
    Some(format!(
        "runs: BASE {base}, NEW {new}: the intervals cover request-to-request noise within a run, not a shift between runs (10-20% on shared machines); repeat each side (--base A1 A2 --new B1 B2) for a verdict on the setup{rates}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_sides_are_refused() {
        let none = Side::default();
        assert!(compare_records(&none, &none, &Bootstrap::default()).is_err());
    }
}
