//! Connections on tokio's paused clock: closed when idle after a response (uvicorn's keep-alive
//! timeout, which SGLang runs on), or when a request's header does not arrive in time; the ground
//! truth of a long run is bounded.

use crate::common::*;
use mock_server::conn::Timeouts;
use mock_server::ServeOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, Duration};

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n";

async fn start_opts(o: ServeOptions) -> MockServer {
    let mut cfg = Config::default();
    cfg.port = 0;
    MockServer::start_with(cfg, o).await.unwrap()
}

/// Sends `req` and reads one whole response to a GET /health (status line, headers, no body).
async fn ask(c: &mut TcpStream, req: &[u8]) -> String {
    c.write_all(req).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while find(&buf, b"\r\n\r\n").is_none() {
        let n = c.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Whether the server closed the connection (a read returns end of file).
async fn closed(c: &mut TcpStream) -> bool {
    let mut b = [0u8; 16];
    matches!(
        tokio::time::timeout(Duration::from_millis(1), c.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_closes_after_the_keep_alive_timeout() {
    let s = start_opts(ServeOptions::default()).await;
    let mut c = TcpStream::connect(s.addr()).await.unwrap();
    // A fresh connection is not subject to it (uvicorn's rule).
    sleep(Duration::from_secs(6)).await;
    assert!(ask(&mut c, HEALTH).await.starts_with("HTTP/1.1 200"));
    // Idle under 5 s after a response: still open; the timer restarts with each response.
    sleep(Duration::from_millis(4_900)).await;
    assert!(!closed(&mut c).await);
    assert!(ask(&mut c, HEALTH).await.starts_with("HTTP/1.1 200"));
    sleep(Duration::from_millis(4_900)).await;
    assert!(!closed(&mut c).await);
    sleep(Duration::from_millis(200)).await;
    assert!(closed(&mut c).await, "idle 5.1 s after the response");
    s.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_keep_alive_timeout_is_a_setting() {
    let s = start_opts(ServeOptions {
        timeouts: Timeouts {
            keep_alive: Duration::from_secs(60),
            header_read: Duration::from_secs(120),
        },
        ..ServeOptions::default()
    })
    .await;
    let mut c = TcpStream::connect(s.addr()).await.unwrap();
    ask(&mut c, HEALTH).await;
    sleep(Duration::from_secs(59)).await;
    assert!(!closed(&mut c).await);
    sleep(Duration::from_secs(2)).await;
    assert!(closed(&mut c).await);
    s.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_header_that_does_not_arrive_in_time_closes_the_connection() {
    let s = start_opts(ServeOptions::default()).await;
    let mut c = TcpStream::connect(s.addr()).await.unwrap();
    // Bytes of a header keep the keep-alive timer away, not the header timer.
    c.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    sleep(Duration::from_secs(29)).await;
    assert!(!closed(&mut c).await);
    sleep(Duration::from_secs(2)).await;
    assert!(
        closed(&mut c).await,
        "no complete header 31 s after connecting"
    );
    s.shutdown().await;
}

/// Many requests through the socket: the store keeps the last `truth_window` that ended, and the
/// request being read by the client is among them.
#[tokio::test(start_paused = true)]
async fn a_long_run_keeps_the_ground_truth_of_the_last_requests_only() {
    let s = start_opts(ServeOptions {
        truth_window: 8,
        ..ServeOptions::default()
    })
    .await;
    let url = s.url();
    for i in 0..40 {
        let rid = format!("w{i}");
        let r = send_generate(&url, &gen_body(&rid, 16, i, 4)).await;
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        assert_eq!(s.truth().request(&rid).unwrap().completion_tokens, 4);
    }
    let kept: Vec<String> = s.truth().all().into_iter().map(|t| t.rid).collect();
    let want: Vec<String> = (32..40).map(|i| format!("w{i}")).collect();
    assert_eq!(kept, want);
    s.shutdown().await;
}
