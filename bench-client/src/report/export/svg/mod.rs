//! SVG plots, as strings (the caller writes the file or embeds it in HTML).
//!
//! A sweep: TTFT, decode rate (true and naive), prefill rate and tokens per chunk against context
//! length on a log axis labelled in tokens (1k ... 185k), each median with its p10-p90 band. A load
//! run: the latency distributions (CDF) and throughput over time. A latency-throughput curve (a
//! capacity search's): TTFT and TPOT against throughput. Every value axis goes log when its values span more than a decade
//! (`axis::choose_scale`); every legend sits where it covers no data (`legend::place`); SLOs and
//! the capacity answer are drawn as labelled lines.

use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::sweep::{Band, Report};

mod axis;
mod compare;
mod curve;
mod legend;
mod marks;
mod plots;
#[cfg(test)]
pub(crate) mod probe;

pub use compare::compare_sweeps;
pub use curve::{latency_throughput, Curve, CurvePoint};
pub use plots::{load, sweep, timeline};

use axis::{Axis, Scale, Unit};
use marks::{place_marks, Mark, MarkAt, PlacedMark};

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
    } else if a >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The words and look of one panel.
struct Panel<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    x_unit: Unit,
    y_unit: Unit,
    /// Dots at the points (the sweep's measured contexts).
    dots: bool,
    /// A y axis fixed from 0 to this (a CDF's share); `None`: fitted to the values.
    y_top: Option<f64>,
    /// Keep the y axis linear whatever the values span (a time series).
    y_linear: bool,
    marks: Vec<Mark>,
    /// Lines under the plot: points beyond the axes, lines left out.
    notes: Vec<String>,
}

impl<'a> Panel<'a> {
    fn new(title: &'a str, x_desc: &'a str, y_desc: &'a str) -> Self {
        Panel {
            title,
            x_desc,
            y_desc,
            x_unit: Unit::Plain,
            y_unit: Unit::Plain,
            dots: false,
            y_top: None,
            y_linear: false,
            marks: Vec::new(),
            notes: Vec::new(),
        }
    }
}

/// A panel of the sweep: a context axis in tokens, dots at the measured contexts; a y axis in
/// `ms` is labelled `200 ms`, `2 s`.
fn sweep_panel<'a>(title: &'a str, y_desc: &'a str) -> Panel<'a> {
    let ms = y_desc == "ms";
    Panel {
        x_unit: Unit::Tokens,
        y_unit: if ms { Unit::Ms } else { Unit::Plain },
        dots: true,
        ..Panel::new(
            title,
            "context (tokens, log scale)",
            if ms { "time" } else { y_desc },
        )
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

/// An [`Axis`] as a plotters coordinate: linear, or log with a tick at each of its ticks.
fn log_coord(a: &Axis) -> WithKeyPoints<LogCoord<f64>> {
    let coord: LogCoord<f64> = (a.lo..a.hi).log_scale().into();
    coord.with_key_points(a.ticks())
}

fn linear_coord(a: &Axis) -> RangedCoordf64 {
    (a.lo..a.hi).into()
}

const BLUE_: RGBColor = RGBColor(31, 119, 180);
const ORANGE_: RGBColor = RGBColor(255, 127, 14);
const GREEN_: RGBColor = RGBColor(44, 160, 44);
const PURPLE_: RGBColor = RGBColor(148, 103, 189);
/// SLO lines.
const SLO_RED: RGBColor = RGBColor(214, 39, 40);
/// The capacity answer's line.
const ANSWER_GREY: RGBColor = RGBColor(60, 60, 60);

/// Pixels of a note line under a panel.
const NOTE_PX: u32 = 14;

/// The chart frame of a panel: caption, margins and label areas (room below for `notes` lines).
fn frame<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &'b str,
    notes: usize,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(area);
    b.caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35 + NOTE_PX * notes as u32)
        .y_label_area_size(60);
    b
}

/// The plot area of a panel's frame, pixels (the frame decides it, not the coordinates).
fn plot_dims(size: (u32, u32), title: &str, notes: usize) -> anyhow::Result<(f64, f64)> {
    let mut scratch = String::new();
    let root = SVGBackend::with_string(&mut scratch, size).into_drawing_area();
    let chart = frame(&root, title, notes)
        .build_cartesian_2d(0.0..1.0, 0.0..1.0)
        .map_err(plot_err)?;
    let (w, h) = chart.plotting_area().dim_in_pixel();
    Ok((f64::from(w), f64::from(h)))
}

/// Where a point of the plot lies, in plot-area pixels from its top left, given the x and y
/// positions along their axes (0..1).
fn to_px((w, h): (f64, f64), (xn, yn): (f64, f64)) -> (f64, f64) {
    (xn * w, (1.0 - yn) * h)
}

/// The points of `pts` a `y` axis can show (a log axis: none at or below its bottom), each with
/// its position along the axes (0..1).
fn drawable(x_norm: &dyn Fn(f64) -> f64, y: &Axis, pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    pts.iter()
        .filter(|p| y.scale == Scale::Linear || p.1 >= y.lo)
        .filter_map(|&(x, v)| Some((x_norm(x), y.norm(v)?)))
        .collect()
}

/// What the legend must not cover: the lines, the bands and the marks, in plot-area pixels.
fn obstacles(
    dims: (f64, f64),
    x_norm: &dyn Fn(f64) -> f64,
    y: &Axis,
    lines: &[Line],
    marks: &[PlacedMark<'_>],
) -> legend::Obstacles {
    let px = |pts: Vec<(f64, f64)>| -> Vec<(f64, f64)> {
        pts.into_iter().map(|p| to_px(dims, p)).collect()
    };
    let mut obs = legend::Obstacles::default();
    for l in lines {
        obs.data.extend(legend::polyline_samples(&px(drawable(
            x_norm, y, &l.points,
        ))));
        let clamp = |v: f64| {
            if y.scale == Scale::Log {
                v.max(y.lo)
            } else {
                v
            }
        };
        let lower: Vec<(f64, f64)> = l.band.iter().map(|b| (b.0, clamp(b.1))).collect();
        let upper: Vec<(f64, f64)> = l.band.iter().map(|b| (b.0, clamp(b.2))).collect();
        let (lower, upper) = (drawable(x_norm, y, &lower), drawable(x_norm, y, &upper));
        if lower.len() == upper.len() && lower.len() >= 2 {
            obs.data
                .extend(legend::band_samples(&px(lower), &px(upper)));
        }
    }
    let (w, h) = dims;
    for m in marks {
        let line = match m.mark.at {
            MarkAt::X(_) => [(m.pos, 0.0), (m.pos, h)],
            MarkAt::Y(_) => [(0.0, m.pos), (w, m.pos)],
        };
        obs.marks.extend(legend::polyline_samples(&line));
        let b = m.label_box;
        obs.marks.extend(legend::band_samples(
            &[(b.x0, b.y1), (b.x1, b.y1)],
            &[(b.x0, b.y0), (b.x1, b.y0)],
        ));
    }
    obs
}

/// What [`panel`] decided before drawing.
struct Layout<'m> {
    y: Axis,
    marks: Vec<PlacedMark<'m>>,
    legend: legend::Rect,
}

/// Draw `lines` and `p.marks` into `area` over the x coordinate `x`, on a y axis fitted to them,
/// with the legend where it covers no data.
fn panel<DB, X>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    mut p: Panel<'_>,
    x: X,
    lines: &[Line],
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let xr: X::CoordDescType = x.into();
    const SPAN: i32 = 1_000_000;
    let x_norm = |v: f64| f64::from(xr.map(&v, (0, SPAN))) / f64::from(SPAN);
    let mut y_values: Vec<f64> = lines
        .iter()
        .flat_map(|l| {
            l.points
                .iter()
                .map(|p| p.1)
                .chain(l.band.iter().flat_map(|b| [b.1, b.2]))
        })
        .collect();
    y_values.extend(p.marks.iter().filter_map(|m| match m.at {
        MarkAt::Y(y) => Some(y),
        MarkAt::X(_) => None,
    }));
    let mut y = match p.y_top {
        Some(top) => Axis {
            scale: Scale::Linear,
            lo: 0.0,
            hi: top,
            unit: p.y_unit,
        },
        None if p.y_linear => Axis::linear(&y_values, p.y_unit),
        None => Axis::fit(&y_values, p.y_unit),
    };
    if y.scale == Scale::Log {
        let left_out: Vec<&str> = lines
            .iter()
            .filter(|l| l.points.iter().any(|pt| pt.1.is_nan() || pt.1 < y.lo))
            .map(|l| l.name)
            .collect();
        if !left_out.is_empty() {
            p.notes.push(format!(
                "below the log axis (under {}), not drawn: points of {}",
                y.label(y.lo),
                left_out.join(", ")
            ));
        }
    }
    let dims = plot_dims(area.dim_in_pixel(), p.title, p.notes.len())?;
    let labels: Vec<&str> = lines.iter().map(|l| l.name).collect();
    let size = legend::legend_size(&labels);
    let mut marks = place_marks(dims, &x_norm, &y, &p.marks);
    let mut placed = legend::place(dims, size, &obstacles(dims, &x_norm, &y, lines, &marks));
    if placed.is_none() {
        y = y.with_headroom(legend::headroom(dims, size));
        marks = place_marks(dims, &x_norm, &y, &p.marks);
        placed = legend::place(dims, size, &obstacles(dims, &x_norm, &y, lines, &marks));
    }
    let legend_box = placed.map_or_else(
        || legend::corner_box(legend::Corner::UpperRight, dims, size),
        |pl| pl.1,
    );
    let layout = Layout {
        y,
        marks,
        legend: legend_box,
    };
    match y.scale {
        Scale::Linear => draw(area, &p, xr, linear_coord(&y), lines, &layout),
        Scale::Log => draw(area, &p, xr, log_coord(&y), lines, &layout),
    }
}

/// Draw a panel laid out by [`panel`].
fn draw<DB, X, Y>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    p: &Panel<'_>,
    x: X,
    y: Y,
    lines: &[Line],
    layout: &Layout<'_>,
) -> anyhow::Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let ya = layout.y;
    let mut chart = frame(area, p.title, p.notes.len())
        .build_cartesian_2d(x, y)
        .map_err(plot_err)?;
    let x_label = |v: &f64| axis::tick_label(*v, p.x_unit);
    let y_label = |v: &f64| ya.label(*v);
    let y_desc = if ya.scale == Scale::Log {
        format!("{} (log scale)", p.y_desc)
    } else {
        p.y_desc.to_string()
    };
    chart
        .configure_mesh()
        .x_desc(p.x_desc)
        .y_desc(y_desc)
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .draw()
        .map_err(plot_err)?;
    let shown = |v: f64| ya.scale == Scale::Linear || v >= ya.lo;
    let clamp = |v: f64| {
        if ya.scale == Scale::Log {
            v.max(ya.lo)
        } else {
            v
        }
    };
    for l in lines {
        if l.band.len() >= 2 {
            let mut poly: Vec<(f64, f64)> = l.band.iter().map(|b| (b.0, clamp(b.2))).collect();
            poly.extend(l.band.iter().rev().map(|b| (b.0, clamp(b.1))));
            chart
                .draw_series(std::iter::once(Polygon::new(poly, l.color.mix(0.15))))
                .map_err(plot_err)?;
        }
        let style = l.color.stroke_width(2);
        let pts = l.points.iter().copied().filter(|p| shown(p.1));
        if l.dashed {
            chart.draw_series(DashedLineSeries::new(pts, 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(pts, style))
        }
        .map_err(plot_err)?;
        if p.dots {
            chart
                .draw_series(
                    l.points
                        .iter()
                        .filter(|pt| shown(pt.1))
                        .map(|&pt| Circle::new(pt, 3, l.color.filled())),
                )
                .map_err(plot_err)?;
        }
    }
    let pa = chart.plotting_area().strip_coord_spec();
    let (w, h) = pa.dim_in_pixel();
    let px = |v: f64| v.round() as i32;
    let mark_font = ("sans-serif", 12).into_font();
    for m in &layout.marks {
        let line = match m.mark.at {
            MarkAt::X(_) => [(px(m.pos), 0), (px(m.pos), h as i32)],
            MarkAt::Y(_) => [(0, px(m.pos)), (w as i32, px(m.pos))],
        };
        pa.draw(&PathElement::new(line, m.mark.color.stroke_width(2)))
            .map_err(plot_err)?;
        let b = m.label_box;
        pa.draw(&Rectangle::new(
            [(px(b.x0) - 1, px(b.y0)), (px(b.x1) + 1, px(b.y1))],
            WHITE.mix(0.8).filled(),
        ))
        .map_err(plot_err)?;
        // A label left of its line ends at the line, whatever the text's real width.
        let (h_pos, x) = if b.x1 <= m.pos {
            (HPos::Right, b.x1)
        } else {
            (HPos::Left, b.x0)
        };
        let style = TextStyle::from(mark_font.clone())
            .color(&m.mark.color)
            .pos(Pos::new(h_pos, VPos::Center));
        pa.draw(&Text::new(
            m.mark.label.clone(),
            (px(x), px((b.y0 + b.y1) / 2.0)),
            style,
        ))
        .map_err(plot_err)?;
    }
    draw_legend(&pa, lines, layout.legend)?;
    let note_font = TextStyle::from(("sans-serif", 11).into_font()).color(&RGBColor(90, 90, 90));
    // Notes go under the tick labels, above the axis description at the bottom of the frame.
    let (_, ah) = area.dim_in_pixel();
    let label_area = 35 + NOTE_PX * p.notes.len() as u32;
    let top = ah as i32 - 10 - label_area as i32 + 20;
    for (i, n) in p.notes.iter().enumerate() {
        let y = top + (NOTE_PX as i32) * i as i32;
        area.draw(&Text::new(n.clone(), (12, y), note_font.clone()))
            .map_err(plot_err)?;
    }
    Ok(())
}

/// The legend box at `r` (plot-area pixels): a line sample and the name of each line.
fn draw_legend<DB: DrawingBackend>(
    pa: &DrawingArea<DB, plotters::coord::Shift>,
    lines: &[Line],
    r: legend::Rect,
) -> anyhow::Result<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let px = |v: f64| v.round() as i32;
    let corners = [(px(r.x0), px(r.y0)), (px(r.x1), px(r.y1))];
    pa.draw(&Rectangle::new(corners, WHITE.mix(0.85).filled()))
        .map_err(plot_err)?;
    pa.draw(&Rectangle::new(corners, BLACK.mix(0.3)))
        .map_err(plot_err)?;
    let font =
        TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, l) in lines.iter().enumerate() {
        let y = px(r.y0 + legend::PAD_PX + (i as f64 + 0.5) * legend::row_px());
        let x0 = px(r.x0 + legend::PAD_PX);
        let style = l.color.stroke_width(2);
        if l.dashed {
            for (a, b) in [(0, 6), (10, 16)] {
                pa.draw(&PathElement::new([(x0 + a, y), (x0 + b, y)], style))
                    .map_err(plot_err)?;
            }
        } else {
            pa.draw(&PathElement::new([(x0, y), (x0 + 16, y)], style))
                .map_err(plot_err)?;
        }
        pa.draw(&Text::new(
            l.name,
            (px(r.x0 + legend::PAD_PX + legend::SWATCH_PX), y),
            font.clone(),
        ))
        .map_err(plot_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
