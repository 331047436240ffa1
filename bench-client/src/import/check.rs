//! The tool's own summary held against the records rebuilt from its file: mean and p99 TTFT, mean
//! TPOT in the tool's definition, output throughput. Each figure is the same within
//! [`TOLERANCE`], or differs for a reason the source's reader names (a definition, a span, data the
//! file does not keep), or differs unexplained.

use std::fmt::Write;

use serde::Serialize;

use super::{Run, TpotDef};
use crate::measure::percentile;
use crate::report::grid::{Col, Grid};
use crate::report::{LoadSummary, Slo};
use crate::results::Record;

/// Relative difference within which a figure counts as the same.
pub const TOLERANCE: f64 = 0.005;

/// The tool's own figures, as its file has them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ToolSummary {
    /// Mean TTFT, ms.
    pub mean_ttft_ms: Option<f64>,
    /// p99 TTFT, ms.
    pub p99_ttft_ms: Option<f64>,
    /// Mean time per output token in the tool's definition, ms.
    pub mean_tpot_ms: Option<f64>,
    /// Output tokens per second over the run.
    pub output_throughput: Option<f64>,
}

/// Why a figure of the tool's summary may differ from the records', by figure (`None`: it should
/// not differ).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Notes {
    /// Mean TTFT.
    pub mean_ttft: Option<String>,
    /// p99 TTFT.
    pub p99_ttft: Option<String>,
    /// Mean TPOT.
    pub mean_tpot: Option<String>,
    /// Output throughput.
    pub output_throughput: Option<String>,
}

/// Why output throughputs differ by default: not the same span.
const SPAN: &str = "span: the records' throughput divides by the first scheduled start to the last end; the tool divides by its own benchmark duration, which starts and ends at instants of its own (before or after the first request, after the last)";

/// How a figure compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Within [`TOLERANCE`].
    Same,
    /// Beyond it, for the reason given.
    Explained,
    /// Beyond it, for no known reason.
    Unexplained,
    /// One side has no value.
    Missing,
}

/// One figure on both sides.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The figure.
    pub figure: String,
    /// The tool's value.
    pub tool: Option<f64>,
    /// The records' value.
    pub imported: Option<f64>,
    /// imported / tool - 1.
    pub diff: Option<f64>,
    /// How they compare.
    pub verdict: Verdict,
    /// Why they may differ.
    pub why: Option<String>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The time per output token of one successful record in the source's definition, ms.
pub fn tpot_ms(rec: &Record, def: TpotDef) -> Option<f64> {
    let trace = rec.trace.as_ref()?;
    let n = rec.completion_tokens?;
    let mut out = trace.chunks.iter().filter(|c| c.carries_output());
    let first = out.next()?.at_ns;
    let last = out.next_back().map_or(first, |c| c.at_ns);
    let end = match def {
        TpotDef::EndMinusFirst => trace.end_ns,
        TpotDef::LastMinusFirst => last,
    };
    (n >= 2).then(|| end.saturating_sub(first) as f64 / 1e6 / f64::from(n - 1))
}

fn row(figure: String, tool: Option<f64>, imported: Option<f64>, why: Option<String>) -> Row {
    let diff = match (tool, imported) {
        (Some(t), Some(i)) if t != 0.0 => Some(i / t - 1.0),
        (Some(t), Some(i)) if t == i => Some(0.0),
        _ => None,
    };
    let verdict = match diff {
        None => Verdict::Missing,
        Some(d) if d.abs() <= TOLERANCE => Verdict::Same,
        Some(_) if why.is_some() => Verdict::Explained,
        Some(_) => Verdict::Unexplained,
    };
    let why = (verdict == Verdict::Explained).then_some(why).flatten();
    Row {
        figure,
        tool,
        imported,
        diff,
        verdict,
        why,
    }
}

/// The rows of one run whose records are `recs`; empty when the file has no summary.
pub fn compare(run: &Run, recs: &[Record]) -> Vec<Row> {
    let mut tally = Tally::new(run);
    for r in recs {
        tally.add(r);
    }
    tally.rows(run)
}

/// One run's records counted a record at a time, and what the check needs of them (their TTFTs
/// and TPOTs, and their summary where the file has one of its own to hold them against).
#[derive(Debug)]
pub struct Tally {
    tpot: TpotDef,
    /// Records added.
    pub records: usize,
    /// Failed records among them.
    pub failed: usize,
    ttfts: Vec<f64>,
    tpots: Vec<f64>,
    summary: Option<LoadSummary>,
}

impl Tally {
    /// An empty tally for `run`'s records.
    pub fn new(run: &Run) -> Self {
        Self {
            tpot: run.tpot,
            records: 0,
            failed: 0,
            ttfts: Vec::new(),
            tpots: Vec::new(),
            summary: run
                .summary
                .is_some()
                .then(|| LoadSummary::new(Slo::default())),
        }
    }

    /// Count one record.
    pub fn add(&mut self, rec: &Record) {
        self.records += 1;
        if rec.failed() {
            self.failed += 1;
        }
        let Some(summary) = &mut self.summary else {
            return;
        };
        summary.add(rec);
        if rec.error.is_none() {
            self.ttfts.extend(rec.ttft_ms);
            self.tpots.extend(tpot_ms(rec, self.tpot));
        }
    }

    /// The rows of the records added; empty when the file has no summary.
    pub fn rows(&self, run: &Run) -> Vec<Row> {
        let (Some(s), Some(summary)) = (&run.summary, &self.summary) else {
            return Vec::new();
        };
        let n = &run.notes;
        // The two spans, so that a throughput's difference can be checked against them: the
        // tool's is the one its figure implies for the records' output tokens.
        let tokens = summary.output_tokens as f64;
        let spans = match (s.output_throughput.filter(|t| *t > 0.0), summary.duration_s()) {
            (Some(tool), Some(ours)) => format!(
                " (the records' span {ours:.4} s; the tool's figure is {:.0} output tokens over {:.4} s)",
                tokens,
                tokens / tool
            ),
            _ => String::new(),
        };
        vec![
            row(
                "mean TTFT ms".into(),
                s.mean_ttft_ms,
                mean(&self.ttfts),
                n.mean_ttft.clone(),
            ),
            row(
                "p99 TTFT ms".into(),
                s.p99_ttft_ms,
                percentile(&self.ttfts, 99.0),
                n.p99_ttft.clone(),
            ),
            row(
                format!("mean TPOT ms, {}", run.tpot.describe()),
                s.mean_tpot_ms,
                mean(&self.tpots),
                n.mean_tpot.clone(),
            ),
            row(
                "output tok/s".into(),
                s.output_throughput,
                summary.derived().output_throughput,
                Some(n.output_throughput.clone().unwrap_or_else(|| SPAN.into()) + &spans),
            ),
        ]
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

/// The rows as a table, each difference with its reason.
pub fn render(rows: &[Row]) -> String {
    let mut g = Grid::new(&[
        Col::left().min(52).gap(2),
        Col::right().min(12),
        Col::right().min(12),
        Col::right().min(9),
        Col::left().gap(2),
    ]);
    g.row(["figure", "tool", "imported", "diff", "verdict"]);
    for r in rows {
        let diff = r
            .diff
            .map_or_else(|| "-".into(), |d| format!("{:+.2}%", d * 100.0));
        let verdict = match r.verdict {
            Verdict::Same => "same",
            Verdict::Explained => "differs, explained",
            Verdict::Unexplained => "differs, UNEXPLAINED",
            Verdict::Missing => "not in the file",
        };
        g.row([
            r.figure.clone(),
            num(r.tool),
            num(r.imported),
            diff,
            verdict.to_string(),
        ]);
    }
    let mut out = g.render();
    for r in rows.iter().filter(|r| r.why.is_some()) {
        let _ = writeln!(
            out,
            "  {} differs: {}",
            r.figure,
            r.why.as_deref().unwrap_or_default()
        );
    }
    out
}
