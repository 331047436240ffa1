//! A table twin's discrepancy (the model-discrepancy term of Kennedy and O'Hagan's calibration
//! of computer models): each fitted row's measured mean TTFT and TPOT over the model's, kept in
//! the preset. `predict` carries it to the rows of the same shape (input and output length):
//! between two fitted concurrencies, the log ratio is linear in log concurrency; beyond the
//! shape's first or last, it holds at that row's. A row of another shape gets the model alone:
//! on the public tables one shape's discrepancy did not predict another's (docs/twin.md).

use mock_server::config::Discrepancy;

use crate::report::twin_table::RowView;

/// Each row's measured mean over the model's ([`of_row`]).
pub fn of_rows(views: &[RowView]) -> Vec<Discrepancy> {
    views
        .iter()
        .filter_map(|v| {
            of_row(
                (v.isl, v.osl, v.concurrency),
                (v.ttft_ms, v.tpot_ms),
                (v.pred_ttft_ms, v.pred_tpot_ms),
            )
        })
        .collect()
}

/// A row's measured (TTFT, TPOT) over the model's, each where both are known and positive (in
/// the same unit); `None` where neither is.
pub fn of_row(
    (isl, osl, concurrency): (u32, u32, u32),
    measured: (Option<f64>, Option<f64>),
    model: (Option<f64>, Option<f64>),
) -> Option<Discrepancy> {
    let ratio = |m: Option<f64>, p: Option<f64>| match (m, p) {
        (Some(m), Some(p)) if m > 0.0 && p > 0.0 && (m / p).is_finite() => Some(m / p),
        _ => None,
    };
    let d = Discrepancy {
        isl,
        osl,
        concurrency,
        ttft: ratio(measured.0, model.0),
        tpot: ratio(measured.1, model.1),
    };
    (d.ttft.is_some() || d.tpot.is_some()).then_some(d)
}

/// The ratio at `concurrency` among `(log concurrency, log ratio)` points of one shape, sorted
/// by concurrency (rows measured twice at one concurrency are averaged).
fn at(points: &[(f64, f64)], concurrency: u32) -> Option<f64> {
    let x = f64::from(concurrency).ln();
    let mut merged: Vec<(f64, f64, f64)> = Vec::new();
    for &(px, py) in points {
        match merged.last_mut() {
            Some(m) if m.0 == px => {
                m.1 += py;
                m.2 += 1.0;
            }
            _ => merged.push((px, py, 1.0)),
        }
    }
    let pts: Vec<(f64, f64)> = merged.iter().map(|m| (m.0, m.1 / m.2)).collect();
    let first = pts.first()?;
    let last = pts.last()?;
    let y = if x <= first.0 {
        first.1
    } else if x >= last.0 {
        last.1
    } else {
        let k = pts.partition_point(|p| p.0 <= x);
        let ((x0, y0), (x1, y1)) = (pts[k - 1], pts[k]);
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    };
    Some(y.exp())
}

/// The ratios (TTFT, TPOT) the preset's rows of `(isl, osl)` give at `concurrency`; each `None`
/// where no row of that shape measured it.
pub fn ratios(
    d: &[Discrepancy],
    isl: u32,
    osl: u32,
    concurrency: u32,
) -> (Option<f64>, Option<f64>) {
    let mut rows: Vec<&Discrepancy> = d.iter().filter(|r| (r.isl, r.osl) == (isl, osl)).collect();
    rows.sort_by_key(|r| r.concurrency);
    let series = |f: &dyn Fn(&Discrepancy) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| f(r).map(|v| (f64::from(r.concurrency).ln(), v.ln())))
            .collect()
    };
    (
        at(&series(&|r| r.ttft), concurrency),
        at(&series(&|r| r.tpot), concurrency),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(c: u32, ttft: f64, tpot: Option<f64>) -> Discrepancy {
        Discrepancy {
            isl: 1024,
            osl: 128,
            concurrency: c,
            ttft: Some(ttft),
            tpot,
        }
    }

    #[test]
    fn a_shape_s_ratio_is_linear_in_log_concurrency_and_held_beyond_its_ends() {
        let d = vec![
            row(16, 0.8, Some(1.1)),
            row(4, 1.2, None),
            row(64, 1.0, Some(0.9)),
        ];
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // Halfway between 4 and 16 in log concurrency: the geometric mean.
        let (t, d8) = ratios(&d, 1024, 128, 8);
        assert!(close(t, (1.2f64 * 0.8).sqrt()), "{t:?}");
        // TPOT has rows at 16 and 64 only: 8 holds at 16's.
        assert!(close(d8, 1.1), "{d8:?}");
        assert!(close(ratios(&d, 1024, 128, 1).0, 1.2));
        assert!(close(ratios(&d, 1024, 128, 512).0, 1.0));
        assert!(close(ratios(&d, 1024, 128, 32).1, (1.1f64 * 0.9).sqrt()));
        // A fitted row gets its own ratio back.
        assert!(close(ratios(&d, 1024, 128, 16).0, 0.8));
        // Another shape gets none.
        assert_eq!(ratios(&d, 1024, 256, 8), (None, None));
    }

    #[test]
    fn rows_measured_twice_at_one_concurrency_are_averaged() {
        let d = vec![row(8, 1.0, None), row(8, 1.44, None)];
        let t = ratios(&d, 1024, 128, 8).0.unwrap_or(0.0);
        assert!((t - 1.2).abs() < 1e-9, "{t}");
    }
}
