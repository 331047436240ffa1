//! Multi-turn sessions: what turn k of session s sends and how long its user thinks before it, as a
//! pure function of (seed, session, turn) and the conversation so far. No I/O and no clock, so the
//! HTTP driver and a simulation drive the same plan turn by turn.
//!
//! Turn k's prompt is the whole conversation so far (turn k-1's prompt, then the output token ids
//! turn k-1 got back) followed by new tokens, as SGLang's `bench_multiturn.py` and vLLM's
//! `benchmarks/multi_turn` build it; a server's prefix cache can then serve every earlier turn.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp, Uniform};
use serde::Serialize;

use super::prompt::PromptGen;
use super::workload::{LenDist, WARMUP_INDEX_BASE};

/// How long a user thinks between the end of one turn and the start of the next.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ThinkTime {
    /// Always `ns`.
    Fixed { ns: u64 },
    /// Uniform on `[lo_ns, hi_ns]`.
    Uniform { lo_ns: u64, hi_ns: u64 },
    /// Exponential with mean `mean_ns` (vLLM's Poisson wait between a client's requests).
    Exponential { mean_ns: u64 },
}

/// `500ms`, `2s`, `1.5m`; a bare number is seconds.
fn parse_duration_ns(p: &str, whole: &str) -> Result<u64, String> {
    let p = p.trim();
    let s = super::duration::parse_secs(p).ok_or_else(|| {
        format!("{p:?} is not a duration in think time {whole:?} (e.g. 500ms, 2s)")
    })?;
    // A day bounds a think time well inside u64 nanoseconds.
    if !s.is_finite() || !(0.0..=86_400.0).contains(&s) {
        return Err(format!(
            "{p:?} is out of range in think time {whole:?} (0 to 24 hours)"
        ));
    }
    Ok((s * 1e9).round() as u64)
}

impl ThinkTime {
    /// Parse `0`, `2s`, `uniform:1s:5s` or `exp:2s` (exponential with that mean).
    pub fn parse(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let d = |p: &str| parse_duration_ns(p, s);
        match parts.as_slice() {
            [t] | ["fixed", t] => Ok(Self::Fixed { ns: d(t)? }),
            ["uniform", lo, hi] => {
                let (lo_ns, hi_ns) = (d(lo)?, d(hi)?);
                if hi_ns < lo_ns {
                    return Err(format!("think time {s:?} needs lo <= hi"));
                }
                Ok(Self::Uniform { lo_ns, hi_ns })
            }
            ["exp" | "exponential", mean] => Ok(Self::Exponential { mean_ns: d(mean)? }),
            _ => Err(format!(
                "think time {s:?} not understood (examples: 0, 2s, uniform:1s:5s, exp:2s)"
            )),
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> Duration {
        let ns = match *self {
            Self::Fixed { ns } => ns,
            Self::Uniform { lo_ns, hi_ns } => match Uniform::new_inclusive(lo_ns, hi_ns) {
                Ok(u) => u.sample(rng),
                Err(_) => lo_ns,
            },
            Self::Exponential { mean_ns: 0 } => 0,
            Self::Exponential { mean_ns } => match Exp::new(1.0 / mean_ns as f64) {
                // Capped at a day, as a parsed think time is.
                Ok(e) => e.sample(rng).round().min(86_400e9) as u64,
                Err(_) => mean_ns,
            },
        };
        Duration::from_nanos(ns)
    }
}

/// What a multi-turn run sends: `sessions` conversations of `turns` turns each.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sessions {
    /// Conversations in the run (over all shards together).
    pub sessions: u64,
    /// Turns per conversation.
    pub turns: u32,
    /// New tokens of the first turn.
    pub first_input: LenDist,
    /// New tokens of every later turn, after the conversation so far.
    pub turn_input: LenDist,
    /// Output tokens asked of every turn.
    pub output: LenDist,
    /// Pause before every turn after the first, from the end of the turn before.
    pub think: ThinkTime,
}

impl Sessions {
    /// At least one session of at least one turn, and turn indices below the warm-up index space.
    pub fn check(&self) -> Result<(), String> {
        if self.sessions == 0 {
            return Err("--sessions must be at least 1".into());
        }
        if self.turns == 0 {
            return Err("--turns must be at least 1".into());
        }
        if self
            .sessions
            .checked_mul(u64::from(self.turns))
            .is_none_or(|n| n >= WARMUP_INDEX_BASE)
        {
            return Err(format!(
                "--sessions {} times --turns {} is too many turns",
                self.sessions, self.turns
            ));
        }
        Ok(())
    }
}

/// The conversation of one session so far: every earlier turn's new tokens and output, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversation {
    ids: Vec<u32>,
    turns: u32,
    stand_in_tokens: u32,
}

/// What a turn got back, to carry into the next turn's prompt.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnOutput {
    /// The output token ids the server listed.
    Server(Vec<u32>),
    /// Ids of the output's length from [`SessionPlan::stand_in`], where the server listed none: the
    /// server never produced them, so its prefix cache misses from there on.
    StandIn(Vec<u32>),
}

impl Conversation {
    /// A session before its first turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Token ids so far: the last turn's prompt and its output.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Turns done.
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Ids in [`Self::ids`] that stand in for outputs the server did not list.
    pub fn stand_in_tokens(&self) -> u32 {
        self.stand_in_tokens
    }

    /// Close the turn `turn` planned on this conversation with what it got back.
    pub fn close(&mut self, turn: &PlannedTurn, output: TurnOutput) {
        self.ids.clear();
        self.ids.extend_from_slice(&turn.prompt);
        let (ids, stand_in) = match output {
            TurnOutput::Server(ids) => (ids, 0),
            TurnOutput::StandIn(ids) => {
                let n = ids.len();
                (ids, n)
            }
        };
        self.ids.extend_from_slice(&ids);
        self.stand_in_tokens = self
            .stand_in_tokens
            .saturating_add(u32::try_from(stand_in).unwrap_or(u32::MAX));
        self.turns += 1;
    }
}

/// One turn to send.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTurn {
    /// Session.
    pub session: u64,
    /// Turn number in the session, from 0.
    pub turn: u32,
    /// Request index in the run: `session * turns + turn`.
    pub index: u64,
    /// The conversation so far, then `new_tokens` new ids.
    pub prompt: Vec<u32>,
    /// New tokens at the end of the prompt.
    pub new_tokens: u32,
    /// Output tokens asked.
    pub output_len: u32,
    /// Prompt ids that stand in for earlier outputs the server did not list.
    pub stand_in_tokens: u32,
}

/// Draws a multi-turn run's turns.
#[derive(Clone, Debug)]
pub struct SessionPlan {
    sessions: Sessions,
    seed: u64,
    prompts: PromptGen,
    stand_ins: PromptGen,
}

/// Seed mixes that keep the plan's random streams apart.
const LENGTHS: u64 = 0x5e55_0000_0000_0001;
const STAND_INS: u64 = 0x5e55_a5a5_0000_0002;

impl SessionPlan {
    /// A plan of `sessions` under `seed`; token ids in `[id_min, id_max)`.
    pub fn new(sessions: Sessions, seed: u64, id_range: (u32, u32)) -> Result<Self, String> {
        sessions.check()?;
        Ok(Self {
            sessions,
            seed,
            prompts: PromptGen::with_range(seed, id_range.0, id_range.1)?,
            stand_ins: PromptGen::with_range(seed ^ STAND_INS, id_range.0, id_range.1)?,
        })
    }

    /// Salt the prompt contents (not the lengths or think times), as
    /// [`super::Planner::salted`] does: a server whose cache is warm from an earlier run with the
    /// same seed must not serve this one.
    pub fn salted(mut self, salt: u64) -> Self {
        let mix = salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.prompts = self.prompts.reseeded(self.seed ^ mix);
        self.stand_ins = self.stand_ins.reseeded(self.seed ^ mix ^ STAND_INS);
        self
    }

    /// The sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Request index of a turn: `session * turns + turn`.
    pub fn index(&self, session: u64, turn: u32) -> u64 {
        session
            .saturating_mul(u64::from(self.sessions.turns))
            .saturating_add(u64::from(turn))
    }

    /// The random stream of one turn: its lengths and think time depend on (seed, session, turn)
    /// alone, whatever order turns are planned in.
    fn rng(&self, session: u64, turn: u32) -> ChaCha8Rng {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ LENGTHS);
        rng.set_stream(self.index(session, turn));
        rng
    }

    /// (new tokens, output tokens, think time) of a turn, drawn in that order.
    fn draws(&self, session: u64, turn: u32) -> (u32, u32, Duration) {
        let mut rng = self.rng(session, turn);
        let s = &self.sessions;
        let new_tokens = if turn == 0 {
            s.first_input.sample(&mut rng)
        } else {
            s.turn_input.sample(&mut rng)
        };
        let output = s.output.sample(&mut rng);
        let think = if turn == 0 {
            Duration::ZERO
        } else {
            s.think.sample(&mut rng)
        };
        (new_tokens, output, think)
    }

    /// Turn `turn` of `session` on the conversation so far; `None` past the last turn or when
    /// `history` has not had exactly `turn` turns.
    pub fn turn(&self, session: u64, turn: u32, history: &Conversation) -> Option<PlannedTurn> {
        if turn >= self.sessions.turns
            || session >= self.sessions.sessions
            || history.turns() != turn
        {
            return None;
        }
        let (new_tokens, output_len, _) = self.draws(session, turn);
        let index = self.index(session, turn);
        let mut prompt = Vec::with_capacity(history.ids().len() + new_tokens as usize);
        prompt.extend_from_slice(history.ids());
        prompt.extend(self.prompts.token_ids(new_tokens, index));
        Some(PlannedTurn {
            session,
            turn,
            index,
            prompt,
            new_tokens,
            output_len,
            stand_in_tokens: history.stand_in_tokens(),
        })
    }

    /// The pause before turn `turn` of `session`, from the end of the turn before (zero for the
    /// first turn).
    pub fn think_time(&self, session: u64, turn: u32) -> Duration {
        self.draws(session, turn).2
    }

    /// `len` ids standing in for the output of turn `turn` of `session` when the server listed
    /// none: always the same under one seed and salt, so a resumed run rebuilds the conversation.
    pub fn stand_in(&self, session: u64, turn: u32, len: u32) -> Vec<u32> {
        self.stand_ins.token_ids(len, self.index(session, turn))
    }

    /// Warm-up request `k`: a unique prompt of the length of session `k`'s first turn (cycling).
    /// Its ids come after the last turn's in the prompt generator, whose first ids differ from
    /// index to index, so under one salt no session begins like a warm-up prompt.
    pub fn warmup(&self, k: u64) -> PlannedTurn {
        let (new_tokens, output_len, _) = self.draws(k % self.sessions.sessions, 0);
        let index = self.index(self.sessions.sessions, 0).saturating_add(k);
        PlannedTurn {
            session: k,
            turn: 0,
            index,
            prompt: self.prompts.token_ids(new_tokens, index),
            new_tokens,
            output_len,
            stand_in_tokens: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sessions(turns: u32, think: &str) -> Sessions {
        Sessions {
            sessions: 5,
            turns,
            first_input: LenDist::Uniform { lo: 20, hi: 40 },
            turn_input: LenDist::Uniform { lo: 3, hi: 9 },
            output: LenDist::Uniform { lo: 2, hi: 6 },
            think: ThinkTime::parse(think).unwrap(),
        }
    }

    fn plan(turns: u32) -> SessionPlan {
        SessionPlan::new(sessions(turns, "uniform:1s:3s"), 7, (100, 4000)).unwrap()
    }

    #[test]
    fn think_times_parse_and_bad_ones_are_refused() {
        assert_eq!(ThinkTime::parse("0"), Ok(ThinkTime::Fixed { ns: 0 }));
        assert_eq!(
            ThinkTime::parse("250ms"),
            Ok(ThinkTime::Fixed { ns: 250_000_000 })
        );
        assert_eq!(
            ThinkTime::parse("uniform:1s:1.5s"),
            Ok(ThinkTime::Uniform {
                lo_ns: 1_000_000_000,
                hi_ns: 1_500_000_000
            })
        );
        assert_eq!(
            ThinkTime::parse("exp:2"),
            Ok(ThinkTime::Exponential {
                mean_ns: 2_000_000_000
            })
        );
        for bad in [
            "",
            "-1s",
            "abc",
            "uniform:3s:1s",
            "uniform:1s",
            "gamma:1s",
            "nan",
            "inf",
            "2d",
            "100000s",
        ] {
            assert!(ThinkTime::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_sessions_or_turns_are_refused() {
        let mut s = sessions(0, "0");
        assert!(SessionPlan::new(s.clone(), 1, (100, 4000))
            .unwrap_err()
            .contains("--turns"));
        s.turns = 2;
        s.sessions = 0;
        assert!(SessionPlan::new(s.clone(), 1, (100, 4000))
            .unwrap_err()
            .contains("--sessions"));
        s.sessions = u64::MAX / 2;
        assert!(SessionPlan::new(s, 1, (100, 4000)).is_err());
    }

    /// Plays a whole session, the server answering each turn with `answer(turn, output_len)`.
    fn play(
        p: &SessionPlan,
        session: u64,
        answer: impl Fn(&PlannedTurn) -> TurnOutput,
    ) -> Vec<(PlannedTurn, TurnOutput)> {
        let mut conv = Conversation::new();
        let mut out = Vec::new();
        for k in 0..p.sessions().turns {
            let t = p.turn(session, k, &conv).unwrap();
            let o = answer(&t);
            conv.close(&t, o.clone());
            out.push((t, o));
        }
        out
    }

    #[test]
    fn each_turn_extends_the_last_prompt_with_its_output_then_new_tokens() {
        let p = plan(4);
        let turns = play(&p, 2, |t| {
            TurnOutput::Server((0..t.output_len).map(|i| 7000 + i).collect())
        });
        for w in turns.windows(2) {
            let ((a, out), (b, _)) = (&w[0], &w[1]);
            let TurnOutput::Server(ids) = out else {
                unreachable!()
            };
            let mut want = a.prompt.clone();
            want.extend(ids);
            assert_eq!(b.prompt[..want.len()], want[..]);
            assert_eq!(b.prompt.len(), want.len() + b.new_tokens as usize);
            assert!((3..=9).contains(&b.new_tokens));
            assert_eq!(b.stand_in_tokens, 0);
        }
        assert!((20..=40).contains(&turns[0].0.prompt.len()));
        assert_eq!(turns[3].0.index, 2 * 4 + 3);
    }

    #[test]
    fn stand_ins_have_the_output_length_are_counted_and_repeat() {
        let p = plan(3);
        let turns = play(&p, 1, |t| {
            TurnOutput::StandIn(p.stand_in(t.session, t.turn, t.output_len))
        });
        let (t0, t1, t2) = (&turns[0].0, &turns[1].0, &turns[2].0);
        assert_eq!(t1.stand_in_tokens, t0.output_len);
        assert_eq!(t2.stand_in_tokens, t0.output_len + t1.output_len);
        let o0 = p.stand_in(1, 0, t0.output_len);
        assert_eq!(t1.prompt[t0.prompt.len()..][..o0.len()], o0[..]);
        assert_eq!(p.stand_in(1, 0, 5), p.stand_in(1, 0, 5));
        assert_ne!(p.stand_in(1, 0, 5), p.stand_in(1, 1, 5));
    }

    #[test]
    fn a_turn_out_of_order_or_past_the_end_is_none() {
        let p = plan(2);
        let conv = Conversation::new();
        assert!(p.turn(0, 1, &conv).is_none());
        assert!(p.turn(0, 2, &conv).is_none());
        assert!(p.turn(5, 0, &conv).is_none());
        assert_eq!(p.think_time(3, 0), Duration::ZERO);
    }

    #[test]
    fn salt_changes_contents_not_lengths_or_think_times() {
        let (a, b) = (plan(3), plan(3).salted(99));
        let c = Conversation::new();
        let (ta, tb) = (a.turn(4, 0, &c).unwrap(), b.turn(4, 0, &c).unwrap());
        assert_eq!(ta.prompt.len(), tb.prompt.len());
        assert_eq!(ta.output_len, tb.output_len);
        assert_ne!(ta.prompt, tb.prompt);
        assert_eq!(a.think_time(4, 2), b.think_time(4, 2));
        assert_ne!(a.stand_in(0, 0, 8), b.stand_in(0, 0, 8));
    }

    #[test]
    fn sessions_and_warm_up_begin_apart() {
        let p = plan(2);
        let c = Conversation::new();
        let firsts: std::collections::HashSet<u32> = (0..5)
            .map(|s| p.turn(s, 0, &c).unwrap().prompt[0])
            .chain((0..3).map(|k| p.warmup(k).prompt[0]))
            .collect();
        assert_eq!(firsts.len(), 8);
        assert_eq!(
            p.warmup(6).prompt.len(),
            p.turn(1, 0, &c).unwrap().prompt.len()
        );
    }

    proptest! {
        #[test]
        fn turns_are_a_function_of_seed_session_and_turn(
            seed in any::<u64>(), s in 0u64..5, k in 0u32..4, mean_ms in 0u64..5000,
        ) {
            let mut ss = sessions(4, "0");
            ss.think = ThinkTime::Exponential { mean_ns: mean_ms * 1_000_000 };
            let p = SessionPlan::new(ss, seed, (100, 4000)).unwrap();
            // The same turn planned twice, and after other turns were planned, is the same turn.
            let answer = |t: &PlannedTurn| TurnOutput::Server(vec![1; t.output_len as usize]);
            let a = play(&p, s, answer);
            let _ = play(&p, (s + 1) % 5, answer);
            let b = play(&p, s, answer);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(p.think_time(s, k), p.think_time(s, k));
            prop_assert!(p.think_time(s, k) <= Duration::from_secs(86_400));
        }
    }
}
