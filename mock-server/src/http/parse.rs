//! Request bodies and their validation: JSON objects, integers, booleans, token ids, prompts
//! (text, token ids, chat messages) and the context-length check, with SGLang's messages.

pub(crate) use crate::config::check_lengths;
use crate::tokenizer;
use axum::body::Bytes;
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// A request body as axum hands it over: its bytes, or why they could not be read.
pub(super) type RawBody = Result<Bytes, axum::extract::rejection::BytesRejection>;

/// The body as a JSON object; otherwise the status and message to answer with.
pub(super) fn parse_body(body: RawBody) -> Result<Map<String, Value>, (StatusCode, String)> {
    let bytes = body.map_err(|e| {
        (
            e.status(),
            format!("could not read the request body: {}", e.body_text()),
        )
    })?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("malformed JSON body: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err((
            StatusCode::BAD_REQUEST,
            "the request body must be a JSON object".into(),
        )),
    }
}

/// An optional non-negative integer (`null` counts as absent).
fn get_uint(m: &Map<String, Value>, key: &str) -> Result<Option<usize>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) if i < 0 => Err(format!("{key} must be non-negative, got {i}")),
            Some(i) => Ok(Some(i as usize)),
            None => Err(format!("{key} must be an integer, got {n}")),
        },
        Some(other) => Err(format!("{key} must be an integer, got {other}")),
    }
}

/// An optional boolean (absent or `null`: false).
fn get_bool(m: &Map<String, Value>, key: &str) -> Result<bool, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("{key} must be a boolean, got {other}")),
    }
}

/// A list of token ids. As in SGLang, an id at or above the vocabulary size or a negative one
/// passes validation (a prompt id then kills the server when it is prefilled, see the engine); a
/// negative id is kept as `u32::MAX`, outside every vocabulary. Ids beyond 32 bits are refused.
fn get_ids(v: &Value, what: &str, vocab: u32) -> Result<Vec<u32>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("{what} must be a list of token ids"))?;
    let mut ids = Vec::with_capacity(arr.len());
    for x in arr {
        ids.push(match x.as_u64() {
            Some(i) if i <= u64::from(u32::MAX) => i as u32,
            None if x.as_i64().is_some_and(|i| i < 0) => u32::MAX,
            Some(i) => {
                return Err(format!(
                    "{what}: token id {i} is outside the vocabulary (size {vocab})"
                ))
            }
            None => {
                return Err(format!(
                    "{what} must contain non-negative integer token ids, got {x}"
                ))
            }
        });
    }
    Ok(ids)
}

/// What a request asks of the sampler, in either dialect.
pub(super) struct Sampling {
    pub(super) max_new: usize,
    pub(super) min_new: usize,
    pub(super) ignore_eos: bool,
    pub(super) stop_token_ids: Vec<u32>,
}

/// The prompt of a completions request: text, token ids, or a list of one of either.
pub(super) fn completion_prompt(p: Option<&Value>, vocab: u32) -> Result<Vec<u32>, String> {
    match p {
        None | Some(Value::Null) => Err("prompt is required".into()),
        Some(Value::String(s)) => Ok(tokenizer::encode(s, vocab)),
        Some(Value::Array(a)) if a.is_empty() => Err("the prompt is empty: at least one input token is required".into()),
        Some(Value::Array(a)) if a.iter().all(|x| x.is_number()) => get_ids(&Value::Array(a.clone()), "prompt", vocab),
        Some(Value::Array(a)) if a.len() == 1 => completion_prompt(a.first(), vocab),
        Some(Value::Array(_)) => Err("batched prompts (a list of several prompts) are not supported by the mock; send one prompt per request".into()),
        Some(o) => Err(format!("prompt must be a string, a list of token ids, or a list of either; got {o}")),
    }
}

/// Chat template of the mock: each message is its role word plus its content words, and one more
/// token opens the assistant's turn.
pub(super) fn chat_prompt(m: Option<&Value>, vocab: u32) -> Result<Vec<u32>, String> {
    let msgs = m
        .and_then(Value::as_array)
        .ok_or_else(|| "messages must be a list of {role, content} objects".to_string())?;
    if msgs.is_empty() {
        return Err("Messages cannot be empty.".into());
    }
    let mut ids = Vec::new();
    for (i, msg) in msgs.iter().enumerate() {
        let role = msg
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("messages[{i}].role must be a string"))?;
        ids.push(tokenizer::word_id(role, vocab));
        match msg.get("content") {
            Some(Value::String(s)) => ids.extend(tokenizer::encode(s, vocab)),
            Some(Value::Array(parts)) => {
                for p in parts {
                    let t = p
                        .get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("messages[{i}].content parts must be text parts"))?;
                    ids.extend(tokenizer::encode(t, vocab));
                }
            }
            None | Some(Value::Null) => {}
            Some(o) => {
                return Err(format!(
                    "messages[{i}].content must be a string or a list of parts, got {o}"
                ))
            }
        }
    }
    ids.push(tokenizer::word_id("assistant", vocab));
    Ok(ids)
}

/// An optional request id: a non-empty string.
fn get_rid(m: &Map<String, Value>) -> Result<Option<String>, String> {
    match m.get("rid") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(o) => Err(format!("rid must be a non-empty string, got {o}")),
    }
}

/// A native `/generate` request.
pub(super) struct NativeRequest {
    pub(super) prompt: Vec<u32>,
    pub(super) sampling: Sampling,
    pub(super) stream: bool,
    pub(super) rid: Option<String>,
    /// Log-probabilities of the output tokens in `meta_info`.
    pub(super) return_logprob: bool,
}

/// Reads a `/generate` body: `text` or `input_ids`, `sampling_params`, `rid`, `stream`.
pub(super) fn parse_native(m: &Map<String, Value>, vocab: u32) -> Result<NativeRequest, String> {
    // With both `text` and `input_ids`, SGLang 0.5.23 serves the text.
    let prompt = match (m.get("text"), m.get("input_ids")) {
        (Some(Value::String(t)), _) => tokenizer::encode(t, vocab),
        (Some(t), _) if !t.is_null() => return Err(format!("text must be a string, got {t}")),
        (_, Some(i)) if !i.is_null() => get_ids(i, "input_ids", vocab)?,
        _ => return Err("Either text or input_ids should be provided.".into()),
    };
    let empty = Map::new();
    let sp = match m.get("sampling_params") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(o)) => o,
        Some(o) => return Err(format!("sampling_params must be an object, got {o}")),
    };
    if let Some(t) = sp.get("temperature") {
        if !t.is_null() && !t.as_f64().is_some_and(|x| x >= 0.0) {
            return Err(format!(
                "temperature must be a non-negative number, got {t}"
            ));
        }
    }
    let stop_token_ids = match sp.get("stop_token_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => get_ids(v, "stop_token_ids", vocab)?,
    };
    let sampling = Sampling {
        max_new: get_uint(sp, "max_new_tokens")?.unwrap_or(128),
        min_new: get_uint(sp, "min_new_tokens")?.unwrap_or(0),
        ignore_eos: get_bool(sp, "ignore_eos")?,
        stop_token_ids,
    };
    let rid = get_rid(m)?;
    Ok(NativeRequest {
        prompt,
        sampling,
        stream: get_bool(m, "stream")?,
        rid,
        return_logprob: get_bool(m, "return_logprob")?,
    })
}

/// A JSON number as Python prints a float (`-1` as `-1.0`), as SGLang's messages show it.
fn python_float(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e16 => format!("{x:.1}"),
        Some(x) => x.to_string(),
        None => v.to_string(),
    }
}

/// The options of an OpenAI request besides its prompt.
pub(super) struct OpenAiOptions {
    pub(super) sampling: Sampling,
    pub(super) stream: bool,
    /// `stream_options.include_usage`: a usage-only chunk before `[DONE]`.
    pub(super) include_usage: bool,
    /// `stream_options.continuous_usage_stats`: usage on every chunk.
    pub(super) continuous_usage: bool,
    pub(super) rid: Option<String>,
}

/// Reads the options of a completions or chat body.
pub(super) fn parse_openai(m: &Map<String, Value>) -> Result<OpenAiOptions, String> {
    let max_new = match get_uint(m, "max_completion_tokens")? {
        Some(v) => Some(v),
        None => get_uint(m, "max_tokens")?,
    };
    let (mut include_usage, mut continuous_usage) = (false, false);
    match m.get("stream_options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(o)) => {
            include_usage = get_bool(o, "include_usage")?;
            continuous_usage = get_bool(o, "continuous_usage_stats")?;
        }
        Some(o) => return Err(format!("stream_options must be an object, got {o}")),
    }
    if max_new == Some(0) {
        return Err("max_tokens must be positive".into());
    }
    if let Some(t) = m.get("temperature").filter(|t| !t.is_null()) {
        if !t.as_f64().is_some_and(|x| x.is_finite() && x >= 0.0) {
            return Err(format!(
                "temperature must be a non-negative finite number, got {}.",
                python_float(t)
            ));
        }
    }
    let rid = get_rid(m)?;
    Ok(OpenAiOptions {
        sampling: Sampling {
            max_new: max_new.unwrap_or(16),
            min_new: get_uint(m, "min_tokens")?.unwrap_or(0),
            ignore_eos: get_bool(m, "ignore_eos")?,
            stop_token_ids: Vec::new(),
        },
        stream: get_bool(m, "stream")?,
        include_usage,
        continuous_usage,
        rid,
    })
}
