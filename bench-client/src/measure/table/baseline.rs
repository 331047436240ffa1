//! What a table twin must beat, and the hold-out protocols it is checked by:
//!
//! - P1, interpolation: in each (isl, osl) series sorted by concurrency, the 2nd, 4th, ... rows
//!   are held out (never the first or the last) and predicted from the rest;
//! - P2, leave one shape out: where a deployment has three or more (isl, osl) shapes, each is
//!   predicted from the others.
//!
//! Baselines: a held-out P1 row on the log-log line between its two neighbours; a linear least
//! squares model in a few features (concurrency, context, prefill tokens per decode step).

use std::collections::BTreeMap;

use super::Point;
use crate::measure::calibrate::lsq;

/// Indices of the points held out by P1, in each series the 2nd, 4th, ... but never the last.
pub fn p1_held_out(points: &[Point]) -> Vec<usize> {
    let mut series: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        series.entry((p.isl, p.osl)).or_default().push(i);
    }
    let mut held = Vec::new();
    for idx in series.values_mut() {
        idx.sort_by_key(|&i| (points[i].concurrency, i));
        let n = idx.len();
        held.extend(
            idx.iter()
                .enumerate()
                .filter(|(k, _)| k % 2 == 1 && k + 1 < n)
                .map(|(_, &i)| i),
        );
    }
    held.sort_unstable();
    held
}

/// P2's folds: for each (isl, osl) shape, the indices of its points, where there are three or
/// more shapes (else none).
pub fn p2_folds(points: &[Point]) -> Vec<Vec<usize>> {
    let mut shapes: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
    for (i, p) in points.iter().enumerate() {
        shapes.entry((p.isl, p.osl)).or_default().push(i);
    }
    if shapes.len() < 3 {
        return Vec::new();
    }
    shapes.into_values().collect()
}

/// P1's baseline: the held-out point `i` on the log-log line (in concurrency) between its
/// neighbours in its series among `train`; `None` without one on each side.
pub fn loglog_neighbours(points: &[Point], train: &[usize], i: usize) -> Option<(f64, f64)> {
    let p = points[i];
    let series = train
        .iter()
        .map(|&j| points[j])
        .filter(|q| (q.isl, q.osl) == (p.isl, p.osl));
    let (mut lo, mut hi): (Option<Point>, Option<Point>) = (None, None);
    for q in series {
        if q.concurrency < p.concurrency && lo.is_none_or(|l| q.concurrency > l.concurrency) {
            lo = Some(q);
        }
        if q.concurrency > p.concurrency && hi.is_none_or(|h| q.concurrency < h.concurrency) {
            hi = Some(q);
        }
    }
    let (lo, hi) = (lo?, hi?);
    let w = (f64::from(p.concurrency).ln() - f64::from(lo.concurrency).ln())
        / (f64::from(hi.concurrency).ln() - f64::from(lo.concurrency).ln());
    let line = |a: f64, b: f64| (a.ln() + w * (b.ln() - a.ln())).exp();
    Some((line(lo.ttft_s?, hi.ttft_s?), line(lo.tpot_s?, hi.tpot_s?)))
}

/// The linear baseline's features of a point: TTFT ~ 1, c, isl, c x isl; TPOT ~ 1, c,
/// c x (isl + osl / 2) (the batch's mean context), c x isl / osl (prefill tokens per step).
fn features(p: &Point) -> (Vec<f64>, Vec<f64>) {
    let (c, i, o) = (f64::from(p.concurrency), f64::from(p.isl), f64::from(p.osl));
    (
        vec![1.0, c, i, c * i],
        vec![1.0, c, c * (i + o / 2.0), c * i / o],
    )
}

/// A metric's measurement and features of a point.
type Pick<'a> = &'a dyn Fn(&Point) -> (Option<f64>, Vec<f64>);

/// The linear least-squares baseline, fitted on relative errors.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    ttft: Vec<f64>,
    tpot: Vec<f64>,
}

impl Linear {
    /// Fits both metrics on `train`; where the points cannot tell every feature apart, the
    /// last features are dropped.
    pub fn fit(points: &[Point], train: &[usize]) -> Linear {
        let fit = |pick: Pick| {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for &j in train {
                if let (Some(v), f) = pick(&points[j]) {
                    x.push(f.iter().map(|a| a / v).collect::<Vec<f64>>());
                    y.push(1.0);
                }
            }
            let k = x.first().map_or(0, Vec::len);
            for keep in (1..=k).rev() {
                let sub: Vec<Vec<f64>> = x.iter().map(|r| r[..keep].to_vec()).collect();
                if let Some(mut b) = lsq::solve(&sub, &y) {
                    b.resize(k, 0.0);
                    return b;
                }
            }
            vec![0.0; k]
        };
        Linear {
            ttft: fit(&|p| (p.ttft_s, features(p).0)),
            tpot: fit(&|p| (p.tpot_s, features(p).1)),
        }
    }

    /// TTFT and TPOT (s) of a point; a prediction at or below 0 reads as a tiny positive time.
    pub fn predict(&self, p: &Point) -> (f64, f64) {
        let (a, b) = features(p);
        let dot = |f: &[f64], w: &[f64]| lsq::predict(f, w).max(1e-9);
        (dot(&a, &self.ttft), dot(&b, &self.tpot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(isl: u32, osl: u32, c: u32, ttft: f64, tpot: f64) -> Point {
        Point {
            isl,
            osl,
            concurrency: c,
            ttft_s: Some(ttft),
            tpot_s: Some(tpot),
        }
    }

    #[test]
    fn p1_holds_out_every_second_row_but_never_the_last() {
        let pts: Vec<Point> = [4, 8, 16, 32, 64]
            .iter()
            .map(|&c| pt(1024, 1024, c, 1.0, 1.0))
            .chain([8, 4, 16, 32].iter().map(|&c| pt(8192, 1024, c, 1.0, 1.0)))
            .collect();
        // series 1: c 4 8 16 32 64 -> 8 and 32 (indices 1, 3); series 2 sorted 4 8 16 32 ->
        // 8 (index 5); 32 is the last
        assert_eq!(p1_held_out(&pts), vec![1, 3, 5]);
        assert!(p2_folds(&pts).is_empty());
    }

    #[test]
    fn loglog_interpolates_between_neighbours() {
        let pts = vec![
            pt(1, 2, 4, 1.0, 10.0),
            pt(1, 2, 8, 9.0, 9.0),
            pt(1, 2, 32, 8.0, 80.0),
        ];
        // c = 8 is a third of the way from 4 to 32 in log c: 1 x 8^(1/3) = 2
        let (a, b) = loglog_neighbours(&pts, &[0, 2], 1).unwrap();
        assert!(
            (a - 2.0).abs() < 1e-12 && (b - 20.0).abs() < 1e-9,
            "{a} {b}"
        );
        assert!(loglog_neighbours(&pts, &[0], 1).is_none());
    }

    #[test]
    fn the_linear_baseline_fits_a_linear_table() {
        let mut pts = Vec::new();
        for (i, o) in [(1000, 100), (2000, 500), (4000, 200)] {
            for c in [1, 4, 16, 64] {
                let (a, b) = features(&pt(i, o, c, 1.0, 1.0));
                let w1 = [0.05, 0.001, 2e-5, 1e-6];
                let w2 = [0.01, 2e-4, 1e-9, 1e-6];
                let d = |f: &[f64], w: &[f64]| f.iter().zip(w).map(|(x, y)| x * y).sum::<f64>();
                pts.push(pt(i, o, c, d(&a, &w1), d(&b, &w2)));
            }
        }
        let all: Vec<usize> = (0..pts.len()).collect();
        let m = Linear::fit(&pts, &all);
        for p in &pts {
            let (a, b) = m.predict(p);
            assert!((a / p.ttft_s.unwrap() - 1.0).abs() < 1e-6);
            assert!((b / p.tpot_s.unwrap() - 1.0).abs() < 1e-6);
        }
    }
}
