//! Waiting on the model's timeline with sub-millisecond precision.
//!
//! Tokio's timer wheel has a 1 ms resolution and wakes on the next tick, so `sleep_until`
//! alone lands a pass 0 to ~1.5 ms late. The mock waits on tokio's timer until about 2 ms
//! before the deadline and then hands the rest to a blocking-pool thread that sleeps with the
//! operating system's timer and spins the last microseconds. Under tokio's paused test clock
//! (`start_paused`), where real time means nothing, it waits on tokio's timer alone.

use tokio::time::{Duration, Instant};

/// How the engine waits for model instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Tokio's timer only: the paused test clock.
    Tokio,
    /// Tokio's timer for the coarse part, an OS sleep plus a short spin for the last 2 ms.
    Precise,
}

/// Time left to the OS sleep and spin after tokio's timer.
const FINE: Duration = Duration::from_millis(2);
/// The OS sleep ends this long before the deadline; the rest is spun (Linux timer slack is 50 µs).
const SPIN: Duration = Duration::from_micros(80);

impl Clock {
    /// Detects tokio's paused clock: while it is paused, `Instant::now()` does not move across
    /// real time spent in synchronous code.
    pub fn detect() -> Clock {
        let a = Instant::now();
        std::thread::sleep(Duration::from_micros(20));
        if Instant::now() == a {
            Clock::Tokio
        } else {
            Clock::Precise
        }
    }

    /// Resolves at `at` (never before it on tokio's clock).
    pub async fn sleep_until(self, at: Instant) {
        if self == Clock::Tokio {
            tokio::time::sleep_until(at).await;
            return;
        }
        if let Some(coarse) = at.checked_sub(FINE) {
            if coarse > Instant::now() {
                tokio::time::sleep_until(coarse).await;
            }
        }
        if Instant::now() >= at {
            return;
        }
        let at_std = at.into_std();
        let fine = tokio::task::spawn_blocking(move || {
            let now = std::time::Instant::now();
            if let Some(d) = at_std.checked_duration_since(now) {
                if d > SPIN {
                    std::thread::sleep(d - SPIN);
                }
            }
            while std::time::Instant::now() < at_std {
                std::hint::spin_loop();
            }
        })
        .await;
        if fine.is_err() {
            // The blocking pool is shutting down: fall back to the timer.
            tokio::time::sleep_until(at).await;
        }
    }
}

impl Clock {
    /// Resolves at `at` like [`Clock::sleep_until`], for the short gaps between the events of one
    /// pass (tens of microseconds apart): waits under ~0.5 ms yield to other tasks until the
    /// instant passes instead of paying a blocking-pool round trip per event, so the worker
    /// writes the events already sent while it waits.
    pub async fn wait_short(self, at: Instant) {
        if self == Clock::Tokio {
            if at > Instant::now() {
                tokio::time::sleep_until(at).await;
            }
            return;
        }
        loop {
            let now = Instant::now();
            if now >= at {
                return;
            }
            if at - now > YIELD_LIMIT {
                return self.sleep_until(at).await;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Longest wait spent yielding rather than sleeping.
const YIELD_LIMIT: Duration = Duration::from_micros(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_clock_is_detected_and_advances_to_the_next_tick() {
        let clock = Clock::detect();
        assert_eq!(clock, Clock::Tokio);
        let t0 = Instant::now();
        clock
            .sleep_until(t0 + Duration::from_micros(1_234_567))
            .await;
        // The paused clock moves in whole timer ticks (1 ms): never early, at most one tick late.
        let e = t0.elapsed();
        assert!(e >= Duration::from_micros(1_234_567), "{e:?}");
        assert!(e <= Duration::from_micros(1_235_567), "{e:?}");
    }

    #[tokio::test]
    async fn real_clock_is_detected_and_never_wakes_early() {
        let clock = Clock::detect();
        assert_eq!(clock, Clock::Precise);
        for us in [0u64, 50, 700, 3_300] {
            let at = Instant::now() + Duration::from_micros(us);
            clock.sleep_until(at).await;
            assert!(Instant::now() >= at);
            let at = Instant::now() + Duration::from_micros(us);
            clock.wait_short(at).await;
            assert!(Instant::now() >= at);
        }
    }
}
