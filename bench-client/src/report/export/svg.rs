//! SVG plots: TTFT and decode rate against context length.

use crate::report::sweep::Report;

/// SVG with two panels: median TTFT and median decode rate against context length.
pub fn sweep(report: &Report, path: &std::path::Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let s = report.summary();
    let ttft: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|r| r.ttft_ms_p50.map(|t| (f64::from(r.context_tokens), t)))
        .collect();
    let dec: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|r| r.decode_tok_s_p50.map(|d| (f64::from(r.context_tokens), d)))
        .collect();
    let root = SVGBackend::new(path, (900, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((1, 2));
    for (area, (name, pts)) in panels
        .iter()
        .zip([("median TTFT (ms)", &ttft), ("median decode (tok/s)", &dec)])
    {
        let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.05;
        let ymax = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("context tokens")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), &BLUE))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
