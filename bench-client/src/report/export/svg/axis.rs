//! Value axes: linear or log (the rule in [`choose_scale`]), their ranges, ticks and tick labels.

/// How an axis maps values to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// What an axis counts, for its tick labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Milliseconds, labelled `0.5 ms`, `200 ms`, `2 s`.
    Ms,
    /// Tokens, labelled `512`, `1k`, `185k`.
    Tokens,
    /// Anything else; the unit is in the axis description.
    Plain,
}

/// Values spanning more than this ratio (max / min, positive values only) get a log axis.
pub const LOG_RATIO: f64 = 10.0;

/// A log axis reaches at most this many decades below its top; smaller values lie below it.
const LOG_DECADES: f64 = 5.0;

/// Log when the positive, finite `values` span more than a decade (max / min > 10), else linear.
/// Values at or below zero cannot be placed on a log axis and do not count: a panel that goes log
/// leaves them out and says so.
pub fn choose_scale(values: impl IntoIterator<Item = f64>) -> Scale {
    match positive_range(values) {
        Some((lo, hi)) if hi / lo > LOG_RATIO => Scale::Log,
        _ => Scale::Linear,
    }
}

/// The smallest and largest positive finite value.
fn positive_range(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

/// A value axis: its scale and range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    pub scale: Scale,
    pub lo: f64,
    pub hi: f64,
    pub unit: Unit,
}

impl Axis {
    /// The axis that shows `values`: log by [`choose_scale`] from the tick at or below the
    /// smallest value to the tick at or above the largest (ticks as [`log_ticks`]), else linear
    /// from 0 to 1.1 x the largest.
    pub fn fit(values: &[f64], unit: Unit) -> Axis {
        let range = positive_range(values.iter().copied());
        match (choose_scale(values.iter().copied()), range) {
            (Scale::Log, Some((lo, hi))) => {
                let lo = lo.max(hi / 10f64.powf(LOG_DECADES));
                Axis {
                    scale: Scale::Log,
                    lo: nice_below(lo / 1.05),
                    hi: nice_above(hi * 1.05),
                    unit,
                }
            }
            _ => Axis::linear(values, unit),
        }
    }

    /// A linear axis from 0 to 1.1 x the largest of `values` (1 when none is above 0).
    pub fn linear(values: &[f64], unit: Unit) -> Axis {
        let top = values
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        Axis {
            scale: Scale::Linear,
            lo: 0.0,
            hi: if top > 0.0 { top * 1.1 } else { 1.0 },
            unit,
        }
    }

    /// Where `v` lies along the axis, 0 at `lo` and 1 at `hi`; `None` for a value a log axis
    /// cannot place (zero or below) or that is not finite.
    pub fn norm(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        match self.scale {
            Scale::Linear => Some((v - self.lo) / (self.hi - self.lo)),
            Scale::Log if v > 0.0 => Some((v / self.lo).ln() / (self.hi / self.lo).ln()),
            Scale::Log => None,
        }
    }

    /// The same axis with its top raised so that the share `f` of its length above the old top
    /// is free (room for a legend above every value).
    pub fn with_headroom(&self, f: f64) -> Axis {
        let f = f.clamp(0.0, 0.9);
        let hi = match self.scale {
            Scale::Linear => self.hi + (self.hi - self.lo) * f / (1.0 - f),
            Scale::Log => self.hi * (self.hi / self.lo).powf(f / (1.0 - f)),
        };
        Axis { hi, ..*self }
    }

    /// The ticks of a log axis ([`log_ticks`]); empty for a linear one (plotters picks those).
    pub fn ticks(&self) -> Vec<f64> {
        match self.scale {
            Scale::Log => log_ticks(self.lo, self.hi),
            Scale::Linear => Vec::new(),
        }
    }

    /// A tick label in the axis's unit.
    pub fn label(&self, v: f64) -> String {
        tick_label(v, self.unit)
    }
}

/// The values 1, 2 and 5 x 10^k from `lo` to `hi`; only 1 x 10^k when that would give more than
/// 10 ticks, and then only every other decade if still more than 10.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return Vec::new();
    }
    let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let within = |v: &f64| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9);
    let all: Vec<f64> = (k0..=k1)
        .flat_map(|k| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(k)))
        .filter(within)
        .collect();
    if all.len() <= 10 {
        return all;
    }
    let decades: Vec<f64> = (k0..=k1).map(|k| 10f64.powi(k)).filter(within).collect();
    if decades.len() <= 10 {
        return decades;
    }
    decades.into_iter().step_by(2).collect()
}

/// The largest 1, 2 or 5 x 10^k at or below `v` (> 0).
fn nice_below(v: f64) -> f64 {
    let k = v.log10().floor();
    let base = 10f64.powf(k);
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * base)
        .find(|t| *t <= v * (1.0 + 1e-9))
        .unwrap_or(base)
}

/// The smallest 1, 2 or 5 x 10^k at or above `v` (> 0).
fn nice_above(v: f64) -> f64 {
    let k = v.log10().floor();
    let base = 10f64.powf(k);
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * base)
        .find(|t| *t >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * base)
}

/// A number with as few digits as it needs: `0.05`, `0.5`, `2`, `45`, `1.5`.
fn short(v: f64) -> String {
    let s = if v.abs() >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        let digits = (-v.abs().log10()).ceil().max(1.0) as usize;
        format!("{v:.digits$}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A tick label: ms as `0.5 ms`, `200 ms`, `2 s`; tokens as `1k`; other values short (`0.5`,
/// `45`, `800k`, `1.4M`).
pub fn tick_label(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Ms if v.abs() >= 1000.0 => format!("{} s", short(v / 1000.0)),
        Unit::Ms => format!("{} ms", short(v)),
        Unit::Tokens => super::tokens_label(v),
        Unit::Plain if v.abs() < 1e4 => short(v),
        Unit::Plain => super::value_label(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TTFT p50 of the Kimi sweep, 1k..185k contexts (`sweep --simulate --preset
    /// kimi-k2.6-dflash-8xrtx-pro-6000`, 0.93 / chunked 4096 / expandable segments), ms.
    const KIMI_TTFT_MS: [f64; 9] = [
        216.8, 383.6, 717.6, 1436.8, 2880.0, 5785.6, 11673.6, 23756.8, 34850.8,
    ];

    #[test]
    fn the_kimi_ttft_gets_a_log_axis_with_1_2_5_ticks() {
        assert_eq!(choose_scale(KIMI_TTFT_MS), Scale::Log);
        let a = Axis::fit(&KIMI_TTFT_MS, Unit::Ms);
        assert_eq!((a.scale, a.lo, a.hi), (Scale::Log, 200.0, 50_000.0));
        assert_eq!(
            a.ticks(),
            [200.0, 500.0, 1000.0, 2000.0, 5000.0, 10_000.0, 20_000.0, 50_000.0]
        );
        let labels: Vec<String> = a.ticks().iter().map(|v| a.label(*v)).collect();
        assert_eq!(
            labels,
            ["200 ms", "500 ms", "1 s", "2 s", "5 s", "10 s", "20 s", "50 s"]
        );
    }

    #[test]
    fn a_narrow_range_stays_linear_from_zero() {
        // The Kimi prefill rate, tok/s: 4614..5574.
        let prefill = [4614.0, 5214.0, 5574.0, 5568.0, 5556.0, 5308.0];
        assert_eq!(choose_scale(prefill), Scale::Linear);
        let a = Axis::fit(&prefill, Unit::Plain);
        assert_eq!(a.scale, Scale::Linear);
        assert_eq!(a.lo, 0.0);
        assert!((a.hi - 5574.0 * 1.1).abs() < 1e-9);
        // Exactly a decade is not more than one.
        assert_eq!(choose_scale([2.0, 20.0]), Scale::Linear);
        assert_eq!(choose_scale([2.0, 20.1]), Scale::Log);
    }

    #[test]
    fn values_at_or_below_zero_do_not_decide_the_scale() {
        assert_eq!(choose_scale([0.0, -0.0, 216.8, 34850.8]), Scale::Log);
        assert_eq!(choose_scale([0.0, 1.0, 5.0]), Scale::Linear);
        assert_eq!(choose_scale([f64::NAN, f64::INFINITY]), Scale::Linear);
        let a = Axis::fit(&[0.0, 216.8, 34850.8], Unit::Ms);
        assert_eq!(a.norm(0.0), None);
        assert_eq!(a.norm(a.lo), Some(0.0));
        assert!((a.norm(a.hi).unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn wide_ranges_thin_their_ticks() {
        assert_eq!(log_ticks(1.0, 10.0), [1.0, 2.0, 5.0, 10.0]);
        assert_eq!(log_ticks(1.0, 1e4), [1.0, 10.0, 100.0, 1000.0, 1e4]);
        assert_eq!(log_ticks(1.0, 1e12).len(), 7);
        assert!(log_ticks(0.0, 1.0).is_empty());
        // A log axis reaches at most five decades below its top.
        let a = Axis::fit(&[1e-3, 1.0, 1e6], Unit::Plain);
        assert_eq!((a.lo, a.hi), (5.0, 2e6));
    }

    #[test]
    fn headroom_frees_the_top_share() {
        for a in [
            Axis::fit(&[1.0, 5.0], Unit::Plain),
            Axis::fit(&[1.0, 500.0], Unit::Plain),
        ] {
            let b = a.with_headroom(0.2);
            let old_top = b.norm(a.hi).unwrap();
            assert!((old_top - 0.8).abs() < 1e-9, "{a:?} -> {b:?}: {old_top}");
        }
    }

    #[test]
    fn tick_labels_carry_their_unit() {
        assert_eq!(tick_label(0.5, Unit::Ms), "0.5 ms");
        assert_eq!(tick_label(0.05, Unit::Ms), "0.05 ms");
        assert_eq!(tick_label(2.0, Unit::Ms), "2 ms");
        assert_eq!(tick_label(200.0, Unit::Ms), "200 ms");
        assert_eq!(tick_label(1500.0, Unit::Ms), "1.5 s");
        assert_eq!(tick_label(20_000.0, Unit::Ms), "20 s");
        assert_eq!(tick_label(185_000.0, Unit::Tokens), "185k");
        assert_eq!(tick_label(0.5, Unit::Plain), "0.5");
    }
}
