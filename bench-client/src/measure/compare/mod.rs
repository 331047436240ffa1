//! Comparing two runs: the ratio NEW/BASE of one statistic, its 95% interval from a seeded
//! percentile bootstrap, and a verdict against a threshold.
//!
//! Method: the percentile interval of the bootstrap (Efron & Tibshirani, "An Introduction to the
//! Bootstrap", Chapman & Hall 1993, ch. 13). Each of B rounds draws a resample of BASE and one of
//! NEW, each with replacement and of its own size, computes the statistic of each and their ratio;
//! the interval is the 2.5th and 97.5th percentile of the B ratios ([`super::percentile`], type 7).
//! The two sides are resampled independently: two runs are two independent samples, not pairs.
//!
//! A unit is one request. It carries one value (a request's TTFT) or several (its inter-chunk
//! gaps): resampling requests, not gaps, keeps a request's correlated gaps together (a cluster
//! bootstrap).
//!
//! A side of several runs (repeats of one setup) is resampled in two stages (Davison & Hinkley,
//! "Bootstrap Methods and their Application", Cambridge 1997, section 3.8): R - 1 of its R runs
//! are drawn with replacement, then each drawn run's requests. The interval then carries the
//! run-to-run variance too (a warmer machine, another neighbour), which every request of one run
//! shares and no resample of one run's requests can show. Drawing R - 1 rather than R runs is the
//! with-replacement bootstrap of survey sampling (McCarthy & Snowden, "The bootstrap and finite
//! population sampling", NCHS 1985; Rao & Wu, JASA 1988): the variance of a mean over the drawn
//! runs is then the unbiased between-run variance, where R draws understate it by (R - 1) / R,
//! which matters at the two or three runs a side that repeats usually have. A throughput is one number per run: with
//! one run on either side its interval covers only the request mix, so its verdict is `unclear`.
//!
//! Each run's units, and each side's runs, are put in a canonical order first, so the result does
//! not depend on the order of the input, only on the values and the seed.

use std::cmp::Ordering;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::percentile::percentile_sorted;

/// The statistic of one side.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Statistic {
    /// The `p`th percentile (0..=100) of all the units' values pooled.
    Percentile(f64),
    /// The sum of all values divided by the sum of the runs' durations: a throughput. Each run's
    /// duration is its own and travels with it when runs are resampled; within a run it is held
    /// fixed.
    Rate,
    /// A ratio of totals over the drawn units, each unit `[numerator, denominator]`: the sum of
    /// the numerators over the sum of the denominators (cached over prompt tokens). A request is
    /// resampled with its own pair, as a unit's gaps are kept together.
    RatioOfSums,
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

/// One run of a side: its units (requests) and, for throughputs, its duration.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    units: Vec<Vec<f64>>,
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

/// Lexicographic order of two sorted value lists, then by length.
fn cmp_values(a: &[f64], b: &[f64]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.total_cmp(y))
        .find(|o| o.is_ne())
        .unwrap_or_else(|| a.len().cmp(&b.len()))
}

/// One side of a comparison: its runs in canonical order and its statistic.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    runs: Vec<Run>,
    statistic: Statistic,
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
            if !(0.0..=100.0).contains(&p) {
                return Err(CompareError::BadStatistic(format!("percentile {p}")));
            }
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
        Ok(Self { runs, statistic })
    }

    /// Units (requests) over all runs.
    pub fn len(&self) -> usize {
        self.runs.iter().map(|r| r.units.len()).sum()
    }

    /// Whether there are no units (never true of a built sample).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The statistic of the whole sample.
    pub fn value(&self) -> Option<f64> {
        let draws: Vec<(usize, usize)> = self
            .runs
            .iter()
            .enumerate()
            .flat_map(|(r, run)| (0..run.units.len()).map(move |u| (r, u)))
            .collect();
        let runs: Vec<usize> = (0..self.runs.len()).collect();
        self.of(&draws, &runs, &mut Vec::new())
    }

    /// One resample into `draws` (run, unit) and `drawn` (runs, with repeats): with one run its
    /// units; with R > 1, R - 1 runs first, then each drawn run's units.
    fn resample(
        &self,
        rng: &mut ChaCha8Rng,
        draws: &mut Vec<(usize, usize)>,
        drawn: &mut Vec<usize>,
    ) {
        draws.clear();
        drawn.clear();
        let n = self.runs.len();
        if n == 1 {
            drawn.push(0);
        } else {
            drawn.extend((1..n).map(|_| rng.random_range(0..n)));
        }
        for &r in drawn.iter() {
            let k = self.runs[r].units.len();
            draws.extend((0..k).map(|_| (r, rng.random_range(0..k))));
        }
        draws.sort_unstable();
    }

    /// The statistic of the units at `draws` (sorted ascending) of the runs `drawn`; `pool` is
    /// scratch space.
    fn of(&self, draws: &[(usize, usize)], drawn: &[usize], pool: &mut Vec<f64>) -> Option<f64> {
        let values = draws
            .iter()
            .flat_map(|&(r, u)| self.runs[r].units[u].iter().copied());
        match self.statistic {
            Statistic::Percentile(p) => {
                pool.clear();
                pool.extend(values);
                // Scalar units of one run in canonical order drawn in index order are already
                // sorted; the sort is then one linear pass.
                pool.sort_by(f64::total_cmp);
                percentile_sorted(pool, p)
            }
            Statistic::Rate => {
                let sum: f64 = values.sum();
                let duration: f64 = drawn
                    .iter()
                    .map(|&r| self.runs[r].duration_s.unwrap_or(0.0))
                    .sum();
                (duration > 0.0).then(|| sum / duration)
            }
            Statistic::RatioOfSums => {
                let (num, den) = draws
                    .iter()
                    .map(|&(r, u)| &self.runs[r].units[u])
                    .fold((0.0, 0.0), |(n, d), u| (n + u[0], d + u[1]));
                (den > 0.0).then(|| num / den)
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
    /// Runs on BASE's side.
    pub base_runs: usize,
    /// Runs on NEW's side.
    pub new_runs: usize,
    /// The verdict.
    pub verdict: Verdict,
}

impl Comparison {
    /// Whether the interval carries the run-to-run variance of both sides (each has several runs).
    pub fn across_runs(&self) -> bool {
        self.base_runs > 1 && self.new_runs > 1
    }
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
/// verdict. Deterministic for a given seed; never NaN (an undefined ratio is an error). A rate
/// with one run on either side is `unclear` whatever its interval: one run is one throughput.
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
    let (mut db, mut dn) = (Vec::new(), Vec::new());
    let (mut rb, mut rn) = (Vec::new(), Vec::new());
    let mut ratios = Vec::with_capacity(b.resamples as usize);
    for _ in 0..b.resamples {
        base.resample(&mut rng, &mut db, &mut rb);
        new.resample(&mut rng, &mut dn, &mut rn);
        let (Some(sb), Some(sn)) = (base.of(&db, &rb, &mut pool), new.of(&dn, &rn, &mut pool))
        else {
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
    let one_run = base.runs() < 2 || new.runs() < 2;
    let verdict = match base.statistic {
        Statistic::Rate if one_run => Verdict::Unclear,
        _ => verdict(lo, hi, b.threshold, dir),
    };
    Ok(Comparison {
        base: bv,
        new: nv,
        ratio: nv / bv,
        lo,
        hi,
        base_runs: base.runs(),
        new_runs: new.runs(),
        verdict,
    })
}

#[cfg(test)]
mod tests;
