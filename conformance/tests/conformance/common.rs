//! Helpers shared by the conformance tests: a paused-clock runtime, an in-process mock, a client target.

use bench_client::api::Dialect;
use bench_client::net::stamped::Stamping;
use bench_client::net::{self, Target};
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::trace::RequestTrace;
use mock_server::{Config, MockServer};

/// A single-threaded runtime whose clock is paused: the mock's pacing and the client's stamps read the
/// same virtual clock, so comparisons are exact and independent of machine speed.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

/// A preset with a free port.
pub fn preset(name: &str) -> Config {
    let mut c = Config::preset(name).expect("preset");
    c.port = 0;
    c.host = "127.0.0.1".into();
    c
}

pub async fn start(cfg: Config) -> MockServer {
    MockServer::start(cfg).await.expect("mock starts")
}

pub fn target(server: &MockServer, dialect: Dialect) -> Target {
    Target {
        base_url: server.url(),
        dialect,
        model: None,
        api_key: None,
    }
}

/// The client as it runs on the paused clock: stamped at the socket, on the runtime's clock.
pub fn http() -> net::Http {
    net::http_client_with(&Timeouts::default(), Stamping::Socket).expect("http client")
}

/// A token-id prompt of exactly `n` tokens with a unique prefix for `index`.
pub fn prompt(seed: u64, n: u32, index: u64) -> Prompt {
    Prompt::TokenIds(PromptGen::new(seed).token_ids(n, index))
}

pub async fn send(
    server: &MockServer,
    dialect: Dialect,
    rid: &str,
    p: Prompt,
    max_tokens: u32,
) -> RequestTrace {
    let spec = RequestSpec::new(rid, p, max_tokens);
    net::send(
        &http(),
        &target(server, dialect),
        &spec,
        &Timeouts::default(),
    )
    .await
}

/// Nanoseconds to milliseconds, as the client reports them.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
