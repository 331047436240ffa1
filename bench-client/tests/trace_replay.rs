//! `load --trace` end to end: the mock's radix cache hits exactly where the Mooncake slice's
//! `hash_ids` say, the flags reach the schedule and the manifest, a request longer than the server's
//! context is a recorded failure, and a bad trace is refused before anything is sent (exit 65).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{Arrivals, Schedule, Stop, Timeouts, Trace, TraceOptions, Workload};
use bench_client::results::read_records;
use bench_client::Dialect;
use bench_client::Target;
use mock_server::{Config, MockServer};

mod support;
use support::{run, stderr};

fn fixture(name: &str) -> PathBuf {
    support::fixture("traces", name)
}

const MOONCAKE: &str = "mooncake-conversation-300.jsonl";
const AZURE: &str = "azure-constructed.csv";

/// The fixture's (input_length, output_length, hash_ids), as written.
fn mooncake_lines() -> Vec<(u64, u64, Vec<u64>)> {
    std::fs::read_to_string(fixture(MOONCAKE))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"].as_array().unwrap();
            (
                v["input_length"].as_u64().unwrap(),
                v["output_length"].as_u64().unwrap(),
                ids.iter().map(|x| x.as_u64().unwrap()).collect(),
            )
        })
        .collect()
}

fn scaled(n: u64, f: f64) -> u64 {
    ((n as f64 * f).round() as u64).max(1)
}

/// Tokens two prompts share by the trace: common leading blocks (of those their lengths use) times
/// the block size, cut to the shorter prompt.
fn shared_by_trace(a: (&[u64], u64), b: (&[u64], u64), block: u64) -> u64 {
    let used = |ids: &[u64], len: u64| ids.len().min(len.div_ceil(block) as usize);
    let common = a.0[..used(a.0, a.1)]
        .iter()
        .zip(&b.0[..used(b.0, b.1)])
        .take_while(|(x, y)| x == y)
        .count() as u64;
    (common * block).min(a.1).min(b.1)
}

#[test]
fn the_mock_caches_exactly_the_blocks_the_slice_shares() {
    // Blocks of 16 tokens (512 / 32); the mock has no page size, so nothing is rounded down.
    let scale = 1.0 / 32.0;
    let block = 16;
    let lines = mooncake_lines();
    let lens: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| (scaled(l.0, scale), scaled(l.1, scale)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.jsonl");
    let trace = Trace::read(
        &fixture(MOONCAKE),
        &TraceOptions {
            scale,
            ..TraceOptions::default()
        },
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = Config::preset("small-cpu-demo").unwrap();
        c.port = 0;
        c.host = "127.0.0.1".into();
        // Output tokens enter the radix tree too: drawn from a vocabulary this large they
        // practically never continue a later prompt (ids below 4,000).
        c.vocab_size = 1 << 24;
        // Room for every request's tokens at once: nothing is evicted.
        let total: u64 = lens.iter().map(|(i, o)| i + o).sum();
        assert!(c.kv_pool_tokens() as u64 > 2 * total);
        let server = MockServer::start(c).await.unwrap();
        let target = Target {
            base_url: server.url(),
            dialect: Dialect::Sglang,
            model: None,
            api_key: None,
        };
        // One at a time, in the trace's order, into an empty cache.
        let schedule = Schedule::new(
            Arrivals::Closed { concurrency: 1 },
            Stop::Requests(lines.len() as u64),
            3,
        )
        .unwrap();
        let trace = Arc::new(trace);
        let cfg = LoadConfig {
            stamping: Stamping::Socket,
            timeouts: Timeouts::default(),
            prompt_salt: Some(9),
            ..LoadConfig::new(
                target,
                schedule,
                Workload::Trace(trace.clone()),
                out.clone(),
            )
        };
        let o = run_load(&cfg).await.unwrap();
        assert_eq!(o.written, 300);
        let truth = server.truth();
        let mut recs = read_records(&out).unwrap();
        recs.sort_by_key(|r| r.load.as_ref().unwrap().index);
        let mut hits = 0;
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.load.as_ref().unwrap().index, i as u64);
            let (len, _) = lens[i];
            // The longest prefix shared with any earlier request; the last prompt token is always
            // computed (SGLang matches at most input - 1 tokens).
            let want = (0..i)
                .map(|j| shared_by_trace((&lines[i].2, len), (&lines[j].2, lens[j].0), block))
                .max()
                .unwrap_or(0)
                .min(len - 1);
            let t = truth.request(&r.rid).unwrap();
            assert_eq!(t.prompt_tokens as u64, len, "request {i}");
            assert_eq!(
                t.cached_tokens as u64, want,
                "request {i}: the mock's radix cache"
            );
            assert_eq!(
                r.cached_tokens,
                Some(want as u32),
                "request {i}: as reported"
            );
            hits += u64::from(want > block);
        }
        // Not only block 0: a score of requests continue an earlier conversation.
        assert!(hits >= 10, "{hits}");
        // What the trace predicts of itself (`load` prints it beside the run's ratio) is what
        // the cache served.
        let served: u64 = recs
            .iter()
            .filter_map(|r| r.cached_tokens)
            .map(u64::from)
            .sum();
        let prompt: u64 = lens.iter().map(|(i, _)| i).sum();
        assert_eq!(trace.predicted_hits(1), Some((served, prompt)));
        let (paged, _) = trace.predicted_hits(16).unwrap();
        assert!(paged < served && paged % 16 == 0, "{paged} of {served}");
        server.shutdown().await;
    });
}

/// The command line with a fresh results file; returns (exit code, stderr, records, manifest).
fn load(args: &[&str]) -> (Option<i32>, String, Vec<serde_json::Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut all = vec!["load", "--simulate", "--no-progress", "--out"];
    all.push(out.to_str().unwrap());
    all.extend_from_slice(args);
    let o = run(&all);
    let recs = std::fs::read_to_string(&out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let manifest =
        std::fs::read_to_string(dir.path().join("r.jsonl.manifest.jsonl")).unwrap_or_default();
    (o.status.code(), stderr(&o), recs, manifest)
}

#[test]
fn speedup_limit_and_scale_reach_the_schedule_the_prompts_and_the_manifest() {
    let f = fixture(AZURE);
    let (code, err, mut recs, manifest) = load(&[
        "--trace",
        f.to_str().unwrap(),
        "--trace-speedup",
        "4",
        "--trace-limit",
        "5",
        "--trace-scale",
        "0.5",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(recs.len(), 5);
    recs.sort_by_key(|r| r["load"]["index"].as_u64().unwrap());
    // Rows 1 and 2 are 265.0655 ms apart; 1,027 and 1,200 prompt tokens, halved.
    assert_eq!(recs[1]["load"]["scheduled_ns"], 265_065_500 / 4);
    assert_eq!(recs[0]["prompt_tokens"], 514);
    assert_eq!(recs[1]["prompt_tokens"], 600);
    let m: serde_json::Value = serde_json::from_str(manifest.lines().next().unwrap()).unwrap();
    // The manifest's workload is the trace's settings, typed.
    let w = &m["workload"];
    assert_eq!(w["kind"], "trace", "{w}");
    let t = &w["trace"];
    for (key, want) in [
        ("format", serde_json::json!("azure")),
        ("requests", serde_json::json!(5)),
        ("block_size", serde_json::json!(256)),
        ("speedup", serde_json::json!(4.0)),
        ("limit", serde_json::json!(5)),
        ("scale", serde_json::json!(0.5)),
    ] {
        assert_eq!(t[key], want, "{key} in {w}");
    }
    assert_eq!(
        m["schedule"],
        serde_json::json!({"kind": "trace", "requests": 5})
    );
}

#[test]
fn a_request_longer_than_the_context_is_a_recorded_failure() {
    let f = fixture(MOONCAKE);
    let (code, err, recs, _) = load(&[
        "--trace",
        f.to_str().unwrap(),
        "--trace-limit",
        "20",
        "--trace-scale",
        "0.125",
        "--mock-set",
        "context_length=1000",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(recs.len(), 20, "{err}");
    let lines = mooncake_lines();
    let mut failed = 0;
    for r in &recs {
        let i = r["load"]["index"].as_u64().unwrap() as usize;
        let (input, output) = (scaled(lines[i].0, 0.125), scaled(lines[i].1, 0.125));
        // SGLang's rule, as the mock keeps it: the prompt and the output must fit the context.
        let too_long = input >= 1000 || input + output > 1000;
        assert_eq!(r["error"].is_object(), too_long, "request {i}: {r}");
        failed += usize::from(too_long);
    }
    assert!((5..20).contains(&failed), "{failed}");
    assert!(
        err.contains(&format!("{failed} of 20 requests failed")),
        "{err}"
    );
}

/// Refused with exit 65 before anything started: one `error:` line naming the file, the line and
/// the field (when a line is at fault), and no results file.
fn refused_data(name: &str, text: &str, says: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join(name);
    std::fs::write(&trace, text).unwrap();
    let out = dir.path().join("r.jsonl");
    let o = run(&[
        "load",
        "--simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(65), "{name}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{name}: one line expected, got {err:?}");
    assert!(lines[0].starts_with("error: trace "), "{err}");
    assert!(lines[0].contains(trace.to_str().unwrap()), "{err}");
    for s in says {
        assert!(lines[0].contains(s), "{name}: {s:?} not in {err}");
    }
    assert!(!err.contains("started the embedded mock"), "{err}");
    assert!(!out.exists(), "{name} wrote {}", out.display());
    assert!(o.stdout.is_empty(), "{name} printed {:?}", o.stdout);
}

#[test]
fn bad_traces_are_refused_naming_the_file_line_and_field() {
    let ok = r#"{"timestamp": 0, "input_length": 90, "output_length": 2, "hash_ids": [0]}"#;
    let m = |bad: &str| format!("{ok}\n{bad}\n");
    refused_data(
        "json.jsonl",
        &m(r#"{"timestamp": 5, "input_length": 90"#),
        &["line 2:", "not valid JSON at column"],
    );
    refused_data(
        "missing.jsonl",
        &m(r#"{"timestamp": 5, "input_length": 90, "hash_ids": [0]}"#),
        &["line 2, field output_length: missing"],
    );
    refused_data(
        "negative.jsonl",
        &m(r#"{"timestamp": 5, "input_length": -90, "output_length": 2, "hash_ids": [0]}"#),
        &["line 2, field input_length: must be at least 1 token, got -90"],
    );
    refused_data(
        "zero.jsonl",
        &m(r#"{"timestamp": 5, "input_length": 90, "output_length": 0, "hash_ids": [0]}"#),
        &["line 2, field output_length: must be at least 1 token, got 0"],
    );
    refused_data(
        "negative-time.jsonl",
        &m(r#"{"timestamp": -1, "input_length": 90, "output_length": 2, "hash_ids": [0]}"#),
        &["line 2, field timestamp: must be a non-negative number of ms, got -1"],
    );
    refused_data(
        "backwards.jsonl",
        &format!(
            "{ok}\n{}\n{}\n",
            ok.replace("\"timestamp\": 0", "\"timestamp\": 9"),
            ok.replace("\"timestamp\": 0", "\"timestamp\": 7")
        ),
        &["line 3, field timestamp: goes backwards: 7 after 9"],
    );
    refused_data(
        "date.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,90,2\n2023-11-16 25:15:46.6805900,90,2\n",
        &["line 3, field TIMESTAMP:", "is not a date and time"],
    );
    refused_data("empty.jsonl", "\n", &["holds no requests"]);
    refused_data(
        "header-only.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n",
        &["holds no requests"],
    );
    // A file that is not there is an unusable input too.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let o = run(&["load", "--simulate", "--trace", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be read"), "{}", stderr(&o));
}

#[test]
fn a_trace_arriving_past_30_days_is_refused_naming_the_line() {
    // A replay is a run, and a run lasts at most 30 days: an arrival past that is a unit slip
    // (an empty run that exits 0 is no answer).
    let ok = r#"{"timestamp": 0, "input_length": 90, "output_length": 2, "hash_ids": [0]}"#;
    let past = "more than 30 days (2592000 s, the longest a run may last) after";
    refused_data(
        "far.jsonl",
        &format!(
            "{ok}\n{}\n",
            ok.replace("\"timestamp\": 0", "\"timestamp\": 1e300")
        ),
        &[
            "line 2, field timestamp: arrives",
            past,
            "the first request",
        ],
    );
    // Thirty days and a millisecond.
    refused_data(
        "native.jsonl",
        "{\"offset_ms\": 0, \"input_len\": 90, \"output_len\": 2}\n{\"offset_ms\": 2592000001, \"input_len\": 90, \"output_len\": 2}\n",
        &["line 2, field offset_ms: arrives", past, "the start of the run"],
    );
    refused_data(
        "month.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-01 00:00:00,90,2\n2023-12-02 00:00:00,90,2\n",
        &["line 3, field TIMESTAMP: arrives", past],
    );
    refused_data(
        "minus.jsonl",
        &format!(
            "{ok}\n{}\n",
            ok.replace("\"timestamp\": 0", "\"timestamp\": -1e300")
        ),
        &["line 2, field timestamp: must be a non-negative number of ms, got -1e300"],
    );
    // A trace slowed down past 30 days: refused at its first line that far into the replay.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("slow.jsonl");
    let second = ok.replace("\"timestamp\": 0", "\"timestamp\": 1000");
    std::fs::write(&trace, format!("{ok}\n{second}\n")).unwrap();
    let out = dir.path().join("r.jsonl");
    let args = [
        "load",
        "--simulate",
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let o = run(&[&args[..], &["--trace-speedup", "1e-300"]].concat());
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(65), "{err}");
    assert!(
        err.contains("line 2, field timestamp: arrives")
            && err.contains("at --trace-speedup 1e-300"),
        "{err}"
    );
    assert!(!out.exists());
    // At most 30 days is replayed (on the engine path's virtual clock, at once).
    let o = run(&[&args[..], &["--trace-speedup", "1e-3"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(support::lines(&out), 2, "{}", stderr(&o));
}

#[test]
fn bad_trace_flags_are_usage_errors() {
    let f = fixture(AZURE);
    let f = f.to_str().unwrap();
    for (args, flag, want) in [
        (
            vec!["--trace", f, "--trace-speedup", "0"],
            "--trace-speedup",
            64,
        ),
        (vec!["--trace", f, "--trace-scale=-1"], "--trace-scale", 64),
        (
            vec!["--trace", f, "--trace-block-size", "64"],
            "--trace-block-size",
            64,
        ),
        (vec!["--trace", f, "--prefix-len", "64"], "--prefix-len", 64),
        (
            vec!["--trace-limit", "5", "--concurrency", "1"],
            "--trace",
            64,
        ),
        // Forced, the CSV is read as JSON lines: its header is not one.
        (
            vec!["--trace", f, "--trace-format", "mooncake"],
            "line 1: not valid JSON",
            65,
        ),
    ] {
        let (code, err, recs, _) = load(&args);
        assert_eq!(code, Some(want), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(recs.is_empty(), "{args:?}");
    }
}
