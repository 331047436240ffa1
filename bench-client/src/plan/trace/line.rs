//! A trace's errors, each naming the file, the line and the field, and what the JSON readers share:
//! when a line does not deserialize, the field at fault is found by looking at the line as a value.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::RawRequest;

/// A trace that cannot be replayed, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceError {
    /// The file.
    pub file: String,
    /// 1-based line, when one is at fault.
    pub line: Option<u64>,
    /// The field (JSON key or CSV column), when one is at fault.
    pub field: Option<&'static str>,
    /// What is wrong.
    pub message: String,
}

impl TraceError {
    pub(super) fn file(source: &str, message: impl Into<String>) -> Self {
        Self {
            file: source.to_string(),
            line: None,
            field: None,
            message: message.into(),
        }
    }

    pub(super) fn line(source: &str, line: u64, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            ..Self::file(source, message)
        }
    }

    pub(super) fn field(
        source: &str,
        line: u64,
        field: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            field: Some(field),
            ..Self::line(source, line, message)
        }
    }
}

/// `trace FILE line N, field F: what is wrong`, as much of the place as is known.
impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "trace {}", self.file)?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
        }
        if let Some(field) = self.field {
            write!(f, ", field {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for TraceError {}

/// What a JSON line's field must hold.
#[derive(Clone, Copy, Debug)]
pub(super) enum Expect {
    /// A number (times).
    Number,
    /// A whole number (token counts, group ids).
    Integer,
    /// A list of non-negative whole numbers (block ids).
    Ids,
    /// A whole number from 0 to 2^32 - 1 (prefix groups).
    Group,
}

/// serde_json's message without its "at line 1 column N" (the line is the trace's), and the column.
pub(super) fn json_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let msg = full.strip_suffix(&suffix).unwrap_or(&full);
    format!("not valid JSON at column {}: {msg}", e.column())
}

/// Why `text` (one line) did not deserialize into a struct of `fields` (`required` ones first):
/// the field at fault when one is, else serde's message.
pub(super) fn diagnose(
    source: &str,
    line: u64,
    text: &str,
    fields: &[(&'static str, Expect, bool)],
    known_only: bool,
    serde_error: &serde_json::Error,
) -> TraceError {
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return TraceError::line(source, line, json_message(&e)),
    };
    let Some(obj) = v.as_object() else {
        return TraceError::line(source, line, "expected a JSON object");
    };
    for &(name, expect, required) in fields {
        match obj.get(name) {
            None | Some(Value::Null) if required => {
                return TraceError::field(source, line, name, "missing");
            }
            None | Some(Value::Null) => {}
            Some(got) => {
                let ok = match expect {
                    Expect::Number => got.is_number(),
                    Expect::Integer => got.is_i64() || got.is_u64(),
                    Expect::Ids => got.as_array().is_some_and(|a| a.iter().all(Value::is_u64)),
                    Expect::Group => got.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
                };
                if !ok {
                    let want = match expect {
                        Expect::Number => "a number",
                        Expect::Integer => "a whole number",
                        Expect::Ids => "a list of non-negative whole numbers",
                        Expect::Group => "a whole number from 0 to 2^32 - 1",
                    };
                    return TraceError::field(
                        source,
                        line,
                        name,
                        format!("expected {want}, got {}", short(got)),
                    );
                }
            }
        }
    }
    if known_only {
        if let Some(k) = obj.keys().find(|k| !fields.iter().any(|(n, _, _)| n == k)) {
            return TraceError::line(
                source,
                line,
                format!(
                    "unknown field {k:?} (expected {})",
                    fields
                        .iter()
                        .map(|(n, _, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
    TraceError::line(source, line, json_message(serde_error))
}

/// A value as JSON, cut to 40 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// A token count: a whole number from 1 to 2^32 - 1.
pub(super) fn tokens(
    source: &str,
    line: u64,
    field: &'static str,
    n: i64,
) -> Result<u64, TraceError> {
    if n < 1 {
        return Err(TraceError::field(
            source,
            line,
            field,
            format!("must be at least 1 token, got {n}"),
        ));
    }
    if n > i64::from(u32::MAX) {
        return Err(TraceError::field(
            source,
            line,
            field,
            format!("{n} tokens is more than 2^32 - 1"),
        ));
    }
    Ok(n as u64)
}

/// An arrival: finite, not negative and not before the one before it (`prev`).
pub(super) fn arrival_ms(
    source: &str,
    line: u64,
    field: &'static str,
    ms: f64,
    prev: Option<f64>,
) -> Result<f64, TraceError> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(TraceError::field(
            source,
            line,
            field,
            format!(
                "must be a non-negative number of ms, got {}",
                crate::plan::compact(ms)
            ),
        ));
    }
    if let Some(p) = prev.filter(|&p| ms < p) {
        return Err(TraceError::field(
            source,
            line,
            field,
            format!("goes backwards: {ms} after {p}"),
        ));
    }
    Ok(ms)
}

/// A JSONL trace's line: its keys (`FIELDS`; `KNOWN_ONLY`: no other key) and its arrival, in ms
/// (the key `ARRIVAL`).
pub(super) trait TraceLine: DeserializeOwned {
    const FIELDS: &'static [(&'static str, Expect, bool)];
    const KNOWN_ONLY: bool;
    const ARRIVAL: &'static str;
    fn arrival(&self) -> f64;
}

/// The first `limit` requests of a JSONL trace: each line that is not blank read as a `T`, its
/// arrival checked against the line before's ([`arrival_ms`]), then made a request by `request`
/// (its line number, its arrival in ms, the line).
pub(super) fn jsonl<T: TraceLine>(
    text: &str,
    source: &str,
    limit: u64,
    mut request: impl FnMut(u64, f64, T) -> Result<RawRequest, TraceError>,
) -> Result<Vec<RawRequest>, TraceError> {
    let mut out: Vec<RawRequest> = Vec::new();
    let mut prev_ms = None;
    for (i, text) in text.lines().enumerate() {
        if out.len() as u64 >= limit {
            break;
        }
        if text.trim().is_empty() {
            continue;
        }
        let line = i as u64 + 1;
        let l: T = serde_json::from_str(text)
            .map_err(|e| diagnose(source, line, text, T::FIELDS, T::KNOWN_ONLY, &e))?;
        let ms = arrival_ms(source, line, T::ARRIVAL, l.arrival(), prev_ms)?;
        prev_ms = Some(ms);
        out.push(request(line, ms, l)?);
    }
    Ok(out)
}
