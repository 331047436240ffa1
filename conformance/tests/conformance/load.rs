//! Load runs against the mock's ground truth: the shared-prefix workload's cache hit rate equals what
//! the engine cached, TTFT after the send equals the engine's first chunk, and with a start already
//! past the client queue time is recorded apart and TTFT from the schedule is queue time + TTFT.

use std::time::Duration;

use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::Timeouts;
use bench_client::plan::{Arrivals, LenDist, Schedule, Stop, Workload};
use bench_client::results::read_records;

use crate::common;

fn cfg(url: String, out: &std::path::Path, schedule: Schedule, workload: Workload) -> LoadConfig {
    LoadConfig {
        stamping: Stamping::Socket,
        timeouts: Timeouts::default(),
        prompt_salt: Some(1),
        seed: 21,
        command: "conformance".into(),
        ..LoadConfig::new(
            bench_client::Target {
                base_url: url,
                dialect: bench_client::Dialect::Sglang,
                model: None,
                api_key: None,
            },
            schedule,
            workload,
            out.to_path_buf(),
        )
    }
}

#[test]
fn shared_prefix_cache_hit_rate_matches_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prefix.jsonl");
    common::paused_runtime().block_on(async {
        let mut c = common::preset("small-cpu-demo");
        c.enable_metrics = true;
        let server = common::start(c).await;
        let s = Schedule::new(Arrivals::Closed { concurrency: 8 }, Stop::Requests(96), 21).unwrap();
        let w = Workload::SharedPrefix {
            groups: 4,
            prefix_len: 64,
            input: LenDist::Uniform { lo: 4, hi: 24 },
            output: LenDist::Fixed { n: 4 },
        };
        let o = run_load(&cfg(server.url(), &out, s, w)).await.unwrap();
        let truth = server.truth().all();
        assert_eq!(truth.len(), 96);
        let cached: usize = truth.iter().map(|t| t.cached_tokens).sum();
        let prompt: usize = truth.iter().map(|t| t.prompt_tokens).sum();
        let want = cached as f64 / prompt as f64;
        let got = o.summary.derived().cache_hit_rate.unwrap();
        assert_eq!(got, want);
        // The workload really exercised the cache: most of each group's 64-token prefix was served.
        assert!(got > 0.4, "cache hit rate {got}");
        // The server's /metrics agree over the run.
        let d = o.metrics.unwrap().deltas();
        assert_eq!(
            bench_client::report::server_metrics::by_name(&d, "sglang:cached_tokens_total"),
            Some(cached as f64)
        );
        // Each record's group is the one whose prefix it carried.
        let recs = read_records(&out).unwrap();
        assert!(recs.iter().all(|r| r.load.as_ref().unwrap().prefix_group
            == Some((r.load.as_ref().unwrap().index % 4) as u32)));
        server.shutdown().await;
    });
}

#[test]
fn ttft_is_measured_from_the_scheduled_start_with_queue_time_apart() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("late.jsonl");
    common::paused_runtime().block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let arr = Arrivals::Open {
            rate: 50.0,
            kind: bench_client::plan::ArrivalKind::Poisson,
            burstiness: 1.0,
        };
        let s = Schedule::new(arr, Stop::Requests(20), 21).unwrap();
        let slots = s.slots();
        let w = Workload::Random {
            input: LenDist::Fixed { n: 40 },
            output: LenDist::Fixed { n: 6 },
        };
        let mut c = cfg(server.url(), &out, s, w);
        // A shared start 2 s in the past: every request that was due before now leaves late.
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        c.start_at_unix_ms = Some(now_ms - 2000);
        run_load(&c).await.unwrap();
        let recs = read_records(&out).unwrap();
        assert_eq!(recs.len(), 20);
        for r in &recs {
            let l = r.load.as_ref().unwrap();
            let slot = slots.iter().find(|s| s.index == l.index).unwrap();
            assert_eq!(l.scheduled_ns, slot.offset_ns);
            assert_eq!(l.client_queue_ns, l.sent_ns - l.scheduled_ns);
            // Every slot is due within 2 s of the start; the wall clock moved on a little while the
            // runtime started, so each request left at least (2 s - its offset) late.
            let due_late =
                Duration::from_secs(2).as_nanos() as u64 - slot.offset_ns.min(2_000_000_000);
            assert!(
                l.client_queue_ns >= due_late,
                "{} < {due_late}",
                l.client_queue_ns
            );
            let truth = server.truth().request(&r.rid).unwrap();
            let engine_ttft_ns = truth.chunks.first().unwrap().at_ns;
            assert_eq!(r.ttft_ms, Some(common::ms(engine_ttft_ns)));
            assert_eq!(
                l.ttft_from_schedule_ms,
                Some(common::ms(l.client_queue_ns + engine_ttft_ns))
            );
        }
        server.shutdown().await;
    });
}

/// Two runs with the same seed against one server: the second is not served from the prefix cache the
/// first left warm (prompt contents are salted per run; lengths and schedule stay those of the seed).
#[test]
fn a_second_run_with_the_same_seed_is_not_served_from_cache() {
    let dir = tempfile::tempdir().unwrap();
    common::paused_runtime().block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let w = Workload::Random {
            input: LenDist::Fixed { n: 256 },
            output: LenDist::Fixed { n: 4 },
        };
        for run in 0..2 {
            let out = dir.path().join(format!("run{run}.jsonl"));
            let s =
                Schedule::new(Arrivals::Closed { concurrency: 4 }, Stop::Requests(32), 21).unwrap();
            let mut c = cfg(server.url(), &out, s, w.clone());
            // A run without --start-at draws its salt at random; fixed here so the test is
            // deterministic. Consecutive prompts of one run never share a first token, and these two
            // salts put the runs' first tokens in disjoint ranges.
            c.prompt_salt = Some(0x5a17 + run);
            let o = run_load(&c).await.unwrap();
            assert_eq!(o.summary.derived().cache_hit_rate, Some(0.0), "run {run}");
        }
        let cached: usize = server.truth().all().iter().map(|t| t.cached_tokens).sum();
        assert_eq!(cached, 0);
        server.shutdown().await;
    });
}
