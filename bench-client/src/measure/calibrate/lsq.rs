//! Ordinary least squares for the few-parameter fits of `calibrate`: the normal equations on
//! scaled columns, solved by Gaussian elimination with partial pivoting, and R-squared.

/// The least-squares coefficients of `y ~ x` (one row of `x` per observation), or `None` when
/// the columns do not determine them: fewer rows than columns, or a column that is (nearly) a
/// combination of the others. Columns are scaled to unit norm first, so a pivot under
/// `1e-9` of the unit diagonal means collinear columns whatever the units.
pub fn solve(x: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = x.first()?.len();
    if k == 0 || x.len() < k || x.len() != y.len() || x.iter().any(|r| r.len() != k) {
        return None;
    }
    let scale: Vec<f64> = (0..k)
        .map(|j| x.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt())
        .collect();
    if scale.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return None;
    }
    // Normal equations on the scaled columns: A b = c.
    let mut a = vec![vec![0.0; k + 1]; k];
    for (r, yi) in x.iter().zip(y) {
        for i in 0..k {
            let xi = r[i] / scale[i];
            for j in 0..k {
                a[i][j] += xi * r[j] / scale[j];
            }
            a[i][k] += xi * yi;
        }
    }
    for col in 0..k {
        let piv = (col..k).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[piv][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, piv);
        let pivot_row = a[col].clone();
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (x, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let b: Vec<f64> = (0..k).map(|i| a[i][k] / a[i][i] / scale[i]).collect();
    b.iter().all(|v| v.is_finite()).then_some(b)
}

/// The coefficients of [`solve`], refitted without every column whose coefficient came out
/// negative (a cost cannot be negative): those are 0. `None` as for [`solve`].
pub fn solve_non_negative(x: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = x.first()?.len();
    let mut keep: Vec<usize> = (0..k).collect();
    loop {
        let sub: Vec<Vec<f64>> = x
            .iter()
            .map(|r| keep.iter().map(|&j| r[j]).collect())
            .collect();
        let b = solve(&sub, y)?;
        let worst = b
            .iter()
            .enumerate()
            .filter(|(_, v)| **v < 0.0)
            .min_by(|p, q| p.1.total_cmp(q.1))
            .map(|(i, _)| i);
        match worst {
            Some(i) if keep.len() > 1 => {
                keep.remove(i);
            }
            Some(_) => return Some(vec![0.0; k]),
            None => {
                let mut out = vec![0.0; k];
                for (j, v) in keep.iter().zip(b) {
                    out[*j] = v;
                }
                return Some(out);
            }
        }
    }
}

/// `x . b` for one row.
pub fn predict(row: &[f64], b: &[f64]) -> f64 {
    row.iter().zip(b).map(|(x, b)| x * b).sum()
}

/// R-squared of predictions against measurements: 1 - residual / total sum of squares (1 when
/// every measurement is the same and predicted exactly).
pub fn r_squared(measured: &[f64], predicted: &[f64]) -> f64 {
    let n = measured.len().max(1) as f64;
    let mean = measured.iter().sum::<f64>() / n;
    let ss_tot: f64 = measured.iter().map(|m| (m - mean).powi(2)).sum();
    let ss_res: f64 = measured
        .iter()
        .zip(predicted)
        .map(|(m, p)| (m - p).powi(2))
        .sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else if ss_res == 0.0 {
        1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_exact_linear_model_is_recovered(
            b in proptest::collection::vec(0.0f64..10.0, 3),
            xs in proptest::collection::vec((1.0f64..100.0, 0.0f64..1e4), 4..12),
        ) {
            let x: Vec<Vec<f64>> = xs.iter().map(|(u, v)| vec![1.0, *u, *v]).collect();
            let y: Vec<f64> = x.iter().map(|r| predict(r, &b)).collect();
            if let Some(got) = solve(&x, &y) {
                for (g, w) in got.iter().zip(&b) {
                    prop_assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{got:?} vs {b:?}");
                }
                let p: Vec<f64> = x.iter().map(|r| predict(r, &got)).collect();
                prop_assert!(r_squared(&y, &p) > 1.0 - 1e-9);
            }
        }
    }

    #[test]
    fn collinear_or_short_data_determine_nothing() {
        let x = vec![vec![1.0, 2.0], vec![2.0, 4.0], vec![3.0, 6.0]];
        assert!(solve(&x, &[1.0, 2.0, 3.0]).is_none());
        assert!(solve(&[vec![1.0, 2.0]], &[1.0]).is_none());
    }

    #[test]
    fn a_negative_cost_is_dropped_and_the_rest_refitted() {
        // y = 2 + 3u exactly, v pulls the wrong way only through noise-free collinearity-free data.
        let x: Vec<Vec<f64>> = (1..6)
            .map(|i| vec![1.0, i as f64, (i * i) as f64])
            .collect();
        let y: Vec<f64> = x.iter().map(|r| 2.0 + 3.0 * r[1] - 0.1 * r[2]).collect();
        let b = solve_non_negative(&x, &y).unwrap();
        assert_eq!(b[2], 0.0);
        assert!(b.iter().all(|v| *v >= 0.0), "{b:?}");
    }
}
