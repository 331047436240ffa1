//! Multi-turn runs by turn number: TTFT from the scheduled start and the prefix cache's hits
//! (the run's [`CacheSplit`] kept per turn) of every turn k over all sessions. Built from records
//! alone and merged by adding, like [`super::LoadSummary`].

use std::collections::BTreeMap;

use super::cache::CacheSplit;
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
    /// Cached over prompt tokens of the successful turns, and their TTFT by hit and miss.
    pub cache: CacheSplit,
    /// Prompt tokens that stood in for earlier outputs the server listed no ids for.
    pub stand_in_tokens: u64,
}

impl TurnStats {
    /// Cached / prompt tokens; `None` when no turn reported a cached count.
    pub fn hit_ratio(&self) -> Option<f64> {
        self.cache.hit_ratio()
    }

    fn merge(&mut self, o: &TurnStats) {
        self.requests += o.requests;
        self.succeeded += o.succeeded;
        self.ttft.merge(&o.ttft);
        self.cache.merge(&o.cache);
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
        // A successful record has a first output chunk; without one it has no TTFT to split.
        if let Some(ttft) = ttft_from_schedule_ns(trace, load.client_queue_ns) {
            t.ttft.record(ttft);
            t.cache.add(rec.prompt_tokens, rec.cached_tokens, ttft);
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
