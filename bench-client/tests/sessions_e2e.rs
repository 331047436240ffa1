//! Multi-turn load runs on tokio's paused clock: every turn sends the conversation so far with the
//! server's own output ids (seen on the wire of a scripted SGLang, cumulative and incremental ids);
//! on the mock the radix cache serves each earlier turn and the hit ratio rises by turn; the think
//! time is before the scheduled start, never in TTFT; where the server lists no ids (the mock's
//! OpenAI API) a marked stand-in is sent; `--resume` continues every session; bad flags exit 64.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use bench_client::drive::{run_sessions, LoadConfig, SessionsConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{
    Arrivals, LenDist, Schedule, SessionPlan, Sessions, Stop, ThinkTime, Timeouts, Workload,
};
use bench_client::report::export::{json, table};
use bench_client::report::LoadSummary;
use bench_client::results::{read_records, Record};
use bench_client::{Dialect, Target};
use mock_server::{Config, MockServer};
use serde_json::{json, Value};

mod support;

/// Refused with exit code 64 before anything starts (clap's conflicts add its usage lines).
fn refused(args: &[&str], flag: &str, out: &Path) {
    support::refused_before_start(args, flag, out);
}
use support::paused_runtime;

async fn mock(edit: impl FnOnce(&mut Config)) -> MockServer {
    let mut c = Config::preset("small-cpu-demo").unwrap();
    c.port = 0;
    c.host = "127.0.0.1".into();
    edit(&mut c);
    MockServer::start(c).await.unwrap()
}

fn sessions(
    n: u64,
    turns: u32,
    first: LenDist,
    later: LenDist,
    output: LenDist,
    think: &str,
) -> Sessions {
    Sessions {
        sessions: n,
        turns,
        first_input: first,
        turn_input: later,
        output,
        think: ThinkTime::parse(think).unwrap(),
    }
}

const SEED: u64 = 11;

fn config(
    url: &str,
    dialect: Dialect,
    out: &Path,
    s: Sessions,
    concurrency: u32,
) -> SessionsConfig {
    let target = Target {
        base_url: url.to_string(),
        dialect,
        model: None,
        api_key: None,
    };
    let total = s.sessions * u64::from(s.turns);
    let schedule = Schedule::new(
        Arrivals::Closed { concurrency },
        Stop::Requests(total),
        SEED,
    )
    .unwrap();
    let workload = Workload::Random {
        input: s.first_input.clone(),
        output: s.output.clone(),
    };
    let run = LoadConfig {
        stamping: Stamping::Socket,
        timeouts: Timeouts::default(),
        prompt_salt: Some(1),
        seed: SEED,
        command: "test".into(),
        ..LoadConfig::new(target, schedule, workload, out.to_path_buf())
    };
    SessionsConfig { run, sessions: s }
}

/// Records by (session, turn); each turn recorded once.
fn by_turn(recs: &[Record]) -> BTreeMap<(u64, u32), &Record> {
    let mut m = BTreeMap::new();
    for r in recs {
        let st = r.load.as_ref().unwrap().session.unwrap();
        assert!(m.insert((st.id, st.turn), r).is_none(), "{st:?} twice");
    }
    m
}

/// Turn records, with their sessions and output ids, stay valid against the committed schema.
fn assert_schema_valid(path: &Path) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/record.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}

/// What the scripted server saw and answered, by rid: the prompt's ids and the output's ids.
type Seen = Arc<Mutex<BTreeMap<String, (Vec<u32>, Vec<u32>)>>>;

#[derive(Clone)]
struct Scripted {
    seen: Seen,
    /// Each event lists only its new ids (SGLang's --incremental-streaming-output).
    incremental: bool,
}

/// A scripted SGLang `/generate`: output ids made from the rid, two per event, cumulative or new
/// only, with the running `completion_tokens`.
async fn generate(State(s): State<Scripted>, Json(body): Json<Value>) -> axum::response::Response {
    let ids: Vec<u32> = body["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let max = body["sampling_params"]["max_new_tokens"].as_u64().unwrap() as usize;
    let rid = body["rid"].as_str().unwrap().to_string();
    let h = rid
        .bytes()
        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let out: Vec<u32> = (0..max as u32).map(|i| 100 + (h + i * 37) % 3000).collect();
    s.seen
        .lock()
        .unwrap()
        .insert(rid, (ids.clone(), out.clone()));
    let mut events = Vec::new();
    let mut done = 0;
    while done < max {
        let n = (done + 2).min(max);
        let listed = if s.incremental {
            &out[done..n]
        } else {
            &out[..n]
        };
        let fin = if n == max {
            json!({"type": "length", "length": max})
        } else {
            Value::Null
        };
        let ev = json!({"text": "x".repeat(n), "output_ids": listed, "meta_info": {
            "prompt_tokens": ids.len(), "completion_tokens": n, "cached_tokens": 0, "finish_reason": fin}});
        events.push(format!("data: {ev}\n\n"));
        done = n;
    }
    events.push("data: [DONE]\n\n".into());
    let stream = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, Infallible>(Bytes::from(e))),
    );
    // One connection per request, as in the sweep tests: the paused clock must not jump while bytes
    // wait in a pooled connection.
    let mut r = axum::response::Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    r
}

async fn scripted(incremental: bool) -> (String, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/generate", post(generate))
        .route("/health", get(|| async { "ok" }))
        .with_state(Scripted {
            seen: seen.clone(),
            incremental,
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

#[test]
fn each_turn_sends_the_last_prompt_then_the_servers_output_ids() {
    for incremental in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("s.jsonl");
        let seen = paused_runtime().block_on(async {
            let (url, seen) = scripted(incremental).await;
            let s = sessions(
                4,
                3,
                LenDist::Uniform { lo: 10, hi: 30 },
                LenDist::Uniform { lo: 2, hi: 9 },
                LenDist::Uniform { lo: 3, hi: 7 },
                "200ms",
            );
            let mut cfg = config(&url, Dialect::Sglang, &out, s, 2);
            cfg.run.scrape_metrics = false;
            let o = run_sessions(&cfg).await.unwrap();
            assert_eq!(o.written, 12);
            seen
        });
        assert_schema_valid(&out);
        let seen = seen.lock().unwrap();
        let recs = read_records(&out).unwrap();
        let turns = by_turn(&recs);
        assert_eq!(turns.len(), 12);
        for (&(s, k), r) in &turns {
            let (prompt, output) = &seen[&r.rid];
            // The client kept exactly the ids the server sent.
            assert_eq!(r.trace.as_ref().unwrap().output_ids.as_ref(), Some(output));
            if k == 0 {
                continue;
            }
            let (before, before_out) = &seen[&turns[&(s, k - 1)].rid];
            let mut want = before.clone();
            want.extend_from_slice(before_out);
            assert_eq!(prompt[..want.len()], want[..], "session {s} turn {k}");
            assert!(
                prompt.len() >= want.len() + 2,
                "new tokens after the conversation"
            );
            assert_eq!(r.load.as_ref().unwrap().session.unwrap().stand_in_tokens, 0);
        }
    }
}

/// Fixed lengths: turn k's prompt is 64 + k * (8 + 16) tokens.
fn fixed() -> Sessions {
    sessions(
        6,
        4,
        LenDist::Fixed { n: 64 },
        LenDist::Fixed { n: 16 },
        LenDist::Fixed { n: 8 },
        "uniform:1s:3s",
    )
}

#[test]
fn on_the_mock_each_turn_hits_the_cache_of_the_turns_before_and_think_time_is_not_ttft() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mock.jsonl");
    paused_runtime().block_on(async {
        let server = mock(|_| {}).await;
        let o = run_sessions(&config(&server.url(), Dialect::Sglang, &out, fixed(), 3))
            .await
            .unwrap();
        assert_eq!((o.written, o.summary.succeeded), (24, 24));
        server.shutdown().await;
    });
    let recs = read_records(&out).unwrap();
    let turns = by_turn(&recs);
    let plan = SessionPlan::new(fixed(), SEED, (100, 4000)).unwrap();
    for (&(s, k), r) in &turns {
        let l = r.load.as_ref().unwrap();
        let trace = r.trace.as_ref().unwrap();
        assert_eq!(r.prompt_tokens, Some(64 + k * 24));
        if k > 0 {
            let prev = turns[&(s, k - 1)];
            // The radix cache holds turn k-1's prompt and its output but the last token.
            assert!(r.cached_tokens.unwrap() >= prev.prompt_tokens.unwrap() + 8 - 1);
            // Scheduled at the end of turn k-1 plus the think time, exactly.
            let pl = prev.load.as_ref().unwrap();
            let prev_end = pl.sent_ns + prev.trace.as_ref().unwrap().end_ns;
            let think = plan.think_time(s, k);
            assert!(think >= Duration::from_secs(1));
            assert_eq!(l.scheduled_ns, prev_end + think.as_nanos() as u64);
        } else {
            assert_eq!(r.cached_tokens, Some(0));
        }
        // TTFT counts from the scheduled start: the client's queue (the clock's 1 ms quantum at
        // most) and the server's part, not the think time before it.
        assert!(l.client_queue_ns <= 1_000_000, "{}", l.client_queue_ns);
        let first = trace
            .chunks
            .iter()
            .find(|c| c.carries_output())
            .unwrap()
            .at_ns;
        let ttft_ms = l.ttft_from_schedule_ms.unwrap();
        assert!((ttft_ms - (l.client_queue_ns + first) as f64 / 1e6).abs() < 1e-6);
        assert!(ttft_ms < 100.0, "{ttft_ms}");
    }
    // The summary by turn: the hit ratio rises turn by turn from 0.
    let s = LoadSummary::from_records(&recs, Default::default());
    let ratios: Vec<f64> = s.turns.0.values().map(|t| t.hit_ratio().unwrap()).collect();
    assert_eq!(ratios.len(), 4);
    assert_eq!(ratios[0], 0.0);
    assert!(ratios.windows(2).all(|w| w[1] > w[0]), "{ratios:?}");
    assert!(s
        .turns
        .0
        .values()
        .all(|t| t.requests == 6 && t.ttft.count() == 6));
    let j = json::load(&s);
    assert_eq!(j["turns"].as_array().unwrap().len(), 4);
    assert_eq!(j["turns"][3]["cache_hit_ratio"], json!(ratios[3]));
    // Every first turn misses the cache, every later one hits it.
    assert_eq!(j["turns"][0]["cache"]["ttft_miss"]["count"], json!(6));
    assert_eq!(j["turns"][1]["cache"]["ttft_hit"]["count"], json!(6));
    assert_eq!(j["turns"][1]["cache"]["ttft_miss"]["count"], json!(0));
    assert!(table::load(&s).contains("by turn"));
    // Turn summaries merge exactly, whatever the split.
    for k in 0..=recs.len() {
        let (a, b) = recs.split_at(k);
        let merged = LoadSummary::from_records(a, Default::default())
            .merge(&LoadSummary::from_records(b, Default::default()));
        assert_eq!(merged.turns, s.turns);
    }
}

#[test]
fn without_output_ids_a_marked_stand_in_is_sent_and_the_cache_misses_there() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("openai.jsonl");
    paused_runtime().block_on(async {
        let server = mock(|c| c.enable_cache_report = true).await;
        let mut s = fixed();
        s.think = ThinkTime::Fixed { ns: 0 };
        let o = run_sessions(&config(&server.url(), Dialect::OpenAi, &out, s, 6))
            .await
            .unwrap();
        assert_eq!(o.written, 24);
        server.shutdown().await;
    });
    assert_schema_valid(&out);
    let recs = read_records(&out).unwrap();
    for (&(s, k), r) in &by_turn(&recs) {
        let st = r.load.as_ref().unwrap().session.unwrap();
        assert_eq!(st.stand_in_tokens, 8 * k, "session {s} turn {k}");
        assert!(r.trace.as_ref().unwrap().output_ids.is_none());
        if k > 0 {
            // The previous prompt is served from the cache, the stand-in for its output is not.
            let prev = 64 + (k - 1) * 24;
            let cached = r.cached_tokens.unwrap();
            assert!(cached >= prev && cached < prev + 7, "{cached}");
        }
    }
    let manifest = std::fs::read_to_string(dir.path().join("openai.jsonl.manifest.jsonl")).unwrap();
    assert!(manifest.contains("stand-in"), "{manifest}");
    let t = table::load(&LoadSummary::from_records(&recs, Default::default()));
    assert!(t.contains("stand-in tokens replace outputs"), "{t}");
}

#[test]
fn resume_continues_every_session_from_its_last_recorded_turn() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("resume.jsonl");
    paused_runtime().block_on(async {
        let server = mock(|_| {}).await;
        let cfg = config(&server.url(), Dialect::Sglang, &out, fixed(), 3);
        run_sessions(&cfg).await.unwrap();
        // Keep the first 10 turn records, as a killed run would have.
        let text = std::fs::read_to_string(&out).unwrap();
        let kept: Vec<&str> = text.lines().take(10).collect();
        std::fs::write(&out, kept.join("\n") + "\n").unwrap();
        let mut again = cfg.clone();
        again.run.resume = true;
        let o = run_sessions(&again).await.unwrap();
        assert_eq!((o.skipped, o.written), (10, 14));
        // Without --resume, or without --sessions, the file is refused.
        assert!(run_sessions(&cfg).await.is_err());
        let mut plain = cfg.run.clone();
        plain.resume = true;
        let e = bench_client::drive::run_load(&plain).await.unwrap_err();
        assert!(e.to_string().contains("multi-turn"), "{e}");
        server.shutdown().await;
    });
    let recs = read_records(&out).unwrap();
    let turns = by_turn(&recs);
    assert_eq!(turns.len(), 24);
    // A resumed turn continues its conversation: the mock's cache still holds the turns before.
    for (&(_, k), r) in &turns {
        assert_eq!(r.prompt_tokens, Some(64 + k * 24));
        if k > 0 {
            assert!(r.cached_tokens.unwrap() >= 64 + (k - 1) * 24 + 7);
        }
    }
}

#[test]
fn bad_session_flags_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = out.to_str().unwrap();
    let base = ["load", "--out", o, "--sessions"];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    refused(&with(&["4", "--turns", "0"]), "--turns", &out);
    refused(&with(&["0"]), "--sessions", &out);
    refused(&with(&["4", "--think-time", "soon"]), "--think-time", &out);
    refused(
        &with(&["4", "--think-time", "uniform:3s:1s"]),
        "--think-time",
        &out,
    );
    refused(
        &with(&["4", "--turn-input-len", "0"]),
        "--turn-input-len",
        &out,
    );
    refused(&with(&["4", "--request-rate", "5"]), "--sessions", &out);
    refused(&with(&["4", "--concurrency", "0"]), "--concurrency", &out);
    refused(&with(&["4", "--api", "openai-chat"]), "openai-chat", &out);
    refused(
        &with(&["4", "--simulate", "--resume"]),
        "--simulate-http",
        &out,
    );
    refused(
        &["load", "--out", o, "--turns", "3", "--concurrency", "2"],
        "--sessions",
        &out,
    );
    // With --num-requests too: a session's flag is never dropped unseen.
    refused(
        &[
            "load",
            "--out",
            o,
            "--think-time",
            "2s",
            "--concurrency",
            "4",
            "--num-requests",
            "4",
        ],
        "--think-time need --sessions",
        &out,
    );
}
