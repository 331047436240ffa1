//! The mission story, reproduced against the mock: the two-point method's cache failure, the doubled
//! prefills of flushing between its requests, the OOM at 32k with mem_fraction_static 0.94 that keeps
//! every earlier point, and the sweep that completes at 0.93 with chunked prefill 4096.

use std::path::Path;
use std::time::Duration;

use bench_client::api::Dialect;
use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::measure::measure;
use bench_client::net::stamped::Stamping;
use bench_client::plan::Timeouts;
use bench_client::results::{read_records, Method, Record};
use mock_server::{MockServer, RequestTruth};

use crate::common::{self, ms};

fn dest(server: &MockServer) -> Destination {
    Destination::server(common::target(server, Dialect::Sglang))
}

fn sweep_cfg(out: &Path, contexts: &[u32], method: Method, flush: bool) -> SweepConfig {
    SweepConfig {
        stamping: Stamping::Socket,
        contexts: contexts.to_vec(),
        output_tokens: 16,
        runs: 1,
        warmup: 0,
        method,
        flush_cache: flush,
        seed: 7,
        timeouts: Timeouts::default(),
        crash_wait: Duration::from_secs(0),
        command: "conformance story".into(),
        ..SweepConfig::new(out.to_path_buf())
    }
}

fn prefilled_tokens(t: &RequestTruth) -> usize {
    t.prefill_passes.iter().map(|p| p.tokens).sum()
}

/// Without a flush, the radix cache serves request b's prompt: the two-point method must name the
/// cache hit (never NaN), while the streaming point beside it is finite and matches ground truth.
#[test]
fn two_point_names_the_cache_hit_and_streaming_matches_truth() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.jsonl");
        let outcome = run_sweep(
            &dest(&server),
            &sweep_cfg(&out, &[4096], Method::TwoPoint, false),
        )
        .await
        .unwrap();
        assert!(outcome.stopped.is_none(), "{:?}", outcome.stopped);
        let recs = read_records(&out).unwrap();
        let tp: Vec<&Record> = recs
            .iter()
            .filter(|r| r.method == Method::TwoPoint)
            .collect();
        let st: Vec<&Record> = recs
            .iter()
            .filter(|r| r.method == Method::Streaming)
            .collect();
        assert_eq!((tp.len(), st.len()), (1, 1), "{recs:#?}");

        let err = tp[0]
            .error
            .as_ref()
            .expect("two-point must fail on a cache hit");
        assert_eq!(err.kind, "cache-hit", "{err:?}");
        assert!(tp[0].decode_tok_s.is_none() && tp[0].prefill_tok_s.is_none());
        let b_rid = &tp[0].rid;
        let b_truth = server.truth().request(b_rid).expect("truth of b");
        assert_eq!(
            b_truth.cached_tokens, 4095,
            "the radix cache serves prompt length - 1"
        );
        assert_eq!(tp[0].cached_tokens, Some(4095));
        assert!(err.message.contains("4095"), "{}", err.message);

        let s = st[0];
        assert!(!s.contaminated && s.error.is_none(), "{s:#?}");
        let truth = server.truth().request(&s.rid).expect("truth");
        let trace = s.trace.as_ref().expect("trace");
        let m = measure(trace).unwrap();
        assert!((m.ttft_ms - ms(truth.chunks[0].at_ns)).abs() < 1e-6);
        assert!(s.decode_tok_s.is_some_and(f64::is_finite));
        assert_eq!(s.cached_tokens.unwrap_or(0), 0);
        server.shutdown().await;
    });
}

/// With --flush-cache the two-point method works again, at the price of twice the prefill work of
/// the streaming method (counted in ground truth).
#[test]
fn flushing_between_two_point_requests_doubles_the_prefills() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.jsonl");
        let ctx = 8192;
        run_sweep(
            &dest(&server),
            &sweep_cfg(&out, &[ctx], Method::TwoPoint, true),
        )
        .await
        .unwrap();
        let recs = read_records(&out).unwrap();
        let tp = recs.iter().find(|r| r.method == Method::TwoPoint).unwrap();
        let st = recs.iter().find(|r| r.method == Method::Streaming).unwrap();
        assert!(tp.error.is_none(), "{:?}", tp.error);
        let detail = tp.two_point.as_ref().unwrap();
        assert!(detail.flushed);
        assert_eq!(detail.cached_tokens_b.unwrap_or(0), 0);
        assert!(tp.decode_tok_s.is_some_and(|d| d.is_finite() && d > 0.0));

        let truth = server.truth();
        let a_rid = &detail.trace_a.as_ref().unwrap().rid;
        let two_point_prefill = prefilled_tokens(&truth.request(a_rid).unwrap())
            + prefilled_tokens(&truth.request(&tp.rid).unwrap());
        let streaming_prefill = prefilled_tokens(&truth.request(&st.rid).unwrap());
        assert_eq!(streaming_prefill, ctx as usize);
        assert_eq!(two_point_prefill, 2 * streaming_prefill);
        server.shutdown().await;
    });
}

/// Repeating a prompt without cache busting yields len - 1 cached tokens, and the client flags it.
#[test]
fn repeated_prompt_is_served_from_cache_and_flagged() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let p = common::prompt(3, 32_000, 1);
        let first = common::send(&server, Dialect::Sglang, "rep-1", p.clone(), 8).await;
        let second = common::send(&server, Dialect::Sglang, "rep-2", p, 8).await;
        assert_eq!(first.cached_tokens().unwrap_or(0), 0);
        assert_eq!(second.cached_tokens(), Some(31_999));
        let truth = server.truth();
        assert_eq!(truth.request("rep-2").unwrap().cached_tokens, 31_999);
        let (m1, m2) = (measure(&first).unwrap(), measure(&second).unwrap());
        assert!(
            m2.ttft_ms < m1.ttft_ms,
            "a cache hit skips prefill: {} vs {}",
            m2.ttft_ms,
            m1.ttft_ms
        );
        let rec = Record::streaming(second, 32_000, 0);
        assert!(rec.contaminated, "{rec:#?}");
        assert!(
            rec.contamination.iter().any(|c| c.contains("31999")),
            "{:?}",
            rec.contamination
        );
        let rec1 = Record::streaming(first, 32_000, 0);
        assert!(!rec1.contaminated);
        server.shutdown().await;
    });
}

const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

/// mem_fraction_static 0.94: the sweep dies at 32k, every earlier point is on disk; restarted at 0.93
/// with chunked prefill 4096 and expandable segments, `resume` finishes the sweep to 185k.
#[test]
fn kimi_oom_at_32k_keeps_earlier_points_and_resume_finishes() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let contexts = [
            1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 185_000,
        ];
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("kimi.jsonl");

        let server = common::start(common::preset(KIMI)).await;
        let mut cfg = sweep_cfg(&out, &contexts, Method::Streaming, false);
        cfg.output_tokens = 8;
        let outcome = run_sweep(&dest(&server), &cfg).await.unwrap();
        let reason = server.crashed().expect("the server must die of OOM at 32k");
        assert!(reason.to_lowercase().contains("out of memory"), "{reason}");
        assert!(
            outcome.stopped.is_some(),
            "the sweep must stop when the server is gone"
        );
        let truth_32k: Vec<_> = server
            .truth()
            .all()
            .into_iter()
            .filter(|t| t.prompt_tokens == 32_000)
            .collect();
        assert!(!truth_32k.is_empty());
        server.shutdown().await;

        let recs = read_records(&out).unwrap();
        let ok: Vec<u32> = recs
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| r.context_tokens)
            .collect();
        assert_eq!(
            ok,
            vec![1000, 2000, 4000, 8000, 16_000],
            "every point before 32k is kept"
        );
        let failed: Vec<&Record> = recs.iter().filter(|r| r.error.is_some()).collect();
        assert_eq!(failed.len(), 1, "{recs:#?}");
        assert_eq!(failed[0].context_tokens, 32_000);

        let mut cfg2 = common::preset(KIMI);
        cfg2.mem_fraction_static = 0.93;
        cfg2.chunked_prefill_size = 4096;
        cfg2.expandable_segments = true;
        let server = common::start(cfg2).await;
        let mut cfg = sweep_cfg(&out, &contexts, Method::Streaming, false);
        cfg.output_tokens = 8;
        cfg.resume = true;
        let outcome = run_sweep(&dest(&server), &cfg).await.unwrap();
        assert!(outcome.stopped.is_none(), "{:?}", outcome.stopped);
        assert!(server.crashed().is_none());
        assert_eq!(
            outcome.skipped, 5,
            "the five measured points are not measured again"
        );
        server.shutdown().await;

        let recs = read_records(&out).unwrap();
        let mut ok: Vec<u32> = recs
            .iter()
            .filter(|r| r.error.is_none())
            .map(|r| r.context_tokens)
            .collect();
        ok.sort_unstable();
        assert_eq!(
            ok,
            contexts.to_vec(),
            "after resume every context has a good point"
        );
        // Decode slows with context, as in the story (109 tok/s at 1k, 13.8 tok/s at 8k).
        let decode = |c: u32| {
            recs.iter()
                .find(|r| r.context_tokens == c && r.error.is_none())
                .and_then(|r| r.decode_tok_s)
                .unwrap()
        };
        assert!(
            decode(1000) > 5.0 * decode(8000),
            "{} vs {}",
            decode(1000),
            decode(8000)
        );
    });
}
