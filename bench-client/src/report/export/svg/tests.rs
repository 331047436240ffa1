//! The plots as drawn: log axes where the data asks, legends off the data, SLO and capacity lines.

use super::*;
use crate::report::LoadSummary;

#[test]
fn token_labels_read_as_people_write_contexts() {
    assert_eq!(tokens_label(512.0), "512");
    assert_eq!(tokens_label(1000.0), "1k");
    assert_eq!(tokens_label(2500.0), "2.5k");
    assert_eq!(tokens_label(185_000.0), "185k");
}

#[test]
fn value_labels_are_short() {
    assert_eq!(value_label(0.0), "0");
    assert_eq!(value_label(0.5), "0.5");
    assert_eq!(value_label(45.0), "45");
    assert_eq!(value_label(800_000.0), "800k");
    assert_eq!(value_label(1_400_000.0), "1.4M");
}

/// The value of attribute `name` in the element text `el`.
fn attr(el: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let i = el.find(&key)? + key.len();
    Some(el[i..].split('"').next()?.to_string())
}

fn num(el: &str, name: &str) -> f64 {
    attr(el, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {name} in {el}"))
}

/// The opening tags of the `tag` elements of `svg`.
fn elements<'s>(svg: &'s str, tag: &str) -> Vec<&'s str> {
    let open = format!("<{tag} ");
    svg.match_indices(&open)
        .filter_map(|(i, _)| svg[i..].split_once('>').map(|(el, _)| el))
        .collect()
}

/// The legend boxes: white, 0.85 opaque (x, y, width, height).
fn legend_boxes(svg: &str) -> Vec<(f64, f64, f64, f64)> {
    elements(svg, "rect")
        .into_iter()
        .filter(|r| {
            attr(r, "fill").as_deref() == Some("#FFFFFF")
                && attr(r, "opacity").as_deref() == Some("0.85")
        })
        .map(|r| (num(r, "x"), num(r, "y"), num(r, "width"), num(r, "height")))
        .collect()
}

/// The dots (circle centres).
fn dots(svg: &str) -> Vec<(f64, f64)> {
    elements(svg, "circle")
        .into_iter()
        .map(|c| (num(c, "cx"), num(c, "cy")))
        .collect()
}

/// The points of every polyline stroked in `color`.
fn polylines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    elements(svg, "polyline")
        .into_iter()
        .filter(|p| attr(p, "stroke").as_deref() == Some(color))
        .map(|p| {
            attr(p, "points")
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|xy| {
                    let (x, y) = xy.split_once(',')?;
                    Some((x.parse().ok()?, y.parse().ok()?))
                })
                .collect()
        })
        .collect()
}

/// The texts of `svg`, trimmed.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|t| t.split_once('>')?.1.split_once("</text>"))
        .map(|(s, _)| s.trim().to_string())
        .collect()
}

/// A straight line from `pts`: vertical (`true`) or horizontal, at least `len` pixels long.
fn is_straight(pts: &[(f64, f64)], vertical: bool, len: f64) -> bool {
    let [a, b] = pts else { return false };
    if vertical {
        a.0 == b.0 && (a.1 - b.1).abs() >= len
    } else {
        a.1 == b.1 && (a.0 - b.0).abs() >= len
    }
}

/// TTFT and decode p50 of the Kimi sweep (`sweep --simulate --preset
/// kimi-k2.6-dflash-8xrtx-pro-6000 --mock-set mem_fraction_static=0.93 --mock-set
/// chunked_prefill_size=4096 --mock-set expandable_segments=true`, 1k..185k, 64 output tokens).
fn kimi_sweep() -> Report {
    let rows = [
        (1000, 216.8, 105.9, 4614.0),
        (2000, 383.6, 53.3, 5214.0),
        (4000, 717.6, 26.4, 5574.0),
        (8000, 1436.8, 13.2, 5568.0),
        (16000, 2880.0, 7.2, 5556.0),
        (32000, 5785.6, 4.0, 5531.0),
        (64000, 11673.6, 1.7, 5482.0),
        (128000, 23756.8, 0.8, 5388.0),
        (185000, 34850.8, 0.6, 5308.0),
    ];
    let mut r = Report {
        points: Default::default(),
    };
    for (ctx, ttft, decode, prefill) in rows {
        let p = crate::report::PointData {
            requests: 3,
            ttft_ms: vec![ttft; 3],
            server_queue_ms: vec![0.0; 3],
            server_prefill_ms: vec![ttft; 3],
            ttft_rest_ms: vec![0.0; 3],
            decode_tok_s: vec![decode * 0.97, decode, decode * 1.02],
            naive_decode_tok_s: vec![decode * 1.05; 3],
            prefill_tok_s: vec![prefill; 3],
            tokens_per_chunk: vec![1.0, 3.0, 5.0],
            ..Default::default()
        };
        r.points.insert(ctx, p);
    }
    r
}

#[test]
fn the_kimi_sweep_draws_ttft_and_decode_on_log_axes() {
    let svg = sweep(&kimi_sweep()).unwrap();
    let t = texts(&svg);
    for tick in ["200 ms", "500 ms", "1 s", "10 s", "50 s"] {
        assert!(t.iter().any(|s| s == tick), "no tick {tick:?} in {t:?}");
    }
    assert!(t.iter().any(|s| s == "time (log scale)"), "{t:?}");
    assert!(t.iter().any(|s| s == "tok/s (log scale)"), "{t:?}");
    // The prefill rate spans less than a decade: linear from 0, as before.
    assert!(t.iter().any(|s| s == "tok/s"), "{t:?}");
    // The rest is 0 at every context: said, not drawn at the bottom of a log axis.
    assert!(
        t.iter().any(
            |s| s.starts_with("below the log axis") && s.contains("rest (network, client) p50")
        ),
        "{t:?}"
    );
}

#[test]
fn no_dot_lies_under_a_legend() {
    let report = kimi_sweep();
    let svg = sweep(&report).unwrap();
    let boxes = legend_boxes(&svg);
    assert_eq!(boxes.len(), 4, "one legend per panel");
    let d = dots(&svg);
    assert!(d.len() >= 9 * 5, "{}", d.len());
    for (x, y, w, h) in &boxes {
        for (cx, cy) in &d {
            let inside =
                *cx >= x - 3.0 && *cx <= x + w + 3.0 && *cy >= y - 3.0 && *cy <= y + h + 3.0;
            assert!(!inside, "dot ({cx}, {cy}) under the legend {x},{y} {w}x{h}");
        }
    }
    let cap = capacity(&capacity_report()).unwrap();
    let d = dots(&cap);
    for (x, y, w, h) in legend_boxes(&cap) {
        assert!(!d.iter().any(|(cx, cy)| *cx >= x - 3.0
            && *cx <= x + w + 3.0
            && *cy >= y - 3.0
            && *cy <= y + h + 3.0));
    }
}

/// A load run's summary: TTFT about 4 ms, TPOT about 1.2 ms, end to end about 155 ms (the
/// default preset at 8 in flight), one TTFT of 480 ms among `n`.
fn load_summary(slo: crate::report::Slo, n: u64) -> LoadSummary {
    let mut s = LoadSummary::new(slo);
    s.requests = n;
    s.succeeded = n;
    for i in 0..n {
        let jitter = (i % 100) * 10_000;
        let ttft = if i == n / 2 {
            480_000_000
        } else {
            3_600_000 + jitter
        };
        s.metrics.entry("ttft").or_default().record(ttft);
        s.metrics
            .entry("tpot")
            .or_default()
            .record(1_150_000 + jitter / 10);
        s.metrics
            .entry("e2e")
            .or_default()
            .record(150_000_000 + jitter * 3);
    }
    s
}

#[test]
fn a_load_plot_draws_its_slo_as_labelled_vertical_lines() {
    let slo = crate::report::Slo::parse("ttft=200,tpot=20").unwrap();
    let svg = load(&load_summary(slo, 2000)).unwrap();
    let t = texts(&svg);
    assert!(t.iter().any(|s| s == "TTFT SLO 200 ms"), "{t:?}");
    assert!(t.iter().any(|s| s == "TPOT SLO 20 ms"), "{t:?}");
    let lines = polylines(&svg, "#D62728");
    assert_eq!(
        lines.iter().filter(|l| is_straight(l, true, 300.0)).count(),
        2,
        "{lines:?}"
    );
    // Without an SLO, no line and no label.
    let svg = load(&load_summary(crate::report::Slo::default(), 2000)).unwrap();
    assert!(polylines(&svg, "#D62728").is_empty());
    assert!(!texts(&svg).iter().any(|s| s.contains("SLO")));
}

#[test]
fn a_load_cdf_spans_decades_on_a_log_axis_and_names_what_lies_beyond() {
    let svg = load(&load_summary(crate::report::Slo::default(), 20_000)).unwrap();
    let t = texts(&svg);
    assert!(t.iter().any(|s| s == "latency (log scale)"), "{t:?}");
    // The axis ends at the largest p99.9 (end to end, ~180 ms): the 480 ms TTFT is beyond it.
    assert!(t.iter().any(|s| s == "200 ms"), "{t:?}");
    assert!(!t.iter().any(|s| s == "500 ms"), "{t:?}");
    assert!(
        t.iter()
            .any(|s| s.starts_with("beyond the axis: TTFT up to 480 ms")),
        "{t:?}"
    );
}

#[test]
fn a_cdf_says_how_much_lies_below_its_log_axis() {
    let mut s = load_summary(crate::report::Slo::default(), 1000);
    // Inter-chunk gaps: 40% of them 0 (events that arrived together), the rest about 3 ms.
    for i in 0..1000 {
        let v = if i < 400 { 0 } else { 2_500_000 + i * 1000 };
        s.metrics.entry("inter_chunk").or_default().record(v);
    }
    let t = texts(&load(&s).unwrap());
    assert!(
        t.iter()
            .any(|n| n.starts_with("below the axis") && n.ends_with("lowest 40% of inter-chunk")),
        "{t:?}"
    );
}

#[test]
fn a_narrow_cdf_stays_linear() {
    let mut s = LoadSummary::new(crate::report::Slo::default());
    s.succeeded = 100;
    for i in 0..100 {
        s.metrics
            .entry("ttft")
            .or_default()
            .record(3_000_000 + i * 20_000);
    }
    let t = texts(&load(&s).unwrap());
    assert!(t.iter().any(|s| s == "latency"), "{t:?}");
    assert!(!t.iter().any(|s| s.contains("log scale")), "{t:?}");
}

/// A capacity search by rate: passes to 80 req/s (71.6 completed: the answer), fails at 84.
fn capacity_report() -> crate::report::capacity::CapacityReport {
    use crate::report::capacity::{CapacityReport, CapacityRow, Level};
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
    let svg = capacity(&capacity_report()).unwrap();
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
    let svg = capacity(&none).unwrap();
    assert!(polylines(&svg, "#3C3C3C").is_empty());
}
