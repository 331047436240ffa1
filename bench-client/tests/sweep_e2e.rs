//! Sweeps against a tiny scripted SGLang-like server on tokio's paused clock: the results file validates
//! against the committed JSON Schema, survives a torn last line with `--resume`, and the two-point
//! method names the prefix-cache violation that the streaming method is immune to.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use bench_client::client::{Target, Timeouts};
use bench_client::record::{read_records, Method};
use bench_client::report::{render_table, Report};
use bench_client::sweep::{run_sweep, OnCrash, SweepConfig};
use bench_client::Dialect;
use serde_json::{json, Value};

/// Prefill costs 1 ms per uncached token (tokio timers have 1 ms resolution; prompts stay small because
/// paused-clock tests cannot wait on large request bodies over real sockets); each decode step 5 ms and yields 2 tokens (speculative).
#[derive(Clone, Default)]
struct Sim {
    seen: Arc<Mutex<HashSet<Vec<u64>>>>,
    cache: bool,
}

async fn generate(State(sim): State<Sim>, Json(body): Json<Value>) -> axum::response::Response {
    let ids: Vec<u64> = body["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let max = body["sampling_params"]["max_new_tokens"].as_u64().unwrap();
    let rid = body["rid"].as_str().unwrap().to_string();
    let cached = if sim.cache && !sim.seen.lock().unwrap().insert(ids.clone()) {
        ids.len() as u64 - 1
    } else {
        0
    };
    let prompt = ids.len() as u64;
    let stream = futures::stream::unfold((0u64, false), move |(done, finished)| {
        let rid = rid.clone();
        async move {
            if finished {
                return None;
            }
            if done >= max {
                return Some((
                    Ok::<_, Infallible>(Bytes::from("data: [DONE]\n\n")),
                    (done, true),
                ));
            }
            let wait = if done == 0 {
                (prompt - cached) * 1_000
            } else {
                5_000
            };
            tokio::time::sleep(Duration::from_micros(wait)).await;
            let n = (done + 2).min(max);
            let ev = json!({"text": "x".repeat(n as usize), "meta_info": {"id": rid, "prompt_tokens": prompt,
                "completion_tokens": n, "cached_tokens": cached,
                "finish_reason": if n == max { json!({"type": "length", "length": max}) } else { Value::Null }}});
            Some((Ok(Bytes::from(format!("data: {ev}\n\n"))), (n, false)))
        }
    });
    // One connection per request: on the paused clock a pooled keep-alive connection can leave the
    // runtime idle while bytes are in flight, and the clock would jump to the client's deadline.
    let mut r = axum::response::Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

async fn start(sim: Sim) -> String {
    let app = Router::new()
        .route("/generate", post(generate))
        .route("/health", get(|| async { "ok" }))
        .route(
            "/get_model_info",
            get(|| async { Json(json!({"model_path": "scripted"})) }),
        )
        .route("/flush_cache", post(|| async { "Cache flushed." }))
        .with_state(sim);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

fn config(url: String, out: std::path::PathBuf) -> SweepConfig {
    SweepConfig {
        target: Target {
            base_url: url,
            dialect: Dialect::Sglang,
            model: None,
            api_key: None,
        },
        contexts: vec![10, 40],
        output_tokens: 9,
        runs: 2,
        warmup: 1,
        method: Method::Streaming,
        flush_cache: false,
        two_point_tokens: (1, 17),
        out,
        resume: false,
        seed: 7,
        token_id_range: (100, 4000),
        return_token_ids: false,
        timeouts: Timeouts::default(),
        on_crash: OnCrash::Stop,
        crash_wait: Duration::from_secs(5),
        progress: false,
        command: "test".into(),
    }
}

fn schema_validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/schema/record.schema.json"
    ))
    .unwrap();
    jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn assert_valid(path: &std::path::Path) -> usize {
    let v = schema_validator();
    let text = std::fs::read_to_string(path).unwrap();
    let mut n = 0;
    for line in text.lines() {
        let inst: Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = v
            .iter_errors(&inst)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "record does not match the schema: {errors:?}"
        );
        n += 1;
    }
    n
}

#[tokio::test(start_paused = true)]
async fn sweep_records_match_schema_and_ground_truth() {
    let url = start(Sim::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let outcome = run_sweep(&config(url, out.clone())).await.unwrap();
    assert!(outcome.stopped.is_none());
    assert_eq!(outcome.records.len(), 4);
    assert_eq!(assert_valid(&out), 4);
    for r in read_records(&out).unwrap() {
        assert!(r.error.is_none(), "{:?}", r.error);
        assert!(!r.contaminated);
        // Ground truth of the script: prefill 1 ms/token, 2 tokens per 5 ms step: 7 tokens after the first chunk in 20 ms.
        let ttft = r.ttft_ms.unwrap();
        assert!(
            (ttft - f64::from(r.context_tokens)).abs() < 1e-6,
            "ttft {ttft}"
        );
        assert!((r.decode_tok_s.unwrap() - 350.0).abs() < 1e-6);
        assert_eq!(r.tokens_per_chunk, vec![2, 2, 2, 2, 1]);
        assert!(r.rid.starts_with("bc-"));
    }
    let table = render_table(&Report::from_records(&read_records(&out).unwrap()));
    assert!(table.contains("40"), "{table}");
    // Existing results without --resume are refused, not overwritten.
    assert!(run_sweep(&config(start(Sim::default()).await, out.clone()))
        .await
        .is_err());
}

#[tokio::test(start_paused = true)]
async fn resume_after_torn_line_finishes_without_duplicates() {
    let url = start(Sim::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut cfg = config(url, out.clone());
    cfg.contexts = vec![10];
    run_sweep(&cfg).await.unwrap();
    // A killed process leaves half a line.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&out)
        .unwrap()
        .write_all(b"{\"method\":\"stream")
        .unwrap();
    cfg.contexts = vec![10, 20];
    cfg.resume = true;
    let outcome = run_sweep(&cfg).await.unwrap();
    assert_eq!(
        outcome.skipped,
        2,
        "{:?}",
        read_records(&out)
            .unwrap()
            .iter()
            .map(|r| &r.error)
            .collect::<Vec<_>>()
    );
    assert_eq!(outcome.records.len(), 2);
    let recs = read_records(&out).unwrap();
    let keys: HashSet<_> = recs.iter().map(|r| r.point_key()).collect();
    assert_eq!(recs.len(), 4);
    assert_eq!(keys.len(), 4);
    assert_eq!(assert_valid(&out), 4);
}

#[tokio::test(start_paused = true)]
async fn two_point_names_the_cache_hit_while_streaming_is_clean() {
    let url = start(Sim {
        cache: true,
        ..Sim::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let mut cfg = config(url, out.clone());
    cfg.method = Method::TwoPoint;
    cfg.runs = 1;
    run_sweep(&cfg).await.unwrap();
    let recs = read_records(&out).unwrap();
    assert_eq!(assert_valid(&out), recs.len());
    for r in &recs {
        match r.method {
            Method::Streaming => {
                assert!(r.error.is_none() && !r.contaminated);
                assert_eq!(r.cached_tokens, Some(0));
            }
            Method::TwoPoint => {
                let e = r
                    .error
                    .as_ref()
                    .expect("two-point must fail with the cache on");
                assert_eq!(e.kind, "cache-hit", "{}", e.message);
                assert!(e.message.contains(&format!("{}", r.context_tokens - 1)));
            }
        }
    }
    let table = render_table(&Report::from_records(&recs));
    assert!(table.contains("cache-hit"), "{table}");
}

#[tokio::test(start_paused = true)]
async fn server_gone_stops_with_a_resume_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let outcome = run_sweep(&config(format!("http://{addr}"), out.clone()))
        .await
        .unwrap();
    let msg = outcome.stopped.expect("sweep must stop");
    assert!(
        msg.contains("--resume") && msg.contains("0 measured points"),
        "{msg}"
    );
    let recs = read_records(&out).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].error.as_ref().unwrap().kind, "connect-refused");
}
