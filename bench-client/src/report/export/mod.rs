//! Exporters: each turns a report into the bytes of one format, one file per format, and does no
//! file I/O beyond what its format needs. A new format is one new file here.

pub mod csv;
pub mod html;
pub mod json;
pub mod svg;
pub mod table;

use crate::measure::ms;

/// The percentiles the load exporters show, with their labels.
const PCTS: [(&str, f64); 4] = [("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0)];

/// A value with `prec` decimals, or `-` when there is none.
pub(crate) fn cell(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}
