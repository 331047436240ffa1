//! The Azure LLM inference trace CSV (Azure/AzurePublicDataset, 2023 and 2024): `TIMESTAMP` (a date
//! and time such as `2023-11-16 18:15:46.6805900`, UTC unless it carries an offset), `ContextTokens`,
//! `GeneratedTokens`. Arrivals count from the first row; nothing says which prompts share a prefix,
//! so none do. Other columns are ignored.

use std::str::FromStr;

use super::line::{tokens, TraceError};
use super::RawRequest;

const TIMESTAMP: &str = "TIMESTAMP";
const CONTEXT: &str = "ContextTokens";
const GENERATED: &str = "GeneratedTokens";

/// Nanoseconds since the unix epoch of a `TIMESTAMP`: with an offset (`+00:00`, `Z`) or without (UTC).
fn unix_ns(s: &str) -> Option<i128> {
    let ts = match jiff::Timestamp::from_str(s) {
        Ok(t) => t,
        Err(_) => {
            let dt = jiff::civil::DateTime::from_str(s).ok()?;
            jiff::tz::Offset::UTC.to_timestamp(dt).ok()?
        }
    };
    Some(ts.as_nanosecond())
}

/// The first `limit` rows.
pub(super) fn parse(text: &str, source: &str, limit: u64) -> Result<Vec<RawRequest>, TraceError> {
    let mut rd = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let csv_error = |e: csv::Error| {
        let line = e.position().map_or(1, |p| p.line());
        TraceError::line(source, line, format!("not valid CSV: {e}"))
    };
    let headers = rd.headers().map_err(csv_error)?.clone();
    let column = |name: &'static str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| TraceError::field(source, 1, name, "no such column in the header"))
    };
    let (ts_col, ctx_col, gen_col) = (column(TIMESTAMP)?, column(CONTEXT)?, column(GENERATED)?);
    let mut out: Vec<RawRequest> = Vec::new();
    let mut first_ns = None;
    let mut prev_ns = None;
    let mut row = csv::StringRecord::new();
    while (out.len() as u64) < limit && rd.read_record(&mut row).map_err(csv_error)? {
        let line = row.position().map_or(0, |p| p.line());
        let cell = |col: usize, name: &'static str| {
            row.get(col)
                .ok_or_else(|| TraceError::field(source, line, name, "missing"))
        };
        let ts = cell(ts_col, TIMESTAMP)?;
        let ns = unix_ns(ts).ok_or_else(|| {
            TraceError::field(
                source,
                line,
                TIMESTAMP,
                format!("{ts:?} is not a date and time such as 2023-11-16 18:15:46.6805900"),
            )
        })?;
        if let Some(p) = prev_ns.filter(|&p| ns < p) {
            return Err(TraceError::field(
                source,
                line,
                TIMESTAMP,
                format!(
                    "goes backwards: {ts} is {} ms before the row above",
                    (p - ns) as f64 / 1e6
                ),
            ));
        }
        prev_ns = Some(ns);
        let first = *first_ns.get_or_insert(ns);
        let count = |col: usize, name: &'static str| -> Result<u64, TraceError> {
            let s = cell(col, name)?;
            let n: i64 = s.parse().map_err(|_| {
                TraceError::field(source, line, name, format!("{s:?} is not a whole number"))
            })?;
            tokens(source, line, name, n)
        };
        out.push(RawRequest {
            line,
            offset_ns: u64::try_from(ns - first).unwrap_or(u64::MAX),
            input_len: count(ctx_col, CONTEXT)?,
            output_len: count(gen_col, GENERATED)?,
            prefix_group: None,
            hash_ids: Vec::new(),
        });
    }
    Ok(out)
}
