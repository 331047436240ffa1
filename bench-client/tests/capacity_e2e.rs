//! `bench-client capacity` on the embedded mock with `--simulate`: the search's answer agrees with
//! a fine scan of the same configuration, the curve it prints is monotone where the mock is, a
//! killed search resumes, and bad flags are refused before anything starts.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod support;
use support::json;

const BIN: &str = env!("CARGO_BIN_EXE_bench-client");

/// The workload every test here runs: an SLO that the small-cpu-demo mock meets up to about 85
/// requests per second (its TPOT passes 2 ms there).
const WORKLOAD: [&str; 6] = [
    "--simulate",
    "--slo",
    "ttft=20,tpot=2",
    "--num-requests",
    "100",
    "--format=json",
];

fn run(args: &[&str], out: &Path) -> Output {
    Command::new(BIN)
        .arg("capacity")
        .args(WORKLOAD)
        .args(args)
        .arg("--out")
        .arg(out)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn the_search_agrees_with_a_fine_scan_and_its_curve_is_monotone() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["--start", "16", "--max-steps", "5", "--refine", "4"],
        &dir.path().join("search.jsonl"),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let search = json(&o);
    let cap = f(&search, "capacity");
    assert!(search["first_fail"].is_number(), "{search}");

    // More rate, more latency, where the mock is: TPOT p50 grows between rates at least 1.09x
    // apart, TTFT p99 between rates at least 1.5x apart (closer steps are within their noise: two
    // runs at one rate differ by a few percent). Up to about 32 req/s a request waits at most for
    // the step under way, so TTFT p99 is flat there (4.9 ms at 16 and at 32 req/s): it may not
    // fall by more than that noise, 2%.
    let steps: Vec<&Value> = search["steps"].as_array().unwrap().iter().collect();
    for a in &steps {
        for b in &steps {
            if f(b, "rate") >= 1.09 * f(a, "rate") {
                assert!(
                    f(b, "tpot_p50_ms") >= f(a, "tpot_p50_ms"),
                    "TPOT p50 falls from {} to {} req/s: {search}",
                    a["rate"],
                    b["rate"]
                );
            }
            if f(b, "rate") >= 1.5 * f(a, "rate") {
                assert!(
                    f(b, "ttft_p99_ms") >= 0.98 * f(a, "ttft_p99_ms"),
                    "TTFT p99 falls from {} to {} req/s: {search}",
                    a["rate"],
                    b["rate"]
                );
            }
        }
    }

    // The fine scan: rates 4% of the answer apart around it, no refinement; it stops at its first
    // failing rate, so its answer is the highest rate of the first passing run of steps.
    let rates: Vec<String> = (0..16)
        .map(|k| format!("{:.3}", cap * (0.7 + 0.04 * f64::from(k))))
        .collect();
    let o = run(
        &["--rates", &rates.join(","), "--refine", "0"],
        &dir.path().join("scan.jsonl"),
    );
    let scan = json(&o);
    let fine = f(&scan, "capacity");
    assert!(
        scan["first_fail"].is_number(),
        "the scan never failed: {scan}"
    );
    assert!(
        (cap - fine).abs() <= 0.10 * fine,
        "search {cap} req/s, fine scan {fine} req/s"
    );
}

#[test]
fn a_killed_search_resumes_from_its_step_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.jsonl");
    let args = ["--start", "32", "--max-steps", "3", "--refine", "1"];
    let first = json(&run(&args, &out));
    assert_eq!(first["steps"].as_array().unwrap().len(), 4, "{first}");
    // Kill it after its third step: the last file goes, the third is torn in half.
    let step = |n: usize| dir.path().join(format!("c.step-{n}.jsonl"));
    std::fs::remove_file(step(3)).unwrap();
    let text = std::fs::read_to_string(step(2)).unwrap();
    std::fs::write(step(2), &text[..text.len() / 2]).unwrap();

    let again = run(&args, &out);
    assert_eq!(
        again.status.code(),
        Some(64),
        "a search is not rerun over its files"
    );
    let mut resumed = args.to_vec();
    resumed.push("--resume");
    let o = run(&resumed, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("2 steps read back"), "{err}");
    let second = json(&o);
    let rates = |v: &Value| -> Vec<f64> {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| f(s, "rate"))
            .collect()
    };
    assert_eq!(rates(&first), rates(&second));
    assert_eq!(first["capacity"], second["capacity"]);
    // The resumed step is timed across its two pieces: it offered the rate the whole one did.
    let offered = |v: &Value| f(&v["steps"][2], "offered_rate");
    assert!(
        (offered(&second) - offered(&first)).abs() <= 0.05 * offered(&first),
        "resumed {} req/s, whole {} req/s",
        offered(&second),
        offered(&first)
    );
    // Resumed with other rates, the step files are another search's: refused.
    let other = [
        "--start",
        "8",
        "--max-steps",
        "3",
        "--refine",
        "1",
        "--resume",
    ];
    let o = run(&other, &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("another search"), "{err}");
    assert!(text.lines().count() > 2);
    // The resumed step holds its requests once each: as many as the step rule gave it.
    assert_eq!(
        std::fs::read_to_string(step(2))
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"load\""))
            .count() as u64,
        first["steps"][2]["requests"].as_u64().unwrap()
    );
}

#[test]
fn a_search_by_concurrency_finds_what_a_scan_of_every_concurrency_finds() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(
        &["--concurrencies", "1,2,4,8,16,32,64", "--refine", "8"],
        &dir.path().join("search.jsonl"),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let search = json(&o);
    assert_eq!(search["level"], "concurrency", "{search}");
    let cap = f(&search, "capacity");
    let fail = f(&search, "first_fail");
    assert!(cap >= 1.0 && cap.fract() == 0.0, "{search}");
    assert_eq!(fail, cap + 1.0, "bisected down to neighbours: {search}");
    assert!(search["answer"]
        .as_str()
        .is_some_and(|a| a.contains("requests in flight")));
    // Every concurrency from 1 to just past the answer, no refinement: the scan stops at its first
    // failing concurrency.
    let all: Vec<String> = (1..=(cap as u32 + 2)).map(|c| c.to_string()).collect();
    let o = run(
        &["--concurrencies", &all.join(","), "--refine", "0"],
        &dir.path().join("scan.jsonl"),
    );
    let scan = json(&o);
    // As for rates (issue 18): within 10% of the scan. The two searches share one mock whose cache
    // and clock differ by the steps run before, so at the edge (a goodput share near the target) a
    // concurrency can pass in one and fail in the other.
    let fine = f(&scan, "capacity");
    assert!(
        (cap - fine).abs() <= (0.10 * fine).max(1.0),
        "search {cap}, scan {fine}\nscan {scan}\nsearch {search}"
    );
}

#[test]
fn no_rate_meeting_the_slo_says_so_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(BIN)
        .args([
            "capacity",
            "--simulate",
            "--slo",
            "ttft=0.001",
            "--num-requests",
            "10",
        ])
        .args(["--max-steps", "1", "--refine", "1", "--out"])
        .arg(dir.path().join("c.jsonl"))
        .arg("--plot")
        .arg(dir.path().join("c.svg"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(out.contains("no rate meets the SLO"), "{out}");
    assert!(out.contains("rate req/s"), "the curve is printed: {out}");
    let svg = std::fs::read_to_string(dir.path().join("c.svg")).expect("the plot is written");
    assert!(svg.starts_with("<svg") && svg.contains("TTFT p99") && svg.contains("TPOT p50"));
}

#[test]
fn bad_flags_are_refused_with_64() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.jsonl");
    let o = out.to_str().unwrap();
    // A step's results file, or its manifest, of any step.
    let step = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (step0, manifest12) = (
        step("c.step-0.jsonl"),
        step("c.step-12.jsonl.manifest.jsonl"),
    );
    for (args, flag) in [
        (vec!["--slo", "ttft=500", "--plot", &step0], "--plot"),
        (vec!["--slo", "ttft=500", "--plot", &manifest12], "--plot"),
        (vec!["--num-requests", "10"], "--slo"),
        (vec!["--slo", "ttft=500", "--target", "0"], "--target"),
        (vec!["--slo", "ttft=500", "--target", "1.5"], "--target"),
        (vec!["--slo", "ttft=500", "--rates", "0,1"], "--rates"),
        (vec!["--slo", "ttft=500", "--rates", "4,2"], "--rates"),
        (
            vec!["--slo", "ttft=500", "--concurrencies", "0,1"],
            "--concurrencies",
        ),
        (
            vec!["--slo", "ttft=500", "--concurrencies", "4,2"],
            "--concurrencies",
        ),
        (
            vec!["--slo", "ttft=500", "--concurrencies", "1.5"],
            "--concurrencies",
        ),
        (vec!["--slo", "ttft=500", "--start=-1"], "--start"),
        (vec!["--slo", "ttft=500", "--factor", "1"], "--factor"),
        (vec!["--slo", "nonsense"], "--slo"),
        // Rates outside what an open loop schedules are refused naming the flag that gave them,
        // every step before the first runs.
        (vec!["--slo", "ttft=500", "--rates", "1e-7"], "--rates"),
        (vec!["--slo", "ttft=500", "--rates", "1,2e6"], "--rates"),
        (vec!["--slo", "ttft=500", "--start", "1e-7"], "--start"),
        (vec!["--slo", "ttft=500", "--start", "2e6"], "--start"),
        (vec!["--slo", "ttft=500", "--factor", "1e300"], "--factor"),
        (
            vec!["--slo", "ttft=500", "--start", "1e5", "--factor", "3"],
            "--max-steps",
        ),
        (
            vec![
                "--slo",
                "ttft=500",
                "--factor",
                "1.000000001",
                "--max-steps",
                "4000000000",
            ],
            "--max-steps",
        ),
        (vec!["--slo", "ttft=500", "--rates", "1,,2"], "--rates"),
        (
            vec!["--slo", "ttft=500", "--concurrencies", "1,2,"],
            "--concurrencies",
        ),
    ] {
        let r = Command::new(BIN)
            .args(["capacity", "--simulate", "--out", o])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(64), "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(flag),
            "{args:?}: {err}"
        );
        // capacity has no --request-rate: its errors name the flags it has.
        assert!(!err.contains("--request-rate"), "{args:?}: {err}");
        assert!(
            !err.contains("started the embedded mock"),
            "{args:?}: {err}"
        );
        assert!(r.stdout.is_empty(), "{args:?}");
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn a_server_failing_requests_stops_the_search_early() {
    let dir = tempfile::tempdir().unwrap();
    // Prompts of up to 1,500 tokens against a 1,000-token context: most requests fail.
    let o = Command::new(BIN)
        .args([
            "capacity",
            "--simulate",
            "--slo",
            "ttft=500",
            "--num-requests",
            "20",
        ])
        .args([
            "--mock-set",
            "context_length=1000",
            "--input-len",
            "uniform:500:1500",
        ])
        .arg("--out")
        .arg(dir.path().join("c.jsonl"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("stopped early: the server failed"), "{out}");
    assert!(dir.path().join("c.step-0.jsonl").exists());
    assert!(
        !dir.path().join("c.step-1.jsonl").exists(),
        "no step after the failing one"
    );
}

/// A load run's achieved throughput and SLO share at `rate` for `secs` seconds, on the engine path.
fn long_run(setup: &[&str], rate: f64, secs: u32, dir: &Path) -> (f64, f64) {
    let out = dir.join(format!("knee-{rate}.jsonl"));
    let o = Command::new(BIN)
        .args(["load", "--simulate", "--format", "json", "--no-metrics"])
        .args(setup)
        .args(["--request-rate", &rate.to_string()])
        .args(["--duration", &format!("{secs}s"), "--out"])
        .arg(&out)
        .output()
        .expect("the binary runs");
    let v = json(&o);
    let requests = v["requests"].as_f64().expect("requests");
    (
        v["derived"]["request_throughput"]
            .as_f64()
            .expect("throughput"),
        v["good"].as_f64().expect("good") / requests,
    )
}

/// The knee found without `capacity`: long fixed-rate runs, stepping up by 1.5x from `start` to
/// the first rate that fails and then bisecting 4 times; a rate passes when its achieved
/// throughput is within 10% of the offered rate and 95% of its requests meet the SLO.
fn knee(setup: &[&str], start: f64, secs: u32, dir: &Path) -> f64 {
    let passes = |r: f64| {
        let (achieved, share) = long_run(setup, r, secs, dir);
        achieved >= 0.9 * r && share >= 0.95
    };
    assert!(passes(start), "the knee is below {start}");
    let (mut lo, mut hi) = (start, start * 1.5);
    while passes(hi) {
        (lo, hi) = (hi, hi * 1.5);
        assert!(hi < start * 100.0, "no knee found");
    }
    for _ in 0..4 {
        let mid = (lo + hi) / 2.0;
        if passes(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `capacity`'s answer is within 10% of the knee of long fixed-rate runs of the same preset and
/// workload, and never above the throughput its passing step achieved.
fn capacity_matches_the_knee(setup: &[&str], step: &[&str], start: f64, secs: u32) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = Command::new(BIN)
        .args(["capacity", "--simulate", "--format", "json"])
        .args(setup)
        .args(step)
        .args(["--start", &start.to_string(), "--factor", "1.5"])
        .args(["--max-steps", "8", "--refine", "4", "--out"])
        .arg(dir.path().join("c.jsonl"))
        .output()
        .expect("the binary runs");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let search = json(&o);
    let cap = f(&search, "capacity");
    let passing = search["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["passed"] == true)
        .max_by(|a, b| f(a, "rate").total_cmp(&f(b, "rate")))
        .expect("a passing step");
    assert!(
        cap <= f(passing, "request_throughput"),
        "above the achieved throughput: {search}"
    );
    let knee = knee(setup, start, secs, dir.path());
    assert!(
        (cap - knee).abs() <= 0.10 * knee,
        "capacity {cap} req/s, knee of long runs {knee} req/s\n{search}"
    );
    (cap, knee)
}

#[test]
fn on_a_slow_preset_the_capacity_is_the_knee_of_long_runs() {
    let setup = [
        "--preset",
        "qwen3-32b-h100-tp2-sglang",
        "--input-len",
        "2k",
        "--output-len",
        "32",
        "--slo",
        "ttft=3000,tpot=100",
    ];
    // Near its knee this server's queue settles over minutes, not over its requests' 2 s: a
    // 60 s run at 3.3 req/s meets the SLO for 98% of requests, a 300 s one for 94% (a queue near
    // saturation takes far longer than its request time to show its tail, though its time in the
    // system does not grow over a step). Steps as long as the knee's runs.
    let (_, knee) = capacity_matches_the_knee(&setup, &["--duration", "300s"], 2.0, 300);
    assert!(knee < 10.0, "{knee}");
}

#[test]
fn on_a_gpu_preset_at_over_100_requests_per_second_the_capacity_is_the_knee_of_long_runs() {
    let setup = [
        "--preset",
        "llama-3.1-70b-fp8-h200-tp2-vllm",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--slo",
        "ttft=500,tpot=50",
    ];
    // Steps of the default length: the step rule alone makes them long enough.
    let (_, knee) = capacity_matches_the_knee(&setup, &[], 100.0, 10);
    assert!(knee > 100.0, "{knee}");
}
