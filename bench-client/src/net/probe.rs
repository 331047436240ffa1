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

/// Pick the dialect: SGLang answers `GET /get_model_info` or `/model_info`; otherwise `openai`.
pub async fn probe_dialect(http: &reqwest::Client, base: &str, key: Option<&str>) -> Dialect {
    for path in ["/get_model_info", "/model_info"] {
        if let Ok(r) = get(http, base, path, key).send().await {
            if r.status().is_success() {
                return Dialect::Sglang;
            }
        }
    }
    Dialect::OpenAi
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
