//! Durations as flags and plans write them: a number with `ms`, `s`, `m` or `h`, seconds without a
//! unit, fractions allowed (`1.5s`, `0.5m`, `60`). `humantime` is not used: it refuses bare numbers
//! and fractions, which these flags accept.

/// The seconds `s` says (`500ms` is 0.5), or `None` when it is not a number with one of the units.
/// The range is the caller's to check (NaN and infinities parse).
pub fn parse_secs(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, unit_s) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    num.trim().parse::<f64>().ok().map(|v| v * unit_s)
}

#[cfg(test)]
mod tests {
    use super::parse_secs;

    #[test]
    fn units_bare_seconds_and_fractions_parse() {
        for (s, want) in [
            ("500ms", 0.5),
            ("2s", 2.0),
            (" 1.5 s ", 1.5),
            ("5m", 300.0),
            ("0.5m", 30.0),
            ("2h", 7200.0),
            ("60", 60.0),
            ("0", 0.0),
        ] {
            assert_eq!(parse_secs(s), Some(want), "{s:?}");
        }
        for s in ["", "soon", "5 days", "s", "1x"] {
            assert_eq!(parse_secs(s), None, "{s:?}");
        }
    }
}
