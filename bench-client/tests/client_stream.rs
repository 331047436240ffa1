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
use bench_client::client::{self, RequestSpec, Target, Timeouts};
use bench_client::measure::measure;
use bench_client::trace::{FailureKind, StreamEnd, TimeoutPhase};
use bench_client::{Dialect, Prompt};

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

fn target(url: String) -> Target {
    Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    }
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
    let http = reqwest::Client::new();
    let trace = client::send(&http, &target(url), &spec(6), &Timeouts::default()).await;
    assert_eq!(trace.end, StreamEnd::Done, "{trace:?}");
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
    let trace = client::send(
        &reqwest::Client::new(),
        &target(url),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
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
    let trace = client::send(
        &reqwest::Client::new(),
        &target(url),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
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
    let trace = client::send(
        &reqwest::Client::new(),
        &target(url),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
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
    let trace = client::send(
        &reqwest::Client::new(),
        &target(url),
        &spec(6),
        &Timeouts::default(),
    )
    .await;
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
    let trace = client::send(&reqwest::Client::new(), &target(url), &spec(6), &timeouts).await;
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
    let trace = client::send(&reqwest::Client::new(), &target(url), &spec(6), &timeouts).await;
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
    let trace = client::send(
        &reqwest::Client::new(),
        &target(format!("http://{addr}")),
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
