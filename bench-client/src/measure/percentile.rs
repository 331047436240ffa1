//! The one percentile definition used everywhere.

/// Percentile by linear interpolation between closest ranks (Hyndman & Fan type 7, numpy's default):
/// sort the n values, h = (n - 1) * p / 100, result = x[floor h] + (h - floor h) * (x[ceil h] - x[floor h]).
/// `p` is in [0, 100]. `None` for an empty input, a `p` outside [0, 100], or any non-finite value.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, p)
}

/// [`percentile`] of values already sorted ascending (and finite), without the copy: for the
/// bootstrap, which sorts each resample itself.
pub(crate) fn percentile_sorted(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() || !(0.0..=100.0).contains(&p) {
        return None;
    }
    let h = (v.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let x = v[lo] + (h - lo as f64) * (v[hi] - v[lo]);
    // Guard against rounding pushing the result outside [v[lo], v[hi]].
    Some(x.clamp(v[lo], v[hi]))
}
