//! Pacing of open-loop arrivals: a thread that wakes each request at its slot, and a precise wait
//! on tokio's clock where the thread cannot run. Every time stamp stays on tokio's clock.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long before its slot an open-loop request's task starts: it builds its prompt, then waits
/// for the slot itself (woken by the `Pacer`) and sends at once, with no hand-off to another task
/// at the slot.
pub const OPEN_LOOP_LEAD: Duration = Duration::from_millis(10);

/// Wakes open-loop requests at their slots from a thread of its own. tokio's timer rounds a
/// deadline up to the next millisecond and its driver can park up to another millisecond past
/// that, so a sleep on it cannot send within 1 ms of the slot; the OS sleep of a thread is far
/// more precise (both measured in BENCHMARKS.md). Slots are registered in schedule order, so the
/// thread handles them one after the other. The instants it sleeps to are tokio instants
/// converted to the OS clock; every time stamp stays on tokio's clock.
pub(super) struct Pacer {
    tx: std::sync::mpsc::Sender<(std::time::Instant, oneshot::Sender<()>)>,
}

impl Pacer {
    /// `None` when the thread cannot be started (the caller falls back to tokio's timer).
    pub(super) fn start() -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<(std::time::Instant, oneshot::Sender<()>)>();
        std::thread::Builder::new()
            .name("load-pacer".into())
            .spawn(move || {
                for (at, wake) in rx {
                    let now = std::time::Instant::now();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                    let _ = wake.send(());
                }
            })
            .ok()?;
        Some(Self { tx })
    }

    /// A receiver that completes [`PACER_EARLY`] before `at` (registered in schedule order).
    pub(super) fn wake_at(&self, at: Instant) -> oneshot::Receiver<()> {
        let (wake, woken) = oneshot::channel();
        let early = at.checked_sub(PACER_EARLY).unwrap_or(at);
        // If the thread is gone the receiver errors and the caller waits on the timer.
        let _ = self.tx.send((early.into_std(), wake));
        woken
    }
}

/// How early the pacer wakes a request: a thread's sleep overshoots by up to ~50 us and waking a
/// task on a runtime worker takes tens more, so the task is woken this early and yields on its
/// worker until the slot (a short spin; its cost is in BENCHMARKS.md).
const PACER_EARLY: Duration = Duration::from_micros(300);

/// Whether tokio's clock is paused (tests): it does not move across a yield.
pub(super) async fn clock_is_paused() -> bool {
    let a = Instant::now();
    tokio::task::yield_now().await;
    Instant::now() == a
}

/// How long before `at` [`wait_until`] stops sleeping on tokio's timer and yields instead: a sleep
/// on the timer fires up to ~2 ms late (see [`Pacer`]).
const PRECISE_WAIT: Duration = Duration::from_millis(2);

/// Wait until `at` on tokio's clock, without the pacer thread. On the real clock: sleep to
/// [`PRECISE_WAIT`] before `at`, then yield until the clock passes `at`. On the paused clock
/// (`paused`: tests and `--simulate`), where a yield does not move the clock, the exact wait
/// on that clock (`paused_clock`), so that a request leaves at its slot and not at the timer's next
/// millisecond.
pub(super) async fn wait_until(at: Instant, paused: bool) {
    if paused {
        paused_clock::sleep_until(at).await;
        return;
    }
    let coarse = at.checked_sub(PRECISE_WAIT).unwrap_or(at);
    tokio::time::sleep_until(coarse).await;
    while Instant::now() < at {
        tokio::task::yield_now().await;
    }
}
