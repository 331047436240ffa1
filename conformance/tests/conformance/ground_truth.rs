//! Property: for generated server configurations and workloads, what the client measures over HTTP
//! equals what the mock did (its ground truth).
//!
//! Tolerances: the mock paces chunks and the client stamps arrivals on the same paused tokio clock, and
//! on loopback the bytes of a chunk are readable in the same virtual instant they were written, so
//! instants agree exactly in nanoseconds. The only slack allowed is floating-point rounding when
//! nanoseconds become milliseconds or rates: `TIME_TOL_MS` (1 ns) and a relative `RATE_TOL` of 1e-9.

use bench_client::api::Dialect;
use bench_client::measure::{measure, DecodeUnavailable};
use bench_client::trace::TokenAttribution;
use mock_server::{Config, RequestTruth};
use proptest::prelude::*;

use crate::common::{self, ms};

const TIME_TOL_MS: f64 = 1e-6;
const RATE_TOL: f64 = 1e-9;

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-12)
}

#[derive(Clone, Debug)]
struct Case {
    prefill_per_token_s: f64,
    prefill_per_token_pair_s: f64,
    decode_base_s: f64,
    decode_per_context_token_s: f64,
    chunked_prefill_size: i64,
    speculative: Option<(String, usize, Vec<f64>)>,
    incremental: bool,
    stream_interval: usize,
    dialect: Dialect,
    context: u32,
    output: u32,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    let spec = prop_oneof![
        Just(None),
        (
            prop_oneof![Just("EAGLE".to_string()), Just("DFLASH".to_string())],
            1usize..=6,
            prop::collection::vec(0.0f64..=1.0, 6),
        )
            .prop_map(|(alg, draft, rates)| Some((alg, draft, rates[..draft].to_vec()))),
    ];
    let context = prop_oneof![3 => 1u32..4096, 2 => 4096u32..40_000, 1 => 40_000u32..=185_000];
    (
        (
            1e-8f64..1e-4,
            prop_oneof![Just(0.0), 1e-12f64..1e-9],
            1e-4f64..0.05,
            0.0f64..3e-5,
        ),
        prop_oneof![Just(-1i64), 256i64..16_384],
        spec,
        any::<bool>(),
        1usize..=3,
        prop_oneof![Just(Dialect::Sglang), Just(Dialect::OpenAi)],
        context,
        1u32..=96,
        any::<u64>(),
    )
        .prop_map(
            |(
                (ppt, ppp, db, dpc),
                chunk,
                speculative,
                incremental,
                stream_interval,
                dialect,
                context,
                output,
                seed,
            )| Case {
                prefill_per_token_s: ppt,
                prefill_per_token_pair_s: ppp,
                decode_base_s: db,
                decode_per_context_token_s: dpc,
                chunked_prefill_size: chunk,
                speculative,
                incremental,
                stream_interval,
                dialect,
                context,
                output,
                seed,
            },
        )
}

fn config(c: &Case) -> Config {
    let mut cfg = common::preset("small-cpu-demo");
    cfg.seed = c.seed;
    cfg.prefill_per_token_s = c.prefill_per_token_s;
    cfg.prefill_per_token_pair_s = c.prefill_per_token_pair_s;
    cfg.decode_base_s = c.decode_base_s;
    cfg.decode_per_context_token_s = c.decode_per_context_token_s;
    cfg.chunked_prefill_size = c.chunked_prefill_size;
    cfg.incremental_streaming_output = c.incremental;
    cfg.stream_interval = c.stream_interval;
    cfg.enable_cache_report = true;
    // Memory is not what this property is about: no activation peak may kill the server.
    cfg.activation_bytes_per_extend_token = 0.0;
    cfg.activation_bytes_per_context_token = 0.0;
    cfg.fragmentation_bytes_per_context_token = 0.0;
    match &c.speculative {
        None => cfg.speculative_algorithm = "none".into(),
        Some((alg, draft, rates)) => {
            cfg.speculative_algorithm = alg.clone();
            cfg.speculative_num_draft_tokens = *draft;
            cfg.spec_accept_rates = rates.clone();
        }
    }
    cfg
}

fn check(
    c: &Case,
    truth: &RequestTruth,
    trace: &bench_client::trace::RequestTrace,
) -> Result<(), TestCaseError> {
    prop_assert!(
        trace.failure().is_none(),
        "request failed: {:?}",
        trace.failure()
    );
    let m = measure(trace).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let truth_tokens: Vec<u32> = truth.chunks.iter().map(|ch| ch.tokens as u32).collect();
    prop_assert!(!truth_tokens.is_empty());

    // Token counts and the chunk shape.
    prop_assert_ne!(m.token_attribution, TokenAttribution::Unknown);
    prop_assert_eq!(&m.tokens_per_chunk, &truth_tokens);
    prop_assert_eq!(m.completion_tokens, Some(c.output));
    prop_assert_eq!(truth.completion_tokens, c.output as usize);
    prop_assert_eq!(m.prompt_tokens, Some(c.context));
    prop_assert_eq!(m.cached_tokens.unwrap_or(0), 0, "cache busting failed");
    prop_assert_eq!(truth.cached_tokens, 0);

    // TTFT and end-to-end latency.
    let first = &truth.chunks[0];
    let last = &truth.chunks[truth.chunks.len() - 1];
    prop_assert!(
        (m.ttft_ms - ms(first.at_ns)).abs() <= TIME_TOL_MS,
        "ttft {} vs truth {}",
        m.ttft_ms,
        ms(first.at_ns)
    );
    prop_assert!(
        m.e2e_ms + TIME_TOL_MS >= ms(last.at_ns),
        "e2e {} before the last chunk {}",
        m.e2e_ms,
        ms(last.at_ns)
    );
    prop_assert!(
        (m.e2e_ms - ms(last.at_ns)).abs() <= TIME_TOL_MS,
        "e2e {} vs last chunk {}",
        m.e2e_ms,
        ms(last.at_ns)
    );

    // Prefill rate over the uncached prompt tokens.
    let prefill = c.context as f64 / (first.at_ns as f64 / 1e9);
    prop_assert!(
        m.prefill_tok_s.is_some_and(|p| close(p, prefill, RATE_TOL)),
        "prefill {:?} vs {prefill}",
        m.prefill_tok_s
    );

    // Decode rate: tokens after the first chunk over the time after it.
    let after: u32 = truth_tokens[1..].iter().sum();
    let span_ns = last.at_ns - first.at_ns;
    if truth_tokens.len() == 1 {
        prop_assert!(m.decode_tok_s.is_none());
        let want = if c.output == 1 {
            DecodeUnavailable::SingleToken
        } else {
            DecodeUnavailable::SingleChunk
        };
        prop_assert_eq!(m.decode_unavailable, Some(want));
    } else {
        let truth_decode = after as f64 / (span_ns as f64 / 1e9);
        let got = m.decode_tok_s.ok_or_else(|| {
            TestCaseError::fail(format!("no decode rate: {:?}", m.decode_unavailable))
        })?;
        prop_assert!(
            close(got, truth_decode, RATE_TOL),
            "decode {got} vs truth {truth_decode}"
        );
        // The common formula is off by exactly the first chunk's extra tokens.
        let naive = m
            .naive_decode_tok_s
            .ok_or_else(|| TestCaseError::fail("no naive rate"))?;
        let k = truth_tokens[0];
        let predicted = got * f64::from(c.output - 1) / f64::from(c.output - k);
        prop_assert!(
            close(naive, predicted, RATE_TOL),
            "naive {naive} vs predicted {predicted} (first chunk {k})"
        );
        if k > 1 {
            prop_assert!(
                naive > got,
                "a multi-token first chunk must make the naive rate overstate decode"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn client_measurement_equals_ground_truth(c in case()) {
        let rt = common::paused_runtime();
        rt.block_on(async {
            let server = common::start(config(&c)).await;
            let rid = format!("gt-{}", c.seed);
            let trace = common::send(&server, c.dialect, &rid, common::prompt(c.seed, c.context, 1), c.output).await;
            let truth = server.truth().request(&rid);
            server.shutdown().await;
            let truth = truth.ok_or_else(|| TestCaseError::fail("no ground truth for the rid the client sent"))?;
            check(&c, &truth, &trace)
        })?;
    }
}

/// Speculative decoding, fixed case: a multi-token first chunk, and the naive formula overstating decode.
#[test]
fn speculative_first_chunk_carries_several_tokens() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let mut cfg = common::preset("small-cpu-demo");
        cfg.speculative_algorithm = "DFLASH".into();
        cfg.speculative_num_draft_tokens = 3;
        cfg.spec_accept_rates = vec![1.0, 1.0, 1.0];
        let server = common::start(cfg).await;
        let trace = common::send(
            &server,
            Dialect::Sglang,
            "spec-1",
            common::prompt(9, 2048, 1),
            32,
        )
        .await;
        let truth = server.truth().request("spec-1").expect("truth");
        let m = measure(&trace).expect("measurement");
        assert_eq!(m.tokens_per_chunk, vec![4; 8]);
        assert_eq!(
            truth
                .chunks
                .iter()
                .map(|c| c.tokens as u32)
                .collect::<Vec<_>>(),
            vec![4; 8]
        );
        let decode = m.decode_tok_s.expect("decode");
        let naive = m.naive_decode_tok_s.expect("naive");
        // 28 tokens after the first chunk, 31 by the naive count.
        assert!(
            close(naive / decode, 31.0 / 28.0, 1e-12),
            "{naive} / {decode}"
        );
        server.shutdown().await;
    });
}

/// With `--enable-metrics` the mock reports its scheduler's timings in `meta_info` as SGLang does,
/// and the client's TTFT split (`server_queue`, `server_prefill`, rest) gives back the ground truth:
/// the queue wait, the time from admission to the first chunk's handover less the way out, and
/// the way in and out (`stream_latency_s`, outside the server's timing as SGLang's HTTP is), with
/// nothing else on a loopback connection of the paused clock.
#[test]
fn the_ttft_split_from_sglang_timings_equals_the_ground_truth() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let mut cfg = common::preset("small-cpu-demo");
        cfg.enable_metrics = true;
        let way_ms = 3.0;
        cfg.stream_latency_s = way_ms / 1e3;
        // One request at a time: the second and third wait in the queue.
        cfg.max_running_requests = 1;
        let server = common::start(cfg).await;
        let sends = (0..3u64).map(|i| {
            let server = &server;
            async move {
                let rid = format!("split-{i}");
                let p = common::prompt(11, 4096, i);
                (
                    rid.clone(),
                    common::send(server, Dialect::Sglang, &rid, p, 16).await,
                )
            }
        });
        let traces = futures::future::join_all(sends).await;
        let mut queued = 0;
        for (rid, trace) in traces {
            let truth = server.truth().request(&rid).expect("truth");
            let m = measure(&trace).expect("measurement");
            let split = bench_client::measure::ttft_split(&trace, m.ttft_ms).expect("split");
            let queue = ms(truth.queue_wait_ns);
            let first = ms(truth.chunks[0].at_ns);
            let got_queue = split.server_queue_ms.expect("queue");
            let got_prefill = split.server_prefill_ms.expect("prefill");
            let rest = split.rest_ms.expect("rest");
            assert!(
                (got_queue - queue).abs() < 1e-3,
                "{rid}: {got_queue} vs {queue}"
            );
            assert!(
                (got_prefill - (first - queue - way_ms)).abs() < 1e-3,
                "{rid}: {got_prefill} vs {}",
                first - queue - way_ms
            );
            assert!((rest - way_ms).abs() < 1e-3, "{rid}: rest {rest} ms");
            queued += usize::from(queue > 0.0);
        }
        assert!(queued >= 2, "two requests waited in the queue");
        server.shutdown().await;
    });
}
