//! The prefix cache of a load run against the mock: with one request in flight the hit ratio is
//! what the shared-prefix workload predicts, the hits and misses are the engine's and add up to the
//! requests, the server's `/metrics` counters give the same ratio, and two files of one run merge
//! to the run whole.

use std::path::Path;

use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{Arrivals, LenDist, Schedule, Stop, Timeouts, Workload};
use bench_client::report::cache::ServerCache;
use bench_client::report::{merge_files, LoadSummary, Slo};
use bench_client::results::read_records;

use crate::common;

fn cfg(url: String, out: &Path, concurrency: u32, requests: u64, w: Workload) -> LoadConfig {
    let s = Schedule::new(
        Arrivals::Closed { concurrency },
        Stop::Requests(requests),
        21,
    )
    .unwrap();
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
            s,
            w,
            out.to_path_buf(),
        )
    }
}

const GROUPS: u32 = 4;
const PREFIX: u32 = 64;
const SUFFIX: u32 = 16;
const REQUESTS: u64 = 48;

#[test]
fn one_in_flight_the_hit_ratio_is_the_workloads_and_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prefix.jsonl");
    common::paused_runtime().block_on(async {
        let mut c = common::preset("small-cpu-demo");
        c.enable_metrics = true;
        let server = common::start(c).await;
        let w = Workload::SharedPrefix {
            groups: GROUPS,
            prefix_len: PREFIX,
            input: LenDist::Fixed { n: SUFFIX },
            output: LenDist::Fixed { n: 4 },
        };
        let o = run_load(&cfg(server.url(), &out, 1, REQUESTS, w))
            .await
            .unwrap();
        // One request at a time: each group's first request finds nothing, every later one finds
        // its group's prefix and no more (suffixes never share a first token).
        let hits = REQUESTS - u64::from(GROUPS);
        let want =
            (hits * u64::from(PREFIX)) as f64 / (REQUESTS * u64::from(PREFIX + SUFFIX)) as f64;
        let s = &o.summary;
        assert_eq!(s.cache.hit_ratio(), Some(want));
        assert_eq!(s.derived().cache_hit_rate, Some(want));
        assert_eq!((s.cache.reported, s.cache.unreported), (REQUESTS, 0));
        assert_eq!(s.cache.hit.count(), hits);
        assert_eq!(s.cache.miss.count(), u64::from(GROUPS));
        assert_eq!(
            s.cache.hit.count() + s.cache.miss.count(),
            s.metrics["ttft"].count()
        );
        // The split is the engine's: its hits are the requests it served from the cache, and the
        // slowest hit's TTFT from the schedule is its queue time plus the engine's first chunk.
        let recs = read_records(&out).unwrap();
        let mut slowest_hit = 0;
        for r in &recs {
            let t = server.truth().request(&r.rid).unwrap();
            let group_first = r.load.as_ref().unwrap().index < u64::from(GROUPS);
            assert_eq!(
                t.cached_tokens,
                if group_first { 0 } else { PREFIX as usize }
            );
            if t.cached_tokens > 0 {
                let ttft = r.load.as_ref().unwrap().client_queue_ns + t.chunks[0].at_ns;
                slowest_hit = slowest_hit.max(ttft);
            }
        }
        assert_eq!(s.cache.hit.max(), Some(slowest_hit));
        // A miss prefills 80 tokens, a hit 16: the split shows it.
        assert!(s.cache.hit.mean().unwrap() < s.cache.miss.mean().unwrap());
        // The server's counters over the run give the same ratio; its gauge is not differenced.
        let m = o.metrics.unwrap();
        let sc: ServerCache = m.cache().unwrap();
        assert_eq!(sc.hits_counter, "sglang:cached_tokens_total");
        assert_eq!(sc.hit_tokens, s.cache.cached_tokens as f64);
        assert_eq!(sc.ratio(), Some(want));
        assert!(!m
            .deltas()
            .keys()
            .any(|k| k.starts_with("sglang:cache_hit_rate")));
        assert!(m.render().contains("sglang:cache_hit_rate{"));
        server.shutdown().await;
    });
    // Two files holding the run's requests, odd and even, merge to the run whole.
    let text = std::fs::read_to_string(&out).unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let (odd, even): (Vec<(usize, &str)>, Vec<_>) =
        text.lines().enumerate().partition(|(i, _)| i % 2 == 1);
    let lines = |v: Vec<(usize, &str)>| v.iter().map(|(_, l)| format!("{l}\n")).collect::<String>();
    std::fs::write(&a, lines(odd)).unwrap();
    std::fs::write(&b, lines(even)).unwrap();
    let whole = LoadSummary::from_records(&read_records(&out).unwrap(), Slo::default());
    let (merged, _) = merge_files(&[a, b], Slo::default()).unwrap();
    assert!(merged.cache.hit.count() > 0 && merged.cache.miss.count() > 0);
    assert_eq!(merged.cache, whole.cache);
}

#[test]
fn many_in_flight_the_responses_the_engine_and_the_counters_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("busy.jsonl");
    common::paused_runtime().block_on(async {
        let mut c = common::preset("small-cpu-demo");
        c.enable_metrics = true;
        let server = common::start(c).await;
        let w = Workload::SharedPrefix {
            groups: 3,
            prefix_len: 128,
            input: LenDist::Uniform { lo: 8, hi: 40 },
            output: LenDist::Uniform { lo: 2, hi: 9 },
        };
        let o = run_load(&cfg(server.url(), &out, 12, 90, w)).await.unwrap();
        let truth = server.truth().all();
        let cached: usize = truth.iter().map(|t| t.cached_tokens).sum();
        let prompt: usize = truth.iter().map(|t| t.prompt_tokens).sum();
        let engine_hits = truth.iter().filter(|t| t.cached_tokens > 0).count() as u64;
        let s = &o.summary;
        assert_eq!(s.cache.hit_ratio(), Some(cached as f64 / prompt as f64));
        assert_eq!(s.cache.hit.count(), engine_hits);
        assert_eq!(s.cache.miss.count(), 90 - engine_hits);
        // Requests sent together before their group's first finished found nothing: some misses
        // beyond the three groups' first requests.
        assert!(s.cache.miss.count() > 3, "{}", s.cache.miss.count());
        let sc = o.metrics.unwrap().cache().unwrap();
        assert_eq!(sc.ratio(), s.cache.hit_ratio());
        server.shutdown().await;
    });
}
