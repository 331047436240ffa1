//! SVG plots, as strings (the caller writes the file or embeds it in HTML).
//!
//! A sweep: TTFT, decode rate (true and naive), prefill rate and tokens per chunk against context
//! length on a log axis labelled in tokens (1k ... 185k), each median with its p10-p90 band. A load
//! run: the latency distributions (CDF) and throughput over time.

use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::measure;
use crate::report::load::LoadSummary;
use crate::report::sweep::{Band, Report};
use crate::trace::RequestTrace;

mod compare;

pub use compare::compare_sweeps;

/// One line of a panel: its points, an optional p10-p90 band, and its look.
struct Line {
    name: &'static str,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
    band: Vec<(f64, f64, f64)>,
}

impl Line {
    fn new(name: &'static str, color: RGBColor) -> Self {
        Line {
            name,
            color,
            dashed: false,
            points: Vec::new(),
            band: Vec::new(),
        }
    }

    /// The median and band of `b` at `x`.
    fn push(&mut self, x: f64, b: Option<Band>) {
        if let Some(b) = b {
            self.points.push((x, b.p50));
            self.band.push((x, b.p10, b.p90));
        }
    }
}

fn plot_err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}

/// A token count as a tick label: `512`, `1k`, `2.5k`, `185k`.
pub fn tokens_label(x: f64) -> String {
    if x >= 1000.0 {
        let k = x / 1000.0;
        if (k - k.round()).abs() < 0.05 {
            format!("{}k", k.round())
        } else {
            format!("{k:.1}k")
        }
    } else {
        format!("{}", x.round())
    }
}

/// A value as a tick label: `0.5`, `45`, `800k`, `1.4M`.
fn value_label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Upper end of a y axis that shows every value of `lines` (bands included), with room above.
fn y_top(lines: &[Line]) -> f64 {
    let top = lines
        .iter()
        .flat_map(|l| {
            l.points
                .iter()
                .map(|p| p.1)
                .chain(l.band.iter().map(|b| b.2))
        })
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    if top > 0.0 {
        top * 1.1
    } else {
        1.0
    }
}

/// The words and look of one panel.
struct Panel<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    /// The x axis counts tokens (`1k`, `185k`), else plain values.
    x_tokens: bool,
    /// Dots at the points (the sweep's measured contexts).
    dots: bool,
    legend: SeriesLabelPosition,
}

/// Draw `lines` into `area` over the x coordinate `x` (a log axis of tokens, or linear).
fn panel<DB, X>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: Panel<'_>,
    x: X,
    lines: &[Line],
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(p.title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(x, 0.0..y_top(lines))
        .map_err(plot_err)?;
    let x_label = |v: &f64| {
        if p.x_tokens {
            tokens_label(*v)
        } else {
            value_label(*v)
        }
    };
    chart
        .configure_mesh()
        .x_desc(p.x_desc)
        .y_desc(p.y_desc)
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|v| value_label(*v))
        .draw()
        .map_err(plot_err)?;
    for l in lines {
        if l.band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = l.band.iter().map(|b| (b.0, b.2)).collect();
            poly.extend(l.band.iter().rev().map(|b| (b.0, b.1)));
            chart
                .draw_series(std::iter::once(Polygon::new(poly, l.color.mix(0.15))))
                .map_err(plot_err)?;
        }
        let style = l.color.stroke_width(2);
        let drawn = if l.dashed {
            chart.draw_series(DashedLineSeries::new(l.points.iter().copied(), 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(l.points.iter().copied(), style))
        }
        .map_err(plot_err)?;
        let color = l.color;
        drawn
            .label(l.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        if p.dots {
            chart
                .draw_series(
                    l.points
                        .iter()
                        .map(|&pt| Circle::new(pt, 3, l.color.filled())),
                )
                .map_err(plot_err)?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .position(p.legend)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

/// A panel of the sweep: a context axis in tokens, dots at the measured contexts.
fn sweep_panel<'a>(title: &'a str, y_desc: &'a str) -> Panel<'a> {
    Panel {
        title,
        x_desc: "context (tokens, log scale)",
        y_desc,
        x_tokens: true,
        dots: true,
        legend: SeriesLabelPosition::UpperRight,
    }
}

/// The context axis: log scale over the report's contexts, with a little room on each side, and a
/// tick at each context.
fn context_axis(report: &Report) -> Option<WithKeyPoints<LogCoord<f64>>> {
    let lo = f64::from(*report.points.keys().next()?);
    let hi = f64::from(*report.points.keys().next_back()?);
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo * 0.5, hi * 2.0)
    };
    let coord: LogCoord<f64> = (lo / 1.25..hi * 1.25).log_scale().into();
    Some(coord.with_key_points(report.points.keys().map(|&c| f64::from(c)).collect()))
}

const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE_: RGBColor = RGBColor(255, 127, 14);
const GREEN_: RGBColor = RGBColor(44, 160, 44);
const PURPLE_: RGBColor = RGBColor(148, 103, 189);

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
            rest.points.push((x, b.p50));
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

/// A load run's two panels, 1100 x 400: the latency CDFs (TTFT, TPOT, inter-chunk, end to end, in
/// ms) and the output throughput and completions per second over the run.
pub fn load(s: &LoadSummary) -> anyhow::Result<String> {
    let mut cdfs = Vec::new();
    for (name, key, color) in [
        ("TTFT", "ttft", BLUE_),
        ("TPOT", "tpot", GREEN_),
        ("inter-chunk", "inter_chunk", ORANGE_),
        ("end to end", "e2e", PURPLE_),
    ] {
        let Some(m) = s.metrics.get(key) else {
            continue;
        };
        let mut l = Line::new(name, color);
        l.points = (0..=100)
            .filter_map(|q| {
                m.percentile(f64::from(q))
                    .map(|v| (v as f64 / 1e6, f64::from(q) / 100.0))
            })
            .collect();
        cdfs.push(l);
    }
    if cdfs.iter().all(|l| l.points.is_empty()) {
        anyhow::bail!("no successful load requests to plot");
    }
    let t0 = s.timeline.keys().next().copied().unwrap_or(0);
    let mut tput = Line::new("output tok/s", BLUE_);
    let mut done = Line::new("completed req/s x 100", GREEN_);
    done.dashed = true;
    for (sec, v) in &s.timeline {
        let x = (sec - t0) as f64;
        tput.points.push((x, v.output_tokens as f64));
        done.points.push((x, v.completed as f64 * 100.0));
    }
    let x_max = cdfs
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let t_max = tput.points.iter().map(|p| p.0).fold(1.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let panels = root.split_evenly((1, 2));
        let cdf = Panel {
            title: "latency distributions (CDF)",
            x_desc: "ms",
            y_desc: "share of requests",
            x_tokens: false,
            dots: false,
            legend: SeriesLabelPosition::LowerRight,
        };
        let x: RangedCoordf64 = (0.0..x_max * 1.05).into();
        panel(&panels[0], cdf, x, &cdfs)?;
        let over_time = Panel {
            title: "throughput over time",
            x_desc: "seconds into the run",
            y_desc: "",
            x_tokens: false,
            dots: false,
            legend: SeriesLabelPosition::UpperRight,
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

/// The capacity search's latency-throughput curve, 1100 x 400: TTFT p50/p99 (left) and TPOT
/// p50/p99 (right), in ms, against the achieved request throughput, one dot per step.
pub fn capacity(r: &crate::report::capacity::CapacityReport) -> anyhow::Result<String> {
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
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let panels = root.split_evenly((1, 2));
        for (area, title, lines) in [
            (&panels[0], "TTFT against throughput", &ttft),
            (&panels[1], "TPOT against throughput", &tpot),
        ] {
            let p = Panel {
                title,
                x_desc: "completed requests per second",
                y_desc: "ms",
                x_tokens: false,
                dots: true,
                legend: SeriesLabelPosition::UpperLeft,
            };
            let x: RangedCoordf64 = (0.0..x_max * 1.05).into();
            panel(area, p, x, lines)?;
        }
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_labels_read_as_people_write_contexts() {
        assert_eq!(tokens_label(512.0), "512");
        assert_eq!(tokens_label(1000.0), "1k");
        assert_eq!(tokens_label(2500.0), "2.5k");
        assert_eq!(tokens_label(185_000.0), "185k");
    }

    #[test]
    fn value_labels_are_short() {
        assert_eq!(value_label(0.0), "0");
        assert_eq!(value_label(0.5), "0.5");
        assert_eq!(value_label(45.0), "45");
        assert_eq!(value_label(800_000.0), "800k");
        assert_eq!(value_label(1_400_000.0), "1.4M");
    }
}
