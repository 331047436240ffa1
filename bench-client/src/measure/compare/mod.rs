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
//!
//! A resample is kept as the count of draws of each unit (`sample`), and statistics whose sides
//! have the same shape (units per run) share their resamples (`many`): each would draw the same
//! ones from the same seed, so the result is the same as comparing each alone.

mod many;
mod sample;

pub use many::{compare_many, Pair};
pub use sample::{Run, Sample};

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
    let pair = Pair {
        base,
        new,
        direction: dir,
    };
    compare_many(&[pair], b, &|_, _| {})
        .pop()
        .unwrap_or(Err(CompareError::Empty("a side")))
}

#[cfg(test)]
mod tests;
