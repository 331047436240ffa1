//! Multi-turn runs by turn number: TTFT from the scheduled start and the prefix cache's hits
//! (cached over prompt tokens, as the server reported them) of every turn k over all sessions.
//! Built from records alone and merged by adding, like [`super::LoadSummary`].

use std::collections::BTreeMap;

use super::load::Metric;
use crate::measure::ttft_from_schedule_ns;
use crate::results::Record;

/// The turns numbered k of every session.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnStats {
    /// Turns recorded.
    pub requests: u64,
    /// Turns that succeeded.
    pub succeeded: u64,
    /// TTFT from the scheduled start (the end of the turn before plus the think time), ns.
    pub ttft: Metric,
    /// Prompt tokens of successful turns that reported a cached count.
    pub prompt_tokens: u64,
    /// Cached prompt tokens those turns reported.
    pub cached_tokens: u64,
    /// Prompt tokens that stood in for earlier outputs the server listed no ids for.
    pub stand_in_tokens: u64,
}

impl TurnStats {
    /// Cached / prompt tokens; `None` when no turn reported a cached count.
    pub fn hit_ratio(&self) -> Option<f64> {
        (self.prompt_tokens > 0).then(|| self.cached_tokens as f64 / self.prompt_tokens as f64)
    }

    fn merge(&mut self, o: &TurnStats) {
        self.requests += o.requests;
        self.succeeded += o.succeeded;
        self.ttft.merge(&o.ttft);
        self.prompt_tokens += o.prompt_tokens;
        self.cached_tokens += o.cached_tokens;
        self.stand_in_tokens += o.stand_in_tokens;
    }
}

/// Per-turn statistics by turn number (0 = the first turn); empty for runs without sessions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turns(pub BTreeMap<u32, TurnStats>);

impl Turns {
    /// Add one record (records of runs without sessions are ignored).
    pub fn add(&mut self, rec: &Record) {
        let (Some(load), Some(trace)) = (&rec.load, &rec.trace) else {
            return;
        };
        let Some(st) = load.session else { return };
        let t = self.0.entry(st.turn).or_default();
        t.requests += 1;
        t.stand_in_tokens += u64::from(st.stand_in_tokens);
        if rec.error.is_some() {
            return;
        }
        t.succeeded += 1;
        if let Some(ns) = ttft_from_schedule_ns(trace, load.client_queue_ns) {
            t.ttft.record(ns);
        }
        if let (Some(p), Some(c)) = (rec.prompt_tokens, rec.cached_tokens) {
            t.prompt_tokens += u64::from(p);
            t.cached_tokens += u64::from(c);
        }
    }

    /// Add another run's turns.
    pub fn merge(&mut self, o: &Turns) {
        for (k, t) in &o.0 {
            self.0.entry(*k).or_default().merge(t);
        }
    }

    /// Whether no record had a session.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
