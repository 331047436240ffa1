//! The capacity search in each format: a table, JSON, CSV (one row per step) and an SVG of its
//! latency-throughput curve (drawn by `report::export::svg`).

use std::fmt::Write as _;

use serde_json::Value;

use super::report::{rate_digits, CapacityReport, Level};
use crate::report::export::cell;
use crate::report::export::svg::{self, Curve, CurvePoint};
use crate::report::grid::{Align, Grid};
use crate::report::Slo;

/// The capacity curve as a table, one row per step ordered by rate, and the answer.
pub fn table(r: &CapacityReport) -> String {
    let level = match r.level {
        Level::Rate => "rate req/s",
        Level::Concurrency => "concurrency",
    };
    let header = [
        level,
        "step",
        "ok/n",
        "req/s",
        "out tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "goodput req/s",
        "good share",
        "cache hit",
        "",
    ];
    let rows: Vec<Vec<String>> = r
        .curve()
        .iter()
        .map(|s| {
            vec![
                rate_digits(s.rate),
                s.step.to_string(),
                format!("{}/{}", s.succeeded, s.requests),
                s.request_throughput.map_or("-".into(), rate_digits),
                cell(s.output_throughput, 1),
                cell(s.ttft_p50_ms, 1),
                cell(s.ttft_p99_ms, 1),
                cell(s.tpot_p50_ms, 2),
                cell(s.tpot_p99_ms, 2),
                cell(s.goodput, 2),
                format!("{:.1}%", s.goodput_share * 100.0),
                cell(s.cache_hit_rate, 3),
                s.verdict().to_string(),
            ]
        })
        .collect();
    let mut g = Grid::spaced(&vec![Align::Right; header.len()], 2);
    g.row(header);
    for row in rows {
        g.row(row);
    }
    let mut out = g.render();
    let _ = writeln!(out, "{}", r.answer());
    out
}

/// The capacity search as JSON: the settings, the steps in the order they ran (latencies in ms),
/// the answer and its sentence.
pub fn json(r: &CapacityReport) -> Value {
    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("answer".into(), Value::String(r.answer()));
    }
    v
}

/// CSV of a capacity search: one row per step, in the order the steps ran (the fields of the
/// JSON's `steps`); the answer is not part of it.
pub fn csv(r: &CapacityReport) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for s in &r.steps {
        w.serialize(s)?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}

/// The search's latency-throughput curve as SVG ([`svg::latency_throughput`]): one dot per step
/// that completed requests, the SLO as given, and a vertical line at the throughput the answer's
/// step achieved, labelled with the answer.
pub fn svg(r: &CapacityReport) -> anyhow::Result<String> {
    let points: Vec<CurvePoint> = r
        .curve()
        .iter()
        .filter_map(|s| {
            Some(CurvePoint {
                throughput: s.request_throughput?,
                ttft_ms: [s.ttft_p50_ms, s.ttft_p99_ms],
                tpot_ms: [s.tpot_p50_ms, s.tpot_p99_ms],
            })
        })
        .collect();
    if points.is_empty() {
        anyhow::bail!("no step of the search completed a request: nothing to plot");
    }
    // The answer's step is the passing one at the highest passing rate; the answer may be below
    // that rate (the throughput achieved there), never above.
    let answer = r.capacity.and_then(|c| {
        let offered = r.passing_rate.unwrap_or(c);
        let step = r.passed_at(offered)?;
        let label = match r.level {
            Level::Rate if c < offered => format!(
                "capacity {} ({} offered)",
                r.level.show(c),
                r.level.show(offered)
            ),
            Level::Rate => format!("capacity {} offered", r.level.show(c)),
            Level::Concurrency => format!("capacity {}", r.level.show(c)),
        };
        Some((step.request_throughput?, label))
    });
    svg::latency_throughput(&Curve {
        points,
        slo: Slo::parse(&r.slo).ok(),
        answer,
    })
}
