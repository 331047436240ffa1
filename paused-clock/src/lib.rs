//! Exact waits on tokio's paused clock (`start_paused`: tests and `--simulate`), where real time
//! means nothing and the timer wheel's 1 ms ticks would read every modelled instant at the next
//! whole millisecond.
//!
//! The paused clock jumps to the next timer only when every task is idle and the sockets have
//! nothing to read, and always by whole milliseconds from where it stands, so a timer set `m - 1`
//! ms and 1 ns ahead wakes exactly `m` ms ahead. A wait for `at` sleeps the whole milliseconds
//! before it that way. Woken by that jump, with no other wait ended or due at that instant, it
//! knows that nothing is under way and advances the clock by hand to `at` at once, never past
//! another exact wait's instant (waits resolve in the order of their instants). A hand advance
//! shifts the clock's millisecond grid, so every other wait then measures its whole milliseconds
//! again. A wait with under 1 ms to go and no such jump behind it cannot know that the tasks
//! woken meanwhile are done (an event's bytes may still be on their way to the client's socket),
//! so it ends at the next jump, up to 1 ms late.
//!
//! Plain tokio timers are invisible to it: a task that one wakes in the same millisecond as an
//! exact wait may do its I/O after the hand advance, read up to 1 ms late (the mock's and the
//! client's own waits on model instants all go through here).
//!
//! Call it only on a paused clock, on its current-thread runtime: elsewhere the clock cannot be
//! advanced by hand.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::time::{Duration, Instant};

#[derive(Default)]
struct Waits {
    next_id: u64,
    /// The instants waited for, each with the waker of a wait sleeping on the timer.
    pending: BTreeMap<(Instant, u64), Option<Waker>>,
    /// Bumped by every hand advance.
    shifts: u64,
    /// When a wait last ended: its task may have sent bytes that nobody has read yet.
    ended_at: Option<Instant>,
}

thread_local! {
    // The paused clock runs on a current-thread runtime: every task is on this thread.
    static WAITS: RefCell<Waits> = RefCell::new(Waits::default());
}

impl Waits {
    /// Whether nothing can be under way now for `entry`'s wait, which the clock's jump woke:
    /// no hand advance since `since`, and no other wait ended at this instant or is due by it
    /// (woken by the same jump, it runs at this instant).
    fn idle_since(&self, since: u64, entry: &Entry) -> bool {
        let now = Instant::now();
        self.shifts == since
            && self.ended_at != Some(now)
            && !self
                .pending
                .keys()
                .take_while(|(t, _)| *t <= now)
                .any(|&(_, id)| id != entry.1)
    }
}

/// A pending wait, withdrawn when dropped (done or cancelled).
struct Entry(Instant, u64);

impl Entry {
    fn new(at: Instant) -> Self {
        WAITS.with_borrow_mut(|w| {
            w.next_id += 1;
            w.pending.insert((at, w.next_id), None);
            Entry(at, w.next_id)
        })
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        WAITS.with_borrow_mut(|w| w.pending.remove(&(self.0, self.1)));
    }
}

/// Resolves once a hand advance happened after `since` (a count of them).
struct Shifted<'a> {
    entry: &'a Entry,
    since: u64,
}

impl Future for Shifted<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        WAITS.with_borrow_mut(|w| {
            if w.shifts != self.since {
                return Poll::Ready(());
            }
            if let Some(slot) = w.pending.get_mut(&(self.entry.0, self.entry.1)) {
                *slot = Some(cx.waker().clone());
            }
            Poll::Pending
        })
    }
}

/// Resolves at `at` on the paused clock: exactly when a jump of the clock lands within 1 ms
/// before it, else at the jump after it (at once if it has passed).
pub async fn sleep_until(at: Instant) {
    let entry = Entry::new(at);
    loop {
        let now = Instant::now();
        if now >= at {
            WAITS.with_borrow_mut(|w| w.ended_at = Some(now));
            return;
        }
        let whole = u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX);
        let since = WAITS.with_borrow(|w| w.shifts);
        // Wakes `now` plus whole milliseconds (1 ms with less to go), whatever the grid's phase.
        let ahead = Duration::from_millis(whole.saturating_sub(1)) + Duration::from_nanos(1);
        let wake = now.checked_add(ahead).unwrap_or(at);
        let jumped = tokio::select! {
            _ = tokio::time::sleep_until(wake) => true,
            _ = Shifted { entry: &entry, since } => false,
        };
        // Woken by the clock's own jump, with no hand advance since and no other wait ended
        // or due at this instant: nothing is under way.
        if jumped && whole >= 1 && WAITS.with_borrow(|w| w.idle_since(since, &entry)) {
            advance_towards(at).await;
        }
    }
}

/// Advances the clock by hand to `at`, or to an earlier exact wait's instant, and wakes the
/// waits sleeping on the timer.
async fn advance_towards(at: Instant) {
    let now = Instant::now();
    let to = WAITS.with_borrow(|w| {
        w.pending
            .keys()
            .map(|(t, _)| *t)
            .find(|t| *t > now)
            .map_or(at, |t| t.min(at))
    });
    if to <= now {
        return;
    }
    let woken: Vec<Waker> = WAITS.with_borrow_mut(|w| {
        w.shifts += 1;
        w.pending.values_mut().filter_map(Option::take).collect()
    });
    // Woken before the advance's own yield, so that no wait is left asleep if this one is
    // dropped during it.
    woken.into_iter().for_each(Waker::wake);
    tokio::time::advance(to - now).await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_with_a_millisecond_or_more_to_go_lands_on_its_instant() {
        for d in [us(1_000), us(1_234_567), us(2_999), us(17_500)] {
            let at = Instant::now() + d;
            sleep_until(at).await;
            assert_eq!(Instant::now(), at, "{d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_wait_ends_no_sooner_and_within_a_millisecond() {
        let t0 = Instant::now();
        sleep_until(t0 + us(300)).await;
        let e = t0.elapsed();
        assert!(e >= us(300) && e <= us(1_000), "{e:?}");
    }

    /// Two waits due within one millisecond: the earlier one lands on its instant and ends
    /// first; the later one, with under 1 ms to go once the first ended, is never early and at
    /// most 1 ms late.
    #[tokio::test(start_paused = true)]
    async fn waits_end_in_the_order_of_their_instants() {
        let t0 = Instant::now();
        let order = Rc::new(Cell::new(0u32));
        let local = tokio::task::LocalSet::new();
        let (late, early) = local
            .run_until(async {
                let o = order.clone();
                let late = tokio::task::spawn_local(async move {
                    sleep_until(t0 + us(5_300)).await;
                    o.set(o.get() * 10 + 2);
                    Instant::now()
                });
                let o = order.clone();
                let early = tokio::task::spawn_local(async move {
                    sleep_until(t0 + us(5_100)).await;
                    o.set(o.get() * 10 + 1);
                    Instant::now()
                });
                (late.await.unwrap(), early.await.unwrap())
            })
            .await;
        assert_eq!(order.get(), 12);
        assert_eq!(early, t0 + us(5_100));
        assert!(
            late >= t0 + us(5_300) && late <= t0 + us(6_300),
            "{:?}",
            late - t0
        );
    }

    /// A loopback connection: the writing end, and a task that reads it to its end and returns
    /// the instant each byte was read at.
    async fn connection() -> (tokio::net::TcpStream, tokio::task::JoinHandle<Vec<Instant>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut b = [0u8; 1];
            while s.read(&mut b).await.unwrap() == 1 {
                got.push(Instant::now());
            }
            got
        });
        (tokio::net::TcpStream::connect(addr).await.unwrap(), reader)
    }

    /// Bytes written at an instant are read at that instant: the writer's next wait never
    /// advances the clock by hand while they may still be on their way.
    #[tokio::test(start_paused = true)]
    async fn bytes_sent_before_a_wait_are_read_at_the_instant_they_were_sent() {
        let (mut w, reader) = connection().await;
        let t0 = Instant::now();
        let mut sent = Vec::new();
        // Each byte leaves at an exact instant, then the writer waits under or over 1 ms.
        for (i, d) in [us(2_500), us(400), us(1_700), us(30), us(3_000)]
            .into_iter()
            .enumerate()
        {
            let at = t0 + us(10_000 * (i as u64 + 1));
            sleep_until(at).await;
            assert_eq!(Instant::now(), at);
            w.write_all(&[1]).await.unwrap();
            sent.push(at);
            sleep_until(at + d).await;
            assert!(Instant::now() >= at + d);
        }
        drop(w);
        assert_eq!(reader.await.unwrap(), sent);
    }

    /// A wait that ends at the instant another wait is woken (both by one jump of the clock)
    /// may send bytes then: the other wait does not advance the clock past them.
    #[tokio::test(start_paused = true)]
    async fn a_wait_woken_beside_one_that_ended_does_not_advance_past_its_bytes() {
        let (mut w, reader) = connection().await;
        let t0 = Instant::now();
        // Both are woken by the jump to t0 + 1 ms: the writer's wait (under 1 ms to go) ends
        // there, 500 us late, and the other would otherwise advance to its instant at once.
        let other = tokio::spawn(async move {
            sleep_until(t0 + us(1_600)).await;
            Instant::now()
        });
        sleep_until(t0 + us(500)).await;
        let wrote = Instant::now();
        assert_eq!(wrote, t0 + us(1_000));
        w.write_all(&[1]).await.unwrap();
        drop(w);
        assert_eq!(reader.await.unwrap(), vec![wrote]);
        assert!(other.await.unwrap() >= t0 + us(1_600));
    }
}
