//! A table twin's discrepancy (the model-discrepancy term of Kennedy and O'Hagan's calibration
//! of computer models): each fitted row's measured mean TTFT and TPOT over the model's, kept in
//! the preset. `predict` carries it to the rows of the same shape (input and output length):
//! between two fitted concurrencies, the log ratio is linear in log concurrency; beyond the
//! shape's first or last, it holds at that row's. A row of an unfitted shape gets half the log
//! ratio of the nearest fitted shape (the least |log isl ratio| + |log osl ratio|; shapes as
//! near are averaged): on the public tables a shape's whole discrepancy over-corrected another
//! shape, half of it corrected it (docs/twin.md). TTFT and TPOT go each on its own: a measure a
//! shape's rows lack comes from the nearest shape that has it.

use mock_server::config::{discrepancy_ratio_ok, Discrepancy};

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
/// the same unit) and within the thousandfold a preset holds (a row off by more is one the
/// model cannot reach, reported beside the fit, not carried); `None` where neither is.
pub fn of_row(
    (isl, osl, concurrency): (u32, u32, u32),
    measured: (Option<f64>, Option<f64>),
    model: (Option<f64>, Option<f64>),
) -> Option<Discrepancy> {
    let ratio = |m: Option<f64>, p: Option<f64>| match (m, p) {
        (Some(m), Some(p)) if m > 0.0 && p > 0.0 && discrepancy_ratio_ok(m / p) => Some(m / p),
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

/// How far past the fitted rows' input lengths, output lengths or concurrencies (a factor) a
/// row's may lie before its note calls it extrapolated: rows of one input length cannot tell a
/// cost per prompt from one per token, so their twin's TTFT at another length may miss either
/// way (docs/twin.md, P2), and past the fitted concurrencies the pool's knee is a guess.
const FITTED_MARGIN: f64 = 1.1;

/// Where a row lies past the preset's fitted rows (its `[[discrepancy]]` rows) by more than
/// `FITTED_MARGIN` in input length, output length or concurrency, what was fitted; `None`
/// within them or with no rows.
pub fn extrapolated(
    fitted: &[Discrepancy],
    (isl, osl, concurrency): (u32, u32, u32),
) -> Option<String> {
    let past = |of: fn(&Discrepancy) -> u32, x: u32, what: &str| {
        let lo = fitted.iter().map(of).min()?;
        let hi = fitted.iter().map(of).max()?;
        let x = f64::from(x);
        (x > f64::from(hi) * FITTED_MARGIN || x * FITTED_MARGIN < f64::from(lo)).then(|| {
            match lo == hi {
                true => format!("{lo} {what} alone"),
                false => format!("{lo} to {hi} {what}"),
            }
        })
    };
    let parts: Vec<String> = [
        past(|d| d.isl, isl, "input tokens"),
        past(|d| d.osl, osl, "output tokens"),
        past(|d| d.concurrency, concurrency, "in flight"),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| format!("extrapolated: fitted at {}", parts.join(", ")))
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

/// The share of the nearest fitted shape's log ratio an unfitted shape takes.
const NEAREST_SHAPE_WEIGHT: f64 = 0.5;

/// The ratios (TTFT, TPOT) the preset's rows give at `(isl, osl, concurrency)`, each on its
/// own (`ratio`): a shape whose rows measured TTFT alone takes TPOT from the nearest shape that
/// measured it.
pub fn ratios(
    d: &[Discrepancy],
    isl: u32,
    osl: u32,
    concurrency: u32,
) -> (Option<f64>, Option<f64>) {
    (
        ratio(d, (isl, osl), concurrency, |r| r.ttft),
        ratio(d, (isl, osl), concurrency, |r| r.tpot),
    )
}

/// One measure's ratio (`of` reads it from a row): that of the shape's own rows, or else the
/// log ratio of the nearest shapes that measured it times `NEAREST_SHAPE_WEIGHT`; `None` where
/// no row measured it.
fn ratio(
    d: &[Discrepancy],
    (isl, osl): (u32, u32),
    concurrency: u32,
    of: impl Fn(&Discrepancy) -> Option<f64> + Copy,
) -> Option<f64> {
    if let Some(r) = shape_ratio(d, (isl, osl), concurrency, of) {
        return Some(r);
    }
    let distance = |(i, o): (u32, u32)| {
        let log = |a: u32, b: u32| (f64::from(a.max(1)) / f64::from(b.max(1))).ln().abs();
        log(i, isl) + log(o, osl)
    };
    let mut shapes: Vec<(u32, u32)> = d
        .iter()
        .filter(|r| of(r).is_some())
        .map(|r| (r.isl, r.osl))
        .collect();
    shapes.sort_unstable();
    shapes.dedup();
    let far: Vec<((u32, u32), f64)> = shapes.into_iter().map(|s| (s, distance(s))).collect();
    let nearest = far.iter().map(|&(_, x)| x).min_by(f64::total_cmp)?;
    // The geometric mean of the near shapes' ratios, raised to the weight.
    let logs: Vec<f64> = far
        .iter()
        .filter(|&&(_, x)| x <= nearest + 1e-9)
        .filter_map(|&(s, _)| shape_ratio(d, s, concurrency, of))
        .map(f64::ln)
        .collect();
    let n = logs.len() as f64;
    (n > 0.0).then(|| (NEAREST_SHAPE_WEIGHT * logs.iter().sum::<f64>() / n).exp())
}

/// One measure's ratio from the rows of one shape at `concurrency` ([`at`]).
fn shape_ratio(
    d: &[Discrepancy],
    shape: (u32, u32),
    concurrency: u32,
    of: impl Fn(&Discrepancy) -> Option<f64>,
) -> Option<f64> {
    let mut rows: Vec<(u32, f64)> = d
        .iter()
        .filter(|r| (r.isl, r.osl) == shape)
        .filter_map(|r| of(r).map(|v| (r.concurrency, v)))
        .collect();
    rows.sort_by_key(|r| r.0);
    let series: Vec<(f64, f64)> = rows
        .iter()
        .map(|&(c, v)| (f64::from(c).ln(), v.ln()))
        .collect();
    at(&series, concurrency)
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
        // No rows, no ratio.
        assert_eq!(ratios(&[], 1024, 128, 8), (None, None));
    }

    #[test]
    fn an_unfitted_shape_takes_half_the_nearest_shapes_log_ratio() {
        let shape = |isl, osl, ttft, tpot| Discrepancy {
            isl,
            osl,
            concurrency: 8,
            ttft: Some(ttft),
            tpot: Some(tpot),
        };
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        let d = vec![
            shape(1024, 1000, 1.44, 0.81),
            shape(1024, 4000, 1.21, 1.0),
            shape(8192, 1000, 4.0, 4.0),
        ];
        // 1024/1900 is nearer 1024/1000 than 1024/4000.
        let (t, p) = ratios(&d, 1024, 1900, 8);
        assert!(close(t, 1.2) && close(p, 0.9), "{t:?} {p:?}");
        // 1024/2000 is as near both 1024-input shapes: their geometric mean, halved in log.
        let (t, _) = ratios(&d, 1024, 2000, 8);
        assert!(close(t, (1.44f64 * 1.21).sqrt().sqrt()), "{t:?}");
        // 8192 in takes 8192/1000's alone.
        let (t, p) = ratios(&d, 8192, 1500, 8);
        assert!(close(t, 2.0) && close(p, 2.0), "{t:?} {p:?}");
    }

    #[test]
    fn a_measure_a_shape_lacks_comes_from_the_nearest_shape_that_has_it() {
        let shape = |osl, ttft, tpot| Discrepancy {
            isl: 1024,
            osl,
            concurrency: 8,
            ttft: Some(ttft),
            tpot,
        };
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        let d = vec![shape(1000, 1.44, None), shape(4000, 1.21, Some(0.81))];
        // 1024/1000's own TTFT; its TPOT, which it lacks, half 1024/4000's.
        let (t, p) = ratios(&d, 1024, 1000, 8);
        assert!(close(t, 1.44) && close(p, 0.9), "{t:?} {p:?}");
        // Nearer 1024/1000: its TTFT, and TPOT from 1024/4000, the nearest that measured it.
        let (t, p) = ratios(&d, 1024, 1200, 8);
        assert!(close(t, 1.2) && close(p, 0.9), "{t:?} {p:?}");
    }

    #[test]
    fn rows_measured_twice_at_one_concurrency_are_averaged() {
        let d = vec![row(8, 1.0, None), row(8, 1.44, None)];
        let t = ratios(&d, 1024, 128, 8).0.unwrap_or(0.0);
        assert!((t - 1.2).abs() < 1e-9, "{t}");
    }
}
