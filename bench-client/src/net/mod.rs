//! The network stage, the only one that does I/O: where requests go ([`Target`]), the HTTP stack
//! ([`Http`]), one streaming request ([`send`]), the probes around a run, and `/metrics` scrapes.

mod errors;
pub mod probe;
mod proxy;
pub mod redact;
pub mod scrape;
mod send;
pub mod stamped;
pub mod unix;

use std::time::Duration;

pub use probe::{
    first_model, flush_cache, health, probe_dialect, probe_dialect_checked, server_info,
    wait_ready, NotUsable,
};
use proxy::ProxyEnv;
pub use send::{send, send_full, send_traced, Sent};
use stamped::{StampedConnector, Stamping};

use crate::plan::Timeouts;
use crate::trace::Dialect;

/// Where requests go.
#[derive(Clone)]
pub struct Target {
    /// Base URL, e.g. `http://127.0.0.1:30000`.
    pub base_url: String,
    /// Wire dialect.
    pub dialect: Dialect,
    /// Model name for OpenAI dialects.
    pub model: Option<String>,
    /// Bearer token; never printed, logged or recorded.
    pub api_key: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("base_url", &self.shown_url())
            .field("dialect", &self.dialect)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Target {
    /// Full URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        join(&self.base_url, path)
    }

    /// The base URL as it may be printed or stored: without its `user:password@`.
    pub fn shown_url(&self) -> String {
        redact::redact_text(&self.base_url)
    }
}

fn join(base: &str, path: &str) -> String {
    format!("{}{}", base.trim_end_matches('/'), path)
}

/// The client's HTTP stack. Streams to plain-HTTP servers go through hyper over connections that
/// stamp their I/O at the socket ([`crate::net::stamped`]); streams to HTTPS servers, and every probe, go
/// through reqwest (which also [`Deref`](std::ops::Deref)s from this type), whose streams are stamped
/// by the request's task.
#[derive(Clone, Debug)]
pub struct Http {
    reqwest: reqwest::Client,
    wire: Option<WireClient>,
    /// Set when the environment names a proxy.
    proxy: Option<ProxyEnv>,
}

type WireClient =
    hyper_util::client::legacy::Client<StampedConnector, http_body_util::Full<bytes::Bytes>>;

impl Http {
    /// The client without socket stamps: every stream goes through reqwest.
    pub fn reqwest_only(reqwest: reqwest::Client) -> Self {
        Self {
            reqwest,
            wire: None,
            proxy: None,
        }
    }

    /// The reqwest client, for probes.
    pub fn reqwest(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

impl std::ops::Deref for Http {
    type Target = reqwest::Client;
    fn deref(&self) -> &reqwest::Client {
        &self.reqwest
    }
}

/// The client with the connect timeout set, reads stamped by the kernel where it can.
pub fn http_client(timeouts: &Timeouts) -> reqwest::Result<Http> {
    http_client_with(timeouts, Stamping::Kernel)
}

/// The client with the connect timeout set; `stamping` says where streams are stamped (use
/// [`Stamping::Socket`] under tokio's paused clock).
pub fn http_client_with(timeouts: &Timeouts, stamping: Stamping) -> reqwest::Result<Http> {
    let reqwest = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .build()?;
    if stamping == Stamping::Task {
        return Ok(Http::reqwest_only(reqwest));
    }
    let connector = StampedConnector::new(timeouts.connect, stamping);
    let wire = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    Ok(Http {
        reqwest,
        wire: Some(wire),
        proxy: ProxyEnv::from_env(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_redacted_in_debug() {
        let t = Target {
            base_url: "http://x".into(),
            dialect: Dialect::Sglang,
            model: None,
            api_key: Some("sk-secret".into()),
        };
        let s = format!("{t:?}");
        assert!(!s.contains("sk-secret") && s.contains("redacted"));
        let t = Target {
            base_url: "http://me:pw@x:1".into(),
            ..t
        };
        assert_eq!(t.shown_url(), "http://<redacted>@x:1");
        assert!(!format!("{t:?}").contains("pw"));
    }

    #[test]
    fn url_join() {
        assert_eq!(join("http://h:1/", "/generate"), "http://h:1/generate");
    }
}
