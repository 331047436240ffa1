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
    /// Turns per session (with --sessions).
    #[arg(long, default_value_t = 5, requires = "sessions")]
    turns: u32,
    /// New tokens of every turn after the first (with --sessions): 512, uniform:64:256 or
    /// normal:200:50 (k = 1,000); default: --input-len.
    #[arg(long, requires = "sessions")]
    turn_input_len: Option<String>,
    /// Pause between the end of a turn and the start of the next (with --sessions): 0, 2s,
    /// uniform:1s:5s or exp:2s (exponential with that mean, vLLM's per-client Poisson wait).
    #[arg(long, default_value = "0", requires = "sessions")]
    think_time: String,
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
            return Ok(None);
        };
        let turn_input = match &self.turn_input_len {
            Some(s) => LenDist::parse(s).map_err(|e| anyhow::anyhow!("--turn-input-len: {e}"))?,
            None => input.clone(),
        };
        let think =
            ThinkTime::parse(&self.think_time).map_err(|e| anyhow::anyhow!("--think-time: {e}"))?;
        let s = Sessions {
            sessions,
            turns: self.turns,
            first_input: input.clone(),
            turn_input,
            output: output.clone(),
            think,
        };
        s.check().map_err(anyhow::Error::msg)?;
        Ok(Some(s))
    }
}
