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
use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::net::stamped::Stamping;
use bench_client::report::export::table;
use bench_client::report::Report;
use bench_client::results::{read_records, Method};
use bench_client::Dialect;
use bench_client::Target;
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

fn server(url: String) -> Destination {
    Destination::server(Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    })
}

fn config(out: std::path::PathBuf) -> SweepConfig {
    SweepConfig {
        stamping: Stamping::Socket,
        contexts: vec![10, 40],
        output_tokens: 9,
        runs: 2,
        warmup: 1,
        seed: 7,
        crash_wait: Duration::from_secs(5),
        command: "test".into(),
        ..SweepConfig::new(out)
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
    let outcome = run_sweep(&server(url), &config(out.clone())).await.unwrap();
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
    let table = table::sweep(&Report::from_records(&read_records(&out).unwrap()));
    assert!(table.contains("40"), "{table}");
    // Existing results without --resume are refused, not overwritten.
    assert!(
        run_sweep(&server(start(Sim::default()).await), &config(out.clone()))
            .await
            .is_err()
    );
}

#[tokio::test(start_paused = true)]
async fn resume_after_torn_line_finishes_without_duplicates() {
    let url = start(Sim::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let (srv, mut cfg) = (server(url), config(out.clone()));
    cfg.contexts = vec![10];
    run_sweep(&srv, &cfg).await.unwrap();
    // A killed process leaves half a line.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&out)
        .unwrap()
        .write_all(b"{\"method\":\"stream")
        .unwrap();
    cfg.contexts = vec![10, 20];
    cfg.resume = true;
    let outcome = run_sweep(&srv, &cfg).await.unwrap();
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
    let (srv, mut cfg) = (server(url), config(out.clone()));
    cfg.method = Method::TwoPoint;
    cfg.runs = 1;
    run_sweep(&srv, &cfg).await.unwrap();
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
    let table = table::sweep(&Report::from_records(&recs));
    assert!(table.contains("cache-hit"), "{table}");
}

#[tokio::test(start_paused = true)]
async fn server_gone_stops_with_a_resume_hint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let outcome = run_sweep(&server(format!("http://{addr}")), &config(out.clone()))
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

/// `--tokenizer`: text prompts of an exact length under a tokenizer.json built here.
#[cfg(feature = "tokenizer")]
mod tokenizer_prompts {
    use super::*;
    use bench_client::drive::sweep::{run_sweep_with, PromptSource};
    use bench_client::plan::tokenizer::TextPrompts;
    use std::path::{Path, PathBuf};

    /// A word-level tokenizer of 300 words `w0`..`w299`, split on whitespace.
    fn word_level(dir: &Path) -> PathBuf {
        use tokenizers::models::wordlevel::WordLevel;
        use tokenizers::pre_tokenizers::whitespace::Whitespace;
        let vocab = (0..300u32)
            .map(|i| (format!("w{i}"), i))
            .chain([("[UNK]".to_string(), 300)])
            .collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token("[UNK]".into())
            .build()
            .unwrap();
        let mut tok = tokenizers::Tokenizer::new(model);
        tok.with_pre_tokenizer(Some(Whitespace {}));
        let path = dir.join("tokenizer.json");
        tok.save(&path, false).unwrap();
        path
    }

    /// An OpenAI chat server that keeps every prompt it is sent and streams a role chunk, then two
    /// tokens per 5 ms step with continuous usage.
    async fn chat(
        State(seen): State<Arc<Mutex<Vec<String>>>>,
        Json(body): Json<Value>,
    ) -> axum::response::Response {
        let text = body["messages"][0]["content"].as_str().unwrap().to_string();
        let prompt = text.split_whitespace().count() as u64;
        seen.lock().unwrap().push(text);
        let max = body["max_tokens"].as_u64().unwrap();
        let stream = futures::stream::unfold(Some(0u64), move |state| async move {
            let done = state?;
            if done > max {
                return Some((Ok::<_, Infallible>(Bytes::from("data: [DONE]\n\n")), None));
            }
            tokio::time::sleep(Duration::from_millis(if done == 0 { 10 } else { 5 })).await;
            let (delta, n) = if done == 0 {
                (json!({"role": "assistant", "content": ""}), 0)
            } else {
                (json!({"content": "ab"}), (done + 1).min(max))
            };
            let ev = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": Value::Null}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": n}});
            let next = if done == 0 { 1 } else { n + 1 };
            Some((Ok(Bytes::from(format!("data: {ev}\n\n"))), Some(next)))
        });
        let mut r = axum::response::Response::new(Body::from_stream(stream));
        r.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        r
    }

    #[tokio::test(start_paused = true)]
    async fn chat_prompts_have_the_exact_count_and_differ_per_request() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/health", get(|| async { "ok" }))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let tok = word_level(dir.path());
        let out = dir.path().join("r.jsonl");
        let (mut srv, cfg) = (server(format!("http://{addr}")), config(out.clone()));
        srv.target.dialect = Dialect::OpenAiChat;
        srv.target.model = Some("m".into());
        let prompts = Arc::new(TextPrompts::from_file(&tok, cfg.seed).unwrap());
        let outcome = run_sweep_with(
            &srv,
            &cfg,
            cfg.validate().unwrap(),
            PromptSource::Tokenizer(prompts.clone()),
        )
        .await
        .unwrap();
        assert!(outcome.stopped.is_none());
        // 2 contexts x (1 warm-up + 2 runs).
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 6);
        let distinct: HashSet<&String> = seen.iter().collect();
        assert_eq!(distinct.len(), 6, "every request has its own prompt");
        let firsts: HashSet<&str> = seen
            .iter()
            .map(|t| t.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(firsts.len(), 6, "consecutive prompts start differently");
        for (text, want) in seen.iter().zip([10u32, 10, 10, 40, 40, 40]) {
            assert_eq!(prompts.count(text).unwrap(), want, "{text}");
            assert!(text.split_whitespace().all(|w| w != "[UNK]"));
        }
        assert_eq!(assert_valid(&out), 4);
        let recs = read_records(&out).unwrap();
        assert_eq!(recs.len(), 4);
        for r in &recs {
            assert!(r.error.is_none(), "{:?}", r.error);
            assert!(!r.contaminated, "{:?}", r.contamination);
            assert_eq!(r.prompt_tokens, Some(r.context_tokens));
        }
        let manifest =
            std::fs::read_to_string(format!("{}.manifest.jsonl", out.display())).unwrap();
        let m: Value = serde_json::from_str(manifest.lines().next().unwrap()).unwrap();
        assert_eq!(m["settings"]["prompt"]["kind"], "text-tokenizer");
        assert_eq!(
            m["settings"]["prompt"]["tokenizer"],
            tok.display().to_string()
        );
    }

    fn cli(args: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_bench-client"))
            .arg("sweep")
            .args(args)
            .output()
            .unwrap()
    }

    #[test]
    fn missing_or_bad_tokenizer_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{ not a tokenizer").unwrap();
        for (file, want) in [(&missing, "does not exist"), (&bad, "cannot load")] {
            let out = dir.path().join("r.jsonl");
            let o = cli(&[
                "--url",
                "http://127.0.0.1:9",
                "--api",
                "openai-chat",
                "--tokenizer",
                file.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success());
            assert!(
                err.contains("--tokenizer")
                    && err.contains(want)
                    && err.contains(file.to_str().unwrap()),
                "{err}"
            );
            assert!(!out.exists(), "no results file on a bad --tokenizer");
        }
    }

    #[cfg(feature = "embedded-mock")]
    #[test]
    fn cli_sweep_against_the_embedded_mock() {
        let dir = tempfile::tempdir().unwrap();
        let tok = word_level(dir.path());
        let out = dir.path().join("r.jsonl");
        let o = cli(&[
            "--api",
            "openai-chat",
            "--tokenizer",
            tok.to_str().unwrap(),
            "--contexts",
            "64,256",
            "--runs",
            "2",
            "--output-tokens",
            "8",
            "--no-progress",
            "--mock-set",
            "enable_cache_report=true",
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let recs = read_records(&out).unwrap();
        assert_eq!(recs.len(), 4);
        for r in &recs {
            assert!(r.error.is_none(), "{:?}", r.error);
            assert!(r.ttft_ms.is_some() && r.decode_tok_s.is_some());
            // The mock tokenizes text its own way: it reports a length, not necessarily N.
            assert!(r.prompt_tokens.is_some_and(|p| p > 0));
        }
        let manifest =
            std::fs::read_to_string(format!("{}.manifest.jsonl", out.display())).unwrap();
        assert!(
            manifest.contains("\"kind\":\"text-tokenizer\""),
            "{manifest}"
        );
    }
}
