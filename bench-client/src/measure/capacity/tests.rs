use super::*;

fn plan(refine: u32) -> CapacityPlan {
    CapacityPlan {
        coarse: geometric(1.0, 2.0, 6),
        refine,
        target: 0.95,
        max_failed: 0.05,
        integer: false,
        throughput_tolerance: DEFAULT_THROUGHPUT_TOLERANCE,
    }
}

#[test]
fn a_search_by_concurrency_bisects_on_whole_numbers_and_ends_between_neighbours() {
    let p = CapacityPlan {
        coarse: vec![1.0, 2.0, 4.0, 8.0, 16.0],
        refine: 8,
        integer: true,
        ..plan(8)
    };
    for cap in [1.0, 3.0, 5.0, 6.0, 11.0] {
        let (levels, a) = search(&p, cap);
        assert!(levels.iter().all(|l| l.fract() == 0.0), "{levels:?}");
        assert_eq!(a.rate, Some(cap), "{levels:?}");
        assert_eq!(a.first_fail, Some(cap + 1.0), "{levels:?}");
    }
}

#[test]
fn a_search_by_concurrency_answers_a_concurrency_whatever_the_throughput() {
    let p = CapacityPlan {
        coarse: vec![1.0, 2.0, 4.0, 8.0, 16.0],
        integer: true,
        ..plan(8)
    };
    // A closed loop offers no rate; long requests complete under one a second at any level.
    let closed = |rate: f64| StepResult {
        offered: None,
        achieved: Some(0.05 * rate),
        ..step(rate, 13.0)
    };
    let mut steps = Vec::new();
    let a = loop {
        match p.next(&steps) {
            Next::Run(r) => steps.push(closed(r)),
            Next::Done(a) => break a,
        }
    };
    assert_eq!(a.rate, Some(13.0), "{a:?}");
    assert_eq!(
        a.achieved, None,
        "req/s is no bound on a concurrency: {a:?}"
    );
}

/// A server whose goodput share is 1 up to `cap` requests per second and 0 above it.
fn step(rate: f64, cap: f64) -> StepResult {
    StepResult {
        rate,
        requests: 100,
        succeeded: 100,
        good: if rate <= cap { 100 } else { 0 },
        offered: Some(rate),
        achieved: Some(rate),
        steady: true,
    }
}

fn search(p: &CapacityPlan, cap: f64) -> (Vec<f64>, CapacityAnswer) {
    let mut steps = Vec::new();
    loop {
        match p.next(&steps) {
            Next::Run(r) => steps.push(step(r, cap)),
            Next::Done(a) => return (steps.iter().map(|s| s.rate).collect(), a),
        }
        assert!(steps.len() < 100, "the search does not end");
    }
}

#[test]
fn steps_up_then_bisects_between_last_pass_and_first_fail() {
    let (rates, a) = search(&plan(3), 5.0);
    assert_eq!(rates, vec![1.0, 2.0, 4.0, 8.0, 6.0, 5.0, 5.5]);
    assert_eq!(a.rate, Some(5.0));
    assert_eq!(a.first_fail, Some(5.5));
    assert_eq!(a.server_failing, None);
}

#[test]
fn refinement_converges_on_the_capacity() {
    for cap in [1.3, 3.7, 9.9, 20.0] {
        let (_, a) = search(&plan(8), cap);
        let r = a.rate.unwrap();
        assert!(r <= cap && r > cap * 0.97, "cap {cap}: found {r}");
    }
}

#[test]
fn every_step_passing_says_at_least_the_last_rate() {
    let (rates, a) = search(&plan(3), 1000.0);
    assert_eq!(rates.len(), 6);
    assert_eq!(a.rate, Some(32.0));
    assert_eq!(a.first_fail, None);
}

#[test]
fn no_passing_step_bisects_down_from_zero_and_says_none() {
    let (rates, a) = search(&plan(2), 0.1);
    assert_eq!(rates, vec![1.0, 0.5, 0.25]);
    assert_eq!(a.rate, None);
    assert_eq!(a.first_fail, Some(0.25));
}

#[test]
fn a_failing_server_stops_the_search_at_once() {
    let p = plan(3);
    let ok = step(1.0, 10.0);
    let failing = StepResult {
        rate: 2.0,
        requests: 100,
        succeeded: 90,
        good: 90,
        ..ok
    };
    let a = p.next(&[ok, failing]);
    assert_eq!(
        a,
        Next::Done(CapacityAnswer {
            rate: Some(1.0),
            achieved: Some(1.0),
            first_fail: Some(2.0),
            server_failing: Some(1),
        })
    );
}

#[test]
fn replaying_the_steps_gives_the_same_next_rate() {
    let p = plan(3);
    let steps: Vec<_> = [1.0, 2.0, 4.0, 8.0].iter().map(|&r| step(r, 5.0)).collect();
    assert_eq!(p.next(&steps), Next::Run(6.0));
    assert_eq!(p.next(&steps[..2]), Next::Run(4.0));
}

#[test]
fn shares() {
    let s = StepResult {
        rate: 1.0,
        requests: 20,
        succeeded: 19,
        good: 18,
        offered: None,
        achieved: None,
        steady: true,
    };
    assert!((s.goodput_share() - 0.9).abs() < 1e-12);
    assert!((s.failed_share() - 0.05).abs() < 1e-12);
    assert!(!plan(0).passes(&s));
    let none = StepResult {
        rate: 1.0,
        requests: 0,
        succeeded: 0,
        good: 0,
        ..s
    };
    assert_eq!(none.failed_share(), 1.0);
}

#[test]
fn a_step_that_does_not_keep_up_with_its_rate_fails_though_every_request_met_the_slo() {
    let p = plan(0);
    let burst = StepResult {
        achieved: Some(150.0),
        ..step(2048.0, 1e9)
    };
    assert_eq!(burst.goodput_share(), 1.0);
    assert!(!p.passes(&burst));
    let close = StepResult {
        achieved: Some(2048.0 * 0.91),
        ..burst
    };
    assert!(p.passes(&close));
}

#[test]
fn a_short_passing_step_is_run_again_at_its_rate_and_never_counts_as_a_pass() {
    let p = plan(0);
    let short = StepResult {
        steady: false,
        ..step(1.0, 10.0)
    };
    assert_eq!(p.next(&[short]), Next::Run(1.0));
    assert_eq!(p.next(&[short, short]), Next::Run(1.0));
    // After MAX_RERUNS reruns a step still too short fails: the search goes down from it.
    match p.next(&[short, short, short]) {
        Next::Done(a) => assert_eq!((a.rate, a.first_fail), (None, Some(1.0))),
        n => panic!("{n:?}"),
    }
    // A steady rerun is the verdict.
    assert_eq!(p.next(&[short, step(1.0, 10.0)]), Next::Run(2.0));
    // A short step that falls behind is no verdict: its drain weighs on its throughput.
    let behind = StepResult {
        steady: false,
        achieved: Some(0.8),
        ..step(1.0, 10.0)
    };
    assert_eq!(p.next(&[behind]), Next::Run(1.0));
    // A short step whose requests miss the SLO is a verdict at once: more time only grows a
    // queue.
    let failing = StepResult {
        steady: false,
        ..step(1.0, 0.5)
    };
    assert!(matches!(p.next(&[failing]), Next::Done(_)));
}

#[test]
fn the_answer_carries_the_throughput_achieved_at_the_passing_rate() {
    let (_, a) = search(&plan(0), 5.0);
    assert_eq!((a.rate, a.achieved), (Some(4.0), Some(4.0)));
}

#[test]
fn step_timing_counts_arrivals_duration_and_mean_request_time() {
    let s = |at: u64, len: u64, ok: bool| RequestSpan {
        scheduled_ns: at,
        sent_ns: at,
        end_ns: at + len,
        ok,
    };
    let reqs: Vec<_> = (0..11)
        .map(|k| s(k * 100_000_000, 50_000_000, k != 3))
        .collect();
    let t = StepTiming::of(&reqs).unwrap();
    assert!((t.arrival_span_s - 1.0).abs() < 1e-12);
    assert!((t.duration_s - 1.05).abs() < 1e-12);
    assert!((t.mean_request_s - 0.05).abs() < 1e-12);
    assert!((t.offered().unwrap() - 10.0).abs() < 1e-9);
    assert!((t.achieved().unwrap() - 10.0 / 1.05).abs() < 1e-9);
    assert!(t.steady(), "1 s of arrivals is 20 requests of 50 ms");
    let long: Vec<_> = (0..11)
        .map(|k| s(k * 100_000_000, 60_000_000, true))
        .collect();
    assert!(!StepTiming::of(&long).unwrap().steady());
    assert_eq!(StepTiming::of(&[]), None);
}

#[test]
fn a_queue_that_grows_over_the_step_is_not_steady_however_long_it_ran() {
    // 400 arrivals 100 ms apart, each 50 ms in the system: steady.
    let at = |k: u64| k * 100_000_000;
    let flat: Vec<_> = (0..400)
        .map(|k| RequestSpan {
            scheduled_ns: at(k),
            sent_ns: at(k),
            end_ns: at(k) + 50_000_000,
            ok: true,
        })
        .collect();
    let t = StepTiming::of(&flat).unwrap();
    assert_eq!(t.queue_growth, Some(1.0));
    assert!(t.steady());
    // The same arrivals, each waiting 1 ms longer than the one before: the last quarter spends
    // about twice as long in the system as the second, though every request is short.
    let growing: Vec<_> = (0..400)
        .map(|k| RequestSpan {
            scheduled_ns: at(k),
            sent_ns: at(k) + k * 1_000_000,
            end_ns: at(k) + k * 1_000_000 + 50_000_000,
            ok: true,
        })
        .collect();
    let g = StepTiming::of(&growing).unwrap();
    assert!(g.arrival_span_s >= g.span_needed_s());
    assert!(
        g.queue_growth.unwrap() > GROWTH_LIMIT,
        "{:?}",
        g.queue_growth
    );
    assert!(!g.steady());
    // Too few requests a quarter say nothing.
    assert_eq!(StepTiming::of(&growing[..20]).unwrap().queue_growth, None);
}
