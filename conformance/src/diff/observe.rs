//! What one response looks like to the differential check: its behaviour (status, content type,
//! how the stream ended, the in-band error) and its fields (JSON key paths, Prometheus metric
//! names, token counts).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;

/// How a response body ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum End {
    /// An SSE stream whose last event was `data: [DONE]`.
    Done,
    /// An SSE stream that ended without `[DONE]`.
    NoDone,
    /// A plain (non-SSE) body.
    Body,
    /// The connection broke or timed out (the message says how).
    Cut(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Done => f.write_str("[DONE]"),
            End::NoDone => f.write_str("stream without [DONE]"),
            End::Body => f.write_str("body"),
            End::Cut(m) => write!(f, "cut ({m})"),
        }
    }
}

/// Token counts a response reports (the last report of a stream).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub prompt: Option<u64>,
    pub completion: Option<u64>,
    pub cached: Option<u64>,
}

/// One response as the check sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub status: u16,
    /// Lower-cased, without spaces.
    pub content_type: String,
    pub end: End,
    /// `type/code` of an in-band error event (`data: {"error": ...}`), if the stream had one.
    pub in_band_error: Option<String>,
    /// JSON key paths over the body or every event: `.meta_info.id`, `.choices[].text`.
    pub key_paths: BTreeSet<String>,
    /// Metric family names of a Prometheus text body.
    pub metric_names: BTreeSet<String>,
    pub tokens: Tokens,
    /// The `message` of an error body or in-band error.
    pub error_message: Option<String>,
}

/// A content type as compared: lower case, no spaces.
pub fn normalize_content_type(ct: &str) -> String {
    ct.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase()
}

/// Reads one response: `body` is the whole body text; `cut` says the transfer broke.
pub fn observe(status: u16, content_type: &str, body: &str, cut: Option<String>) -> Observed {
    let content_type = normalize_content_type(content_type);
    let mut o = Observed {
        status,
        content_type: content_type.clone(),
        end: End::Body,
        in_band_error: None,
        key_paths: BTreeSet::new(),
        metric_names: BTreeSet::new(),
        tokens: Tokens::default(),
        error_message: None,
    };
    if content_type.starts_with("text/event-stream") {
        let mut done = false;
        for data in body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
        {
            if data == "[DONE]" {
                done = true;
                continue;
            }
            done = false;
            match serde_json::from_str::<Value>(data) {
                Ok(v) => take(&mut o, &v, true),
                Err(_) => {
                    o.key_paths.insert("<not JSON>".into());
                }
            }
        }
        o.end = if done { End::Done } else { End::NoDone };
    } else if content_type.starts_with("text/plain") {
        o.metric_names = body
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
    } else if !body.trim().is_empty() {
        match serde_json::from_str::<Value>(body) {
            Ok(v) => take(&mut o, &v, false),
            Err(_) => {
                o.key_paths.insert("<not JSON>".into());
            }
        }
    }
    if let Some(c) = cut {
        o.end = End::Cut(c);
    }
    o
}

/// Folds one JSON value (the body, or one event) into `o`.
fn take(o: &mut Observed, v: &Value, event: bool) {
    paths(v, "", &mut o.key_paths);
    if let Some(e) = v.get("error").filter(|e| event && e.is_object()) {
        let ty = e.get("type").and_then(Value::as_str).unwrap_or("?");
        let code = e.get("code").map(Value::to_string).unwrap_or_default();
        o.in_band_error = Some(format!("{ty}/{code}"));
    }
    let message = v
        .get("error")
        .and_then(|e| e.get("message"))
        .or_else(|| v.get("message"))
        .or_else(|| v.get("detail"));
    if let Some(m) = message.and_then(Value::as_str) {
        o.error_message = Some(m.to_string());
    }
    let meta = v.get("meta_info");
    let usage = v.get("usage").filter(|u| u.is_object());
    let int = |x: Option<&Value>| x.and_then(Value::as_u64);
    if let Some(m) = meta {
        o.tokens.prompt = int(m.get("prompt_tokens")).or(o.tokens.prompt);
        o.tokens.completion = int(m.get("completion_tokens")).or(o.tokens.completion);
        o.tokens.cached = int(m.get("cached_tokens")).or(o.tokens.cached);
    }
    if let Some(u) = usage {
        o.tokens.prompt = int(u.get("prompt_tokens")).or(o.tokens.prompt);
        o.tokens.completion = int(u.get("completion_tokens")).or(o.tokens.completion);
        let cached = u
            .get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens"));
        o.tokens.cached = int(cached).or(o.tokens.cached);
    }
}

/// Every key path under `v`: objects add `.key`, arrays `[]` (their elements share one path);
/// a path is listed whatever its value (null included).
pub fn paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                paths(x, &p, out);
            }
        }
        Value::Array(a) => {
            let p = format!("{at}[]");
            for x in a {
                out.insert(p.clone());
                paths(x, &p, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_read_into_behaviour_and_fields() {
        let body = "data: {\"text\":\"a\",\"meta_info\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"cached_tokens\":0,\"d\":null}}\n\n\
                    data: {\"text\":\"ab\",\"meta_info\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"cached_tokens\":2,\"w\":[{\"v\":1}]}}\n\ndata: [DONE]\n\n";
        let o = observe(200, "text/event-stream; charset=utf-8", body, None);
        assert_eq!(o.content_type, "text/event-stream;charset=utf-8");
        assert_eq!(o.end, End::Done);
        assert_eq!(o.tokens.completion, Some(2));
        assert_eq!(o.tokens.cached, Some(2));
        for p in [
            ".text",
            ".meta_info.d",
            ".meta_info.w",
            ".meta_info.w[]",
            ".meta_info.w[].v",
        ] {
            assert!(o.key_paths.contains(p), "{p}: {:?}", o.key_paths);
        }
        let err = "data: {\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"code\":400}}\n\n";
        let o = observe(200, "text/event-stream", err, None);
        assert_eq!(o.end, End::NoDone);
        assert_eq!(
            o.in_band_error.as_deref(),
            Some("invalid_request_error/400")
        );
        assert_eq!(o.error_message.as_deref(), Some("m"));
    }

    #[test]
    fn metric_names_come_from_type_lines() {
        let body = "# HELP a x\n# TYPE sglang:a counter\nsglang:a 1\n# TYPE sglang:b gauge\n";
        let o = observe(200, "text/plain; version=0.0.4", body, None);
        assert_eq!(o.metric_names.len(), 2);
        assert!(o.metric_names.contains("sglang:b"));
    }
}
