//! `bench-client load --sessions`: the flags of a multi-turn run, checked into [`Sessions`].

use clap::Args;

use crate::plan::{LenDist, Sessions, ThinkTime};

/// Multi-turn sessions (SGLang's `bench_multiturn.py`, vLLM's `benchmarks/multi_turn`).
#[derive(Args, Debug)]
pub(super) struct SessionArgs {
    /// Multi-turn run: N sessions (conversations), each of --turns turns; --concurrency sessions
    /// in flight (default: all). The first turn sends --input-len new tokens; every later turn
    /// sends the whole conversation so far (earlier prompts and the server's output ids) plus
    /// --turn-input-len new tokens, a --think-time after the turn before ended. Every turn asks
    /// --output-len tokens.
    #[arg(long, conflicts_with_all = ["request_rate", "trace", "prefix_groups", "num_requests", "duration", "max_concurrency"])]
    pub(super) sessions: Option<u64>,
    /// Turns per session (with --sessions) [default: 5].
    #[arg(long)]
    turns: Option<u32>,
    /// New tokens of every turn after the first (with --sessions): 512, uniform:64:256 or
    /// normal:200:50 (k = 1,000); default: --input-len.
    #[arg(long)]
    turn_input_len: Option<String>,
    /// Pause between the end of a turn and the start of the next (with --sessions): 0, 2s,
    /// uniform:1s:5s or exp:2s (exponential with that mean, vLLM's per-client Poisson wait)
    /// [default: 0].
    #[arg(long)]
    think_time: Option<String>,
}

impl SessionArgs {
    /// The sessions the flags ask for, every value checked (`None` without `--sessions`);
    /// `input` and `output` are the parsed `--input-len` and `--output-len`.
    pub(super) fn sessions(
        &self,
        input: &LenDist,
        output: &LenDist,
    ) -> anyhow::Result<Option<Sessions>> {
        let Some(sessions) = self.sessions else {
            // Flags of sessions without them would be dropped unseen.
            let given: Vec<&str> = [
                ("--turns", self.turns.is_some()),
                ("--turn-input-len", self.turn_input_len.is_some()),
                ("--think-time", self.think_time.is_some()),
            ]
            .into_iter()
            .filter_map(|(flag, given)| given.then_some(flag))
            .collect();
            if !given.is_empty() {
                anyhow::bail!("{} need --sessions N (a multi-turn run)", given.join(", "));
            }
            return Ok(None);
        };
        let turn_input = match &self.turn_input_len {
            Some(s) => LenDist::parse(s).map_err(|e| anyhow::anyhow!("--turn-input-len: {e}"))?,
            None => input.clone(),
        };
        let think = ThinkTime::parse(self.think_time.as_deref().unwrap_or("0"))
            .map_err(|e| anyhow::anyhow!("--think-time: {e}"))?;
        let s = Sessions {
            sessions,
            turns: self.turns.unwrap_or(5),
            first_input: input.clone(),
            turn_input,
            output: output.clone(),
            think,
        };
        s.check().map_err(anyhow::Error::msg)?;
        Ok(Some(s))
    }
}
