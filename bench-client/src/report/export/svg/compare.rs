//! The overlay of two compared sweeps, and each row's ratio NEW/BASE with its interval.

use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::prelude::*;

use super::{
    context_axis, panel, plot_err, sweep_panel, tokens_label, Line, BLUE_, GREEN_, ORANGE_, PURPLE_,
};
use crate::report::compare::CompareReport;
use crate::report::sweep::{Band, Report};

/// Two sweeps overlaid, 1100 x 800: BASE's and NEW's TTFT and decode medians with their p10-p90
/// bands against context, and below, each row's ratio NEW/BASE with its 95% interval between the
/// threshold lines.
pub fn compare_sweeps(base: &Report, new: &Report, cmp: &CompareReport) -> anyhow::Result<String> {
    let both = Report {
        points: base
            .points
            .iter()
            .filter(|(c, _)| new.points.contains_key(c))
            .map(|(c, p)| (*c, p.clone()))
            .collect(),
    };
    if both.points.is_empty() {
        anyhow::bail!("no context length on both sides to plot");
    }
    let axis = || context_axis(&both).ok_or_else(|| anyhow::anyhow!("no sweep points to plot"));
    let side = |r: &Report, name_t: &'static str, name_d: &'static str, color: RGBColor| {
        let (mut t, mut d) = (Line::new(name_t, color), Line::new(name_d, color));
        for (&ctx, p) in r.points.iter().filter(|(c, _)| both.points.contains_key(c)) {
            t.push(f64::from(ctx), Band::of(&p.ttft_ms));
            d.push(f64::from(ctx), Band::of(&p.decode_tok_s));
        }
        (t, d)
    };
    let (tb, db) = side(
        base,
        "BASE TTFT p50 (p10-p90)",
        "BASE decode p50 (p10-p90)",
        BLUE_,
    );
    let (tn, dn) = side(
        new,
        "NEW TTFT p50 (p10-p90)",
        "NEW decode p50 (p10-p90)",
        ORANGE_,
    );
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 800)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (top, bottom) = root.split_vertically(400);
        let halves = top.split_evenly((1, 2));
        panel(
            &halves[0],
            sweep_panel("time to first token", "ms"),
            axis()?,
            &[tb, tn],
        )?;
        panel(
            &halves[1],
            sweep_panel("decode rate", "tok/s"),
            axis()?,
            &[db, dn],
        )?;
        ratio_panel(&bottom, cmp, axis()?)?;
        root.present().map_err(plot_err)?;
    }
    Ok(out)
}

/// The rows' ratios NEW/BASE with their 95% intervals against context, one series per metric,
/// between the `same` band's edges.
fn ratio_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    cmp: &CompareReport,
    x: WithKeyPoints<LogCoord<f64>>,
) -> anyhow::Result<()> {
    let t = cmp.bootstrap.threshold;
    let pts: Vec<(&str, f64, f64, f64, f64)> = cmp
        .rows
        .iter()
        .filter_map(|r| {
            let c = r.outcome.as_ref().ok()?;
            Some((r.metric, f64::from(r.context_tokens?), c.lo, c.ratio, c.hi))
        })
        .collect();
    let lo = pts
        .iter()
        .map(|p| p.2)
        .fold(1.0 - 2.0 * t, f64::min)
        .max(0.0);
    let hi = pts.iter().map(|p| p.4).fold(1.0 + 2.0 * t, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "NEW / BASE with 95% bootstrap intervals",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(x, lo..hi)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("context (tokens, log scale)")
        .y_desc("ratio")
        .light_line_style(TRANSPARENT)
        .x_label_formatter(&|v| tokens_label(*v))
        .draw()
        .map_err(plot_err)?;
    let (x0, x1) = (chart.x_range().start, chart.x_range().end);
    for edge in [1.0 - t, 1.0 + t] {
        chart
            .draw_series(DashedLineSeries::new(
                [(x0, edge), (x1, edge)],
                6,
                4,
                BLACK.mix(0.4).stroke_width(1),
            ))
            .map_err(plot_err)?;
    }
    let metrics: Vec<&str> = {
        let mut m: Vec<&str> = pts.iter().map(|p| p.0).collect();
        m.dedup();
        m.sort_unstable();
        m.dedup();
        m
    };
    for (i, metric) in metrics.iter().enumerate() {
        let color = [BLUE_, GREEN_, PURPLE_, ORANGE_][i % 4];
        // Metrics of one context side by side: a small offset on the log axis.
        let shift = 1.0 + 0.04 * (i as f64 - (metrics.len() as f64 - 1.0) / 2.0);
        chart
            .draw_series(
                pts.iter()
                    .filter(|p| p.0 == *metric)
                    .map(|p| ErrorBar::new_vertical(p.1 * shift, p.2, p.3, p.4, color.filled(), 8)),
            )
            .map_err(plot_err)?
            .label(*metric)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    Ok(())
}
