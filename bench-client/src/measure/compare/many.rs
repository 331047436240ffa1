//! Many comparisons at once, each exactly as [`super::compare`] alone would give it: statistics
//! whose sides have the same shape draw the same resamples from the seed, so a group of them draws
//! once and evaluates each statistic on that draw (a load run's TTFT, inter-chunk and end-to-end
//! percentiles share one), and the rounds of a batch are evaluated on all cores.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::sample::Draw;
use super::{verdict, Bootstrap, CompareError, Comparison, Direction, Sample, Statistic, Verdict};
use crate::measure::percentile::percentile_sorted;

/// One comparison to make: BASE's and NEW's sample of one statistic, and which way is better.
#[derive(Clone, Copy, Debug)]
pub struct Pair<'a> {
    /// BASE's side.
    pub base: &'a Sample,
    /// NEW's side.
    pub new: &'a Sample,
    /// Which way is better.
    pub direction: Direction,
}

/// Rounds drawn before they are evaluated together.
const BATCH: usize = 64;

/// Values evaluated per round below which one thread does the batch.
const PARALLEL_FROM: usize = 20_000;

/// One round's outcome for one pair: the ratio NEW/BASE, or why it is undefined.
fn ratio(p: &Pair, db: &Draw, dn: &Draw) -> Result<f64, CompareError> {
    let (Some(sb), Some(sn)) = (p.base.of(db), p.new.of(dn)) else {
        // A resample drew only units without values: its statistic is undefined.
        return Err(CompareError::Empty("a resample"));
    };
    if sb <= 0.0 {
        return Err(CompareError::ZeroBase);
    }
    Ok(sn / sb)
}

/// The outcomes of `rounds` for every pair of a group: one list per round.
fn evaluate(pairs: &[Pair], rounds: &[(Draw, Draw)]) -> Vec<Vec<Result<f64, CompareError>>> {
    let per_round: usize = pairs.iter().map(|p| p.base.values() + p.new.values()).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(rounds.len().max(1));
    let one = |chunk: &[(Draw, Draw)]| -> Vec<Vec<Result<f64, CompareError>>> {
        chunk
            .iter()
            .map(|(db, dn)| pairs.iter().map(|p| ratio(p, db, dn)).collect())
            .collect()
    };
    if threads < 2 || per_round < PARALLEL_FROM {
        return one(rounds);
    }
    let size = rounds.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = rounds
            .chunks(size)
            .map(|chunk| s.spawn(move || one(chunk)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The interval and verdict of a pair from its ratios.
fn finish(
    p: &Pair,
    (bv, nv): (f64, f64),
    mut ratios: Vec<f64>,
    b: &Bootstrap,
) -> Result<Comparison, CompareError> {
    ratios.sort_by(f64::total_cmp);
    let lo = percentile_sorted(&ratios, 2.5).ok_or(CompareError::ZeroBase)?;
    let hi = percentile_sorted(&ratios, 97.5).ok_or(CompareError::ZeroBase)?;
    let one_run = p.base.runs() < 2 || p.new.runs() < 2;
    let verdict = match p.base.statistic() {
        Statistic::Rate if one_run => Verdict::Unclear,
        _ => verdict(lo, hi, b.threshold, p.direction),
    };
    Ok(Comparison {
        base: bv,
        new: nv,
        ratio: nv / bv,
        lo,
        hi,
        base_runs: p.base.runs(),
        new_runs: p.new.runs(),
        verdict,
    })
}

/// Compare each pair as [`super::compare`] does, in the order given. `progress` is told the
/// rounds done and the rounds in all (one round draws each side of a group once).
pub fn compare_many(
    pairs: &[Pair],
    b: &Bootstrap,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Vec<Result<Comparison, CompareError>> {
    let settings = if b.resamples == 0 {
        Err(CompareError::BadSettings("0 resamples".into()))
    } else if !(b.threshold.is_finite() && b.threshold > 0.0 && b.threshold < 1.0) {
        Err(CompareError::BadSettings(format!(
            "threshold {} is not in (0, 1)",
            b.threshold
        )))
    } else {
        Ok(())
    };
    let mut out: Vec<Option<Result<Comparison, CompareError>>> = vec![None; pairs.len()];
    let mut values = vec![(0.0, 0.0); pairs.len()];
    let mut groups: BTreeMap<(Vec<usize>, Vec<usize>), Vec<usize>> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if let Err(e) = &settings {
            out[i] = Some(Err(e.clone()));
            continue;
        }
        match (p.base.value(), p.new.value()) {
            (Some(bv), Some(_)) if bv <= 0.0 => out[i] = Some(Err(CompareError::ZeroBase)),
            (Some(bv), Some(nv)) => {
                values[i] = (bv, nv);
                groups
                    .entry((p.base.shape(), p.new.shape()))
                    .or_default()
                    .push(i);
            }
            _ => out[i] = Some(Err(CompareError::Empty("a side"))),
        }
    }
    let total = groups.len() as u64 * u64::from(b.resamples);
    let mut done = 0u64;
    for members in groups.values() {
        let group: Vec<Pair> = members.iter().map(|&i| pairs[i]).collect();
        let (base, new) = (group[0].base, group[0].new);
        let mut rng = ChaCha8Rng::seed_from_u64(b.seed);
        let mut ratios: Vec<Result<Vec<f64>, CompareError>> =
            vec![Ok(Vec::with_capacity(b.resamples as usize)); group.len()];
        let mut left = b.resamples as usize;
        let mut rounds: Vec<(Draw, Draw)> = Vec::new();
        while left > 0 {
            let n = left.min(BATCH);
            rounds.resize_with(n, Default::default);
            for (db, dn) in &mut rounds {
                base.resample(&mut rng, db);
                new.resample(&mut rng, dn);
            }
            for round in evaluate(&group, &rounds) {
                for (acc, r) in ratios.iter_mut().zip(round) {
                    // The first undefined round decides, as a comparison alone stops at it.
                    if let Ok(list) = acc {
                        match r {
                            Ok(x) => list.push(x),
                            Err(e) => *acc = Err(e),
                        }
                    }
                }
            }
            left -= n;
            done += n as u64;
            progress(done, total);
        }
        for ((&i, p), r) in members.iter().zip(&group).zip(ratios) {
            out[i] = Some(r.and_then(|list| finish(p, values[i], list, b)));
        }
    }
    out.into_iter()
        .map(|o| o.unwrap_or(Err(CompareError::Empty("a side"))))
        .collect()
}
