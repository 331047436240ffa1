//! A latency-throughput curve (a capacity search's), with the SLO and an answer marked.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::axis::Unit;
use super::{
    panel, plot_err, Line, Mark, MarkAt, Panel, ANSWER_GREY, BLUE_, GREEN_, ORANGE_, PURPLE_,
};
use crate::report::Slo;

/// One point of a latency-throughput curve: the requests completed per second, and TTFT and
/// TPOT (p50, p99, ms) there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    /// Completed requests per second.
    pub throughput: f64,
    /// TTFT p50 and p99, ms.
    pub ttft_ms: [Option<f64>; 2],
    /// TPOT p50 and p99, ms.
    pub tpot_ms: [Option<f64>; 2],
}

/// What [`latency_throughput`] draws.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    /// The points, in any order.
    pub points: Vec<CurvePoint>,
    /// The SLO, drawn where it sets a bound.
    pub slo: Option<Slo>,
    /// A vertical line at this throughput, with its label (the answer).
    pub answer: Option<(f64, String)>,
}

/// A latency-throughput curve, 1100 x 400: TTFT p50/p99 (left) and TPOT p50/p99 (right) against
/// the completed request throughput, one dot per point. Each panel has a horizontal line at its
/// SLO, and both the vertical answer line. No points: an error.
pub fn latency_throughput(c: &Curve) -> anyhow::Result<String> {
    let mut ttft = [Line::new("TTFT p50", BLUE_), Line::new("TTFT p99", ORANGE_)];
    let mut tpot = [
        Line::new("TPOT p50", GREEN_),
        Line::new("TPOT p99", PURPLE_),
    ];
    ttft[1].dashed = true;
    tpot[1].dashed = true;
    let mut pts = c.points.clone();
    pts.sort_by(|a, b| a.throughput.total_cmp(&b.throughput));
    for p in &pts {
        let x = p.throughput;
        for (l, v) in ttft.iter_mut().zip(p.ttft_ms) {
            if let Some(v) = v {
                l.points.push((x, v));
            }
        }
        for (l, v) in tpot.iter_mut().zip(p.tpot_ms) {
            if let Some(v) = v {
                l.points.push((x, v));
            }
        }
    }
    if pts.is_empty() {
        anyhow::bail!("no point to plot");
    }
    let x_max = pts
        .iter()
        .map(|p| p.throughput)
        .fold(0.0, f64::max)
        .max(1e-3);
    let slo = c.slo;
    let marks = |metric: &str, slo_ms: Option<f64>| {
        let mut m: Vec<Mark> = slo_ms
            .map(|v| Mark::slo(MarkAt::Y(v), metric, v))
            .into_iter()
            .collect();
        if let Some((x, label)) = &c.answer {
            m.push(Mark {
                at: MarkAt::X(*x),
                label: label.clone(),
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
