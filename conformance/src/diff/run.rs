//! Sending the battery, saving and loading recorded answers, and the mock's settings that match a
//! real server.

use super::battery::Case;
use super::observe::{observe, Observed};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// One answer as sent by a server: what the check reads, and what a recording keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub case: Case,
    pub status: u16,
    pub content_type: String,
    pub body: String,
    /// Set when the transfer broke (the message says how).
    #[serde(default)]
    pub cut: Option<String>,
}

impl Answer {
    /// The answer as the check sees it.
    pub fn observed(&self) -> Observed {
        observe(
            self.status,
            &self.content_type,
            &self.body,
            self.cut.clone(),
        )
    }
}

/// A recorded battery's description (`server.json` beside the answers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// What answered, in words (server, version, how it ran).
    pub server: String,
    /// When it was recorded, in seconds since the Unix epoch.
    pub recorded_unix_s: u64,
    /// The mock's settings (`--set key=value`) that match the server.
    pub mock_settings: Vec<(String, String)>,
    /// The battery's prompt seed.
    pub seed: u64,
}

/// Sends one case (twice for a repeat case) and reads the whole answer.
pub async fn send(http: &reqwest::Client, base: &str, case: &Case, timeout: Duration) -> Answer {
    if case.repeat {
        let _ = send_once(http, base, case, timeout).await;
    }
    send_once(http, base, case, timeout).await
}

async fn send_once(http: &reqwest::Client, base: &str, case: &Case, timeout: Duration) -> Answer {
    let url = format!("{}{}", base.trim_end_matches('/'), case.path);
    let req = match &case.body {
        None => http.get(&url),
        Some(b) => http
            .post(&url)
            .header("content-type", "application/json")
            .body(b.clone()),
    };
    let mut a = Answer {
        case: case.clone(),
        status: 0,
        content_type: String::new(),
        body: String::new(),
        cut: None,
    };
    let resp = match req.timeout(timeout).send().await {
        Ok(r) => r,
        Err(e) => {
            a.cut = Some(error_chain(&e));
            return a;
        }
    };
    a.status = resp.status().as_u16();
    a.content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    match resp.bytes().await {
        Ok(b) => a.body = String::from_utf8_lossy(&b).into_owned(),
        Err(e) => a.cut = Some(error_chain(&e)),
    }
    a
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

/// The mock's settings matching an SGLang server, from its `/server_info` and the context length
/// from `/v1/models` (`max_model_len`). Settings the server does not report keep the preset's.
pub fn mock_settings(server_info: &Value, max_model_len: Option<u64>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let s = |k: &str| server_info.get(k);
    if let Some(m) = s("served_model_name").and_then(Value::as_str) {
        out.push(("served_model_name".into(), m.to_string()));
    }
    if let Some(m) = s("model_path").and_then(Value::as_str) {
        out.push(("model_path".into(), m.to_string()));
    }
    let ctx = s("context_length")
        .and_then(Value::as_u64)
        .or(max_model_len);
    if let Some(c) = ctx {
        out.push(("context_length".into(), c.to_string()));
    }
    if let Some(c) = s("chunked_prefill_size").and_then(Value::as_i64) {
        out.push(("chunked_prefill_size".into(), c.to_string()));
    }
    if let Some(c) = s("stream_interval").and_then(Value::as_u64) {
        out.push(("stream_interval".into(), c.to_string()));
    }
    for k in [
        "enable_metrics",
        "enable_cache_report",
        "incremental_streaming_output",
        "disable_radix_cache",
    ] {
        if let Some(b) = s(k).and_then(Value::as_bool) {
            out.push((k.into(), b.to_string()));
        }
    }
    let algo = s("speculative_algorithm").and_then(Value::as_str);
    out.push((
        "speculative_algorithm".into(),
        algo.unwrap_or("none").into(),
    ));
    out
}

/// Writes a recorded battery: `server.json` and one `CASE.json` per answer.
pub fn save(dir: &Path, rec: &Recording, answers: &[Answer]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("server.json"), pretty(rec))?;
    for a in answers {
        std::fs::write(dir.join(format!("{}.json", a.case.name)), pretty(a))?;
    }
    Ok(())
}

/// Reads a recorded battery: its description and its answers in battery order (by file name,
/// then ordered as `order` lists the case names; unknown names last).
pub fn load(dir: &Path, order: &[String]) -> Result<(Recording, Vec<Answer>), String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let server = dir.join("server.json");
    let rec: Recording =
        serde_json::from_str(&read(&server)?).map_err(|e| format!("{}: {e}", server.display()))?;
    let mut answers = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries {
        let p = e.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if p.extension().is_some_and(|x| x == "json") && p != server {
            let a: Answer =
                serde_json::from_str(&read(&p)?).map_err(|e| format!("{}: {e}", p.display()))?;
            answers.push(a);
        }
    }
    let rank = |n: &str| order.iter().position(|o| o == n).unwrap_or(usize::MAX);
    answers.sort_by(|a, b| {
        rank(&a.case.name)
            .cmp(&rank(&b.case.name))
            .then(a.case.name.cmp(&b.case.name))
    });
    if answers.is_empty() {
        return Err(format!("{}: no recorded answers", dir.display()));
    }
    Ok((rec, answers))
}

/// Pretty JSON with a trailing newline.
fn pretty<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}
