//! The real-time clock as unix time: the one place that reads `SystemTime` for a timestamp (a clock
//! set before 1970 reads as 0).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, as the time since the unix epoch.
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// Now, as unix ns (saturating at `u64::MAX`).
pub fn unix_ns_now() -> u64 {
    u64::try_from(since_epoch().as_nanos()).unwrap_or(u64::MAX)
}

/// Now, as unix ms (saturating at `u64::MAX`).
pub fn unix_ms_now() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// Now, as whole unix seconds.
pub fn unix_s_now() -> u64 {
    since_epoch().as_secs()
}
