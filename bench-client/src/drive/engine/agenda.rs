//! The load driver's agenda on the engine path: the client's pending events (arrivals, turns,
//! the engine's stream events) in order of their instants, ties in order of insertion.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use mock_server::engine::StreamEvent;

/// Something the client does at an instant.
#[derive(Debug)]
pub(super) enum Due {
    /// Open loop: a scheduled request (its slot's index and offset from the run's start).
    Arrival { index: u64, scheduled_ns: u64 },
    /// Multi-turn: the next turn of the session in this slot is due.
    Turn { slot: usize },
    /// A stream event the engine produced (for the request of this key).
    Stream { id: u64, event: StreamEvent },
    /// The server died.
    Died,
}

/// A client event at its instant; ties in order of insertion.
struct Entry {
    at_ns: u64,
    seq: u64,
    /// Boxed: the heap moves entries as it sifts, and a stream event is a few hundred bytes.
    due: Box<Due>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.seq) == (other.at_ns, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at_ns, self.seq).cmp(&(other.at_ns, other.seq))
    }
}

/// The client's pending events, in order of their instants, ties in order of insertion.
///
/// The engine's stream events come out of its output queue in order of their instants, so
/// they wait in a plain queue (`stream`) while each is no earlier than the one before; any
/// other event, and a stream event out of that order, goes to the heap. `pop` takes the
/// earlier of the two heads by (instant, insertion), which is the order one heap would give.
#[derive(Default)]
pub(super) struct Agenda {
    heap: BinaryHeap<Reverse<Entry>>,
    stream: VecDeque<(u64, u64, u64, StreamEvent)>,
    seq: u64,
}

impl Agenda {
    pub(super) fn push(&mut self, at_ns: u64, due: Due) {
        if let Due::Stream { id, event } = due {
            return self.push_stream(at_ns, id, event);
        }
        self.seq += 1;
        self.push_heap(at_ns, due);
    }
    /// [`Agenda::push`] of a stream event.
    pub(super) fn push_stream(&mut self, at_ns: u64, id: u64, event: StreamEvent) {
        self.seq += 1;
        if self.stream.back().is_none_or(|b| b.0 <= at_ns) {
            self.stream.push_back((at_ns, self.seq, id, event));
            return;
        }
        self.push_heap(at_ns, Due::Stream { id, event });
    }
    fn push_heap(&mut self, at_ns: u64, due: Due) {
        self.heap.push(Reverse(Entry {
            at_ns,
            seq: self.seq,
            due: Box::new(due),
        }));
    }
    /// Whether the stream queue's head comes before the heap's.
    fn stream_first(&self) -> Option<bool> {
        let h = self.heap.peek().map(|Reverse(e)| (e.at_ns, e.seq));
        let s = self.stream.front().map(|f| (f.0, f.1));
        match (h, s) {
            (None, None) => None,
            (Some(_), None) => Some(false),
            (None, Some(_)) => Some(true),
            (Some(h), Some(s)) => Some(s < h),
        }
    }
    pub(super) fn peek_ns(&self) -> Option<u64> {
        match self.stream_first()? {
            true => self.stream.front().map(|f| f.0),
            false => self.heap.peek().map(|Reverse(e)| e.at_ns),
        }
    }
    pub(super) fn pop(&mut self) -> Option<(u64, Due)> {
        match self.stream_first()? {
            true => self
                .stream
                .pop_front()
                .map(|(at, _, id, event)| (at, Due::Stream { id, event })),
            false => self.heap.pop().map(|Reverse(e)| (e.at_ns, *e.due)),
        }
    }
    /// The stream queue's head (instant, key, event), when it is the next event: handled where
    /// it sits, then dropped with [`Agenda::drop_stream_head`].
    pub(super) fn stream_head(&self) -> Option<(u64, u64, &StreamEvent)> {
        if self.stream_first()? {
            self.stream
                .front()
                .map(|(at, _, id, event)| (*at, *id, event))
        } else {
            None
        }
    }
    pub(super) fn drop_stream_head(&mut self) {
        self.stream.pop_front();
    }
}
