//! Waiting on the model's timeline with sub-millisecond precision.
//!
//! Tokio's timer wheel has a 1 ms resolution and wakes on the next tick, so `sleep_until`
//! alone lands a pass 0 to ~1.5 ms late. The mock waits on tokio's timer until about 2 ms
//! before the deadline and then hands the rest to a blocking-pool thread that sleeps with the
//! operating system's timer and spins the last microseconds.
//!
//! Under tokio's paused clock (`start_paused`: tests and `--simulate`), where real time means
//! nothing, the timer wheel's 1 ms ticks would read every modelled instant at the next whole
//! millisecond. There the mock waits with `paused_clock`, which reaches an instant exactly when
//! nothing else is under way at the millisecond before it, and else up to 1 ms late.
//!
//! Every thread that sleeps on the OS timer first asks Linux for a timer slack of 1 ns: by
//! default Linux lets a sleep end up to 50 µs late so that it can batch wake-ups, and the mock
//! would have to spin those 50 µs instead, burning a core the client on the same machine needs.

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
/// The OS sleep ends this long before the deadline; the rest is spun. On Linux the sleeping
/// thread's timer slack is 1 ns and a sleep ends within a few µs; elsewhere the OS may add tens
/// of µs.
#[cfg(target_os = "linux")]
const SPIN: Duration = Duration::from_micros(20);
#[cfg(not(target_os = "linux"))]
const SPIN: Duration = Duration::from_micros(80);

/// Sleeps on the OS timer until `SPIN` before `at` (returns at once when that has passed).
fn os_sleep_until(at: std::time::Instant) {
    precise_timer_slack();
    if let Some(d) = at.checked_duration_since(std::time::Instant::now()) {
        if d > SPIN {
            std::thread::sleep(d - SPIN);
        }
    }
}

/// Sets this thread's timer slack to 1 ns, once per thread (Linux; a no-op elsewhere).
fn precise_timer_slack() {
    #[cfg(target_os = "linux")]
    {
        thread_local! {
            static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        SET.with(|set| {
            if !set.get() {
                if let Err(e) = nix::sys::prctl::set_timerslack(1) {
                    tracing::debug!("cannot set the timer slack: {e}");
                }
                set.set(true);
            }
        });
    }
}

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
            paused_clock::sleep_until(at).await;
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
            os_sleep_until(at_std);
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
    /// pass (tens of microseconds apart), without a blocking-pool round trip per event. A wait
    /// under ~0.5 ms sleeps on the OS timer in place until `SPIN` before the instant, then
    /// yields to other tasks until it passes, so the worker writes the events already sent.
    /// The sleep blocks this worker (the other workers run and steal its queued tasks), but it
    /// leaves the core to other threads: never spin through a whole gap, as a client on the same
    /// machine needs that core (see BENCHMARKS.md).
    pub async fn wait_short(self, at: Instant) {
        if self == Clock::Tokio {
            paused_clock::sleep_until(at).await;
            return;
        }
        loop {
            let now = Instant::now();
            if now >= at {
                return;
            }
            let left = at - now;
            if left > YIELD_LIMIT {
                return self.sleep_until(at).await;
            }
            if left > SPIN {
                os_sleep_until(at.into_std());
                continue;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Longest wait spent on this worker rather than on tokio's timer and the blocking pool.
const YIELD_LIMIT: Duration = Duration::from_micros(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_clock_is_detected_and_reaches_the_instant_exactly() {
        let clock = Clock::detect();
        assert_eq!(clock, Clock::Tokio);
        let t0 = Instant::now();
        clock
            .sleep_until(t0 + Duration::from_micros(1_234_567))
            .await;
        // Not at the timer's next whole millisecond: nothing else waits, so the clock is
        // advanced by hand to the instant (`paused_clock`).
        assert_eq!(t0.elapsed(), Duration::from_micros(1_234_567));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_os_sleep_asks_for_a_timer_slack_of_one_nanosecond() {
        // A fresh thread starts with the default slack (50 µs unless the process changed it).
        let slack = std::thread::spawn(|| {
            os_sleep_until(std::time::Instant::now() + Duration::from_micros(200));
            nix::sys::prctl::get_timerslack()
        })
        .join()
        .expect("thread");
        assert_eq!(slack.ok(), Some(1));
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
