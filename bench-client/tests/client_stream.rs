//! In-process tests of the network stage against a tiny axum server that streams a scripted SSE body on
//! tokio's paused clock: the client must stamp exactly the scripted instants and type every failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bench_client::measure::measure;
use bench_client::net;
use bench_client::net::stamped::{StampedConnector, Stamping};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::trace::{FailureKind, RequestTrace, Stamps, StreamEnd, TimeoutPhase};
use bench_client::Prompt;

mod support;
use support::sglang;

/// The client as the paused-clock tests use it: reads stamped on the runtime's clock, at the socket.
fn http() -> net::Http {
    net::http_client_with(&Timeouts::default(), Stamping::Socket).unwrap()
}

/// One scripted piece of the body: wait `after_ms` (from the previous piece), then send `data`.
#[derive(Clone)]
struct Step {
    after_ms: u64,
    data: &'static str,
}

#[derive(Clone)]
enum Ending {
    Close,
    Hang,
}

async fn serve(status: StatusCode, steps: Vec<Step>, ending: Ending) -> String {
    let app = Router::new().route(
        "/generate",
        post(move || {
            let steps = steps.clone();
            let ending = ending.clone();
            async move {
                let stream = async_stream(steps, ending);
                let mut r = Response::new(Body::from_stream(stream));
                *r.status_mut() = status;
                r.into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

fn async_stream(
    steps: Vec<Step>,
    ending: Ending,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> + Send {
    futures::stream::unfold(
        (steps.into_iter(), ending, false),
        |(mut it, ending, ended)| async move {
            if ended {
                return None;
            }
            match it.next() {
                Some(s) => {
                    tokio::time::sleep(Duration::from_millis(s.after_ms)).await;
                    Some((
                        Ok(Bytes::from_static(s.data.as_bytes())),
                        (it, ending, false),
                    ))
                }
                None => {
                    if let Ending::Hang = ending {
                        futures::future::pending::<()>().await;
                    }
                    None
                }
            }
        },
    )
}

fn spec(max: u32) -> RequestSpec {
    RequestSpec::new("rid-1", Prompt::TokenIds(vec![101, 102, 103, 104]), max)
}

const E1: &str = "data: {\"text\":\"ab\",\"output_ids\":[5,6,7],\"meta_info\":{\"id\":\"rid-1\",\"prompt_tokens\":4,\"completion_tokens\":3,\"cached_tokens\":0,\"finish_reason\":null}}\n\n";
const E2: &str = "data: {\"text\":\"abc\",\"output_ids\":[5,6,7,8],\"meta_info\":{\"id\":\"rid-1\",\"prompt_tokens\":4,\"completion_tokens\":4,\"cached_tokens\":0,\"finish_reason\":null}}\n\n";
const E3: &str = "data: {\"text\":\"abcde\",\"output_ids\":[5,6,7,8,9,10],\"meta_info\":{\"id\":\"rid-1\",\"prompt_tokens\":4,\"completion_tokens\":6,\"cached_tokens\":0,\"finish_reason\":{\"type\":\"length\",\"length\":6}}}\n\n";
const DONE: &str = "data: [DONE]\n\n";

#[tokio::test(start_paused = true)]
async fn stamps_scripted_instants_exactly() {
    let url = serve(
        StatusCode::OK,
        vec![
            Step {
                after_ms: 250,
                data: E1,
            },
            Step {
                after_ms: 40,
                data: E2,
            },
            Step {
                after_ms: 60,
                data: E3,
            },
            Step {
                after_ms: 0,
                data: DONE,
            },
        ],
        Ending::Close,
    )
    .await;
    let trace = net::send(&http(), &sglang(&url), &spec(6), &Timeouts::default()).await;
    assert_eq!(trace.end, StreamEnd::Done, "{trace:?}");
    assert_eq!(trace.stamps, Stamps::Socket);
    let at: Vec<u64> = trace.chunks.iter().map(|c| c.at_ns).collect();
    assert_eq!(at, vec![250_000_000, 290_000_000, 350_000_000]);
    assert_eq!(trace.end_ns, 350_000_000);
    let m = measure(&trace).unwrap();
    assert_eq!(m.ttft_ms, 250.0);
    assert_eq!(m.tokens_per_chunk, vec![3, 1, 2]);
    // 3 tokens after the first chunk over 100 ms.
    assert!((m.decode_tok_s.unwrap() - 30.0).abs() < 1e-9);
    assert!((m.naive_decode_tok_s.unwrap() - 50.0).abs() < 1e-9);
    assert!((m.prefill_tok_s.unwrap() - 16.0).abs() < 1e-9);
}

/// Serves `/generate` on the real clock, keeping connections alive: E1 250 ms after the request,
/// E2, E3 and `[DONE]` after it; records the instant each E1 is handed to the connection.
async fn serve_keep_alive(
    first_chunks: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
) -> String {
    let app = Router::new().route(
        "/generate",
        post(move || {
            let first_chunks = first_chunks.clone();
            async move {
                let s = futures::stream::unfold(0usize, move |k| {
                    let first_chunks = first_chunks.clone();
                    async move {
                        let (wait, data) = match k {
                            0 => (250, E1),
                            1 => (40, E2),
                            2 => (60, E3),
                            3 => (0, DONE),
                            _ => return None,
                        };
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                        if k == 0 {
                            first_chunks.lock().unwrap().push(std::time::Instant::now());
                        }
                        Some((
                            Ok::<_, Infallible>(Bytes::from_static(data.as_bytes())),
                            k + 1,
                        ))
                    }
                });
                Response::new(Body::from_stream(s))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}")
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn requests_one_after_another_on_one_client_each_get_their_own_exchange() {
    // Real clock: on the paused clock a second request on one client hangs in this harness (with
    // reqwest too). Kernel stamps: each request's first chunk lies against the server's hand-off
    // of it, and an exchange that is not the request's own leaves its trace `mixed`.
    let _warm = warm_kernel_stamps().await;
    let first_chunks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let url = serve_keep_alive(first_chunks.clone()).await;
    let http = net::http_client_with(&Timeouts::default(), Stamping::Kernel).unwrap();
    let mut delays = Vec::new();
    for round in 0..3 {
        let (trace, origin) =
            net::send_traced(&http, &sglang(&url), &spec(6), &Timeouts::default()).await;
        assert_eq!(trace.end, StreamEnd::Done, "round {round}: {trace:?}");
        assert_eq!(trace.stamps, Stamps::Kernel, "round {round}");
        let first = origin.into_std() + Duration::from_nanos(trace.chunks[0].at_ns);
        let handed = first_chunks.lock().unwrap()[round];
        let off = if first > handed {
            first - handed
        } else {
            handed - first
        };
        assert!(
            off < Duration::from_millis(50),
            "round {round}: first chunk {off:?} from the server's hand-off"
        );
        delays.push(trace.send_delay_ns);
    }
    assert!(delays.iter().all(Option::is_some), "{delays:?}");
}

#[tokio::test(start_paused = true)]
async fn cut_without_done_is_stream_cut() {
    let url = serve(
        StatusCode::OK,
        vec![
            Step {
                after_ms: 10,
                data: E1,
            },
            Step {
                after_ms: 10,
                data: E2,
            },
        ],
        Ending::Close,
    )
    .await;
    let trace = net::send(&http(), &sglang(&url), &spec(6), &Timeouts::default()).await;
    assert_eq!(trace.end, StreamEnd::Eof);
    assert_eq!(trace.failure().unwrap().kind, FailureKind::StreamCut);
}

#[tokio::test(start_paused = true)]
async fn in_band_error_is_typed() {
    let url = serve(
        StatusCode::OK,
        vec![
            Step {
                after_ms: 10,
                data: E1,
            },
            Step {
                after_ms: 10,
                data: "data: {\"error\": {\"message\": \"CUDA out of memory\"}}\n\n",
            },
            Step {
                after_ms: 0,
                data: DONE,
            },
        ],
        Ending::Close,
    )
    .await;
    let trace = net::send(&http(), &sglang(&url), &spec(6), &Timeouts::default()).await;
    let f = trace.failure().unwrap();
    assert_eq!(f.kind, FailureKind::InBandError);
    assert!(f.message.contains("CUDA out of memory"));
}

#[tokio::test(start_paused = true)]
async fn fewer_tokens_than_asked_is_typed() {
    let url = serve(
        StatusCode::OK,
        vec![
            Step {
                after_ms: 10,
                data: E1,
            },
            Step {
                after_ms: 0,
                data: DONE,
            },
        ],
        Ending::Close,
    )
    .await;
    let trace = net::send(&http(), &sglang(&url), &spec(6), &Timeouts::default()).await;
    assert_eq!(trace.failure().unwrap().kind, FailureKind::ShortOutput);
}

#[tokio::test(start_paused = true)]
async fn http_status_carries_body() {
    let url = serve(
        StatusCode::BAD_REQUEST,
        vec![Step {
            after_ms: 0,
            data: "{\"error\":\"prompt too long\"}",
        }],
        Ending::Close,
    )
    .await;
    let trace = net::send(&http(), &sglang(&url), &spec(6), &Timeouts::default()).await;
    match &trace.end {
        StreamEnd::HttpStatus { status, body } => {
            assert_eq!(*status, 400);
            assert!(body.contains("prompt too long"));
        }
        other => panic!("expected HTTP status, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn idle_gap_timeout_fires_at_its_deadline() {
    let url = serve(
        StatusCode::OK,
        vec![Step {
            after_ms: 100,
            data: E1,
        }],
        Ending::Hang,
    )
    .await;
    let timeouts = Timeouts {
        idle: Duration::from_secs(5),
        ..Timeouts::default()
    };
    let trace = net::send(&http(), &sglang(&url), &spec(6), &timeouts).await;
    assert_eq!(
        trace.end,
        StreamEnd::Timeout {
            phase: TimeoutPhase::Idle
        }
    );
    assert_eq!(trace.end_ns, 5_100_000_000);
    assert_eq!(trace.failure().unwrap().kind, FailureKind::Timeout);
}

#[tokio::test(start_paused = true)]
async fn first_token_timeout_scales_with_prompt() {
    let url = serve(
        StatusCode::OK,
        vec![Step {
            after_ms: 10,
            data: ": keep-alive\n\n",
        }],
        Ending::Hang,
    )
    .await;
    let timeouts = Timeouts {
        first_token_base: Duration::from_secs(1),
        first_token_per_1k: Duration::from_secs(1000),
        ..Timeouts::default()
    };
    // 4 prompt tokens: 1 s + 4 s.
    let trace = net::send(&http(), &sglang(&url), &spec(6), &timeouts).await;
    assert_eq!(
        trace.end,
        StreamEnd::Timeout {
            phase: TimeoutPhase::FirstToken
        }
    );
    assert_eq!(trace.end_ns, 5_000_000_000);
}

#[tokio::test]
async fn connection_refused_is_typed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let trace = net::send(
        &http(),
        &sglang(&format!("http://{addr}")),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
    assert_eq!(
        trace.failure().unwrap().kind,
        FailureKind::ConnectRefused,
        "{trace:?}"
    );
}

#[tokio::test]
async fn connection_refused_is_typed_through_reqwest_too() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let http = net::http_client_with(&Timeouts::default(), Stamping::Task).unwrap();
    let trace = net::send(
        &http,
        &sglang(&format!("http://{addr}")),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
    assert_eq!(trace.stamps, Stamps::Task);
    assert_eq!(
        trace.failure().unwrap().kind,
        FailureKind::ConnectRefused,
        "{trace:?}"
    );
}

/// What a hand-written server saw and did, on the real monotonic clock (which tokio's clock is when
/// not paused).
struct ServerLog {
    /// Just after it read the whole request.
    request_read: std::time::Instant,
    /// Around the write of each event: (before, after).
    writes: Vec<(std::time::Instant, std::time::Instant)>,
}

/// Serves one request on a real socket: reads it, waits until `blocked` says the client's thread
/// is blocked, then writes the headers with E1 at once (while the client cannot read), E2 600 ms
/// later (after the block) and E3 + `[DONE]` 30 ms after that.
fn serve_while_client_blocked(
    requested: std::sync::Arc<std::sync::atomic::AtomicBool>,
    blocked: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (String, std::thread::JoinHandle<ServerLog>) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        // Headers, then Content-Length bytes of body.
        let body_len = loop {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client closed early");
            req.extend_from_slice(&buf[..n]);
            if let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&req[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap();
                if req.len() >= end + 4 + len {
                    break len;
                }
            }
        };
        assert!(body_len > 0);
        let request_read = std::time::Instant::now();
        requested.store(true, Ordering::SeqCst);
        while !blocked.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
        let mut writes = Vec::new();
        let parts = [
            format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{}", chunk(E1)),
            chunk(E2),
            format!("{}{}0\r\n\r\n", chunk(E3), chunk(DONE)),
        ];
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(if i == 1 { 600 } else { 30 }));
            }
            let before = std::time::Instant::now();
            s.write_all(p.as_bytes()).unwrap();
            writes.push((before, std::time::Instant::now()));
        }
        ServerLog {
            request_read,
            writes,
        }
    });
    (url, server)
}

/// Linux turns receive timestamps on in a deferred job after the first socket asks for them: holds
/// a stamped connection open a while, so that a test's segments are stamped even when it is the
/// first in its process. Keep the result alive for the test.
async fn warm_kernel_stamps() -> (std::net::TcpListener, impl Sized) {
    let warm = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut connector = StampedConnector::new(Duration::from_secs(5), Stamping::Kernel);
    let uri = format!("http://{}", warm.local_addr().unwrap())
        .parse()
        .unwrap();
    let conn = tower::Service::call(&mut connector, uri).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    (warm, conn)
}

/// Sends one request on a current-thread runtime on the real clock, and blocks that thread for
/// 300 ms from the moment the server has the request: the first event arrives while the client
/// cannot read. Returns the trace, the instant its times count from, and what the server did.
fn send_while_blocked(stamping: Stamping) -> (RequestTrace, std::time::Instant, ServerLog) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let requested = Arc::new(AtomicBool::new(false));
    let blocked = Arc::new(AtomicBool::new(false));
    let (url, server) = serve_while_client_blocked(requested.clone(), blocked.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (trace, origin) = rt.block_on(async move {
        let _warm = warm_kernel_stamps().await;

        let blocker = tokio::spawn(async move {
            while !requested.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            blocked.store(true, Ordering::SeqCst);
            // Blocks the runtime's only thread: nothing of the client runs.
            std::thread::sleep(Duration::from_millis(300));
        });
        let http = net::http_client_with(&Timeouts::default(), stamping).unwrap();
        let sent = net::send_traced(&http, &sglang(&url), &spec(6), &Timeouts::default()).await;
        blocker.await.unwrap();
        sent
    });
    (trace, origin.into_std(), server.join().unwrap())
}

/// The instant of a trace time, given the instant the trace's times count from.
fn instant_of(origin: std::time::Instant, at_ns: u64) -> std::time::Instant {
    origin + Duration::from_nanos(at_ns)
}

#[cfg(target_os = "linux")]
#[test]
fn kernel_stamps_do_not_count_a_blocked_client() {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (trace, origin, server) = send_while_blocked(Stamping::Kernel);
    assert_eq!(trace.end, StreamEnd::Done, "{trace:?}");
    assert_eq!(
        trace.stamps,
        Stamps::Kernel,
        "every instant from the kernel"
    );
    assert!(
        trace.send_delay_ns.is_some() && origin <= server.request_read,
        "the send is stamped at the request's write, before the server read it"
    );
    // The first event's segment arrived during the server's first write; the client read it
    // ~300 ms later.
    let first = instant_of(origin, trace.chunks[0].at_ns);
    let (w0, w0_end) = server.writes[0];
    let slack = Duration::from_millis(1);
    assert!(
        first + slack >= w0 && first <= w0_end + slack,
        "first chunk stamped {:.3} ms after the server's write began (write took {:.3} ms)",
        ms(first.saturating_duration_since(w0)),
        ms(w0_end - w0)
    );
    // The later events are stamped at their own arrival, so the decode span is the server's.
    let last = instant_of(origin, trace.chunks[2].at_ns);
    let (w2, w2_end) = server.writes[2];
    assert!(
        last + slack >= w2 && last <= w2_end + slack,
        "last chunk stamped {:.3} ms after the server's last write began",
        ms(last.saturating_duration_since(w2))
    );
    let m = measure(&trace).unwrap();
    let served_ttft = ms(w0 - origin);
    assert!(
        (m.ttft_ms - served_ttft).abs() < 1.0 + ms(w0_end - w0),
        "TTFT {} ms, served {served_ttft} ms",
        m.ttft_ms
    );
}

#[test]
fn task_stamps_count_a_blocked_client() {
    // The same exchange stamped by the request's task: the block lands in TTFT. This is what
    // socket stamps are for, and it shows the test above blocks the client as it means to.
    let (trace, origin, server) = send_while_blocked(Stamping::Task);
    assert_eq!(trace.end, StreamEnd::Done, "{trace:?}");
    assert_eq!(trace.stamps, Stamps::Task);
    let first = instant_of(origin, trace.chunks[0].at_ns);
    assert!(
        first >= server.writes[0].1 + Duration::from_millis(100),
        "the task read the first event only after the block"
    );
}
