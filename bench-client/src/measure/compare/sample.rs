//! One side of a comparison: its runs in canonical order, and the statistic of a resample given
//! as draw counts (how often each unit was drawn), never as a list of drawn values to sort.
//!
//! A resample of n units is n draws with replacement; what the statistic needs of it is how often
//! each unit was drawn. A percentile of the pooled values is then found by walking the side's
//! values, sorted once when the sample is built, and summing each value's count up to the rank
//! the percentile needs (from the nearer end: p50 walks half the values, p99 a hundredth), where
//! sorting each resample's pool cost O(v log v) for v pooled values. A rate or a ratio of sums adds
//! each unit's values as often as it was drawn, in unit order, which is the order the sorted draws
//! gave, so the floating-point sums are the same to the bit.

use std::cmp::Ordering;
use std::sync::Arc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::{CompareError, Statistic};

/// One run of a side: its units (requests) and, for throughputs, its duration.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub(super) units: Vec<Vec<f64>>,
    duration_s: Option<f64>,
}

impl Run {
    /// One value per unit.
    pub fn scalar(values: &[f64]) -> Self {
        Self::clustered(values.iter().map(|&v| vec![v]).collect())
    }

    /// Several values per unit (a request's gaps); units without values still count as units
    /// (they are drawn, and add nothing).
    pub fn clustered(units: Vec<Vec<f64>>) -> Self {
        Self {
            units,
            duration_s: None,
        }
    }

    /// The run's duration in seconds, which [`Statistic::Rate`] divides by.
    pub fn lasting(mut self, duration_s: f64) -> Self {
        self.duration_s = Some(duration_s);
        self
    }
}

/// A percentile is a number from 0 to 100.
fn check_percentile(p: f64) -> Result<(), CompareError> {
    match (0.0..=100.0).contains(&p) {
        true => Ok(()),
        false => Err(CompareError::BadStatistic(format!("percentile {p}"))),
    }
}

/// Lexicographic order of two sorted value lists, then by length.
fn cmp_values(a: &[f64], b: &[f64]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.total_cmp(y))
        .find(|o| o.is_ne())
        .unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// One resample: how often each unit (numbered over all runs in order) was drawn, and the runs
/// drawn (with repeats, in the order drawn).
#[derive(Clone, Debug, Default)]
pub(super) struct Draw {
    pub counts: Vec<u32>,
    pub runs: Vec<usize>,
}

/// One side of a comparison: its runs in canonical order and its statistic.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    runs: Vec<Run>,
    statistic: Statistic,
    /// The number of the first unit of each run.
    first: Vec<usize>,
    /// Values per unit.
    lens: Vec<u32>,
    /// Percentiles: every value with its unit's number, sorted by value (shared by the samples
    /// of one set of values at several percentiles, [`Sample::at`]). A percentile sample's units
    /// keep no values of their own: `lens` and this are all it reads.
    pooled: Arc<[(f64, u32)]>,
}

impl Sample {
    /// One run, one value per unit.
    pub fn scalar(
        side: &'static str,
        values: &[f64],
        statistic: Statistic,
    ) -> Result<Self, CompareError> {
        Self::new(side, vec![Run::scalar(values)], statistic)
    }

    /// One run, several values per unit.
    pub fn clustered(
        side: &'static str,
        units: &[Vec<f64>],
        statistic: Statistic,
    ) -> Result<Self, CompareError> {
        Self::new(side, vec![Run::clustered(units.to_vec())], statistic)
    }

    /// A side of one or more runs. Runs without units are left out; a side with no values at all,
    /// a value that is not a finite non-negative number, or (for a rate) a run without a positive
    /// duration is refused.
    pub fn new(
        side: &'static str,
        runs: Vec<Run>,
        statistic: Statistic,
    ) -> Result<Self, CompareError> {
        if let Statistic::Percentile(p) = statistic {
            check_percentile(p)?;
        }
        let mut runs: Vec<Run> = runs.into_iter().filter(|r| !r.units.is_empty()).collect();
        if runs.iter().flat_map(|r| &r.units).all(Vec::is_empty) {
            return Err(CompareError::Empty(side));
        }
        if runs
            .iter()
            .flat_map(|r| r.units.iter().flatten())
            .any(|v| !(v.is_finite() && *v >= 0.0))
        {
            return Err(CompareError::BadValue(side));
        }
        if statistic == Statistic::RatioOfSums {
            if let Some(u) = runs.iter().flat_map(|r| &r.units).find(|u| u.len() != 2) {
                return Err(CompareError::BadStatistic(format!(
                    "{side}: a ratio's unit has {} values, not [numerator, denominator]",
                    u.len()
                )));
            }
        }
        if statistic == Statistic::Rate {
            if let Some(d) = runs
                .iter()
                .map(|r| r.duration_s.unwrap_or(f64::NAN))
                .find(|d| !(d.is_finite() && *d > 0.0))
            {
                return Err(CompareError::BadStatistic(format!(
                    "{side}: a run's duration is {d} s"
                )));
            }
        }
        let units: usize = runs.iter().map(|r| r.units.len()).sum();
        if units > u32::MAX as usize {
            return Err(CompareError::BadStatistic(format!(
                "{side}: {units} units are more than can be counted"
            )));
        }
        for r in &mut runs {
            // A ratio's pair is ordered (numerator first); any other unit's values are a set.
            if statistic != Statistic::RatioOfSums {
                for u in &mut r.units {
                    u.sort_by(f64::total_cmp);
                }
            }
            r.units.sort_by(|a, b| cmp_values(a, b));
        }
        runs.sort_by(|a, b| {
            a.units
                .iter()
                .zip(&b.units)
                .map(|(x, y)| cmp_values(x, y))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| a.units.len().cmp(&b.units.len()))
                .then_with(|| {
                    let d = |r: &Run| r.duration_s.unwrap_or(0.0);
                    d(a).total_cmp(&d(b))
                })
        });
        let mut first = Vec::with_capacity(runs.len());
        let mut lens = Vec::with_capacity(units);
        let mut pooled = Vec::new();
        let percentile = matches!(statistic, Statistic::Percentile(_));
        for r in &mut runs {
            first.push(lens.len());
            for u in &mut r.units {
                let id = lens.len() as u32;
                lens.push(u.len() as u32);
                if percentile {
                    pooled.extend(u.iter().map(|&v| (v, id)));
                    *u = Vec::new();
                }
            }
        }
        pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(Self {
            runs,
            statistic,
            first,
            lens,
            pooled: pooled.into(),
        })
    }

    /// The same values at percentile `p` (a percentile sample's values are shared, not copied).
    pub fn at(self, p: f64) -> Result<Self, CompareError> {
        if !matches!(self.statistic, Statistic::Percentile(_)) {
            return Err(CompareError::BadStatistic(format!(
                "percentile {p} of a sample of {:?}",
                self.statistic
            )));
        }
        check_percentile(p)?;
        Ok(Self {
            statistic: Statistic::Percentile(p),
            ..self
        })
    }

    /// Units (requests) over all runs.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// Whether there are no units (never true of a built sample).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The statistic.
    pub fn statistic(&self) -> Statistic {
        self.statistic
    }

    /// The units of each run: samples of the same shape draw the same resamples from one seed.
    pub(super) fn shape(&self) -> Vec<usize> {
        self.runs.iter().map(|r| r.units.len()).collect()
    }

    /// Values over all units.
    pub(super) fn values(&self) -> usize {
        self.lens.iter().map(|&l| l as usize).sum()
    }

    /// The statistic of the whole sample.
    pub fn value(&self) -> Option<f64> {
        let draw = Draw {
            counts: vec![1; self.len()],
            runs: (0..self.runs.len()).collect(),
        };
        self.of(&draw)
    }

    /// One resample into `draw`: with one run its units; with R > 1, R - 1 runs first, then each
    /// drawn run's units. The random stream is the same for samples of the same shape.
    pub(super) fn resample(&self, rng: &mut ChaCha8Rng, draw: &mut Draw) {
        draw.counts.clear();
        draw.counts.resize(self.len(), 0);
        draw.runs.clear();
        let n = self.runs.len();
        if n == 1 {
            draw.runs.push(0);
        } else {
            draw.runs.extend((1..n).map(|_| rng.random_range(0..n)));
        }
        for &r in &draw.runs {
            let k = self.runs[r].units.len();
            let first = self.first[r];
            for _ in 0..k {
                draw.counts[first + rng.random_range(0..k)] += 1;
            }
        }
    }

    /// The statistic of the resample `draw`.
    pub(super) fn of(&self, draw: &Draw) -> Option<f64> {
        match self.statistic {
            Statistic::Percentile(p) => self.percentile(&draw.counts, p),
            Statistic::Rate => {
                let sum = self.drawn_units(&draw.counts).flatten().sum::<f64>();
                let duration: f64 = draw
                    .runs
                    .iter()
                    .map(|&r| self.runs[r].duration_s.unwrap_or(0.0))
                    .sum();
                (duration > 0.0).then(|| sum / duration)
            }
            Statistic::RatioOfSums => {
                let (num, den) = self
                    .drawn_units(&draw.counts)
                    .fold((0.0, 0.0), |(n, d), u| (n + u[0], d + u[1]));
                (den > 0.0).then(|| num / den)
            }
        }
    }

    /// Each unit as often as it was drawn, in unit order.
    fn drawn_units<'a>(&'a self, counts: &'a [u32]) -> impl Iterator<Item = &'a Vec<f64>> + 'a {
        self.runs
            .iter()
            .flat_map(|r| &r.units)
            .zip(counts)
            .flat_map(|(u, &c)| std::iter::repeat_n(u, c as usize))
    }

    /// The `p`th percentile (type 7, as [`super::super::percentile`]) of the values pooled with
    /// their units' counts: the values at ranks floor(h) and ceil(h), h = (N - 1) p / 100, found by
    /// summing counts from the nearer end of the sorted values.
    fn percentile(&self, counts: &[u32], p: f64) -> Option<f64> {
        let n: u64 = self
            .lens
            .iter()
            .zip(counts)
            .map(|(&l, &c)| u64::from(l) * u64::from(c))
            .sum();
        if n == 0 {
            return None;
        }
        let h = (n - 1) as f64 * p / 100.0;
        let (lo, hi) = (h.floor() as u64, h.ceil() as u64);
        let weight = |&(_, u): &(f64, u32)| u64::from(counts[u as usize]);
        // The values at ranks `lo` and `hi` of the values taken in `order`.
        fn at<'a>(
            order: impl Iterator<Item = &'a (f64, u32)>,
            weight: impl Fn(&(f64, u32)) -> u64,
            lo: u64,
            hi: u64,
        ) -> Option<(f64, f64)> {
            let mut seen = 0u64;
            let mut low = None;
            for e in order {
                seen += weight(e);
                if low.is_none() && seen > lo {
                    low = Some(e.0);
                }
                if seen > hi {
                    return Some((low.unwrap_or(e.0), e.0));
                }
            }
            None
        }
        let (vlo, vhi) = if lo < n / 2 {
            at(self.pooled.iter(), weight, lo, hi)?
        } else {
            // From the top: rank r from below is rank n - 1 - r from above.
            let (a, b) = at(self.pooled.iter().rev(), weight, n - 1 - hi, n - 1 - lo)?;
            (b, a)
        };
        let x = vlo + (h - lo as f64) * (vhi - vlo);
        Some(x.clamp(vlo, vhi))
    }
}

#[cfg(test)]
mod tests {
    //! The counts against the plain method they replace: drawing (run, unit) pairs, sorting them,
    //! pooling the drawn values and sorting the pool.
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::measure::percentile::percentile_sorted;

    /// The plain resample and statistic, from the same random stream.
    fn plain(s: &Sample, rng: &mut ChaCha8Rng) -> Option<f64> {
        let n = s.runs.len();
        let drawn: Vec<usize> = if n == 1 {
            vec![0]
        } else {
            (1..n).map(|_| rng.random_range(0..n)).collect()
        };
        let mut draws = Vec::new();
        for &r in &drawn {
            let k = s.runs[r].units.len();
            draws.extend((0..k).map(|_| (r, rng.random_range(0..k))));
        }
        draws.sort_unstable();
        let units = || draws.iter().map(|&(r, u)| &s.runs[r].units[u]);
        match s.statistic {
            Statistic::Percentile(p) => {
                // A percentile sample keeps its units' values in the pool alone.
                let of_unit = |id: usize| {
                    s.pooled
                        .iter()
                        .filter(move |e| e.1 as usize == id)
                        .map(|e| e.0)
                };
                let mut pool: Vec<f64> = draws
                    .iter()
                    .flat_map(|&(r, u)| of_unit(s.first[r] + u))
                    .collect();
                pool.sort_by(f64::total_cmp);
                percentile_sorted(&pool, p)
            }
            Statistic::Rate => {
                let sum: f64 = units().flatten().sum();
                let d: f64 = drawn
                    .iter()
                    .map(|&r| s.runs[r].duration_s.unwrap_or(0.0))
                    .sum();
                (d > 0.0).then(|| sum / d)
            }
            Statistic::RatioOfSums => {
                let (a, b) = units().fold((0.0, 0.0), |(a, b), u| (a + u[0], b + u[1]));
                (b > 0.0).then(|| a / b)
            }
        }
    }

    fn runs() -> impl Strategy<Value = Vec<Vec<Vec<f64>>>> {
        let unit = prop::collection::vec(
            prop::sample::select(vec![0.0, 1.0, 2.5, 3.0, 7.0, 40.0]),
            0..5,
        );
        prop::collection::vec(prop::collection::vec(unit, 1..30), 1..4)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn counts_give_the_plain_method_to_the_bit(
            runs in runs(),
            p in prop::sample::select(vec![0.0, 2.5, 50.0, 90.0, 99.0, 100.0]),
            which in 0..3u8,
            seed in any::<u64>(),
        ) {
            let statistic = match which {
                0 => Statistic::Percentile(p),
                1 => Statistic::Rate,
                _ => Statistic::RatioOfSums,
            };
            let runs: Vec<Run> = runs
                .into_iter()
                .enumerate()
                .map(|(i, units)| {
                    let units = match statistic {
                        Statistic::RatioOfSums => units.into_iter().map(|u| vec![u.first().copied().unwrap_or(0.0), u.len() as f64]).collect(),
                        _ => units,
                    };
                    Run::clustered(units).lasting(1.0 + i as f64)
                })
                .collect();
            let Ok(s) = Sample::new("BASE", runs, statistic) else { return Ok(()) };
            let (mut a, mut b) = (ChaCha8Rng::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
            let mut draw = Draw::default();
            for _ in 0..5 {
                s.resample(&mut a, &mut draw);
                let fast = s.of(&draw);
                let slow = plain(&s, &mut b);
                prop_assert_eq!(fast.map(f64::to_bits), slow.map(f64::to_bits));
            }
        }
    }
}
