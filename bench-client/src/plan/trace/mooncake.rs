//! Mooncake's trace JSONL (kvcache-ai/Mooncake, FAST25-release): `timestamp` (ms from the start),
//! `input_length`, `output_length`, `hash_ids` (the prompt's blocks, each named by an id). Other keys
//! are ignored, as the readers of SGLang, AIPerf and GuideLLM do.

use serde::Deserialize;

use super::line::{arrival_ms, diagnose, tokens, Expect, TraceError};
use super::RawRequest;

#[derive(Deserialize)]
struct Line {
    timestamp: f64,
    input_length: i64,
    output_length: i64,
    hash_ids: Vec<u64>,
}

const FIELDS: &[(&str, Expect, bool)] = &[
    ("timestamp", Expect::Number, true),
    ("input_length", Expect::Integer, true),
    ("output_length", Expect::Integer, true),
    ("hash_ids", Expect::Ids, true),
];

/// The first `limit` requests; arrivals count from the first request's, so a slice cut from the
/// middle of a trace starts at once.
pub(super) fn parse(text: &str, source: &str, limit: u64) -> Result<Vec<RawRequest>, TraceError> {
    let mut out: Vec<RawRequest> = Vec::new();
    let mut first_ms = None;
    let mut prev_ms = None;
    for (i, text) in text.lines().enumerate() {
        if out.len() as u64 >= limit {
            break;
        }
        if text.trim().is_empty() {
            continue;
        }
        let line = i as u64 + 1;
        let l: Line = serde_json::from_str(text)
            .map_err(|e| diagnose(source, line, text, FIELDS, false, &e))?;
        let ms = arrival_ms(source, line, "timestamp", l.timestamp, prev_ms)?;
        prev_ms = Some(ms);
        let first = *first_ms.get_or_insert(ms);
        out.push(RawRequest {
            line,
            offset_ns: ((ms - first) * 1e6).round() as u64,
            input_len: tokens(source, line, "input_length", l.input_length)?,
            output_len: tokens(source, line, "output_length", l.output_length)?,
            prefix_group: None,
            hash_ids: l.hash_ids,
        });
    }
    Ok(out)
}
