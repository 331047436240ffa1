//! The small requests around a run: which dialect and model a server has, its description for the
//! manifest, its health, and SGLang's cache flush.

use std::time::Duration;

use serde_json::Value;

use super::join;
use crate::trace::Dialect;

fn get(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let r = http.get(join(base, path)).timeout(Duration::from_secs(10));
    match key {
        Some(k) => r.bearer_auth(k),
        None => r,
    }
}

/// Why a server cannot be benchmarked yet: never taken as an answer about its dialect.
#[derive(Debug, thiserror::Error)]
pub enum NotUsable {
    /// Starting, or overloaded: `503` (or another 5xx), or no answer, after the wait.
    #[error("server not ready: {detail}")]
    NotReady {
        /// What the last try got.
        detail: String,
    },
    /// `401` or `403`.
    #[error("server needs an API key (--api-key, or env OPENAI_API_KEY / SGLANG_API_KEY): GET {path} answered HTTP {status}")]
    NeedsKey {
        /// The path that refused.
        path: &'static str,
        /// Its status.
        status: u16,
    },
    /// Nothing listens, or the connection failed.
    #[error("server not reachable: {detail}")]
    Unreachable {
        /// The connection error.
        detail: String,
    },
}

/// What one probe's status says of the server, when it says it is not usable.
fn refusal(path: &'static str, status: reqwest::StatusCode) -> Option<NotUsable> {
    match status.as_u16() {
        401 | 403 => Some(NotUsable::NeedsKey {
            path,
            status: status.as_u16(),
        }),
        503 => Some(NotUsable::NotReady {
            detail: format!("GET {path} answered HTTP 503"),
        }),
        _ => None,
    }
}

/// Pick the dialect: SGLang answers `GET /get_model_info` or `/model_info`; otherwise `openai`
/// (also when the server is not usable: see [`probe_dialect_checked`]).
pub async fn probe_dialect(http: &reqwest::Client, base: &str, key: Option<&str>) -> Dialect {
    probe_dialect_checked(http, base, key)
        .await
        .unwrap_or(Dialect::OpenAi)
}

/// Pick the dialect as [`probe_dialect`] does, but a server that answers `401`/`403` (needs a key)
/// or `503` (not ready), or cannot be reached, is an error, not an `openai` server.
pub async fn probe_dialect_checked(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> Result<Dialect, NotUsable> {
    for path in ["/get_model_info", "/model_info", "/v1/models"] {
        match get(http, base, path, key).send().await {
            Ok(r) if r.status().is_success() && path != "/v1/models" => return Ok(Dialect::Sglang),
            Ok(r) => {
                if let Some(e) = refusal(path, r.status()) {
                    return Err(e);
                }
            }
            Err(e) if e.is_connect() => {
                return Err(NotUsable::Unreachable {
                    detail: super::errors::error_chain(&e).text,
                })
            }
            Err(_) => {}
        }
    }
    Ok(Dialect::OpenAi)
}

/// How often [`wait_ready`] asks.
const READY_POLL: Duration = Duration::from_secs(1);

/// Waits up to `within` for the server to be ready: `GET /health` answers with success (a server
/// without the route, `404`, counts as ready), then, where the server has it, SGLang's
/// `GET /health_generate` too. `401`/`403` end the wait at once ([`NotUsable::NeedsKey`]); `503`,
/// other errors and refused connections are retried every second until `within` has passed.
pub async fn wait_ready(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    within: Duration,
) -> Result<(), NotUsable> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = match ready_once(http, base, key).await {
            Ok(()) => return Ok(()),
            Err(e @ NotUsable::NeedsKey { .. }) => return Err(e),
            Err(e) => e,
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(match last {
                NotUsable::NotReady { detail } | NotUsable::Unreachable { detail } => {
                    NotUsable::NotReady {
                        detail: format!("{detail} (after waiting {within:?}; --wait-ready)"),
                    }
                }
                other => other,
            });
        }
        tokio::time::sleep(READY_POLL.min(deadline - now)).await;
    }
}

/// One readiness check: `/health`, then `/health_generate` where it exists.
async fn ready_once(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> Result<(), NotUsable> {
    for path in ["/health", "/health_generate"] {
        match get(http, base, path, key).send().await {
            Ok(r) if r.status().is_success() || r.status().as_u16() == 404 => {}
            Ok(r) => {
                return Err(refusal(path, r.status()).unwrap_or(NotUsable::NotReady {
                    detail: format!("GET {path} answered HTTP {}", r.status().as_u16()),
                }))
            }
            Err(e) => {
                return Err(NotUsable::Unreachable {
                    detail: super::errors::error_chain(&e).text,
                })
            }
        }
    }
    Ok(())
}

/// First model id from `GET /v1/models`, if the server lists any.
pub async fn first_model(http: &reqwest::Client, base: &str, key: Option<&str>) -> Option<String> {
    let r = get(http, base, "/v1/models", key).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    let v = json_capped(r).await?;
    v.pointer("/data/0/id")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Server description for the run manifest: `/server_info`, else `/v1/models`; its secrets (the
/// server's API keys, passwords, the client's own key) redacted here, before it is stored
/// anywhere ([`super::redact`]).
pub async fn server_info(http: &reqwest::Client, base: &str, key: Option<&str>) -> Option<Value> {
    for path in ["/server_info", "/get_server_info", "/v1/models"] {
        if let Ok(r) = get(http, base, path, key).send().await {
            if r.status().is_success() {
                if let Some(mut v) = json_capped(r).await {
                    super::redact::redact_json(&mut v, key);
                    return Some(v);
                }
            }
        }
    }
    None
}

/// The most bytes of a probe's answer read: a server description is a few kB.
const PROBE_BODY_CAP: usize = 4 << 20;

/// A probe's JSON answer, `None` when it is not JSON or longer than [`PROBE_BODY_CAP`].
async fn json_capped(mut r: reqwest::Response) -> Option<Value> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = r.chunk().await {
        if body.len() + chunk.len() > PROBE_BODY_CAP {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).ok()
}

/// `GET /health` answered with a success status.
pub async fn health(http: &reqwest::Client, base: &str, key: Option<&str>) -> bool {
    matches!(get(http, base, "/health", key).send().await, Ok(r) if r.status().is_success())
}

/// `POST /flush_cache` (SGLang); an error says why the flush was refused.
pub async fn flush_cache(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
) -> Result<(), String> {
    let mut r = http
        .post(join(base, "/flush_cache"))
        .timeout(Duration::from_secs(60));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    match r.send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => {
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            Err(format!(
                "POST /flush_cache answered HTTP {status}: {}",
                crate::api::truncate(body.trim(), 300)
            ))
        }
        Err(e) => Err(format!("POST /flush_cache failed: {e}")),
    }
}
