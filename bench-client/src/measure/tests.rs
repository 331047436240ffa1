use crate::trace::RequestTrace;
use crate::trace::TokenAttribution;

use super::*;
use crate::trace::Dialect;
use crate::trace::{Chunk, StreamEnd, Usage};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn chunk(at_ms: u64, tokens: u32, cum: u32) -> Chunk {
    Chunk {
        at_ns: at_ms * MS,
        tokens: Some(tokens),
        text_len: tokens,
        usage: Some(Usage {
            prompt_tokens: Some(1000),
            completion_tokens: Some(cum),
            cached_tokens: Some(0),
        }),
        ..Chunk::default()
    }
}

fn trace(chunks: Vec<Chunk>, max_tokens: u32) -> RequestTrace {
    let end_ns = chunks.last().map_or(0, |c| c.at_ns) + MS;
    RequestTrace {
        rid: "r".into(),
        dialect: Dialect::Sglang,
        prompt_tokens_sent: Some(1000),
        max_tokens,
        status: Some(200),
        headers_ns: Some(MS),
        reads: chunks.len() as u32,
        chunks,
        done_ns: Some(end_ns),
        end: StreamEnd::Done,
        end_ns,
        attribution: TokenAttribution::ServerCumulative,
        stamps: Default::default(),
        send_delay_ns: None,
        output_ids: None,
    }
}

#[test]
fn multi_token_first_chunk_is_excluded_from_decode() {
    // First chunk (speculative) carries 4 tokens at 100 ms, then 4 more at 110, 120 ms.
    let t = trace(
        vec![chunk(100, 4, 4), chunk(110, 2, 6), chunk(120, 2, 8)],
        8,
    );
    let m = measure(&t).unwrap();
    assert_eq!(m.ttft_ms, 100.0);
    assert!((m.decode_tok_s.unwrap() - 4.0 / 0.020).abs() < 1e-9);
    // The common formula counts the first chunk's extra tokens: (8 - 1) / 0.020.
    assert!((m.naive_decode_tok_s.unwrap() - 7.0 / 0.020).abs() < 1e-9);
    assert!((m.prefill_tok_s.unwrap() - 1000.0 / 0.1).abs() < 1e-9);
    assert_eq!(m.tokens_per_chunk, vec![4, 2, 2]);
    assert_eq!(m.per_token_ms, vec![5.0; 4]);
    assert!((m.tpot_ms.unwrap() - 5.0).abs() < 1e-9);
}

#[test]
fn single_chunk_stream_has_named_reason() {
    let m = measure(&trace(vec![chunk(50, 5, 5)], 5)).unwrap();
    assert_eq!(m.decode_tok_s, None);
    assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::SingleChunk));
    assert_eq!(m.naive_decode_tok_s, None);
}

#[test]
fn single_token_has_named_reason() {
    let m = measure(&trace(vec![chunk(50, 1, 1)], 1)).unwrap();
    assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::SingleToken));
}

#[test]
fn usage_only_chunk_is_not_the_last_chunk() {
    let mut chunks = vec![chunk(10, 1, 1), chunk(20, 1, 2)];
    chunks.push(Chunk {
        at_ns: 500 * MS,
        tokens: Some(0),
        usage_only: true,
        usage: Some(Usage {
            prompt_tokens: Some(1000),
            completion_tokens: Some(2),
            cached_tokens: Some(0),
        }),
        ..Chunk::default()
    });
    let m = measure(&trace(chunks, 2)).unwrap();
    assert!((m.decode_tok_s.unwrap() - 100.0).abs() < 1e-9);
}

#[test]
fn in_band_error_is_a_failure() {
    let mut t = trace(vec![chunk(10, 1, 1)], 2);
    t.chunks.push(Chunk {
        at_ns: 20 * MS,
        error: Some("boom".into()),
        ..Chunk::default()
    });
    match measure(&t) {
        Err(MeasureError::Failed(f)) => {
            assert_eq!(f.kind, crate::trace::FailureKind::InBandError)
        }
        other => panic!("expected failure, got {other:?}"),
    }
}

#[test]
fn short_output_is_a_failure() {
    let t = trace(vec![chunk(10, 1, 1), chunk(20, 1, 2)], 17);
    assert!(
        matches!(measure(&t), Err(MeasureError::Failed(f)) if f.kind == crate::trace::FailureKind::ShortOutput)
    );
}

#[test]
fn unknown_attribution_does_not_guess() {
    let mut t = trace(vec![chunk(10, 1, 1), chunk(20, 1, 2), chunk(30, 1, 3)], 3);
    for c in &mut t.chunks {
        c.tokens = None;
        c.usage = None;
    }
    t.chunks.push(Chunk {
        at_ns: 31 * MS,
        tokens: Some(0),
        usage_only: true,
        usage: Some(Usage {
            prompt_tokens: Some(1000),
            completion_tokens: Some(3),
            cached_tokens: None,
        }),
        ..Chunk::default()
    });
    t.attribution = TokenAttribution::Unknown;
    let m = measure(&t).unwrap();
    assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::CountsUnknown));
    assert!(m.tokens_per_chunk.is_empty());
    assert!((m.naive_decode_tok_s.unwrap() - 100.0).abs() < 1e-9);
}

fn tp(end_ms: u64, n: u32, cached: u32) -> RequestTrace {
    let mut t = trace(vec![chunk(end_ms - 1, n, n)], n);
    if let Some(u) = t.chunks[0].usage.as_mut() {
        u.cached_tokens = Some(cached);
    }
    t.end_ns = end_ms * MS;
    t
}

#[test]
fn two_point_cache_hit_named() {
    let e = two_point(&tp(500, 1, 0), &tp(200, 17, 992)).unwrap_err();
    assert_eq!(e.kind(), "cache-hit");
    assert!(e.to_string().contains("992"));
}

#[test]
fn two_point_time_not_increasing_named() {
    let e = two_point(&tp(500, 1, 0), &tp(400, 17, 0)).unwrap_err();
    assert_eq!(e.kind(), "time-not-increasing");
}

#[test]
fn two_point_solves_when_assumptions_hold() {
    let r = two_point(&tp(100, 1, 0), &tp(260, 17, 0)).unwrap();
    assert!((r.decode_tok_s - 100.0).abs() < 1e-9);
    assert!((r.prefill_tok_s - 10_000.0).abs() < 1e-6);
}

#[test]
fn two_point_negative_prefill_named() {
    // Decode solves to 7 / 0.1 s = 70 tok/s, so a's 9 decode tokens alone need 129 ms > t_a = 100 ms:
    // the solved prefill time is negative.
    let e = two_point(&tp(100, 10, 0), &tp(200, 17, 0)).unwrap_err();
    assert_eq!(e.kind(), "invalid-rate");
}

#[test]
fn percentile_definition() {
    let v = [1.0, 2.0, 3.0, 4.0];
    assert_eq!(percentile(&v, 0.0), Some(1.0));
    assert_eq!(percentile(&v, 100.0), Some(4.0));
    assert_eq!(percentile(&v, 50.0), Some(2.5));
    assert_eq!(percentile(&[], 50.0), None);
    assert_eq!(percentile(&v, 101.0), None);
    assert_eq!(percentile(&[1.0, f64::NAN], 50.0), None);
}

fn arb_trace() -> impl Strategy<Value = RequestTrace> {
    (
        proptest::collection::vec((0u64..50, 1u32..6), 1..40),
        1u64..1000,
    )
        .prop_map(|(steps, first)| {
            let mut at = first;
            let mut cum = 0;
            let mut chunks = Vec::new();
            for (i, (gap, n)) in steps.into_iter().enumerate() {
                if i > 0 {
                    at += gap;
                }
                cum += n;
                chunks.push(chunk(at, n, cum));
            }
            trace(chunks, cum)
        })
}

proptest! {
    #[test]
    fn percentile_monotone_bounded_order_free(mut v in proptest::collection::vec(-1e6f64..1e6, 1..50), p in 0.0f64..100.0, q in 0.0f64..100.0) {
        let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
        let a = percentile(&v, lo).unwrap();
        let b = percentile(&v, hi).unwrap();
        prop_assert!(a <= b);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        prop_assert!(a >= min && b <= max);
        v.reverse();
        prop_assert_eq!(percentile(&v, lo), Some(a));
    }

    #[test]
    fn measurement_is_finite_and_consistent(t in arb_trace()) {
        let m = measure(&t).unwrap();
        for x in [Some(m.ttft_ms), Some(m.e2e_ms), m.prefill_tok_s, m.decode_tok_s, m.naive_decode_tok_s, m.tpot_ms].into_iter().flatten() {
            prop_assert!(x.is_finite() && x >= 0.0);
        }
        prop_assert_eq!(m.decode_tok_s.is_some(), m.decode_unavailable.is_none());
        prop_assert_eq!(m.tokens_per_chunk.iter().sum::<u32>(), m.completion_tokens.unwrap());
        if let (Some(d), Some(n)) = (m.decode_tok_s, m.naive_decode_tok_s) {
            // The naive rate never undercounts: the first chunk carries at least one token.
            prop_assert!(n + 1e-9 >= d);
        }
        let after: usize = m.tokens_per_chunk.iter().skip(1).map(|&t| t as usize).sum();
        prop_assert_eq!(m.per_token_ms.len(), after);
    }
}

/// Replayed transcripts measure as the live stream would.
mod replayed {
    use crate::measure::measure;
    use crate::stream::replay::{replay, Transcript};
    use crate::trace::StreamEnd;
    use serde_json::Value;

    fn transcript(reads: Vec<(f64, &str)>, end: &str) -> Transcript {
        let reads: Vec<Value> = reads
            .into_iter()
            .map(|(at, d)| serde_json::json!({"at_ms": at, "data": d}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "description": "test", "source": "constructed", "recorded": false, "dialect": "sglang",
            "request": {"path": "/generate", "body": {"rid": "t1", "input_ids": [1,2,3,4], "sampling_params": {"max_new_tokens": 3}, "stream": true}},
            "status": 200, "headers_at_ms": 0.5, "reads": reads, "end": end
        }))
        .unwrap()
    }

    #[test]
    fn replay_split_events_crlf_and_keepalive() {
        let t = transcript(
            vec![
                (10.0, ": keep-alive\r\n\r\ndata: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"cached_tokens\":0}}\r\n"),
                (12.0, "\r\n"),
                (20.0, "data: {\"text\":\"ab\",\"meta_info\":{\"prompt_tokens\":4,\"completion_tokens\":3,\"cached_tokens\":0}}\n\ndata: [DO"),
                (21.0, "NE]\n\n"),
            ],
            "eof",
        );
        let tr = replay(&t);
        assert_eq!(tr.end, StreamEnd::Done);
        assert_eq!(tr.rid, "t1");
        assert_eq!(tr.chunks[0].at_ns, 12_000_000);
        assert_eq!(tr.end_ns, 21_000_000);
        let m = measure(&tr).unwrap();
        assert_eq!(m.ttft_ms, 12.0);
        assert_eq!(m.tokens_per_chunk, vec![2, 1]);
        assert!((m.decode_tok_s.unwrap() - 1.0 / 0.008).abs() < 1e-6);
    }

    #[test]
    fn replay_reset_is_stream_cut() {
        let t = transcript(
            vec![(
                5.0,
                "data: {\"text\":\"a\",\"meta_info\":{\"completion_tokens\":1}}\n\n",
            )],
            "reset",
        );
        let tr = replay(&t);
        assert_eq!(
            tr.failure().unwrap().kind,
            crate::trace::FailureKind::StreamCut
        );
    }
}

/// SGLang with `--enable-metrics` reports its queue time and first-token latency; TTFT splits by
/// them (a recorded SGLang 0.5.23 stream).
#[test]
fn sglang_timing_splits_ttft_into_server_and_rest() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/streams/real/sglang_native_cumulative.json"
    );
    let t = crate::stream::replay::load(std::path::Path::new(path)).unwrap();
    let trace = crate::stream::replay::replay(&t);
    let m = measure(&trace).unwrap();
    let s = m.ttft_split.expect("SGLang reported its timing");
    // meta_info.queue_time 0.00046658 s, first_token_latency 0.18761625 s.
    let queue = s.server_queue_ms.unwrap();
    assert!((queue - 0.466_585).abs() < 1e-3, "{queue}");
    let prefill = s.server_prefill_ms.unwrap();
    assert!(
        (prefill - (187.616_255 - 0.466_585)).abs() < 1e-3,
        "{prefill}"
    );
    let rest = s.rest_ms.unwrap();
    assert!((rest - (m.ttft_ms - 187.616_255)).abs() < 1e-3, "{rest}");
}

#[test]
fn a_server_that_reports_no_timing_gives_no_split() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/streams/sglang-native-cumulative.json"
    );
    let t = crate::stream::replay::load(std::path::Path::new(path)).unwrap();
    let m = measure(&crate::stream::replay::replay(&t)).unwrap();
    assert_eq!(m.ttft_split, None);
}

/// llama.cpp reports its prefill time alone (`timings.prompt_ms`, on the last event); TTFT splits
/// into that and the rest, with no queue time (a recorded llama.cpp stream).
#[test]
fn llamacpp_timings_split_ttft_into_prefill_and_rest() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/streams/real/llamacpp_include_usage.json"
    );
    let t = crate::stream::replay::load(std::path::Path::new(path)).unwrap();
    let m = measure(&crate::stream::replay::replay(&t)).unwrap();
    let s = m.ttft_split.expect("llama.cpp reported its prefill time");
    // timings.prompt_ms 2.871.
    assert_eq!(s.server_queue_ms, None);
    let prefill = s.server_prefill_ms.unwrap();
    assert!((prefill - 2.871).abs() < 1e-9, "{prefill}");
    let rest = s.rest_ms.unwrap();
    assert!((rest - (m.ttft_ms - 2.871)).abs() < 1e-9, "{rest}");
}
