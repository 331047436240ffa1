//! Faults on demand: the `x-mock-fault` request header.

use axum::http::HeaderMap;

/// Faults requested with the `x-mock-fault` header, e.g. `reset-after=3,stall-ms=500,split`.
#[derive(Default, Clone)]
pub(super) struct Faults {
    pub(super) reset_after: Option<usize>,
    pub(super) error_after: Option<usize>,
    pub(super) stall_ms: Option<u64>,
    pub(super) split: bool,
    pub(super) pack: bool,
}

impl Faults {
    /// The faults the request's headers ask for (none without the header).
    pub(super) fn from_headers(h: &HeaderMap) -> Faults {
        let mut f = Faults::default();
        let Some(v) = h.get("x-mock-fault").and_then(|v| v.to_str().ok()) else {
            return f;
        };
        for part in v.split(',').map(str::trim) {
            let (k, val) = part.split_once('=').unwrap_or((part, ""));
            match k {
                "reset-after" => f.reset_after = val.parse().ok(),
                "error-after" => f.error_after = val.parse().ok(),
                "stall-ms" => f.stall_ms = val.parse().ok(),
                "split" => f.split = true,
                "pack" => f.pack = true,
                _ => {}
            }
        }
        f
    }
}
