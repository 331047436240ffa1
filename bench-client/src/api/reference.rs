//! An independent parse of every event into a `serde_json::Value`, for tests only: the oracle the
//! typed decoder's parsing must match chunk for chunk (text, usage, finish reason, server timing,
//! error messages, on any input). It leaves token attribution out on purpose: a copy of the
//! attribution rules would pass whatever error the decoder has. Attribution is held to the recorded
//! fixtures instead: their snapshots (`conformance/tests/conformance/snapshots`) fix every chunk's
//! tokens and method, and `api::tests` checks that a stream's tokens add up to the count the server
//! itself reported.

use serde_json::Value;

use super::{Chunk, ServerTiming, Usage};

/// Per-stream state of the reference decoder.
#[derive(Clone, Debug, Default)]
pub(crate) struct RefState {
    prev_text: String,
}

/// Decode one event's data; `None` for `[DONE]`.
pub(crate) fn decode(
    dialect: super::Dialect,
    data: &str,
    at_ns: u64,
    st: &mut RefState,
) -> Option<Chunk> {
    let data = data.trim();
    if data == "[DONE]" {
        return None;
    }
    let value: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => {
            return Some(Chunk {
                at_ns,
                error: Some(
                    format!("undecodable event ({e}): {}", super::truncate(data, 200)).into(),
                ),
                ..Chunk::default()
            })
        }
    };
    if let Some(msg) = error_message(&value) {
        return Some(Chunk {
            at_ns,
            error: Some(msg.into()),
            ..Chunk::default()
        });
    }
    Some(match dialect {
        super::Dialect::Sglang => sglang(&value, at_ns, st),
        super::Dialect::OpenAi => openai(&value, at_ns, false),
        super::Dialect::OpenAiChat => openai(&value, at_ns, true),
    })
}

fn error_message(v: &Value) -> Option<String> {
    if let Some(e) = v.get("error") {
        if e.is_null() {
            return None;
        }
        return Some(match e {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string()),
            other => other.to_string(),
        });
    }
    if v.get("object").and_then(Value::as_str) == Some("error") {
        return Some(
            v.get("message")
                .and_then(Value::as_str)
                .unwrap_or("unspecified error")
                .to_string(),
        );
    }
    None
}

fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// A number of seconds: a float or a non-negative integer, finite.
fn seconds(v: Option<&Value>) -> Option<f64> {
    v.filter(|v| v.is_f64() || v.is_u64())
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite())
}

fn openai_usage(v: &Value) -> Option<Usage> {
    let u = v.get("usage")?;
    if u.is_null() {
        return None;
    }
    Some(Usage {
        prompt_tokens: as_u32(u.get("prompt_tokens")),
        completion_tokens: as_u32(u.get("completion_tokens")),
        cached_tokens: as_u32(u.pointer("/prompt_tokens_details/cached_tokens"))
            .or_else(|| as_u32(u.get("cached_tokens"))),
    })
}

fn finish_reason(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn sglang(v: &Value, at_ns: u64, st: &mut RefState) -> Chunk {
    let meta = v.get("meta_info");
    let text = v.get("text").and_then(Value::as_str).unwrap_or("");
    let text_len = if !st.prev_text.is_empty() && text.starts_with(st.prev_text.as_str()) {
        text.len() - st.prev_text.len()
    } else {
        text.len()
    };
    st.prev_text = text.to_string();
    let cum = meta.and_then(|m| as_u32(m.get("completion_tokens")));
    let usage = meta.map(|m| Usage {
        prompt_tokens: as_u32(m.get("prompt_tokens")),
        completion_tokens: cum,
        cached_tokens: as_u32(m.get("cached_tokens")),
    });
    Chunk {
        at_ns,
        text_len: u32::try_from(text_len).unwrap_or(u32::MAX),
        usage,
        finish_reason: finish_reason(meta.and_then(|m| m.get("finish_reason"))).map(Into::into),
        server_timing: meta
            .and_then(|m| {
                ServerTiming::reported(
                    seconds(m.get("queue_time")),
                    seconds(m.get("first_token_latency")),
                )
            })
            .map(std::sync::Arc::new),
        ..Chunk::default()
    }
}

fn openai(v: &Value, at_ns: u64, chat: bool) -> Chunk {
    let usage = openai_usage(v);
    // llama.cpp's own prefill time, on its last event.
    let prompt_ms = v
        .get("timings")
        .and_then(|t| t.get("prompt_ms"))
        .and_then(Value::as_f64)
        .filter(|ms| ms.is_finite() && *ms >= 0.0);
    let server_timing = ServerTiming::prefill_ms(prompt_ms).map(std::sync::Arc::new);
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    let Some(choice) = choice else {
        return Chunk {
            at_ns,
            usage,
            usage_only: true,
            server_timing,
            ..Chunk::default()
        };
    };
    let (text_len, role_only, content_event) = if chat {
        let delta = choice.get("delta");
        let content_field = delta.and_then(|d| d.get("content")).and_then(Value::as_str);
        let content = content_field.unwrap_or("");
        let reasoning = delta
            .and_then(|d| d.get("reasoning_content"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let has_role = delta.and_then(|d| d.get("role")).is_some();
        let len = content.len() + reasoning.len();
        let ids_empty = choice
            .get("token_ids")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty());
        let role_only = has_role && len == 0 && ids_empty;
        (len, role_only, content_field.is_some() && !role_only)
    } else {
        let text_field = choice.get("text").and_then(Value::as_str);
        (text_field.map_or(0, str::len), false, text_field.is_some())
    };
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(Into::into);
    Chunk {
        at_ns,
        text_len: u32::try_from(text_len).unwrap_or(u32::MAX),
        usage,
        finish_reason,
        role_only,
        content_event,
        server_timing,
        ..Chunk::default()
    }
}
