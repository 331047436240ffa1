//! Load runs against the in-process mock on tokio's paused clock: a closed loop at concurrency 64 and
//! an open Poisson loop write JSONL and a summary; two shards of one schedule merged give the same
//! counts (and the same latency histograms) as one unsharded run; `--resume` skips done indices; and
//! the summary merges exactly: merge(summary(a), summary(b)) == summary(a ++ b); `report --html`
//! shows a file's slowest requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

mod support;
use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::Timeouts;
use bench_client::plan::{ArrivalKind, Arrivals, LenDist, Schedule, Shard, Stop, Workload};
use bench_client::report::export::{json, table};
use bench_client::report::server_metrics::by_name;
use bench_client::report::{LoadSummary, Slo};
use bench_client::results::load_record;
use bench_client::results::LoadInfo;
use bench_client::results::{read_records, Record};
use bench_client::trace::{Chunk, RequestTrace, StreamEnd, TokenAttribution, Usage};
use bench_client::Dialect;
use bench_client::Target;
use mock_server::{Config, MockServer};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use support::paused_runtime;

async fn mock() -> MockServer {
    let mut c = Config::preset("small-cpu-demo").unwrap();
    c.enable_metrics = true;
    c.port = 0;
    c.host = "127.0.0.1".into();
    MockServer::start(c).await.unwrap()
}

fn config(url: &str, out: &Path, schedule: Schedule, workload: Workload) -> LoadConfig {
    let target = Target {
        base_url: url.to_string(),
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    };
    LoadConfig {
        stamping: Stamping::Socket,
        timeouts: Timeouts::default(),
        prompt_salt: Some(1),
        seed: 11,
        slo: Slo {
            ttft_ms: Some(50.0),
            tpot_ms: Some(5.0),
        },
        command: "test".into(),
        ..LoadConfig::new(target, schedule, workload, out.to_path_buf())
    }
}

fn small() -> Workload {
    Workload::Random {
        input: LenDist::Uniform { lo: 16, hi: 48 },
        output: LenDist::Uniform { lo: 2, hi: 12 },
    }
}

fn indices(recs: &[Record]) -> BTreeSet<u64> {
    recs.iter()
        .map(|r| r.load.as_ref().unwrap().index)
        .collect()
}

#[test]
fn closed_loop_at_concurrency_64_writes_jsonl_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("closed.jsonl");
    paused_runtime().block_on(async {
        let server = mock().await;
        let s = Schedule::new(
            Arrivals::Closed { concurrency: 64 },
            Stop::Requests(256),
            11,
        )
        .unwrap();
        let mut cfg = config(&server.url(), &out, s, small());
        cfg.warmup = 4;
        let o = run_load(&cfg).await.unwrap();
        assert_eq!(o.written, 256);
        let recs = read_records(&out).unwrap();
        assert_eq!(indices(&recs), (0..256).collect());
        assert!(recs.iter().all(|r| r.error.is_none()));
        // Load records stay valid against the committed schema.
        let schema: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/schema/record.schema.json"
            ))
            .unwrap(),
        )
        .unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        for line in std::fs::read_to_string(&out).unwrap().lines().take(20) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.get("load").is_some());
            let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{errors:?}");
        }
        // Warm-up requests reached the server but are not recorded.
        let truth = server.truth().all();
        assert_eq!(truth.len(), 260);
        assert_eq!(truth.iter().filter(|t| t.rid.contains("-w")).count(), 4);
        // Client-measured TTFT equals the mock's ground truth (same paused clock).
        for r in &recs {
            let t = server.truth().request(&r.rid).unwrap();
            let first = t.chunks.first().unwrap().at_ns;
            assert_eq!(r.ttft_ms, Some(first as f64 / 1e6), "{}", r.rid);
            assert_eq!(r.completion_tokens, Some(t.completion_tokens as u32));
        }
        let sum = &o.summary;
        assert_eq!(sum.requests, 256);
        assert_eq!(sum.succeeded, 256);
        let d = sum.derived();
        let conc = d.achieved_concurrency.unwrap();
        assert!(
            conc > 32.0 && conc <= 64.0 + 1e-9,
            "achieved concurrency {conc}"
        );
        assert_eq!(sum, &LoadSummary::from_records(&recs, cfg.slo));
        let table = table::load(sum);
        for needle in [
            "request throughput",
            "ttft",
            "sglang_vllm_itl",
            "timeline",
            "goodput",
        ] {
            assert!(table.contains(needle), "{needle} missing in\n{table}");
        }
        let m = o.metrics.expect("the mock serves /metrics");
        let deltas = m.deltas();
        assert_eq!(by_name(&deltas, "sglang:num_requests_total"), Some(256.0));
        server.shutdown().await;
    });
}

#[test]
fn open_loop_poisson_starts_requests_on_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("open.jsonl");
    paused_runtime().block_on(async {
        let server = mock().await;
        let arr = Arrivals::Open {
            rate: 200.0,
            kind: ArrivalKind::Poisson,
            burstiness: 1.0,
        };
        let s = Schedule::new(arr, Stop::Duration(Duration::from_millis(500)), 5).unwrap();
        let slots = s.slots();
        let cfg = config(&server.url(), &out, s, small());
        let o = run_load(&cfg).await.unwrap();
        let recs = read_records(&out).unwrap();
        assert_eq!(recs.len(), slots.len());
        assert_eq!(o.written as usize, slots.len());
        for slot in &slots {
            let r = recs
                .iter()
                .find(|r| r.load.as_ref().unwrap().index == slot.index)
                .unwrap();
            let l = r.load.as_ref().unwrap();
            assert_eq!(l.scheduled_ns, slot.offset_ns);
            // On the paused clock a send leaves at its slot, or up to 1 ms late when another wait
            // ended within the millisecond before it; TTFT from the schedule is that wait plus
            // TTFT from the send.
            assert!(l.client_queue_ns < 1_000_000, "{}", l.client_queue_ns);
            assert_eq!(l.sent_ns, slot.offset_ns + l.client_queue_ns);
            let ttft_ns = r.trace.as_ref().unwrap().chunks[0].at_ns;
            assert_eq!(
                l.ttft_from_schedule_ms,
                Some((l.client_queue_ns + ttft_ns) as f64 / 1e6)
            );
        }
        // The pacer's wait reaches its slot exactly where no wait of the mock's ended in the
        // millisecond before it: here (a pass every few ms, 30 us between a pass's events) about
        // a quarter of the slots; on tokio's timer alone, none.
        let on_time = recs
            .iter()
            .filter(|r| r.load.as_ref().unwrap().client_queue_ns == 0)
            .count();
        assert!(
            on_time * 5 >= recs.len(),
            "{on_time} of {} on time",
            recs.len()
        );
        let json = json::load(&o.summary);
        assert_eq!(json["requests"], slots.len() as u64);
        assert!(json["metrics"]["client_queue"]["max_ms"].as_f64().unwrap() < 1.0);
        server.shutdown().await;
    });
}

#[test]
fn two_shards_merged_match_one_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let arr = Arrivals::Open {
        rate: 100.0,
        kind: ArrivalKind::Gamma,
        burstiness: 0.5,
    };
    let s = Schedule::new(arr, Stop::Requests(60), 9).unwrap();
    let rt = paused_runtime();
    let whole = dir.path().join("whole.jsonl");
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    rt.block_on(async {
        let server = mock().await;
        run_load(&config(&server.url(), &whole, s.clone(), small()))
            .await
            .unwrap();
        server.shutdown().await;
        // Both shards against one server at the same time, with a shared start.
        let server = mock().await;
        let start = support::unix_ms();
        let mk = |i: u32, out: &Path| {
            let mut c = config(&server.url(), out, s.clone(), small());
            c.shard = Shard { index: i, count: 2 };
            c.start_at_unix_ms = Some(start);
            c
        };
        let (ca, cb) = (mk(0, &a), mk(1, &b));
        let (ra, rb) = tokio::join!(run_load(&ca), run_load(&cb));
        assert_eq!(ra.unwrap().written + rb.unwrap().written, 60);
        server.shutdown().await;
    });
    let slo = Slo::default();
    let one = LoadSummary::from_records(&read_records(&whole).unwrap(), slo);
    let (merged, ignored) =
        bench_client::report::merge_files(&[a.clone(), b.clone()], slo).unwrap();
    assert_eq!(ignored, 0);
    assert_eq!(merged.requests, one.requests);
    assert_eq!(merged.succeeded, one.succeeded);
    assert_eq!(merged.failures, one.failures);
    assert_eq!(merged.prompt_tokens, one.prompt_tokens);
    assert_eq!(merged.output_tokens, one.output_tokens);
    assert_eq!(merged.chunk_tokens, one.chunk_tokens);
    assert_eq!(merged.shards.len(), 2);
    let sched = |p: &Path| {
        read_records(p)
            .unwrap()
            .iter()
            .map(|r| {
                let l = r.load.as_ref().unwrap();
                (l.index, l.scheduled_ns, r.prompt_tokens, r.output_tokens)
            })
            .collect::<BTreeSet<_>>()
    };
    let mut union = sched(&a);
    union.extend(sched(&b));
    assert_eq!(union, sched(&whole));
    // Chunk counts depend on how the server batched concurrent streams; request counts do not.
    for m in ["ttft", "e2e", "client_queue"] {
        assert_eq!(merged.metrics[m].count(), one.metrics[m].count(), "{m}");
    }
    // The shards scraped one server over overlapping windows: the merged /metrics count the run's
    // traffic once, not once per shard.
    let server_metrics = bench_client::report::server_metrics::merge_files(&[a, b]).unwrap();
    assert!(server_metrics.missing.is_empty());
    assert_eq!(server_metrics.per_shard.len(), 2);
    assert_eq!(server_metrics.servers.len(), 1);
    assert_eq!(server_metrics.servers[0].windows.len(), 1);
    let d = server_metrics.deltas();
    assert_eq!(by_name(&d, "sglang:num_requests_total"), Some(60.0));
    assert_eq!(
        by_name(&d, "sglang:generation_tokens_total"),
        Some(merged.output_tokens as f64)
    );
    assert_eq!(
        by_name(&d, "sglang:prompt_tokens_total"),
        Some(merged.prompt_tokens as f64)
    );
}

/// Most requests in flight at once, from the records' send-to-end intervals (an end and a send at
/// the same instant do not overlap).
fn peak_in_flight(recs: &[Record]) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for r in recs {
        let l = r.load.as_ref().unwrap();
        let end = l.sent_ns + r.trace.as_ref().unwrap().end_ns;
        events.push((l.sent_ns, 1));
        events.push((end, -1));
    }
    events.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, e) in events {
        now += e;
        peak = peak.max(now);
    }
    peak as usize
}

#[test]
fn open_loop_max_concurrency_caps_requests_in_flight_and_counts_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let (capped, free) = (
        dir.path().join("capped.jsonl"),
        dir.path().join("free.jsonl"),
    );
    // 1,000 req/s of ~12-token streams: far more than 6 in flight without a cap.
    let arr = Arrivals::Open {
        rate: 1000.0,
        kind: ArrivalKind::Poisson,
        burstiness: 1.0,
    };
    let s = Schedule::new(arr, Stop::Requests(150), 13).unwrap();
    let w = Workload::Random {
        input: LenDist::Fixed { n: 32 },
        output: LenDist::Fixed { n: 12 },
    };
    paused_runtime().block_on(async {
        let server = mock().await;
        let o = run_load(&config(&server.url(), &free, s.clone(), w.clone()))
            .await
            .unwrap();
        assert_eq!(o.written, 150);
        let mut cfg = config(&server.url(), &capped, s.clone(), w.clone());
        cfg.max_concurrency = Some(6);
        let o = run_load(&cfg).await.unwrap();
        assert_eq!(o.written, 150);
        assert_eq!(o.summary.succeeded, 150);
        server.shutdown().await;
    });
    let free = read_records(&free).unwrap();
    let capped = read_records(&capped).unwrap();
    assert!(peak_in_flight(&free) > 6, "{}", peak_in_flight(&free));
    assert_eq!(peak_in_flight(&capped), 6);
    let queue = |recs: &[Record]| -> Vec<u64> {
        recs.iter()
            .map(|r| r.load.as_ref().unwrap().client_queue_ns)
            .collect()
    };
    // Uncapped, only the timer's granularity delays a send; capped, arrivals wait for a free slot
    // and the wait is client_queue_time, kept out of TTFT after the send and inside TTFT from the
    // schedule.
    assert!(queue(&free).iter().all(|&q| q < 1_000_000));
    let waited = queue(&capped).iter().filter(|&&q| q > 1_000_000).count();
    assert!(waited > 75, "{waited} of 150 waited over 1 ms");
    for r in &capped {
        let l = r.load.as_ref().unwrap();
        assert_eq!(l.sent_ns, l.scheduled_ns + l.client_queue_ns);
        let ttft_ns = r.trace.as_ref().unwrap().chunks[0].at_ns;
        assert_eq!(
            l.ttft_from_schedule_ms,
            Some((l.client_queue_ns + ttft_ns) as f64 / 1e6)
        );
    }
    // Sends keep the schedule's order.
    let mut by_index: Vec<_> = capped.iter().map(|r| r.load.as_ref().unwrap()).collect();
    by_index.sort_by_key(|l| l.index);
    assert!(by_index.windows(2).all(|w| w[0].sent_ns <= w[1].sent_ns));
}

#[test]
fn resume_skips_indices_already_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    paused_runtime().block_on(async {
        let server = mock().await;
        let mk =
            |n| Schedule::new(Arrivals::Closed { concurrency: 4 }, Stop::Requests(n), 3).unwrap();
        run_load(&config(&server.url(), &out, mk(10), small()))
            .await
            .unwrap();
        let again = run_load(&config(&server.url(), &out, mk(25), small())).await;
        assert!(again.unwrap_err().to_string().contains("--resume"));
        let mut cfg = config(&server.url(), &out, mk(25), small());
        cfg.resume = true;
        let o = run_load(&cfg).await.unwrap();
        assert_eq!((o.skipped, o.written), (10, 15));
        let recs = read_records(&out).unwrap();
        assert_eq!(recs.len(), 25);
        assert_eq!(indices(&recs), (0..25).collect());
        let mut other_seed = cfg.clone();
        other_seed.seed = 4;
        assert!(run_load(&other_seed).await.is_err());
        server.shutdown().await;
    });
}

fn synthetic(index: u64, ttft_us: u64, gaps: &[(u64, u32)], queue_us: u64, fail: bool) -> Record {
    let mut chunks = Vec::new();
    let mut at = ttft_us * 1000;
    let mut cum = 0;
    let first = gaps.first().map_or(1, |g| g.1.max(1));
    for (k, &(gap_us, t)) in std::iter::once(&(0, first))
        .chain(gaps.iter().skip(1))
        .enumerate()
    {
        at += if k == 0 { 0 } else { gap_us * 1000 };
        cum += t.max(1);
        chunks.push(Chunk {
            at_ns: at,
            tokens: Some(t.max(1)),
            text_len: t.max(1),
            usage: Some(Usage {
                prompt_tokens: Some(32),
                completion_tokens: Some(cum),
                cached_tokens: Some(index as u32 % 7),
            }),
            ..Chunk::default()
        });
    }
    let trace = RequestTrace {
        rid: format!("r{index}"),
        dialect: Dialect::Sglang,
        prompt_tokens_sent: Some(32),
        max_tokens: cum,
        status: Some(if fail { 500 } else { 200 }),
        headers_ns: Some(1000),
        reads: chunks.len() as u32,
        chunks: if fail { Vec::new() } else { chunks },
        done_ns: (!fail).then_some(at + 1000),
        end: if fail {
            StreamEnd::HttpStatus {
                status: 500,
                body: "x".into(),
            }
        } else {
            StreamEnd::Done
        },
        end_ns: at + 1000,
        attribution: TokenAttribution::ServerCumulative,
        stamps: Default::default(),
        send_delay_ns: None,
        output_ids: None,
    };
    load_record(
        trace,
        32,
        LoadInfo {
            index,
            shard: Shard::default(),
            seed: 1,
            start_unix_ms: 1_700_000_000_000,
            scheduled_ns: index * 3_000_000,
            sent_ns: index * 3_000_000 + queue_us * 1000,
            client_queue_ns: queue_us * 1000,
            ttft_from_schedule_ms: None,
            prefix_group: None,
            session: None,
        },
    )
}

fn record_strategy() -> impl Strategy<Value = Record> {
    (
        0u64..5000,
        1u64..2_000_000,
        prop::collection::vec((1u64..500_000, 1u32..6), 1..12),
        0u64..5000,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(i, ttft, gaps, q, fail)| synthetic(i, ttft, &gaps, q, fail))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        // An integration test has no lib.rs beside it for proptest's default file: failing
        // cases are kept here and replayed first on the next run.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("tests/load_e2e.proptest-regressions"))),
        ..ProptestConfig::default()
    })]
    #[test]
    fn summaries_merge_exactly(
        recs in prop::collection::vec(record_strategy(), 0..60),
        split in 0usize..60,
    ) {
        let slo = Slo { ttft_ms: Some(800.0), tpot_ms: Some(60.0) };
        let k = split.min(recs.len());
        let (a, b) = recs.split_at(k);
        let whole = LoadSummary::from_records(&recs, slo);
        let merged = LoadSummary::from_records(a, slo).merge(&LoadSummary::from_records(b, slo));
        prop_assert_eq!(&merged, &whole);
        prop_assert_eq!(json::load(&merged), json::load(&whole));
        prop_assert_eq!(table::load(&merged), table::load(&whole));
    }
}

/// The command line, as a user runs it: a short closed-loop run against the embedded mock prints the
/// summary, the server's /metrics deltas and the client's own CPU use, and writes the records.
#[test]
fn cli_load_against_the_embedded_mock_reports_client_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cli.jsonl");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bench-client"))
        .args(["load", "--concurrency", "4", "--num-requests", "12"])
        .args([
            "--input-len",
            "32",
            "--output-len",
            "8",
            "--no-progress",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("12 measured, 12 ok, 0 failed"), "{stdout}");
    assert!(stdout.contains("sglang:num_requests_total"), "{stdout}");
    let cpu = stderr
        .lines()
        .find(|l| l.starts_with("client CPU: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        cpu.contains("% of one core") || cpu.contains("not available"),
        "{cpu}"
    );
    assert_eq!(read_records(&out).unwrap().len(), 12);
}

/// `report` reads a record at a time and keeps only the slowest for the HTML page: the page's
/// timelines are still the N slowest of the whole file, slowest first (a tie keeps the earlier).
#[test]
fn the_report_page_shows_the_slowest_requests_of_a_file_read_a_record_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("open.jsonl");
    let bin = env!("CARGO_BIN_EXE_bench-client");
    let o = std::process::Command::new(bin)
        .args(["load", "--simulate", "--request-rate", "300"])
        .args(["--num-requests", "600", "--input-len", "64", "--output-len"])
        .args(["32", "--seed", "4", "--no-progress", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut recs: Vec<Record> = read_records(&out)
        .unwrap()
        .into_iter()
        .filter(|r| r.trace.is_some() && r.e2e_ms.is_some())
        .collect();
    recs.sort_by(|a, b| b.e2e_ms.partial_cmp(&a.e2e_ms).unwrap());
    let page = dir.path().join("page.html");
    let o = std::process::Command::new(bin)
        .args(["report", "--slowest", "5", "--html"])
        .arg(&page)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    // A timeline's caption: "RID (N prompt tokens): end to end ...".
    let shown: Vec<&str> = html
        .split("<figcaption>")
        .filter(|c| c.contains(" prompt tokens): end to end "))
        .filter_map(|c| c.split(" (").next())
        .collect();
    let want: Vec<&str> = recs.iter().take(5).map(|r| r.rid.as_str()).collect();
    assert_eq!(shown, want);
}
