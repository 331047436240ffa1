//! The project's own trace JSONL: `offset_ms` (from the start of the run), `input_len`, `output_len`
//! and an optional `prefix_group` (requests of a group share their first `--prefix-len` tokens).

use serde::{Deserialize, Serialize};

use super::line::{jsonl, tokens, Expect, TraceError, TraceLine};
use super::RawRequest;

/// One line of a native trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceEntry {
    /// Arrival offset from the start of the run, ms.
    pub offset_ms: f64,
    /// Prompt tokens (including the group prefix, when there is one).
    pub input_len: i64,
    /// Output tokens.
    pub output_len: i64,
    /// Prefix group: requests of one group share their first `--prefix-len` tokens.
    #[serde(default)]
    pub prefix_group: Option<u32>,
}

impl TraceLine for TraceEntry {
    const FIELDS: &'static [(&'static str, Expect, bool)] = &[
        ("offset_ms", Expect::Number, true),
        ("input_len", Expect::Integer, true),
        ("output_len", Expect::Integer, true),
        ("prefix_group", Expect::Group, false),
    ];
    const KNOWN_ONLY: bool = true;
    const ARRIVAL: &'static str = "offset_ms";
    fn arrival(&self) -> f64 {
        self.offset_ms
    }
}

/// The first `limit` requests; offsets count from the start of the run.
pub(super) fn parse(text: &str, source: &str, limit: u64) -> Result<Vec<RawRequest>, TraceError> {
    jsonl(text, source, limit, |line, ms, e: TraceEntry| {
        Ok(RawRequest {
            line,
            offset_ns: (ms * 1e6).round() as u64,
            input_len: tokens(source, line, "input_len", e.input_len)?,
            output_len: tokens(source, line, "output_len", e.output_len)?,
            prefix_group: e.prefix_group,
            hash_ids: Vec::new(),
        })
    })
}
