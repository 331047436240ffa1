//! The hiccup meter: a sleeping thread that notices when the machine itself stalls.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A thread that only sleeps, 1 ms at a time, and records how late it wakes up: a wake-up more
/// than 2 ms late means the machine itself stalled (the hypervisor took the virtual CPU away, or
/// every core was taken for that long). A thread that barely runs is woken first by Linux's
/// scheduler, so the processes under test rarely delay it; their own stalls do not show here.
pub(crate) struct HiccupMeter {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<f64>>>,
}

impl HiccupMeter {
    pub(crate) const PERIOD: Duration = Duration::from_millis(1);

    pub(crate) fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut late_ms = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = std::time::Instant::now();
                    std::thread::sleep(Self::PERIOD);
                    let over = t.elapsed().saturating_sub(Self::PERIOD);
                    if over > Duration::from_millis(2) {
                        late_ms.push(over.as_secs_f64() * 1e3);
                    }
                }
                late_ms
            })
        };
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// The wake-ups more than 2 ms late, in ms.
    pub(crate) fn finish(mut self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// "N over 2 ms (M over 5 ms), largest X ms" for a hiccup meter's late wake-ups.
pub(crate) fn fmt_hiccups(late_ms: &[f64]) -> String {
    let over5 = late_ms.iter().filter(|m| **m > 5.0).count();
    let max = late_ms.iter().copied().fold(0.0, f64::max);
    format!(
        "{} over 2 ms ({over5} over 5 ms), largest {max:.1} ms",
        late_ms.len()
    )
}
