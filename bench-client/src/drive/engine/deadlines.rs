//! Client timeouts on the engine path: the client gives a request up at the instant
//! [`crate::plan::Timeouts::deadline`] names, as the HTTP path's client does, and the server
//! drops it before its next pass ([`mock_server::Simulator::abort`]). A request has one entry in
//! a heap of deadlines, armed as it is sent; an entry that comes due after its stream moved on
//! (its first output, a later read) is armed again at the new deadline, so a request costs about
//! one entry whatever its length. An entry whose request ended is dropped when it comes due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::load::{InFlight, Run};
use super::Streams;
use crate::drive::duration_ns;

/// Whose deadline an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Waiter {
    /// A stream the engine took, by its key.
    Stream(u64),
    /// A send the client holds ([`super::held::HeldQueue`]), by its index: on the server it
    /// waits in the queue.
    Held(u64),
}

/// The deadlines, earliest first.
#[derive(Default)]
pub(super) struct Deadlines {
    heap: BinaryHeap<Reverse<(u64, Waiter)>>,
}

impl Deadlines {
    pub(super) fn push(&mut self, at_ns: u64, w: Waiter) {
        self.heap.push(Reverse((at_ns, w)));
    }

    pub(super) fn peek_ns(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    pub(super) fn pop(&mut self) -> Option<(u64, Waiter)> {
        self.heap.pop().map(|Reverse(e)| e)
    }
}

impl Run<'_> {
    /// Arms the deadline of stream `id`, just taken by the engine.
    pub(super) fn arm(&mut self, id: u64) {
        if let Some((at, _)) = self.streams.deadline(id, &self.cfg.timeouts) {
            self.deadlines.push(at, Waiter::Stream(id));
        }
    }

    /// The entry of `w` came due at `at_ns`: the request is given up there, unless it ended or
    /// its deadline moved on.
    pub(super) fn expire(&mut self, at_ns: u64, w: Waiter) {
        match w {
            Waiter::Stream(id) => {
                let Some((due, phase)) = self.streams.deadline(id, &self.cfg.timeouts) else {
                    return;
                };
                if due > at_ns {
                    self.deadlines.push(due, w);
                    return;
                }
                let Some(trace) = self.streams.timed_out(id, at_ns, phase) else {
                    return;
                };
                self.clock_ns = self.clock_ns.max(at_ns);
                self.sim.abort(id, &trace.rid);
                self.next_step = None;
                self.stream_ended(at_ns, id, trace);
            }
            Waiter::Held(index) => {
                let Some(h) = self.held.give_up(index) else {
                    return;
                };
                let Some(plan) = self.planner.request(index) else {
                    return;
                };
                self.clock_ns = self.clock_ns.max(at_ns);
                let (_, phase) = self.cfg.timeouts.deadline(h.prompt_tokens, None);
                let trace = Streams::given_up_waiting(
                    &self.rid(index),
                    h.prompt_tokens,
                    plan.output_len,
                    at_ns.saturating_sub(h.sent_ns),
                    phase,
                );
                let info = InFlight {
                    index,
                    scheduled_ns: h.scheduled_ns,
                    sent_ns: h.sent_ns,
                    prompt_tokens: h.prompt_tokens,
                    prefix_group: plan.prefix_group,
                    warm: false,
                    slot: None,
                };
                self.ended(trace, info, at_ns);
            }
        }
    }

    /// The deadline of a send held at `sent_ns` with a prompt of `prompt_tokens`: it has no
    /// output before the engine takes it.
    pub(super) fn held_deadline(&self, sent_ns: u64, prompt_tokens: u32) -> u64 {
        let (due, _) = self.cfg.timeouts.deadline(prompt_tokens, None);
        sent_ns.saturating_add(duration_ns(due))
    }
}
