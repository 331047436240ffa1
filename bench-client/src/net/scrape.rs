//! `/metrics` scrapes: the server's Prometheus text and the unix ms it arrived at (parsed by
//! `report::server_metrics`).

use std::time::Duration;

use super::Target;

pub use super::unix::unix_ms_now;

/// Scrape `/metrics`: its text and the unix ms it arrived at; `None` when the server has no
/// metrics endpoint.
pub async fn scrape(http: &reqwest::Client, target: &Target) -> Option<(String, u64)> {
    let mut r = http
        .get(target.url("/metrics"))
        .timeout(Duration::from_secs(10));
    if let Some(k) = &target.api_key {
        r = r.bearer_auth(k);
    }
    let resp = r.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let text = resp.text().await.ok()?;
    Some((text, unix_ms_now()))
}
