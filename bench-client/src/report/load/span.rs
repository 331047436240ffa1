//! When a load run's requests ran: each request's instants, a run piece's (the requests one
//! process sent from one start), and a run's span over its pieces.

use std::collections::BTreeMap;

use crate::results::LoadInfo;
use crate::trace::RequestTrace;

/// The instants of one run piece (the requests sent by one process from one start), unix ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Earliest scheduled start.
    pub first_scheduled: u64,
    /// Earliest send.
    pub first_sent: u64,
    /// Latest send.
    pub last_sent: u64,
    /// Latest end.
    pub last_end: u64,
}

impl Piece {
    pub(super) fn of(i: Instants) -> Self {
        Self {
            first_scheduled: i.scheduled,
            first_sent: i.sent,
            last_sent: i.sent,
            last_end: i.end,
        }
    }

    pub(super) fn join(self, o: Self) -> Self {
        Self {
            first_scheduled: self.first_scheduled.min(o.first_scheduled),
            first_sent: self.first_sent.min(o.first_sent),
            last_sent: self.last_sent.max(o.last_sent),
            last_end: self.last_end.max(o.last_end),
        }
    }
}

/// Total length of the union of the intervals `[a, b]`, ns: pieces that overlap (the shards of
/// one run) count once, the gaps between pieces (a resumed run's down time) not at all.
pub(super) fn union_ns(mut spans: Vec<(u64, u64)>) -> u64 {
    spans.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for (a, b) in spans {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

/// A load request's scheduled start, send and stream end, unix ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instants {
    /// Scheduled start.
    pub scheduled: u64,
    /// Send.
    pub sent: u64,
    /// End of the stream.
    pub end: u64,
}

impl Instants {
    /// The instants of one request from its load fields and trace.
    pub fn of(load: &LoadInfo, trace: &RequestTrace) -> Self {
        let base = load.start_unix_ms.saturating_mul(1_000_000);
        let sent = base.saturating_add(load.sent_ns);
        Self {
            scheduled: base.saturating_add(load.scheduled_ns),
            sent,
            end: sent.saturating_add(trace.end_ns),
        }
    }

    /// Seconds of a run's pieces (requests keyed by their piece's start): from each piece's
    /// earliest scheduled start to its latest end, the pieces' union, as
    /// [`super::LoadSummary::duration_s`] (`None` when there are none or the span is zero).
    pub fn pieces_span_s(requests: impl IntoIterator<Item = (u64, Self)>) -> Option<f64> {
        let mut pieces: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (start, i) in requests {
            pieces
                .entry(start)
                .and_modify(|(a, b)| {
                    *a = (*a).min(i.scheduled);
                    *b = (*b).max(i.end);
                })
                .or_insert((i.scheduled, i.end));
        }
        let ns = union_ns(pieces.into_values().collect());
        (ns > 0).then(|| ns as f64 / 1e9)
    }

    /// Seconds from the earliest scheduled start to the latest end of `requests` (`None` when
    /// there are none or the span is zero), the span [`super::LoadSummary::duration_s`] divides by.
    pub fn span_s(requests: impl IntoIterator<Item = Self>) -> Option<f64> {
        let (a, b) = requests
            .into_iter()
            .fold(None, |acc: Option<(u64, u64)>, i| {
                Some(acc.map_or((i.scheduled, i.end), |(a, b)| {
                    (a.min(i.scheduled), b.max(i.end))
                }))
            })?;
        (b > a).then(|| (b - a) as f64 / 1e9)
    }
}
