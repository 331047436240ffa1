//! The comparison's statistics: verdicts, errors, rates, repeats, and properties over inputs.

use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const P50: Statistic = Statistic::Percentile(50.0);

fn cmp(base: &[f64], new: &[f64], dir: Direction, seed: u64) -> Result<Comparison, CompareError> {
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
    for d in [0.0, -1.0, f64::NAN] {
        let run = Run::scalar(&[1.0]).lasting(d);
        assert!(
            Sample::new("NEW", vec![run], Statistic::Rate).is_err(),
            "{d}"
        );
    }
    assert!(Sample::scalar("NEW", &[1.0], Statistic::Rate).is_err());
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

fn rate(runs: &[(&[f64], f64)]) -> Sample {
    let runs = runs
        .iter()
        .map(|(v, d)| Run::scalar(v).lasting(*d))
        .collect();
    Sample::new("SIDE", runs, Statistic::Rate).unwrap()
}

/// NEW against BASE, higher is better, with the default bootstrap.
fn faster(base: &Sample, new: &Sample) -> Comparison {
    compare(base, new, Direction::HigherIsBetter, &Bootstrap::default()).unwrap()
}

#[test]
fn rates_of_one_run_resample_requests_over_its_duration_and_stay_unclear() {
    let tokens = [10.0, 12.0, 11.0, 9.0, 10.0, 0.0, 10.0, 11.0];
    let (base, new) = (rate(&[(&tokens, 2.0)]), rate(&[(&tokens, 1.0)]));
    let c = faster(&base, &new);
    assert_eq!(c.base, 36.5);
    assert_eq!(c.ratio, 2.0);
    assert!(c.lo <= 2.0 && 2.0 <= c.hi);
    assert!(c.lo > 1.05, "{c:?}");
    // One run is one throughput: twice as fast within the run's own mix, but no verdict.
    assert_eq!(c.verdict, Verdict::Unclear);
    assert!(!c.across_runs());
}

#[test]
fn rates_of_several_runs_pool_tokens_over_the_durations() {
    let t = [10.0, 10.0];
    let base = rate(&[(&t, 1.0), (&t, 1.0), (&t, 1.0)]);
    let new = rate(&[(&t, 0.5), (&t, 0.5), (&t, 0.5)]);
    let c = faster(&base, &new);
    assert_eq!((c.base, c.new, c.ratio), (20.0, 40.0, 2.0));
    assert_eq!((c.lo, c.hi), (2.0, 2.0));
    assert_eq!(c.verdict, Verdict::Better);
    assert!(c.across_runs());
    // Runs that differ in speed widen the interval of the same total.
    let noisy = rate(&[(&t, 0.3), (&t, 0.5), (&t, 0.7)]);
    let d = faster(&base, &noisy);
    assert_eq!(d.ratio, 2.0);
    assert!(d.lo < 1.8 && d.hi > 2.4, "{d:?}");
}

#[test]
fn drawing_one_run_fewer_gives_the_unbiased_between_run_variance() {
    // Three runs of one request each, lasting a second: the rate of a resample is the mean of
    // its drawn runs' values, whose variance should be the unbiased s^2 / R of a mean of R.
    let runs: Vec<Run> = [10.0, 14.0, 21.0]
        .iter()
        .map(|&v| Run::scalar(&[v]).lasting(1.0))
        .collect();
    let s = Sample::new("S", runs, Statistic::Rate).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut draw = sample::Draw::default();
    let n = 40_000;
    let xs: Vec<f64> = (0..n)
        .map(|_| {
            s.resample(&mut rng, &mut draw);
            s.of(&draw).unwrap()
        })
        .collect();
    let mean = xs.iter().sum::<f64>() / f64::from(n);
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / f64::from(n);
    // s^2 = ((10-15)^2 + (14-15)^2 + (21-15)^2) / 2 = 31; s^2 / 3 = 10.33.
    let want = 31.0 / 3.0;
    assert!(
        (var - want).abs() < 0.05 * want,
        "variance {var}, want {want}"
    );
    assert!((mean - 15.0).abs() < 0.1, "{mean}");
}

/// Three runs a side of 40 requests each, every request of run `k` scaled by `drift[k]`.
fn drifting(drift: [f64; 3], salt: u32) -> Vec<Run> {
    drift
        .iter()
        .enumerate()
        .map(|(k, f)| {
            let v: Vec<f64> = (0..40u32)
                .map(|i| f * (100.0 + f64::from((i * 7 + salt + k as u32) % 11)))
                .collect();
            Run::scalar(&v)
        })
        .collect()
}

#[test]
fn run_to_run_drift_is_in_the_interval_of_repeats() {
    let b = Bootstrap::default();
    let dir = Direction::LowerIsBetter;
    // One setup measured six times, the machine's speed moving by up to 12% between runs.
    let base = drifting([0.94, 1.0, 1.06], 0);
    let new = drifting([1.12, 1.04, 0.98], 3);
    // Any one pair of runs from opposite ends of that drift looks like a regression ...
    let one = |r: &Run| Sample::new("S", vec![r.clone()], P50).unwrap();
    let pair = compare(&one(&base[0]), &one(&new[0]), dir, &b).unwrap();
    assert_eq!(pair.verdict, Verdict::Worse, "{pair:?}");
    // ... but the repeats, resampled by run, cannot tell.
    let all = |r: &[Run]| Sample::new("S", r.to_vec(), P50).unwrap();
    let reps = compare(&all(&base), &all(&new), dir, &b).unwrap();
    assert_eq!(reps.verdict, Verdict::Unclear, "{reps:?}");
    assert!(reps.across_runs());
    assert!(
        reps.hi - reps.lo > 2.0 * (pair.hi - pair.lo),
        "{reps:?} {pair:?}"
    );
    // A real 20% slowdown of every run is still seen through the drift.
    let slow: Vec<Run> = drifting([0.94, 1.0, 1.06], 3)
        .into_iter()
        .map(|r| Run::clustered(r.units.iter().map(|u| vec![u[0] * 1.2]).collect()))
        .collect();
    let worse = compare(&all(&base), &all(&slow), dir, &b).unwrap();
    assert_eq!(worse.verdict, Verdict::Worse, "{worse:?}");
}

#[test]
fn clustered_units_pool_their_values() {
    let units = vec![vec![1.0, 2.0], vec![3.0], vec![]];
    let s = Sample::clustered("BASE", &units, Statistic::Percentile(100.0)).unwrap();
    assert_eq!(s.value(), Some(3.0));
    assert_eq!(s.len(), 3);
    assert!(Sample::clustered("BASE", &[vec![], vec![]], P50).is_err());
}

#[test]
fn a_ratio_of_sums_keeps_each_pair_in_order_and_pools_the_totals() {
    // Cached over prompt tokens: 10/100, 0/50, 40/50 pool to 50/200, not the mean of the ratios.
    let pairs = vec![vec![10.0, 100.0], vec![0.0, 50.0], vec![40.0, 50.0]];
    let s = Sample::clustered("BASE", &pairs, Statistic::RatioOfSums).unwrap();
    assert_eq!(s.value(), Some(0.25));
    let mut reordered = pairs.clone();
    reordered.reverse();
    let r = Sample::clustered("BASE", &reordered, Statistic::RatioOfSums).unwrap();
    assert_eq!(r, s);
    // Every request hit twice as much: a verdict from one run each, as a percentile gets.
    let base: Vec<Vec<f64>> = (0..200)
        .map(|i| vec![f64::from(i % 7) * 5.0, 100.0])
        .collect();
    let new: Vec<Vec<f64>> = base.iter().map(|u| vec![u[0] * 2.0, u[1]]).collect();
    let b = Sample::clustered("BASE", &base, Statistic::RatioOfSums).unwrap();
    let n = Sample::clustered("NEW", &new, Statistic::RatioOfSums).unwrap();
    let c = compare(&b, &n, Direction::HigherIsBetter, &Bootstrap::default()).unwrap();
    assert!((c.ratio - 2.0).abs() < 1e-12, "{c:?}");
    assert_eq!(c.verdict, Verdict::Better);
    for bad in [vec![vec![1.0]], vec![vec![1.0, 2.0, 3.0]]] {
        assert!(matches!(
            Sample::clustered("BASE", &bad, Statistic::RatioOfSums),
            Err(CompareError::BadStatistic(_))
        ));
    }
    // The pair is not sorted as a unit's gaps are: 3 over 1 stays 3.
    let big = Sample::clustered("BASE", &[vec![3.0, 1.0]], Statistic::RatioOfSums).unwrap();
    assert_eq!(big.value(), Some(3.0));
    let none = Sample::clustered("BASE", &[vec![0.0, 0.0]], Statistic::RatioOfSums).unwrap();
    assert_eq!(none.value(), None);
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
    fn the_order_of_runs_does_not_matter(
        runs in prop::collection::vec(values(), 2..5), new in values(), seed in any::<u64>()
    ) {
        let side = |rs: &[Vec<f64>]| {
            Sample::new("S", rs.iter().map(|v| Run::scalar(v)).collect(), P50).unwrap()
        };
        let b = Bootstrap { resamples: 200, seed, threshold: 0.05 };
        let n = Sample::scalar("NEW", &new, P50).unwrap();
        let a = compare(&side(&runs), &n, Direction::LowerIsBetter, &b);
        let mut r2: Vec<Vec<f64>> = runs.iter().rev().cloned().collect();
        r2[0].reverse();
        prop_assert_eq!(a, compare(&side(&r2), &n, Direction::LowerIsBetter, &b));
    }

    #[test]
    fn identical_repeats_are_never_worse_or_better(
        runs in prop::collection::vec(values(), 2..5), seed in any::<u64>()
    ) {
        let s = Sample::new("S", runs.iter().map(|v| Run::scalar(v)).collect(), P50).unwrap();
        let b = Bootstrap { resamples: 200, seed, threshold: 0.05 };
        let c = compare(&s, &s, Direction::LowerIsBetter, &b).unwrap();
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

#[test]
fn a_sample_at_another_percentile_is_the_sample_built_at_it() {
    let runs = vec![
        Run::clustered(vec![vec![3.0, 1.0], vec![], vec![7.0, 2.5, 9.0]]),
        Run::clustered(vec![vec![4.0], vec![40.0, 0.5]]),
    ];
    let p50 = Sample::new("BASE", runs.clone(), P50).unwrap();
    for p in [0.0, 10.0, 50.0, 90.0, 99.0, 100.0] {
        let built = Sample::new("BASE", runs.clone(), Statistic::Percentile(p)).unwrap();
        let at = p50.clone().at(p).unwrap();
        assert_eq!(at, built, "p{p}");
        assert_eq!(
            at.value().map(f64::to_bits),
            built.value().map(f64::to_bits)
        );
    }
    assert!(p50.at(100.5).is_err());
    let rate = Sample::new(
        "BASE",
        vec![Run::scalar(&[1.0]).lasting(1.0)],
        Statistic::Rate,
    );
    assert!(rate.unwrap().at(50.0).is_err());
}
