//! Faults as a user meets them: a hostile stream capped, a gone or refusing server backed off or
//! stopped (exit 2), and a server that is not ready or needs a key reported as such. Test servers
//! are axum apps or raw TCP listeners.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use bench_client::drive::backoff::GONE_AFTER;
use bench_client::drive::{run_load, LoadConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{
    Arrivals, LenDist, RequestSpec, Schedule, Stop, StreamCaps, Timeouts, Workload,
};
use bench_client::results::read_records;
use bench_client::trace::FailureKind;
use bench_client::{Dialect, Prompt, Target};
use support::server::{read, respond, serve, STREAM};
use support::{run, stderr};

/// A raw server that answers every connection with a 200 SSE head and then one line that never
/// ends; returns its URL and the bytes it managed to write.
fn endless_line_server() -> (String, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let written = Arc::new(AtomicUsize::new(0));
    let w = written.clone();
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut s) = conn else { return };
            let w = w.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = s.read(&mut buf);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 100000000000\r\n\r\ndata: ";
                if s.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b'x'; 16 * 1024];
                while s.write_all(&chunk).is_ok() {
                    w.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            });
        }
    });
    (url, written)
}

#[tokio::test]
async fn an_endless_line_fails_at_the_cap_without_buffering_past_it() {
    let (url, _) = endless_line_server();
    let target = Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    };
    let cap = 1 << 20;
    let timeouts = Timeouts {
        caps: StreamCaps {
            line: cap,
            body: 64 << 20,
        },
        ..Timeouts::default()
    };
    let http = bench_client::net::http_client(&timeouts).unwrap();
    let spec = RequestSpec::new("r", Prompt::TokenIds(vec![1, 2, 3]), 4);
    let trace = bench_client::net::send(&http, &target, &spec, &timeouts).await;
    let f = trace.failure().expect("the request fails");
    assert_eq!(f.kind, FailureKind::StreamTooLarge, "{}", f.message);
    // The body bytes read when the cap was hit: past the cap by less than one read.
    let read: u64 = f
        .message
        .split("after ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect(&f.message);
    assert!(read > cap && read <= cap + 512 * 1024, "{read}");
    assert!(trace.chunks.is_empty());
}

#[test]
fn a_load_run_records_stream_too_large_and_goes_on() {
    let (url, _) = endless_line_server();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = run(&[
        "load",
        "--url",
        &url,
        "--api",
        "sglang",
        "--max-stream-bytes",
        "2MiB",
        "--concurrency",
        "1",
        "--num-requests",
        "3",
        "--no-metrics",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let recs = read_records(&out).unwrap();
    assert_eq!(recs.len(), 3);
    for r in &recs {
        assert_eq!(r.error.as_ref().unwrap().kind, "stream-too-large");
    }
}

#[test]
fn a_server_that_refuses_every_connection_stops_the_run_with_exit_2() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let concurrency = 4;
    let o = run(&[
        "load",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--api",
        "sglang",
        "--concurrency",
        &concurrency.to_string(),
        "--duration",
        "20s",
        "--no-metrics",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("went away"), "{}", stderr(&o));
    // The rule: the run stops at GONE_AFTER refusals in a row; the requests already in flight
    // then (at most concurrency − 1) are recorded too.
    let n = read_records(&out).unwrap().len() as u32;
    assert!(
        (GONE_AFTER..GONE_AFTER + concurrency).contains(&n),
        "{n} records"
    );
}

#[test]
fn an_open_loop_stops_too_when_the_server_is_gone() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = run(&[
        "load",
        "--url",
        &format!("http://127.0.0.1:{port}"),
        "--api",
        "sglang",
        "--request-rate",
        "200",
        "--duration",
        "20s",
        "--no-metrics",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("went away"), "{}", stderr(&o));
    // Slots that arrive while the gate holds the run back wait there, and are dropped once it
    // stops: far fewer records than the 4,000 slots of the schedule.
    let n = read_records(&out).unwrap().len() as u32;
    assert!((GONE_AFTER..GONE_AFTER + 32).contains(&n), "{n} records");
}

#[test]
fn load_and_sweep_agree_that_a_server_refusing_all_work_is_gone() {
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/generate",
            post(|| async { respond(StatusCode::SERVICE_UNAVAILABLE, "overloaded") }),
        );
    let url = serve(app);
    let dir = tempfile::tempdir().unwrap();
    let (l, s) = (dir.path().join("l.jsonl"), dir.path().join("s.jsonl"));
    let load = run(&[
        "load",
        "--url",
        &url,
        "--api",
        "sglang",
        "--concurrency",
        "1",
        "--num-requests",
        "3",
        "--input-len",
        "8",
        "--no-metrics",
        "--out",
        l.to_str().unwrap(),
    ]);
    let sweep = run(&[
        "sweep",
        "--url",
        &url,
        "--api",
        "sglang",
        "--contexts",
        "1k",
        "--runs",
        "2",
        "--warmup",
        "0",
        "--no-progress",
        "--out",
        s.to_str().unwrap(),
    ]);
    assert_eq!(load.status.code(), Some(2), "{}", stderr(&load));
    assert_eq!(sweep.status.code(), Some(2), "{}", stderr(&sweep));
    assert_eq!(read_records(&l).unwrap().len(), 3);
    assert_eq!(read_records(&s).unwrap().len(), 2);
}

/// A raw server on the test's runtime that answers every request `429` with `Retry-After: 1`,
/// logging the instant (tokio's clock) of each.
async fn too_many_requests_server() -> (String, Arc<Mutex<Vec<tokio::time::Instant>>>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let lg = log.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let lg = lg.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // One request per connection: read to the end of its body.
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if let Some(h) = text.find("\r\n\r\n") {
                        let len = text[..h]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if got.len() >= h + 4 + len {
                            break;
                        }
                    }
                }
                if got.starts_with(b"POST /generate") {
                    lg.lock().unwrap().push(tokio::time::Instant::now());
                }
                let _ = s
                    .write_all(b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbusy")
                    .await;
            });
        }
    });
    (url, log)
}

#[tokio::test(start_paused = true)]
async fn retry_after_holds_a_closed_loop_back() {
    let (url, log) = too_many_requests_server().await;
    let dir = tempfile::tempdir().unwrap();
    let target = Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    };
    let schedule =
        Schedule::new(Arrivals::Closed { concurrency: 2 }, Stop::Requests(12), 1).unwrap();
    let workload = Workload::Random {
        input: LenDist::parse("8").unwrap(),
        output: LenDist::parse("2").unwrap(),
    };
    let cfg = LoadConfig {
        stamping: Stamping::Socket,
        scrape_metrics: false,
        ..LoadConfig::new(target, schedule, workload, dir.path().join("r.jsonl"))
    };
    let outcome = run_load(&cfg).await.unwrap();
    assert_eq!(outcome.written, 12);
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 12);
    // Two workers; after the first 429 asking for one second, one request a second goes (the
    // gate lets requests queued behind a wait through one by one): 0, 0, then 1 s .. 10 s (without
    // the wait, all twelve arrive at the same instant; as a burst per wait, in six rounds).
    let span = *log.last().unwrap() - log[0];
    assert!(
        span >= Duration::from_millis(9900) && span < Duration::from_secs(12),
        "{span:?}"
    );
    for w in log[1..].windows(2) {
        assert!(w[1] - w[0] >= Duration::from_millis(900), "{log:?}");
    }
    // Every request failed as refused: the server counts as gone (exit 2).
    assert!(outcome.server_gone.is_some());
}

/// A server whose `/health` (and SGLang's probe) answer `503` for the first `starting` calls.
fn starting_server(starting: usize) -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let ready = move || {
        let c = c.clone();
        async move {
            if c.fetch_add(1, Ordering::SeqCst) < starting {
                respond(StatusCode::SERVICE_UNAVAILABLE, "starting")
            } else {
                respond(StatusCode::OK, "ok")
            }
        }
    };
    let app = Router::new()
        .route("/health", get(ready.clone()))
        .route(
            "/get_model_info",
            get(move || {
                let r = ready.clone();
                async move { r().await }
            }),
        )
        .route("/server_info", get(|| async { "{}" }))
        .route("/generate", post(|| async { STREAM }));
    (serve(app), calls)
}

fn load_args<'a>(url: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "load",
        "--url",
        url,
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--input-len",
        "8",
        "--output-len",
        "2",
        "--no-metrics",
        "--out",
        out,
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn wait_ready_waits_out_a_starting_server_then_probes_it() {
    let (url, calls) = starting_server(3);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = run(&load_args(
        &url,
        out.to_str().unwrap(),
        &["--wait-ready", "30s"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(calls.load(Ordering::SeqCst) >= 4);
    let manifest = read(&dir.path().join("r.jsonl.manifest.jsonl"));
    assert!(manifest.contains("\"dialect\":\"sglang\""), "{manifest}");
}

#[test]
fn a_starting_server_is_not_ready_not_an_openai_server() {
    let (url, _) = starting_server(usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = run(&load_args(&url, out.to_str().unwrap(), &[]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("server not ready"), "{}", stderr(&o));
    assert!(!out.exists(), "nothing was run");
}

#[test]
fn a_server_that_needs_a_key_says_so() {
    let app = Router::new().fallback(|| async {
        Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from("{\"error\":\"unauthorized\"}"))
            .unwrap()
    });
    let url = serve(app);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    for extra in [&[][..], &["--wait-ready", "30s"][..]] {
        let o = run(&load_args(&url, out.to_str().unwrap(), extra));
        assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("server needs an API key (--api-key"),
            "{}",
            stderr(&o)
        );
        assert!(!out.exists());
    }
}
