//! The plots as drawn: log axes where the data asks, legends off the data, SLO lines (the
//! capacity plot's answer line: in the capacity folder's tests).

use super::probe::*;
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
