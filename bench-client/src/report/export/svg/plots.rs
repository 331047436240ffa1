//! The sweep's four panels, a load run's latency CDFs and throughput, and one request's chunk
//! timeline.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::axis::{Axis, Scale, Unit};
use super::{
    context_axis, linear_coord, log_coord, panel, plot_err, sweep_panel, value_label, Line, Mark,
    MarkAt, Panel, BLUE_, GREEN_, ORANGE_, PURPLE_,
};
use crate::measure;
use crate::report::load::{LoadSummary, Metric};
use crate::report::sweep::{Band, Report};
use crate::trace::RequestTrace;

/// The sweep's four panels, 1100 x 800.
pub fn sweep(report: &Report) -> anyhow::Result<String> {
    if report.points.is_empty() {
        anyhow::bail!("no sweep points to plot");
    }
    let axis = || context_axis(report).ok_or_else(|| anyhow::anyhow!("no sweep points to plot"));
    let mut ttft = Line::new("TTFT p50 (band p10-p90)", BLUE_);
    let mut server = Line::new("server: queue + prefill p50", ORANGE_);
    server.dashed = true;
    let mut rest = Line::new("rest (network, client) p50", PURPLE_);
    rest.dashed = true;
    let mut decode = Line::new("decode p50 (band p10-p90)", GREEN_);
    let mut naive = Line::new("naive decode p50", ORANGE_);
    naive.dashed = true;
    let mut prefill = Line::new("prefill p50 (band p10-p90)", PURPLE_);
    let mut chunk = Line::new("tokens per chunk p50 (band p10-p90)", BLUE_);
    for (&ctx, p) in &report.points {
        let x = f64::from(ctx);
        ttft.push(x, Band::of(&p.ttft_ms));
        let server_ms: Vec<f64> = p
            .server_queue_ms
            .iter()
            .zip(&p.server_prefill_ms)
            .map(|(q, f)| q + f)
            .collect();
        if let Some(b) = Band::of(&server_ms) {
            server.points.push((x, b.p50));
        }
        if let Some(b) = Band::of(&p.ttft_rest_ms) {
            // The rest is a difference of ms floats from ns instants: below a ns it is rounding.
            rest.points.push((x, (b.p50 * 1e6).round() / 1e6));
        }
        decode.push(x, Band::of(&p.decode_tok_s));
        if let Some(b) = Band::of(&p.naive_decode_tok_s) {
            naive.points.push((x, b.p50));
        }
        prefill.push(x, Band::of(&p.prefill_tok_s));
        chunk.push(x, Band::of(&p.tokens_per_chunk));
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let panels = root.split_evenly((2, 2));
        let p = sweep_panel;
        let mut ttft_lines = vec![ttft];
        if !server.points.is_empty() {
            ttft_lines.extend([server, rest]);
        }
        let t = if ttft_lines.len() > 1 {
            p("time to first token, and the server's part of it", "ms")
        } else {
            p("time to first token", "ms")
        };
        panel(&panels[0], t, axis()?, &ttft_lines)?;
        let d = p("decode rate: true and naive", "tok/s");
        panel(&panels[1], d, axis()?, &[decode, naive])?;
        panel(&panels[2], p("prefill rate", "tok/s"), axis()?, &[prefill])?;
        panel(
            &panels[3],
            p("tokens per chunk", "tokens"),
            axis()?,
            &[chunk],
        )?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// The percentiles a CDF is drawn through: every whole one, and the tail finer.
fn cdf_quantiles() -> impl Iterator<Item = f64> {
    (0..=99).map(f64::from).chain([99.5, 99.9, 100.0])
}

/// The share of `m`'s samples above `v` ns, percent (by bisection over its percentiles).
fn share_above(m: &Metric, v: u64) -> f64 {
    let (mut lo, mut hi) = (0.0, 100.0);
    for _ in 0..40 {
        let mid = (lo + hi) / 2.0;
        match m.percentile(mid) {
            Some(x) if x > v => hi = mid,
            _ => lo = mid,
        }
    }
    100.0 - hi
}

/// A load run's two panels, 1100 x 400: the latency CDFs (TTFT, TPOT, inter-chunk, end to end)
/// with the SLO's lines, and the output throughput and completions per second over the run.
///
/// The latency axis ends at the largest p99.9 of the four (or the SLO, if larger), so one
/// outlier cannot squeeze the rest into a pixel; it goes log when the values span more than a
/// decade; the plot names what lies beyond it.
pub fn load(s: &LoadSummary) -> anyhow::Result<String> {
    let mut series = Vec::new();
    for (name, key, color) in [
        ("TTFT", "ttft", BLUE_),
        ("TPOT", "tpot", GREEN_),
        ("inter-chunk", "inter_chunk", ORANGE_),
        ("end to end", "e2e", PURPLE_),
    ] {
        let Some(m) = s.metrics.get(key).filter(|m| m.count() > 0) else {
            continue;
        };
        let mut l = Line::new(name, color);
        l.points = cdf_quantiles()
            .filter_map(|q| m.percentile(q).map(|v| (v as f64 / 1e6, q / 100.0)))
            .collect();
        series.push((l, m));
    }
    if series.is_empty() {
        anyhow::bail!("no successful load requests to plot");
    }
    let mut marks = Vec::new();
    for (metric, v) in [("TTFT", s.slo.ttft_ms), ("TPOT", s.slo.tpot_ms)] {
        if let Some(v) = v {
            marks.push(Mark::slo(MarkAt::X(v), metric, v));
        }
    }
    let clip = series
        .iter()
        .filter_map(|(_, m)| m.percentile(99.9))
        .map(|v| v as f64 / 1e6)
        .chain(marks.iter().filter_map(|m| match m.at {
            MarkAt::X(x) => Some(x),
            MarkAt::Y(_) => None,
        }))
        .fold(0.0, f64::max);
    let mut values: Vec<f64> = series
        .iter()
        .flat_map(|(l, _)| l.points.iter().map(|p| p.0))
        .filter(|v| *v <= clip)
        .collect();
    values.push(clip);
    let xa = Axis::fit(&values, Unit::Ms);
    let mut notes = Vec::new();
    let mut beyond = Vec::new();
    let mut below = Vec::new();
    for (l, m) in &mut series {
        let max_ms = m.max().map_or(0.0, |v| v as f64 / 1e6);
        if max_ms > xa.hi {
            let share = share_above(m, (xa.hi * 1e6) as u64);
            beyond.push(format!(
                "{} up to {} ({:.2}% of samples)",
                l.name,
                xa.label(max_ms),
                share
            ));
        }
        if xa.scale == Scale::Log && l.points.iter().any(|p| p.0.is_nan() || p.0 < xa.lo) {
            let lo_ns = (xa.lo * 1e6) as u64;
            let under = 100.0 - share_above(m, lo_ns.saturating_sub(1));
            below.push(format!("lowest {under:.0}% of {}", l.name));
        }
        l.points
            .retain(|p| p.0 <= xa.hi && (xa.scale == Scale::Linear || p.0 >= xa.lo));
    }
    if !beyond.is_empty() {
        notes.push(format!("beyond the axis: {}", beyond.join(", ")));
    }
    if !below.is_empty() {
        notes.push(format!(
            "below the axis (under {}, or 0): {}",
            xa.label(xa.lo),
            below.join(", ")
        ));
    }
    let cdfs: Vec<Line> = series.into_iter().map(|(l, _)| l).collect();
    let mut tput = Line::new("output tok/s", BLUE_);
    let mut done = Line::new("completed req/s x 100", GREEN_);
    done.dashed = true;
    let t0 = s.timeline.keys().next().copied().unwrap_or(0);
    for (sec, v) in &s.timeline {
        let x = (sec - t0) as f64;
        tput.points.push((x, v.output_tokens as f64));
        done.points.push((x, v.completed as f64 * 100.0));
    }
    let t_max = tput.points.iter().map(|p| p.0).fold(1.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let panels = root.split_evenly((1, 2));
        let x_desc = match xa.scale {
            Scale::Log => "latency (log scale)",
            Scale::Linear => "latency",
        };
        let cdf = Panel {
            x_unit: Unit::Ms,
            y_top: Some(1.1),
            marks,
            notes,
            ..Panel::new("latency distributions (CDF)", x_desc, "share of requests")
        };
        match xa.scale {
            Scale::Log => panel(&panels[0], cdf, log_coord(&xa), &cdfs)?,
            Scale::Linear => panel(&panels[0], cdf, linear_coord(&xa), &cdfs)?,
        }
        let over_time = Panel {
            y_linear: true,
            ..Panel::new("throughput over time", "seconds into the run", "")
        };
        let x: RangedCoordf64 = (0.0..t_max + 1.0).into();
        panel(&panels[1], over_time, x, &[tput, done])?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// One request's chunk timeline, 560 x 180: output tokens so far against ms after the send, a
/// step per chunk (the first step is TTFT).
pub fn timeline(trace: &RequestTrace) -> anyhow::Result<String> {
    let pts = measure::timeline(trace);
    let t_max = pts
        .last()
        .map_or(1.0, |p| p.0)
        .max(trace.end_ns as f64 / 1e6);
    let n_max = pts.last().map_or(1, |p| p.1).max(1) as f64;
    let mut steps = vec![(0.0, 0.0)];
    let mut prev = 0.0;
    for &(t, n) in &pts {
        steps.push((t, prev));
        steps.push((t, n as f64));
        prev = n as f64;
    }
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (560, 180)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..t_max * 1.05, 0.0..n_max * 1.1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc("ms after the send")
            .y_desc("tokens")
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| value_label(*v))
            .draw()
            .map_err(plot_err)?;
        chart
            .draw_series(LineSeries::new(steps, BLUE_.stroke_width(2)))
            .map_err(plot_err)?;
        chart
            .draw_series(
                pts.iter()
                    .map(|&(t, n)| Circle::new((t, n as f64), 2, BLUE_.filled())),
            )
            .map_err(plot_err)?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}
