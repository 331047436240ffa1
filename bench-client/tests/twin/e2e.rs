//! The measured twin's round trip on tokio's paused clock: a sweep and a load run of a generated
//! mock, calibrated, give back the mock's own cost parameters, and the twin's sweep equals the
//! original's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::schedule::{Arrivals, Schedule, Stop};
use bench_client::plan::workload::{LenDist, Workload};
use bench_client::plan::Timeouts;
use bench_client::report::Report;
use bench_client::results::read_records;
use bench_client::twin::{calibrate_files, CalibrateOptions};
use bench_client::{Dialect, Target};
use mock_server::{Config, MockServer};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// Sixteen contexts: the sweep alone pins the prefill fit (the load run's stretches of passes
/// join only a three-context fit).
fn contexts() -> Vec<u32> {
    (0..16).map(|i| 2000 + 450 * i).collect()
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

fn target(s: &MockServer) -> Target {
    Target {
        base_url: s.url(),
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    }
}

async fn sweep(s: &MockServer, out: &Path, contexts: Vec<u32>) {
    let cfg = SweepConfig {
        stamping: Stamping::Socket,
        contexts,
        output_tokens: 64,
        runs: 1,
        warmup: 0,
        seed: 11,
        timeouts: Timeouts::default(),
        crash_wait: Duration::from_secs(0),
        command: "twin round trip".into(),
        simulated: true,
        ..SweepConfig::new(out.to_path_buf())
    };
    let o = run_sweep(&Destination::server(target(s)), &cfg)
        .await
        .unwrap();
    assert!(o.stopped.is_none(), "{:?}", o.stopped);
}

async fn load(s: &MockServer, out: &Path, input: u32) {
    let schedule =
        Schedule::new(Arrivals::Closed { concurrency: 4 }, Stop::Requests(16), 5).unwrap();
    let workload = Workload::Random {
        input: LenDist::Fixed { n: input },
        // Outputs of different lengths, so that requests start while others decode.
        output: LenDist::Uniform { lo: 64, hi: 192 },
    };
    let cfg = LoadConfig {
        stamping: Stamping::Socket,
        prompt_salt: Some(3),
        seed: 5,
        scrape_metrics: false,
        command: "twin round trip".into(),
        simulated: true,
        ..LoadConfig::new(target(s), schedule, workload, out.to_path_buf())
    };
    run_load(&cfg).await.unwrap();
}

/// Median TTFT and decode rate per context of a sweep's results.
fn medians(out: &Path) -> Vec<(u32, f64, f64)> {
    Report::from_records(&read_records(out).unwrap())
        .summary()
        .iter()
        .map(|s| {
            (
                s.context_tokens,
                s.ttft_ms_p50.expect("ttft"),
                s.decode_tok_s_p50.expect("decode"),
            )
        })
        .collect()
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs()
}

/// A mock with generated costs: chunked prefill, either scheduler (mixed batches or not), results
/// processed at once or after the next pass, a batch cost, and speculation (after a warm-up of
/// one-token steps, its first chunk a verify step or the prefill's token alone) whose verify
/// steps accept a fixed number of drafts (rates 1 then 0), so the twin draws the same tokens.
/// Passes last tens of milliseconds, so that the paused clock's late reads (up to 1 ms, a load run's
/// events after the first of a pass) stay well under 1% of what is compared.
fn model() -> impl Strategy<Value = Config> {
    (
        prop_oneof![Just(512i64), Just(1024), Just(2048)],
        // The pair cost from 5e-9: below it, its whole share of the longest TTFT is under 0.2 s.
        (0.05f64..0.15, 5e-5f64..2e-4, 5e-9f64..2e-8),
        (0.02f64..0.05, 5e-7f64..4e-6, 0.002f64..0.01),
        (0usize..=3).prop_flat_map(|d| (Just(d), 0..=d)),
        (any::<bool>(), any::<bool>(), 0usize..3, any::<bool>()),
    )
        .prop_map(
            |(
                chunk,
                (pb, pt, pp),
                (db, dc, dr),
                (draft, accepted),
                (mixed, lag, warmup, alone),
            )| {
                let mut c = Config::preset("small-cpu-demo").unwrap();
                c.port = 0;
                c.chunked_prefill_size = chunk;
                c.mixed_batches = mixed;
                c.results_after_next_pass = lag;
                (
                    c.prefill_base_s,
                    c.prefill_per_token_s,
                    c.prefill_per_token_pair_s,
                ) = (pb, pt, pp);
                (
                    c.decode_base_s,
                    c.decode_per_context_token_s,
                    c.decode_per_request_s,
                ) = (db, dc, dr);
                if draft == 0 {
                    c.speculative_algorithm = "none".into();
                } else {
                    c.speculative_num_draft_tokens = draft;
                    c.spec_accept_rates = (0..draft)
                        .map(|i| f64::from(u8::from(i < accepted)))
                        .collect();
                    c.spec_warmup_steps = warmup;
                    c.spec_first_token_alone = alone;
                }
                c
            },
        )
}

fn accepted_any(c: &Config) -> bool {
    c.spec_accept_rates.first().is_some_and(|&r| r > 0.0)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 6,
        // An integration test has no lib.rs beside it for proptest's default file: failing
        // cases are kept here and replayed first on the next run.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/twin/e2e.proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_calibrated_twin_gives_back_the_mock(mock in model()) {
        let dir = tempfile::tempdir().unwrap();
        let twin = calibrated(dir.path(), &mock, contexts(), 128);
        let (sw, twin_sw) = (dir.path().join("sweep.jsonl"), dir.path().join("twin.jsonl"));
        let c = &twin.config;
        for (name, got, want) in [
            ("prefill_base_s", c.prefill_base_s, mock.prefill_base_s),
            ("prefill_per_token_s", c.prefill_per_token_s, mock.prefill_per_token_s),
            ("prefill_per_token_pair_s", c.prefill_per_token_pair_s, mock.prefill_per_token_pair_s),
            ("decode_base_s", c.decode_base_s, mock.decode_base_s),
            ("decode_per_context_token_s", c.decode_per_context_token_s, mock.decode_per_context_token_s),
            ("decode_per_request_s", c.decode_per_request_s, mock.decode_per_request_s),
        ] {
            prop_assert!(close(got, want, 0.02), "{name}: fitted {got}, mock {want}\n{}", twin.text);
        }
        prop_assert_eq!(c.chunked_prefill_size, mock.chunked_prefill_size);
        prop_assert_eq!(c.mixed_batches, mock.mixed_batches);
        prop_assert_eq!(c.results_after_next_pass, mock.results_after_next_pass);
        prop_assert_eq!(c.speculative(), mock.speculative());
        if mock.speculative() {
            prop_assert_eq!(&c.spec_accept_rates, &mock.spec_accept_rates);
            // With no draft ever accepted, every step is one token and no warm-up shows.
            if accepted_any(&mock) {
                prop_assert_eq!(c.spec_warmup_steps, mock.spec_warmup_steps);
                // Every request warms up alike: all of the shares at the mock's warm-up.
                let shares: Vec<f64> = (0..=mock.spec_warmup_steps)
                    .map(|i| f64::from(u8::from(i == mock.spec_warmup_steps)))
                    .collect();
                let want = if mock.spec_warmup_steps > 0 { shares } else { Vec::new() };
                prop_assert_eq!(&c.spec_warmup_shares, &want);
                prop_assert_eq!(c.spec_first_token_alone, mock.spec_first_token_alone);
            }
        }
        prop_assert_eq!(c.kv_pool_tokens(), mock.kv_pool_tokens());
        // The twin, run from the preset file as a user would, sweeps like the original.
        let file = dir.path().join("twin.toml");
        std::fs::write(&file, &twin.text).unwrap();
        let mut twin_cfg = Config::preset_file(&file).unwrap();
        twin_cfg.port = 0;
        paused().block_on(async {
            let s = MockServer::start(twin_cfg).await.unwrap();
            sweep(&s, &twin_sw, contexts()).await;
            s.shutdown().await;
        });
        let (a, b) = (medians(&sw), medians(&twin_sw));
        prop_assert_eq!(a.len(), contexts().len());
        for ((ctx, ttft, dec), (_, ttft2, dec2)) in a.iter().zip(&b) {
            prop_assert!(close(*ttft2, *ttft, 0.01), "TTFT p50 at {ctx}: twin {ttft2}, mock {ttft}");
            prop_assert!(close(*dec2, *dec, 0.01), "decode p50 at {ctx}: twin {dec2}, mock {dec}");
        }
    }


    /// Three sweep contexts (as the live check runs) cannot tell the way in and out from a
    /// pass's base cost; the load run's stretches of prefill passes, which hold none of it, tell
    /// them apart. Only where a pass's results leave at its end: after the next pass, a prefill
    /// pass that finishes no prompt shows its end nowhere, and the stretches are not read.
    #[test]
    fn three_contexts_and_a_load_run_give_back_the_way_in_and_out(
        mock in model(),
        way in 0.002f64..0.02,
    ) {
        let mut mock = mock;
        mock.stream_latency_s = way;
        mock.results_after_next_pass = false;
        let dir = tempfile::tempdir().unwrap();
        // Lengths whose passes are not proportional to their tokens at any chunk size drawn.
        let twin = calibrated(dir.path(), &mock, vec![1300, 4100, 8700], 1024);
        let c = &twin.config;
        for (name, got, want) in [
            ("stream_latency_s", c.stream_latency_s, mock.stream_latency_s),
            ("prefill_base_s", c.prefill_base_s, mock.prefill_base_s),
            ("prefill_per_token_s", c.prefill_per_token_s, mock.prefill_per_token_s),
            ("prefill_per_token_pair_s", c.prefill_per_token_pair_s, mock.prefill_per_token_pair_s),
        ] {
            prop_assert!(close(got, want, 0.02), "{name}: fitted {got}, mock {want}\n{}", twin.text);
        }
    }
}

/// A calibration from the mock's own runs on the paused clock, their results in `dir`
/// (`sweep.jsonl`, `load.jsonl`): `contexts` swept alone, then a load run of `input`-token prompts.
fn calibrated(
    dir: &Path,
    mock: &Config,
    contexts: Vec<u32>,
    input: u32,
) -> bench_client::twin::Twin {
    let (sw, ld) = (dir.join("sweep.jsonl"), dir.join("load.jsonl"));
    paused().block_on(async {
        let s = MockServer::start(mock.clone()).await.unwrap();
        sweep(&s, &sw, contexts).await;
        load(&s, &ld, input).await;
        s.shutdown().await;
        calibrate_files(&CalibrateOptions {
            files: vec![sw.clone(), ld.clone()],
            base: "small-cpu-demo".into(),
            chunked_prefill_size: None,
            contexts: None,
        })
        .unwrap()
    })
}
