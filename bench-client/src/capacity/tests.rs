//! The capacity plot as drawn: the SLO and the answer marked, no dot under a legend.

use super::export;
use super::{CapacityReport, CapacityRow, Level};
use crate::report::export::svg::probe::{dots, is_straight, legend_boxes, polylines, texts};

/// A capacity search by rate: passes to 80 req/s (71.6 completed: the answer), fails at 84.
fn capacity_report() -> CapacityReport {
    let row = |step, rate: f64, tput, ttft: (f64, f64), tpot: (f64, f64), passed| CapacityRow {
        step,
        rate,
        requests: 200,
        succeeded: 200,
        good: if passed { 200 } else { 100 },
        tpot_unmeasured: 0,
        goodput_share: if passed { 1.0 } else { 0.5 },
        passed,
        offered_rate: Some(rate),
        kept_up: true,
        arrival_span_s: Some(200.0 / rate),
        mean_request_s: Some(0.01),
        steady: true,
        queue_growth: Some(1.0),
        too_short: false,
        request_throughput: Some(tput),
        output_throughput: Some(tput * 128.0),
        goodput: Some(tput),
        ttft_p50_ms: Some(ttft.0),
        ttft_p99_ms: Some(ttft.1),
        tpot_p50_ms: Some(tpot.0),
        tpot_p99_ms: Some(tpot.1),
        cache_hit_rate: None,
        file: String::new(),
    };
    CapacityReport {
        slo: "ttft=5,tpot=2".into(),
        target: 0.95,
        level: Level::Rate,
        steps: vec![
            row(0, 1.0, 0.95, (1.2, 3.1), (0.85, 0.99), true),
            row(1, 16.0, 15.0, (2.0, 3.5), (0.91, 1.12), true),
            row(2, 64.0, 58.3, (2.4, 4.5), (1.32, 1.69), true),
            row(3, 80.0, 71.6, (2.8, 5.2), (1.56, 1.96), true),
            row(4, 84.0, 75.0, (2.9, 5.4), (1.6, 2.05), false),
            row(5, 128.0, 108.1, (4.0, 8.2), (2.82, 3.41), false),
        ],
        capacity: Some(71.6),
        passing_rate: Some(80.0),
        first_fail: Some(84.0),
        server_failing: None,
    }
}

#[test]
fn a_capacity_plot_marks_the_slo_and_the_answer() {
    let svg = export::svg(&capacity_report()).unwrap();
    let t = texts(&svg);
    assert!(t.iter().any(|s| s == "TTFT SLO 5 ms"), "{t:?}");
    assert!(t.iter().any(|s| s == "TPOT SLO 2 ms"), "{t:?}");
    assert_eq!(
        t.iter()
            .filter(|s| *s == "capacity 71.600 req/s (80.000 req/s offered)")
            .count(),
        2,
        "{t:?}"
    );
    let slo = polylines(&svg, "#D62728");
    assert_eq!(
        slo.iter().filter(|l| is_straight(l, false, 400.0)).count(),
        2,
        "{slo:?}"
    );
    let answer = polylines(&svg, "#3C3C3C");
    let vertical: Vec<_> = answer
        .iter()
        .filter(|l| is_straight(l, true, 300.0))
        .collect();
    assert_eq!(vertical.len(), 2, "{answer:?}");
    // Both lie where the answer's step (71.6 req/s completed) has its dots.
    let d = dots(&svg);
    for v in vertical {
        let x = v[0].0;
        assert!(
            d.iter().any(|(cx, _)| (cx - x).abs() <= 1.0),
            "no dot at x {x}: {d:?}"
        );
    }
    // No answer, no answer line.
    let mut none = capacity_report();
    none.capacity = None;
    let svg = export::svg(&none).unwrap();
    assert!(polylines(&svg, "#3C3C3C").is_empty());
}

#[test]
fn no_dot_lies_under_a_legend() {
    let cap = export::svg(&capacity_report()).unwrap();
    let d = dots(&cap);
    for (x, y, w, h) in legend_boxes(&cap) {
        assert!(!d.iter().any(|(cx, cy)| *cx >= x - 3.0
            && *cx <= x + w + 3.0
            && *cy >= y - 3.0
            && *cy <= y + h + 3.0));
    }
}
