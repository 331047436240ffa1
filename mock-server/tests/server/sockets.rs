//! The listening socket: its accept queue, and kernel receive timestamps of requests (Linux).

use crate::common::*;

/// Reads a number from a `/proc` file, or the `Max open files` soft limit from `/proc/self/limits`.
#[cfg(target_os = "linux")]
fn proc_number(path: &str) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    if path.ends_with("limits") {
        let line = s.lines().find(|l| l.starts_with("Max open files"))?;
        return line.split_whitespace().nth(3)?.parse().ok();
    }
    s.trim().parse().ok()
}

/// 2,000 clients connecting at once must not overflow the listening socket's queue: with the
/// backlog of tokio's `TcpListener::bind` (128) the kernel dropped the excess handshakes, and those
/// clients connected a second later on the SYN retry. The runtime is blocked while the connections
/// arrive, so none is accepted and every one of them must wait in the kernel's queue.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn listen_queue_holds_1200_pending_connections() {
    const N: usize = 1_200;
    let somaxconn = proc_number("/proc/sys/net/core/somaxconn").unwrap_or(0);
    let files = proc_number("/proc/self/limits").unwrap_or(0);
    if somaxconn < N as u64 + 1 || files < N as u64 + 200 {
        eprintln!(
            "skipped: needs net.core.somaxconn > {N} (is {somaxconn}) and an open-file limit over {} (is {files})",
            N + 200
        );
        return;
    }
    let s = start(Config::preset("small-cpu-demo").unwrap()).await;
    let addr = s.addr();
    // Blocking join: this current-thread runtime, which runs the accept loop, does nothing else
    // until every connection is either established or timed out.
    let connected = std::thread::spawn(move || {
        let mut open = Vec::with_capacity(N);
        for _ in 0..N {
            match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300))
            {
                Ok(c) => open.push(c),
                Err(_) => break,
            }
        }
        open.len()
    })
    .join()
    .unwrap();
    assert_eq!(
        connected, N,
        "the listen queue overflowed after {connected} connections"
    );
    s.shutdown().await;
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The ground truth records when a request reached the server's socket (the kernel's receive
/// timestamp), apart from when the handler got to it. The runtime is blocked while the client
/// writes, so the request waits in the socket: its recorded arrival lies within the client's
/// write call, and the handler receives it only after the runtime is free again.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn truth_records_the_requests_arrival_at_the_socket() {
    use std::io::{Read, Write};
    let s = start(Config::preset("small-cpu-demo").unwrap()).await;
    let addr = s.addr();
    let body = r#"{"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":2},"rid":"held"}"#;
    let client = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let req = format!(
            "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let before = unix_ns();
        c.write_all(req.as_bytes()).unwrap();
        let after = unix_ns();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        (before, after, resp)
    });
    // Nothing on this current-thread runtime runs (no accept, no read) for 200 ms.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let freed = unix_ns();
    let (before, after, resp) = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let t = s
        .truth()
        .request("held")
        .expect("truth of the held request");
    let arrived = t
        .socket_arrival_unix_ns
        .expect("a kernel receive timestamp");
    assert!(
        (before..=after).contains(&arrived),
        "arrival {arrived} outside the client's write [{before}, {after}]"
    );
    assert!(t.received_unix_ns >= freed.min(after), "{t:?}");
    if after < freed {
        // The usual case: the request was in the socket before the runtime was free.
        assert!(t.received_unix_ns - arrived >= freed - after);
    }
    s.shutdown().await;
}
