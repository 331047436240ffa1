//! Comparing two runs: the ratio NEW/BASE of one statistic, its 95% interval from a seeded
//! percentile bootstrap, and a verdict against a threshold.
//!
//! Method: the percentile interval of the bootstrap (Efron & Tibshirani, "An Introduction to the
//! Bootstrap", Chapman & Hall 1993, ch. 13). Each of B rounds draws a resample of BASE's units and
//! one of NEW's, each with replacement and of its own size, computes the statistic of each and
//! their ratio; the interval is the 2.5th and 97.5th percentile of the B ratios
//! ([`super::percentile`], type 7). The two sides are resampled independently: two runs are two
//! independent samples, not pairs.
//!
//! A unit is one request. It carries one value (a request's TTFT) or several (its inter-chunk
//! gaps): resampling requests, not gaps, keeps a request's correlated gaps together (a cluster
//! bootstrap). Each side's units are put in a canonical order first, so the result does not depend
//! on the order of the input, only on the values and the seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::percentile::percentile_sorted;

/// The statistic of one side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Statistic {
    /// The `p`th percentile (0..=100) of all the units' values pooled.
    Percentile(f64),
    /// The sum of all values divided by a fixed duration in seconds: a throughput. The duration is
    /// the run's own and is held fixed, so the interval covers the variation of the request mix
    /// (tokens per request, failures, requests meeting an SLO), not that of the run's length.
    Rate {
        /// Seconds the run lasted.
        duration_s: f64,
    },
}

/// Which way is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Latencies.
    LowerIsBetter,
    /// Rates and throughputs.
    HigherIsBetter,
}

/// What the interval says, against a threshold `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// The whole interval lies beyond the threshold on the good side.
    Better,
    /// The whole interval lies beyond the threshold on the bad side.
    Worse,
    /// The whole interval lies within [1 - t, 1 + t].
    Same,
    /// Anything else: the data cannot tell.
    Unclear,
}

impl Verdict {
    /// Wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Better => "better",
            Self::Worse => "worse",
            Self::Same => "same",
            Self::Unclear => "unclear",
        }
    }
}

/// Why no comparison could be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// A side has no values.
    #[error("{0} has no values")]
    Empty(&'static str),
    /// A value is NaN, infinite or negative.
    #[error("{0} has a value that is not a finite non-negative number")]
    BadValue(&'static str),
    /// A statistic's parameter is out of range (a percentile outside 0..=100, a duration <= 0).
    #[error("statistic out of range: {0}")]
    BadStatistic(String),
    /// BASE's statistic is zero (in the data or in a resample): the ratio is undefined.
    #[error("BASE's statistic is 0 (in the data or in a resample), so NEW/BASE is undefined")]
    ZeroBase,
    /// The bootstrap needs at least one resample and a threshold in (0, 1).
    #[error("bad bootstrap settings: {0}")]
    BadSettings(String),
}

/// One side of a comparison: its units in canonical order and its statistic.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    units: Vec<Vec<f64>>,
    statistic: Statistic,
}

impl Sample {
    /// One value per unit.
    pub fn scalar(
        side: &'static str,
        values: &[f64],
        statistic: Statistic,
    ) -> Result<Self, CompareError> {
        let units: Vec<Vec<f64>> = values.iter().map(|&v| vec![v]).collect();
        Self::clustered(side, &units, statistic)
    }

    /// Several values per unit (a request's gaps); units without values still count as units
    /// (they are drawn, and add nothing).
    pub fn clustered(
        side: &'static str,
        units: &[Vec<f64>],
        statistic: Statistic,
    ) -> Result<Self, CompareError> {
        match statistic {
            Statistic::Percentile(p) if !(0.0..=100.0).contains(&p) => {
                return Err(CompareError::BadStatistic(format!("percentile {p}")))
            }
            Statistic::Rate { duration_s } if !(duration_s.is_finite() && duration_s > 0.0) => {
                return Err(CompareError::BadStatistic(format!(
                    "duration {duration_s} s"
                )))
            }
            _ => {}
        }
        if units.iter().all(Vec::is_empty) {
            return Err(CompareError::Empty(side));
        }
        if units
            .iter()
            .flatten()
            .any(|v| !(v.is_finite() && *v >= 0.0))
        {
            return Err(CompareError::BadValue(side));
        }
        let mut units: Vec<Vec<f64>> = units
            .iter()
            .map(|u| {
                let mut u = u.clone();
                u.sort_by(f64::total_cmp);
                u
            })
            .collect();
        units.sort_by(|a, b| {
            a.iter()
                .zip(b)
                .map(|(x, y)| x.total_cmp(y))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| a.len().cmp(&b.len()))
        });
        Ok(Self { units, statistic })
    }

    /// Units (requests).
    pub fn len(&self) -> usize {
        self.units.len()
    }

    /// Whether there are no units (never true of a built sample).
    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The statistic of the whole sample.
    pub fn value(&self) -> Option<f64> {
        let idx: Vec<usize> = (0..self.units.len()).collect();
        self.of(&idx, &mut Vec::new())
    }

    /// The statistic of the units at `idx` (sorted ascending); `pool` is scratch space.
    fn of(&self, idx: &[usize], pool: &mut Vec<f64>) -> Option<f64> {
        match self.statistic {
            Statistic::Percentile(p) => {
                pool.clear();
                pool.extend(idx.iter().flat_map(|&i| self.units[i].iter().copied()));
                // Scalar units in canonical order drawn in index order are already sorted; the
                // sort is then one linear pass.
                pool.sort_by(f64::total_cmp);
                percentile_sorted(pool, p)
            }
            Statistic::Rate { duration_s } => {
                let sum: f64 = idx.iter().flat_map(|&i| self.units[i].iter()).sum();
                Some(sum / duration_s)
            }
        }
    }
}

/// Bootstrap settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bootstrap {
    /// Rounds (B).
    pub resamples: u32,
    /// Seed of the resampling.
    pub seed: u64,
    /// Threshold as a fraction: 0.05 is 5%.
    pub threshold: f64,
}

impl Default for Bootstrap {
    fn default() -> Self {
        Self {
            resamples: 2000,
            seed: 0,
            threshold: 0.05,
        }
    }
}

/// A comparison of one statistic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// BASE's statistic.
    pub base: f64,
    /// NEW's statistic.
    pub new: f64,
    /// NEW / BASE.
    pub ratio: f64,
    /// Lower end of the 95% interval of the ratio.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// The verdict.
    pub verdict: Verdict,
}

/// The verdict of an interval `[lo, hi]` of NEW/BASE against the threshold `t` (a fraction).
pub fn verdict(lo: f64, hi: f64, t: f64, dir: Direction) -> Verdict {
    let (low, high) = (1.0 - t, 1.0 + t);
    if lo >= low && hi <= high {
        Verdict::Same
    } else if hi < low {
        match dir {
            Direction::LowerIsBetter => Verdict::Better,
            Direction::HigherIsBetter => Verdict::Worse,
        }
    } else if lo > high {
        match dir {
            Direction::LowerIsBetter => Verdict::Worse,
            Direction::HigherIsBetter => Verdict::Better,
        }
    } else {
        Verdict::Unclear
    }
}

/// Compare NEW with BASE: the ratio of their statistics, its percentile-bootstrap interval and the
/// verdict. Deterministic for a given seed; never NaN (an undefined ratio is an error).
pub fn compare(
    base: &Sample,
    new: &Sample,
    dir: Direction,
    b: &Bootstrap,
) -> Result<Comparison, CompareError> {
    if b.resamples == 0 {
        return Err(CompareError::BadSettings("0 resamples".into()));
    }
    if !(b.threshold.is_finite() && b.threshold > 0.0 && b.threshold < 1.0) {
        return Err(CompareError::BadSettings(format!(
            "threshold {} is not in (0, 1)",
            b.threshold
        )));
    }
    let (Some(bv), Some(nv)) = (base.value(), new.value()) else {
        return Err(CompareError::Empty("a side"));
    };
    if bv <= 0.0 {
        return Err(CompareError::ZeroBase);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(b.seed);
    let mut pool = Vec::new();
    let mut ib = vec![0usize; base.len()];
    let mut inew = vec![0usize; new.len()];
    let mut ratios = Vec::with_capacity(b.resamples as usize);
    for _ in 0..b.resamples {
        for i in ib.iter_mut() {
            *i = rng.random_range(0..base.len());
        }
        for i in inew.iter_mut() {
            *i = rng.random_range(0..new.len());
        }
        ib.sort_unstable();
        inew.sort_unstable();
        let (Some(sb), Some(sn)) = (base.of(&ib, &mut pool), new.of(&inew, &mut pool)) else {
            // A resample drew only units without values: its statistic is undefined.
            return Err(CompareError::Empty("a resample"));
        };
        if sb <= 0.0 {
            return Err(CompareError::ZeroBase);
        }
        ratios.push(sn / sb);
    }
    ratios.sort_by(f64::total_cmp);
    let lo = percentile_sorted(&ratios, 2.5).ok_or(CompareError::ZeroBase)?;
    let hi = percentile_sorted(&ratios, 97.5).ok_or(CompareError::ZeroBase)?;
    Ok(Comparison {
        base: bv,
        new: nv,
        ratio: nv / bv,
        lo,
        hi,
        verdict: verdict(lo, hi, b.threshold, dir),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const P50: Statistic = Statistic::Percentile(50.0);

    fn cmp(
        base: &[f64],
        new: &[f64],
        dir: Direction,
        seed: u64,
    ) -> Result<Comparison, CompareError> {
        let b = Bootstrap {
            resamples: 300,
            seed,
            threshold: 0.05,
        };
        compare(
            &Sample::scalar("BASE", base, P50)?,
            &Sample::scalar("NEW", new, P50)?,
            dir,
            &b,
        )
    }

    fn values() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(1.0f64..1000.0, 1..40)
    }

    #[test]
    fn verdicts_follow_the_interval_and_the_direction() {
        use Direction::*;
        assert_eq!(verdict(0.97, 1.04, 0.05, LowerIsBetter), Verdict::Same);
        assert_eq!(verdict(0.80, 0.90, 0.05, LowerIsBetter), Verdict::Better);
        assert_eq!(verdict(0.80, 0.90, 0.05, HigherIsBetter), Verdict::Worse);
        assert_eq!(verdict(1.10, 1.20, 0.05, LowerIsBetter), Verdict::Worse);
        assert_eq!(verdict(1.10, 1.20, 0.05, HigherIsBetter), Verdict::Better);
        assert_eq!(verdict(0.90, 1.02, 0.05, HigherIsBetter), Verdict::Unclear);
        assert_eq!(verdict(0.94, 1.06, 0.05, HigherIsBetter), Verdict::Unclear);
    }

    #[test]
    fn empty_and_bad_inputs_are_errors() {
        assert_eq!(
            Sample::scalar("BASE", &[], P50),
            Err(CompareError::Empty("BASE"))
        );
        assert_eq!(
            Sample::scalar("NEW", &[1.0, f64::NAN], P50),
            Err(CompareError::BadValue("NEW"))
        );
        assert!(Sample::scalar("NEW", &[1.0], Statistic::Percentile(101.0)).is_err());
        assert!(Sample::scalar("NEW", &[1.0], Statistic::Rate { duration_s: 0.0 }).is_err());
        assert_eq!(
            cmp(&[0.0, 0.0], &[1.0], Direction::LowerIsBetter, 1),
            Err(CompareError::ZeroBase)
        );
        let s = Sample::scalar("BASE", &[1.0], P50).unwrap();
        for threshold in [0.0, -0.1, f64::NAN, 1.0] {
            let b = Bootstrap {
                threshold,
                ..Bootstrap::default()
            };
            assert!(compare(&s, &s, Direction::LowerIsBetter, &b).is_err());
        }
    }

    #[test]
    fn a_clear_shift_is_a_verdict() {
        let base: Vec<f64> = (0..50).map(|i| 100.0 + f64::from(i % 7)).collect();
        let slow: Vec<f64> = base.iter().map(|v| v * 1.15).collect();
        assert_eq!(
            cmp(&base, &slow, Direction::LowerIsBetter, 3)
                .unwrap()
                .verdict,
            Verdict::Worse
        );
        assert_eq!(
            cmp(&base, &slow, Direction::HigherIsBetter, 3)
                .unwrap()
                .verdict,
            Verdict::Better
        );
    }

    #[test]
    fn rates_resample_requests_over_a_fixed_duration() {
        let tokens = [10.0, 12.0, 11.0, 9.0, 10.0, 0.0, 10.0, 11.0];
        let base = Sample::scalar("BASE", &tokens, Statistic::Rate { duration_s: 2.0 }).unwrap();
        let new = Sample::scalar("NEW", &tokens, Statistic::Rate { duration_s: 1.0 }).unwrap();
        let c = compare(
            &base,
            &new,
            Direction::HigherIsBetter,
            &Bootstrap::default(),
        )
        .unwrap();
        assert_eq!(c.base, 36.5);
        assert_eq!(c.ratio, 2.0);
        assert!(c.lo <= 2.0 && 2.0 <= c.hi);
        assert_eq!(c.verdict, Verdict::Better);
    }

    #[test]
    fn clustered_units_pool_their_values() {
        let units = vec![vec![1.0, 2.0], vec![3.0], vec![]];
        let s = Sample::clustered("BASE", &units, Statistic::Percentile(100.0)).unwrap();
        assert_eq!(s.value(), Some(3.0));
        assert_eq!(s.len(), 3);
        assert!(Sample::clustered("BASE", &[vec![], vec![]], P50).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn the_result_does_not_depend_on_input_order(
            base in values(), new in values(), seed in any::<u64>(), rot in 0usize..40
        ) {
            let a = cmp(&base, &new, Direction::LowerIsBetter, seed);
            let mut b2 = base.clone();
            b2.reverse();
            let mut n2 = new.clone();
            let r = rot % n2.len();
            n2.rotate_left(r);
            prop_assert_eq!(a, cmp(&b2, &n2, Direction::LowerIsBetter, seed));
        }

        #[test]
        fn a_constant_shift_is_the_ratio_and_inside_the_interval(
            base in values(), x in -0.5f64..0.5, seed in any::<u64>()
        ) {
            let new: Vec<f64> = base.iter().map(|v| v * (1.0 + x)).collect();
            let c = cmp(&base, &new, Direction::LowerIsBetter, seed).unwrap();
            let want = 1.0 + x;
            prop_assert!((c.ratio - want).abs() <= 1e-9 * want, "{c:?}");
            prop_assert!(c.lo <= want * (1.0 + 1e-9) && want <= c.hi * (1.0 + 1e-9), "{c:?} {want}");
        }

        #[test]
        fn identical_inputs_are_the_same(
            base in prop::collection::vec(100.0f64..104.0, 1..40), seed in any::<u64>()
        ) {
            // Every resample's median lies in [100, 104), so every ratio lies within 4%.
            let c = cmp(&base, &base, Direction::HigherIsBetter, seed).unwrap();
            prop_assert_eq!(c.ratio, 1.0);
            prop_assert_eq!(c.verdict, Verdict::Same);
        }

        #[test]
        fn identical_inputs_never_look_worse_or_better(base in values(), seed in any::<u64>()) {
            let c = cmp(&base, &base, Direction::LowerIsBetter, seed).unwrap();
            prop_assert_eq!(c.ratio, 1.0);
            prop_assert!(c.lo <= 1.0 && 1.0 <= c.hi, "{c:?}");
            prop_assert!(matches!(c.verdict, Verdict::Same | Verdict::Unclear));
        }

        #[test]
        fn never_nan(
            base in prop::collection::vec(0.0f64..1e9, 0..20),
            new in prop::collection::vec(0.0f64..1e9, 0..20),
            p in 0.0f64..=100.0, seed in any::<u64>()
        ) {
            let st = Statistic::Percentile(p);
            let b = Bootstrap { resamples: 50, seed, threshold: 0.05 };
            let r = Sample::scalar("BASE", &base, st).and_then(|s| {
                compare(&s, &Sample::scalar("NEW", &new, st)?, Direction::HigherIsBetter, &b)
            });
            if let Ok(c) = r {
                for v in [c.base, c.new, c.ratio, c.lo, c.hi] {
                    prop_assert!(v.is_finite(), "{c:?}");
                }
                prop_assert!(c.lo <= c.hi);
            } else {
                prop_assert!(base.is_empty() || new.is_empty() || base.iter().all(|&v| v == 0.0) || base.contains(&0.0));
            }
        }
    }
}
