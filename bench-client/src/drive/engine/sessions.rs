//! Multi-turn sessions on the engine path: `--concurrency` sessions in flight, each turn sent at
//! the end of the turn before plus its think time (its scheduled start), carrying the whole
//! conversation so far with the engine's own output ids, as `drive::sessions` does over HTTP.

use std::collections::VecDeque;
use std::sync::Arc;

use super::load::{InFlight, Run};
use crate::plan::session::{Conversation, PlannedTurn, SessionPlan, TurnOutput};
use crate::results::{Record, SessionTurn};

/// A session in a slot: its conversation so far and the turn it sends next.
struct Active {
    session: u64,
    conversation: Conversation,
    turn: PlannedTurn,
    /// The next turn's scheduled start.
    scheduled_ns: u64,
}

/// The sessions of a run on the engine path.
pub(crate) struct SessionState {
    plan: Arc<SessionPlan>,
    /// Sessions not begun yet, in order.
    queue: VecDeque<u64>,
    /// One slot per session in flight.
    active: Vec<Option<Active>>,
}

impl SessionState {
    /// This shard's sessions of `plan` (salted), `in_flight` at a time.
    pub(crate) fn new(
        plan: SessionPlan,
        sessions: impl Iterator<Item = u64>,
        in_flight: u32,
    ) -> Self {
        Self {
            plan: Arc::new(plan),
            queue: sessions.collect(),
            active: (0..in_flight.max(1)).map(|_| None).collect(),
        }
    }

    /// Slots to begin sessions in.
    pub(crate) fn slots(&self) -> usize {
        self.active.len()
    }

    /// Warm-up request `k`: a unique prompt of a first turn's length.
    pub(crate) fn warmup(&self, k: u64) -> PlannedTurn {
        self.plan.warmup(k)
    }
}

impl Run<'_> {
    /// The slot is free at `now_ns`: the next session begins there, its first turn sent at once.
    pub(super) fn begin_session(&mut self, slot: usize, now_ns: u64) {
        let Some(s) = self.sessions.as_mut() else {
            return;
        };
        let begun = loop {
            let Some(session) = s.queue.pop_front() else {
                break None;
            };
            let conversation = Conversation::new();
            if let Some(turn) = s.plan.turn(session, 0, &conversation) {
                break Some(Active {
                    session,
                    conversation,
                    turn,
                    scheduled_ns: now_ns,
                });
            }
        };
        let Some(slot_ref) = s.active.get_mut(slot) else {
            return;
        };
        *slot_ref = begun;
        if slot_ref.is_some() {
            self.send_turn(slot, now_ns);
        }
    }

    /// Sends the turn due in `slot` at `now_ns`.
    pub(super) fn send_turn(&mut self, slot: usize, now_ns: u64) {
        let Some(a) = self
            .sessions
            .as_ref()
            .and_then(|s| s.active.get(slot))
            .and_then(Option::as_ref)
        else {
            return;
        };
        let rid = format!(
            "ld-{:x}-{}-s{}-t{}",
            self.cfg.seed, self.start_unix_ms, a.session, a.turn.turn
        );
        let info = InFlight {
            index: a.turn.index,
            scheduled_ns: a.scheduled_ns,
            sent_ns: now_ns,
            prompt_tokens: u32::try_from(a.turn.prompt.len()).unwrap_or(u32::MAX),
            prefix_group: None,
            warm: false,
            slot: Some(slot),
        };
        let (prompt, output_len) = (a.turn.prompt.clone(), a.turn.output_len);
        self.submit(rid, prompt, output_len, info);
    }

    /// The turn in `slot` ended at `now_ns` with record `rec` (its session fields set here):
    /// the instant the session's next turn is due, or `None` when the session is over (every
    /// turn sent, or this one failed: there is no answer to continue with).
    pub(super) fn turn_ended(&mut self, slot: usize, rec: &mut Record, now_ns: u64) -> Option<u64> {
        let s = self.sessions.as_mut()?;
        let a = s.active.get_mut(slot)?.as_mut()?;
        let k = a.turn.turn;
        if let Some(l) = rec.load.as_mut() {
            l.session = Some(SessionTurn {
                id: a.session,
                turn: k,
                stand_in_tokens: a.turn.stand_in_tokens,
            });
        }
        if rec.error.is_some() {
            return None;
        }
        // The engine lists every output id: no stand-in is ever needed here.
        let ids = rec
            .trace
            .as_ref()
            .and_then(|t| t.output_ids.clone())
            .unwrap_or_default();
        a.conversation.close(&a.turn, TurnOutput::Server(ids));
        let next = s.plan.turn(a.session, k + 1, &a.conversation)?;
        let think = crate::drive::duration_ns(s.plan.think_time(a.session, k + 1));
        a.turn = next;
        a.scheduled_ns = now_ns.saturating_add(think);
        Some(a.scheduled_ns)
    }

    /// Sends warm-up turn `k` at instant 0 (not recorded).
    pub(super) fn send_session_warmup(&mut self, k: u64) {
        let Some(w) = self.sessions.as_ref().map(|s| s.warmup(k)) else {
            return;
        };
        let rid = format!("ld-{:x}-{}-w{k}", self.cfg.seed, self.start_unix_ms);
        let info = InFlight {
            index: crate::plan::workload::WARMUP_INDEX_BASE + k,
            scheduled_ns: 0,
            sent_ns: 0,
            prompt_tokens: u32::try_from(w.prompt.len()).unwrap_or(u32::MAX),
            prefix_group: None,
            warm: true,
            slot: None,
        };
        self.submit(rid, w.prompt, w.output_len, info);
    }
}
