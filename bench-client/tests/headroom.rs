//! The saturation probes of a simulated load (`twin::headroom`) held against open loops run at
//! GPU rates on the engine path: the capacity they report is what an overloaded open loop
//! achieves, a load well below it moves with the costs alone, and one near it is called fragile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
use bench_client::drive::{run_load, LoadConfig};
use bench_client::plan::{ArrivalKind, Arrivals, LenDist, Schedule, Stop, Workload};
use bench_client::report::load::LoadSummary;
use bench_client::twin::headroom::{headroom, Headroom, SLOWER};
use mock_server::Config;
use support::{paused_runtime, sglang as target};

/// The shipped vLLM twin of an H200 pair: a knee above 100 req/s with short prompts.
fn gpu() -> Config {
    let mut c = Config::preset("llama-3.1-70b-fp8-h200-tp2-vllm").unwrap();
    c.port = 0;
    c.host = "127.0.0.1".into();
    c
}

fn open_loop(rate: f64, requests: u64, out: &std::path::Path) -> LoadConfig {
    let schedule = Schedule {
        arrivals: Arrivals::Open {
            rate,
            kind: ArrivalKind::Poisson,
            burstiness: 1.0,
        },
        stop: Stop::Requests(requests),
        seed: 3,
    };
    let workload = Workload::Random {
        input: LenDist::Fixed { n: 64 },
        output: LenDist::Fixed { n: 128 },
    };
    let mut cfg = LoadConfig {
        prompt_salt: Some(1),
        seed: 3,
        scrape_metrics: false,
        ..LoadConfig::new(
            target(bench_client::drive::ENGINE_URL),
            schedule,
            workload,
            out.to_path_buf(),
        )
    };
    cfg.engine = Some(gpu());
    cfg
}

/// The run of `cfg` and what the probes say of it.
fn probed(cfg: &LoadConfig) -> (LoadSummary, Headroom) {
    let planner = cfg.validate().unwrap();
    let outcome = paused_runtime().block_on(run_load(cfg)).unwrap();
    let h = headroom(cfg, &gpu(), &planner, &outcome.summary).unwrap();
    (outcome.summary, h)
}

#[test]
fn the_capacity_is_what_an_overloaded_open_loop_achieves_and_the_knee_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let (_, low) = probed(&open_loop(40.0, 2_000, &dir.path().join("low.jsonl")));
    let capacity = low.capacity_rps.expect("a capacity");
    assert!(capacity > 100.0, "a GPU twin's capacity: {capacity}");

    // Well below the knee: the latencies move with the costs alone.
    let share = low.share().unwrap();
    assert!((0.2..0.4).contains(&share), "{low:?}");
    for m in [low.ttft_move.unwrap(), low.tpot_move.unwrap()] {
        assert!(m > 0.5 * SLOWER && m < 2.0 * SLOWER, "{low:?}");
    }
    assert!(!low.near_knee(), "{low:?}");
    assert!(low.lines().iter().any(|l| l.starts_with("below the knee")));

    // Past it, an open loop completes what the capacity says and no more.
    let (over_run, over) = probed(&open_loop(
        1.25 * capacity,
        6_000,
        &dir.path().join("over.jsonl"),
    ));
    let achieved = over_run.derived().request_throughput.unwrap();
    assert!(
        (achieved / capacity - 1.0).abs() < 0.06,
        "achieved {achieved} against capacity {capacity}"
    );
    assert!(over.share().unwrap() > 1.0, "{over:?}");
    assert!(over.lines().iter().any(|l| l.starts_with("over capacity")));

    // Just below it: a small error in the costs moves the latencies more than the error (a
    // batching server takes up some of it in larger batches: at 0.95, 2-3 times as much).
    let (_, near) = probed(&open_loop(
        0.95 * capacity,
        4_000,
        &dir.path().join("near.jsonl"),
    ));
    assert!(near.near_knee(), "{near:?}");
    let most = |h: &Headroom| h.ttft_move.unwrap().max(h.tpot_move.unwrap());
    assert!(
        most(&near) > 2.0 * SLOWER && most(&near) > 1.5 * most(&low),
        "{near:?}"
    );
    assert!(near.lines().iter().any(|l| l.starts_with("near the knee")));
}

#[test]
fn a_closed_loop_at_its_capacity_is_full_not_fragile() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = open_loop(1.0, 3_000, &dir.path().join("closed.jsonl"));
    cfg.schedule.arrivals = Arrivals::Closed { concurrency: 1024 };
    let (_, h) = probed(&cfg);
    assert!(!h.open);
    // As many in flight as the scheduler admits come close to the capacity, which is measured
    // with a quarter more waiting, and do not pass it.
    assert_eq!(h.capacity_in_flight, 1280);
    let share = h.share().unwrap();
    assert!(share > 0.8 && share < 1.02, "{h:?}");
    assert!(!h.near_knee(), "{h:?}");
    assert!(h
        .lines()
        .iter()
        .any(|l| l.starts_with("the scheduler is nearly full")));
}

/// `load --simulate --format json` as a user runs it: the probes' figures under `saturation`,
/// none with `--no-saturation`, and the results file holds the run's requests alone.
#[test]
fn the_command_line_carries_the_probes_in_its_json() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_bench-client"))
            .args(["load", "--preset", "small-cpu-demo", "--simulate"])
            .args(["--request-rate", "50", "--num-requests", "200"])
            .args(["--input-len", "256", "--output-len", "16", "--no-progress"])
            .args(["--format", "json", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let lines = std::fs::read_to_string(&out).unwrap();
        let records = lines.lines().filter(|l| l.contains("\"load\"")).count();
        (v, String::from_utf8_lossy(&o.stderr).into_owned(), records)
    };
    let (v, stderr, records) = run("probed.jsonl", &[]);
    assert_eq!(records, 200);
    let s = &v["saturation"];
    let capacity = s["capacity_rps"].as_f64().unwrap();
    let share = s["share_of_capacity"].as_f64().unwrap();
    assert!((share - 50.0 / capacity).abs() < 1e-9, "{s}");
    assert_eq!(s["capacity_in_flight"], 320);
    assert!(s["ttft_p50_move"].as_f64().is_some(), "{s}");
    assert!(
        stderr.contains("saturation: offered 50.00 req/s"),
        "{stderr}"
    );
    let (v, stderr, records) = run("plain.jsonl", &["--no-saturation"]);
    assert_eq!(records, 200);
    assert!(v.get("saturation").is_none(), "{v}");
    assert!(!stderr.contains("saturation:"), "{stderr}");
}
