//! The capacity search's latency-throughput curve, with the SLO and the answer marked.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::axis::Unit;
use super::{
    panel, plot_err, Line, Mark, MarkAt, Panel, ANSWER_GREY, BLUE_, GREEN_, ORANGE_, PURPLE_,
};
use crate::report::capacity::{CapacityReport, Level};
use crate::report::Slo;

/// The capacity search's latency-throughput curve, 1100 x 400: TTFT p50/p99 (left) and TPOT
/// p50/p99 (right) against the achieved request throughput, one dot per step. Each panel has a
/// horizontal line at its SLO (from the report's SLO text), and both a vertical line at the
/// throughput the answer's step achieved, labelled with the answer.
pub fn capacity(r: &CapacityReport) -> anyhow::Result<String> {
    let curve = r.curve();
    let mut ttft = [Line::new("TTFT p50", BLUE_), Line::new("TTFT p99", ORANGE_)];
    let mut tpot = [
        Line::new("TPOT p50", GREEN_),
        Line::new("TPOT p99", PURPLE_),
    ];
    ttft[1].dashed = true;
    tpot[1].dashed = true;
    let mut pts: Vec<_> = curve
        .iter()
        .filter_map(|s| s.request_throughput.map(|x| (x, *s)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (x, s) in &pts {
        let x = *x;
        for (l, v) in ttft.iter_mut().zip([s.ttft_p50_ms, s.ttft_p99_ms]) {
            if let Some(v) = v {
                l.points.push((x, v));
            }
        }
        for (l, v) in tpot.iter_mut().zip([s.tpot_p50_ms, s.tpot_p99_ms]) {
            if let Some(v) = v {
                l.points.push((x, v));
            }
        }
    }
    if pts.is_empty() {
        anyhow::bail!("no step of the search completed a request: nothing to plot");
    }
    let x_max = pts.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
    let slo = Slo::parse(&r.slo).ok();
    // The answer's step is the passing one at the highest passing rate; the answer may be below
    // that rate (the throughput achieved there), never above.
    let answer = r.capacity.and_then(|c| {
        let offered = r.passing_rate.unwrap_or(c);
        let step = r.steps.iter().find(|s| s.passed && s.rate == offered)?;
        Some((step.request_throughput?, c, offered))
    });
    let marks = |metric: &str, slo_ms: Option<f64>| {
        let mut m: Vec<Mark> = slo_ms
            .map(|v| Mark::slo(MarkAt::Y(v), metric, v))
            .into_iter()
            .collect();
        if let Some((x, c, offered)) = answer {
            m.push(Mark {
                at: MarkAt::X(x),
                label: match r.level {
                    Level::Rate if c < offered => format!(
                        "capacity {} ({} offered)",
                        r.level.show(c),
                        r.level.show(offered)
                    ),
                    Level::Rate => format!("capacity {} offered", r.level.show(c)),
                    Level::Concurrency => format!("capacity {}", r.level.show(c)),
                },
                color: ANSWER_GREY,
            });
        }
        m
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let panels = root.split_evenly((1, 2));
        for (area, title, metric, slo_ms, lines) in [
            (
                &panels[0],
                "TTFT against throughput",
                "TTFT",
                slo.and_then(|s| s.ttft_ms),
                &ttft,
            ),
            (
                &panels[1],
                "TPOT against throughput",
                "TPOT",
                slo.and_then(|s| s.tpot_ms),
                &tpot,
            ),
        ] {
            let p = Panel {
                y_unit: Unit::Ms,
                dots: true,
                marks: marks(metric, slo_ms),
                ..Panel::new(title, "completed requests per second", "time")
            };
            let x: RangedCoordf64 = (0.0..x_max * 1.05).into();
            panel(area, p, x, lines)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}
