//! Mooncake's trace JSONL (kvcache-ai/Mooncake, FAST25-release): `timestamp` (ms from the start),
//! `input_length`, `output_length`, `hash_ids` (the prompt's blocks, each named by an id). Other keys
//! are ignored, as the readers of SGLang, AIPerf and GuideLLM do.

use serde::Deserialize;

use super::line::{jsonl, tokens, Expect, TraceError, TraceLine};
use super::RawRequest;

#[derive(Deserialize)]
struct Line {
    timestamp: f64,
    input_length: i64,
    output_length: i64,
    hash_ids: Vec<u64>,
}

impl TraceLine for Line {
    const FIELDS: &'static [(&'static str, Expect, bool)] = &[
        ("timestamp", Expect::Number, true),
        ("input_length", Expect::Integer, true),
        ("output_length", Expect::Integer, true),
        ("hash_ids", Expect::Ids, true),
    ];
    const KNOWN_ONLY: bool = false;
    const ARRIVAL: &'static str = "timestamp";
    fn arrival(&self) -> f64 {
        self.timestamp
    }
}

/// The first `limit` requests; arrivals count from the first request's, so a slice cut from the
/// middle of a trace starts at once.
pub(super) fn parse(text: &str, source: &str, limit: u64) -> Result<Vec<RawRequest>, TraceError> {
    let mut first_ms = None;
    jsonl(text, source, limit, |line, ms, l: Line| {
        let first = *first_ms.get_or_insert(ms);
        Ok(RawRequest {
            line,
            offset_ns: ((ms - first) * 1e6).round() as u64,
            input_len: tokens(source, line, "input_length", l.input_length)?,
            output_len: tokens(source, line, "output_length", l.output_length)?,
            prefix_group: None,
            hash_ids: l.hash_ids,
        })
    })
}
