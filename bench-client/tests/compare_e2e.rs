//! `compare` as a user runs it, against sweeps of the embedded mock: a decode 15% slower is `worse`
//! at every context and fails `--fail-on-regression`; two runs of one setup with different seeds
//! are never `worse`; inputs that cannot be compared, and bad thresholds, are refused; load runs with
//! shared prefixes show the prefix cache in the table, the JSON, `merge`, the HTML page and `compare`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

mod support;
use support::{run, stderr};

/// A small sweep of the embedded mock on virtual time (`--simulate`: the machine's load cannot move
/// a verdict): two contexts, 16 runs of 128 tokens, enough decode steps per request that the
/// speculative acceptance draws average out; the seeds alone set one run apart from another.
fn sweep(dir: &Path, name: &str, seed: u64, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let seed = seed.to_string();
    let mock_seed = format!("seed={seed}");
    let mut args = vec![
        "sweep",
        "--simulate",
        "--contexts",
        "1k,4k",
        "--runs",
        "16",
        "--output-tokens",
        "128",
        "--no-progress",
        "--seed",
        &seed,
        "--mock-set",
        &mock_seed,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

fn compare_json(base: &Path, new: &Path) -> Value {
    compare_json_with(base, new, &[])
}

fn compare_json_with(base: &Path, new: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "compare",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--format",
        "json",
    ];
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn verdicts<'a>(v: &'a Value, metric: &str) -> Vec<(u64, &'a str)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["metric"] == metric)
        .map(|r| {
            (
                r["context_tokens"].as_u64().unwrap(),
                r["verdict"].as_str().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_slower_decode_is_worse_at_every_context_and_a_rerun_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let base = sweep(dir.path(), "base.jsonl", 1, &[]);
    // The preset's decode_base_s is 0.002 s a step; 0.00235 makes decode about 15% slower.
    let slow = sweep(
        dir.path(),
        "slow.jsonl",
        2,
        &["--mock-set", "decode_base_s=0.00235"],
    );
    let v = compare_json(&base, &slow);
    assert_eq!(
        verdicts(&v, "decode_p50_tok_s"),
        vec![(1000, "worse"), (4000, "worse")],
        "{v:#}"
    );
    assert!(v["differences"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["key"] == "server_info.decode_base_s"));
    let gate = run(&[
        "compare",
        base.to_str().unwrap(),
        slow.to_str().unwrap(),
        "--fail-on-regression",
    ]);
    let table = String::from_utf8_lossy(&gate.stdout);
    assert_eq!(gate.status.code(), Some(1), "{table}{}", stderr(&gate));
    assert!(
        table.starts_with("what differs between the runs"),
        "{table}"
    );
    assert!(stderr(&gate).contains("regression"), "{}", stderr(&gate));

    let again = sweep(dir.path(), "again.jsonl", 3, &[]);
    let v = compare_json(&base, &again);
    let worse: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "worse")
        .collect();
    assert!(worse.is_empty(), "{worse:#?}");
    // Several files a side: the shards or repeats of one setup are pooled.
    let o = run(&[
        "compare",
        "--base",
        base.to_str().unwrap(),
        again.to_str().unwrap(),
        "--new",
        slow.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    assert!(
        csv.lines()
            .any(|l| l.starts_with("1000,decode_p50_tok_s,higher,32,16,")),
        "{csv}"
    );
}

/// The verdicts of `compare --base B... --new N...` as JSON, with the runs each row counted.
fn compare_sides(base: &[&Path], new: &[&Path]) -> Value {
    let mut args = vec!["compare", "--base"];
    args.extend(base.iter().map(|p| p.to_str().unwrap()));
    args.push("--new");
    args.extend(new.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--format", "json"]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn repeats_carry_the_drift_between_runs_into_the_verdict() {
    let dir = tempfile::tempdir().unwrap();
    // One setup run four times on a machine whose decode speed moves by about 20% between runs.
    let drift = ["--mock-set", "decode_base_s=0.0025"];
    let a1 = sweep(dir.path(), "a1.jsonl", 11, &[]);
    let a2 = sweep(dir.path(), "a2.jsonl", 12, &drift);
    let b1 = sweep(dir.path(), "b1.jsonl", 13, &drift);
    let b2 = sweep(dir.path(), "b2.jsonl", 14, &[]);
    // One run a side: the shift between the two runs looks like a regression.
    let pair = compare_json(&a1, &b1);
    assert_eq!(
        verdicts(&pair, "decode_p50_tok_s"),
        vec![(1000, "worse"), (4000, "worse")],
        "{pair:#}"
    );
    assert!(pair["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("not a shift between runs")));
    // Two runs a side, resampled by run: the drift is in the interval, and nothing is worse.
    let reps = compare_sides(&[&a1, &a2], &[&b1, &b2]);
    let rows = reps["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["runs_base"] == 2 && r["runs_new"] == 2),
        "{reps:#}"
    );
    let alarms: Vec<&Value> = rows
        .iter()
        .filter(|r| r["verdict"] == "worse" || r["verdict"] == "better")
        .collect();
    assert!(alarms.is_empty(), "{alarms:#?}");
    assert_eq!(
        verdicts(&reps, "decode_p50_tok_s"),
        vec![(1000, "unclear"), (4000, "unclear")]
    );
}

/// Refused with `code` and one `error:` line containing `what`.
fn refused(args: &[&str], code: i32, what: &str) {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: ") && l.contains(what)),
        "{args:?}: {err}"
    );
    assert!(o.stdout.is_empty(), "{args:?}");
    assert!(!err.contains("panicked") && !err.contains("NaN"), "{err}");
}

#[test]
fn inputs_that_cannot_be_compared_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = |name: &str, ctx: &str, extra: &[&str]| {
        let out = d.join(name);
        let mut args = vec![
            "sweep",
            "--contexts",
            ctx,
            "--runs",
            "2",
            "--warmup",
            "0",
            "--output-tokens",
            "4",
            "--no-progress",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = run(&args);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
        out.to_str().unwrap().to_string()
    };
    let a = tiny("a.jsonl", "64", &[]);
    let other = tiny("other.jsonl", "128", &[]);
    let failed = tiny("failed.jsonl", "64", &["--mock-set", "context_length=32"]);
    let load = d.join("load.jsonl");
    let o = run(&[
        "load",
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--input-len",
        "64",
        "--output-len",
        "4",
        "--no-progress",
        "--out",
        load.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let load = load.to_str().unwrap();
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let empty = empty.to_str().unwrap();

    refused(&["compare", &a, &a, "--threshold", "0"], 64, "--threshold");
    refused(&["compare", &a, &a, "--threshold", "-5"], 64, "--threshold");
    refused(&["compare", &a, &a, "--threshold", "x%"], 64, "--threshold");
    // A billion resamples would be gigabytes of statistics: refused, not an allocation abort.
    refused(
        &["compare", &a, &a, "--resamples", "1000000000"],
        64,
        "--resamples",
    );
    refused(&["compare", &a], 64, "BASE and NEW");
    refused(&["compare", &a, load], 65, "nothing to compare");
    refused(&["compare", &a, &other], 65, "no context length in common");
    refused(&["compare", &a, empty], 65, "NEW has no records");
    refused(&["compare", &failed, &a], 65, "BASE has no successful");
    refused(&["compare", &a, "/nonexistent.jsonl"], 65, "NEW");

    // A load run against itself: every row there, none worse, the throughputs included.
    let o = run(&[
        "compare",
        load,
        load,
        "--format",
        "json",
        "--slo",
        "ttft=10000",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 15, "{v:#}");
    assert!(rows.iter().all(|r| r["verdict"] != "worse"), "{v:#}");
    assert!(rows.iter().any(|r| r["metric"] == "goodput_req_s"));
}

/// A small closed-loop load run of the embedded mock, as shard `shard` of a run starting at
/// `start_ms` (unix ms).
fn load_shard(dir: &Path, name: &str, shard: &str, start_ms: u64) -> PathBuf {
    let out = dir.join(name);
    let start = start_ms.to_string();
    let o = run(&[
        "load",
        "--concurrency",
        "2",
        "--num-requests",
        "8",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--seed",
        "3",
        "--shard",
        shard,
        "--start-at",
        &start,
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

#[test]
fn the_shards_of_one_load_run_are_one_run_and_repeats_are_several() {
    let dir = tempfile::tempdir().unwrap();
    let now = support::unix_ms();
    // Two shards of one run (one start), and a repeat of the whole run (its own start).
    let s0 = load_shard(dir.path(), "s0.jsonl", "0/2", now + 500);
    let s1 = load_shard(dir.path(), "s1.jsonl", "1/2", now + 500);
    let r0 = load_shard(dir.path(), "r0.jsonl", "0/2", now + 1500);
    let r1 = load_shard(dir.path(), "r1.jsonl", "1/2", now + 1500);
    let v = compare_sides(&[&s0, &s1], &[&r0, &r1]);
    let rows = v["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["runs_base"] == 1 && r["runs_new"] == 1),
        "{v:#}"
    );
    // One run a side: a throughput is one number a side, so no verdict on it.
    for m in ["output_throughput_tok_s", "request_throughput_req_s"] {
        let row = rows.iter().find(|r| r["metric"] == m).unwrap();
        assert_eq!(row["verdict"], "unclear", "{row:#}");
    }
    let both = compare_sides(&[&s0, &s1, &r0, &r1], &[&s0, &s1, &r0, &r1]);
    let rows = both["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["runs_base"] == 2 && r["runs_new"] == 2),
        "{both:#}"
    );
    assert!(rows
        .iter()
        .all(|r| r["verdict"] == "same" || r["verdict"] == "unclear"));
}

/// A simulated closed loop (virtual time): `requests` of 64 tokens in and 8 out, two in flight,
/// starting at `start_ms`; `extra` flags after.
fn small_closed_loop(out: &Path, requests: &str, start_ms: u64, extra: &[&str]) {
    let start = start_ms.to_string();
    let mut args = vec![
        "load",
        "--simulate",
        "--concurrency",
        "2",
        "--num-requests",
        requests,
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--seed",
        "9",
        "--start-at",
        &start,
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_resumed_run_is_one_run_whose_span_leaves_out_the_time_it_was_down() {
    let dir = tempfile::tempdir().unwrap();
    let now = support::unix_ms();
    let whole = dir.path().join("whole.jsonl");
    small_closed_loop(&whole, "60", now, &[]);
    // The same run stopped after 30 requests and resumed a minute later: two pieces, two starts.
    let pieces = dir.path().join("pieces.jsonl");
    small_closed_loop(&pieces, "30", now, &[]);
    small_closed_loop(&pieces, "60", now + 60_000, &["--resume"]);
    let v = compare_sides(&[&whole], &[&pieces]);
    let rows = v["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .all(|r| r["runs_base"] == 1 && r["runs_new"] == 1),
        "{v:#}"
    );
    // Its throughput counts the pieces' time, not the minute it was down.
    let row = rows
        .iter()
        .find(|r| r["metric"] == "request_throughput_req_s")
        .unwrap();
    let ratio = row["ratio"].as_f64().unwrap();
    assert!((0.9..1.1).contains(&ratio), "{row:#}");
}

/// A simulated closed loop of 16 requests one at a time, in two prefix groups whose prompts are
/// `prefix` shared tokens and `suffix` of their own; `extra` flags after.
fn prefix_load(
    dir: &Path,
    name: &str,
    prefix: u32,
    suffix: u32,
    extra: &[&str],
) -> (PathBuf, String) {
    let out = dir.join(name);
    let (prefix, suffix) = (prefix.to_string(), suffix.to_string());
    let mut args = vec![
        "load",
        "--simulate",
        "--concurrency",
        "1",
        "--num-requests",
        "16",
        "--prefix-groups",
        "2",
        "--prefix-len",
        &prefix,
        "--input-len",
        &suffix,
        "--output-len",
        "4",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    (out, String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn the_prefix_cache_is_in_every_view_of_a_load_run() {
    let dir = tempfile::tempdir().unwrap();
    // 14 of 16 requests find their group's prefix: 14 x 256 of 16 x 288 tokens, then 14 x 32.
    let (base, json) = prefix_load(dir.path(), "base.jsonl", 256, 32, &["--format", "json"]);
    let (new, table) = prefix_load(dir.path(), "new.jsonl", 32, 256, &[]);
    let (want_base, want_new) = (3584.0 / 4608.0, 448.0 / 4608.0);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["prefix_cache"]["hit_ratio"], want_base, "{v:#}");
    assert_eq!(v["prefix_cache"]["ttft_hit"]["count"], 14);
    assert_eq!(v["prefix_cache"]["ttft_miss"]["count"], 2);
    assert_eq!(v["server_metrics"]["prefix_cache"]["hit_ratio"], want_base);
    for needle in [
        "16 of 16 ok requests reported a cached count: 14 hits (cached > 0), 2 misses",
        "  ttft_cache_hit          14",
        "  ttft_cache_miss          2",
        "server prefix cache hit ratio 0.0972: 448 sglang:cached_tokens_total / 4608 sglang:prompt_tokens_total",
    ] {
        assert!(table.contains(needle), "{needle} missing in\n{table}");
    }
    // compare: the hit ratio fell to an eighth (worse), with TTFT of the hits and misses beside it.
    // The prefixes differ, so the workloads do: compared only when allowed.
    let v = compare_json_with(&base, &new, &["--allow-different-workloads"]);
    assert_eq!(
        v["workload_differences"][0],
        "prefix settings differ: BASE 2 groups sharing a 256-token prefix, NEW 2 groups sharing a 32-token prefix"
    );
    let rows = v["rows"].as_array().unwrap();
    let ratio = rows
        .iter()
        .find(|r| r["metric"] == "cache_hit_ratio")
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(ratio["base"], want_base);
    assert_eq!(ratio["new"], want_new);
    assert_eq!(ratio["verdict"], "worse", "{ratio:#}");
    for m in [
        "ttft_cache_hit_p50_ms",
        "ttft_cache_hit_p99_ms",
        "ttft_cache_miss_p50_ms",
        "ttft_cache_miss_p99_ms",
    ] {
        let row = rows.iter().find(|r| r["metric"] == m);
        assert_eq!(
            row.map(|r| r["n_base"].clone()),
            Some(Value::from(if m.contains("hit") { 14 } else { 2 })),
            "{m}"
        );
    }
    // merge: the responses' and the counters' ratio, in the JSON; the manifest a shell glob
    // (`merge new*.jsonl`) adds beside its results file is read as the manifest, not as results.
    let manifest = format!("{}.manifest.jsonl", new.display());
    let o = run(&[
        "merge",
        new.to_str().unwrap(),
        &manifest,
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipped 1 manifest"), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["prefix_cache"]["hit_ratio"], want_new);
    assert_eq!(v["server_metrics"]["prefix_cache"]["hit_ratio"], want_new);
    // The HTML report: a small table, the server's counters in its last row.
    let html = dir.path().join("r.html");
    let o = run(&[
        "report",
        new.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    for needle in [
        "<table id=\"prefix-cache\">",
        "<td>16 of 16</td><td>0.0972</td>",
        "server: sglang:cached_tokens_total / sglang:prompt_tokens_total</td><td></td><td>0.0972</td>",
    ] {
        assert!(page.contains(needle), "{needle} missing in\n{page}");
    }
}

/// A simulated load run of 20 short requests with `arrivals` (`--concurrency 4`, say).
fn small_load(dir: &Path, name: &str, arrivals: &[&str], input: &str) -> PathBuf {
    let out = dir.join(name);
    let mut args = vec![
        "load",
        "--simulate",
        "--num-requests",
        "20",
        "--input-len",
        input,
    ];
    args.extend([
        "--output-len",
        "8",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    args.extend(arrivals);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

#[test]
fn runs_of_different_workloads_are_refused_in_words_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let closed = small_load(dir.path(), "closed.jsonl", &["--concurrency", "64"], "64");
    let open = small_load(dir.path(), "open.jsonl", &["--request-rate", "20"], "256");
    let (c, o) = (closed.to_str().unwrap(), open.to_str().unwrap());
    let args = ["compare", c, o, "--resamples", "50"];
    refused(
        &args,
        65,
        "the runs' workloads differ, so a verdict would compare two experiments",
    );
    let err = stderr(&run(&args));
    for sentence in [
        "workload differs: BASE is a closed loop at 64 in flight, NEW an open loop at 20 req/s (Poisson)",
        "input lengths differ: BASE 64 tokens, NEW 256 tokens",
        "--allow-different-workloads",
    ] {
        assert!(err.contains(sentence), "{sentence}: {err}");
    }
    assert!(
        !err.contains("Closed {") && !err.contains("Fixed {"),
        "{err}"
    );
    // Allowed: compared, with the differences as warnings on stderr and atop the table.
    let allowed = run(&[
        "compare",
        c,
        o,
        "--resamples",
        "50",
        "--allow-different-workloads",
    ]);
    assert_eq!(allowed.status.code(), Some(0), "{}", stderr(&allowed));
    let table = String::from_utf8(allowed.stdout.clone()).unwrap();
    assert!(
        table.starts_with("WARNING: workload differs: BASE is a closed loop at 64 in flight"),
        "{table}"
    );
    assert!(
        !table.contains("Closed {") && !table.contains("Open {"),
        "{table}"
    );
    assert!(stderr(&allowed).contains("WARNING: compared anyway"));
    // The same workload with another seed is compared without a word about it.
    let again = dir.path().join("again.jsonl");
    let o2 = run(&[
        "load",
        "--simulate",
        "--num-requests",
        "20",
        "--input-len",
        "64",
        "--output-len",
        "8",
        "--concurrency",
        "64",
        "--seed",
        "9",
        "--no-progress",
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(o2.status.code(), Some(0), "{}", stderr(&o2));
    let same = run(&["compare", c, again.to_str().unwrap(), "--resamples", "50"]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert!(!stderr(&same).contains("WARNING"), "{}", stderr(&same));
}

#[test]
fn a_load_runs_percentiles_are_each_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("load.jsonl");
    small_closed_loop(&out, "60", support::unix_ms(), &[]);
    let v = compare_sides(&[&out], &[&out]);
    let rows = v["rows"].as_array().unwrap();
    let base = |m: &str| {
        let row = rows.iter().find(|r| r["metric"] == m).unwrap();
        row["base"].as_f64().unwrap()
    };
    for family in ["ttft", "tpot", "inter_chunk", "e2e"] {
        let [p50, p90, p99] = ["p50", "p90", "p99"].map(|p| base(&format!("{family}_{p}_ms")));
        assert!(p50 <= p90 && p90 <= p99, "{family}: {p50} {p90} {p99}");
        assert!(p50 < p99, "{family}: p99 is p50, {p50}");
    }
}
