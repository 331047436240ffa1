//! The flags `sweep`, `load` and `capacity` share, each defined once with one default: deadlines,
//! seed and results file, progress, the workload of a load (lengths, shared prefixes, traces), the
//! arrivals of an open loop, and the SLO with its gate. A default that must differ between the
//! commands is an `Option` resolved by the command, with the reason in the flag's help.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::common::{secs, IdRange};
use crate::plan::{Timeouts, DEFAULT_SEED};
use crate::report::gate::check_target;
use crate::report::Slo;

/// Per-request deadlines.
#[derive(Args, Debug, Clone)]
pub(super) struct TimeoutArgs {
    /// Connect timeout, seconds.
    #[arg(long, default_value_t = Timeouts::default().connect.as_secs_f64())]
    connect_timeout_s: f64,
    /// Time-to-first-token timeout, seconds, fixed part (long: a loaded server queues requests,
    /// and the first token of a queued one may come minutes late).
    #[arg(long, default_value_t = Timeouts::default().first_token_base.as_secs_f64())]
    ttft_timeout_s: f64,
    /// Time-to-first-token timeout, seconds added per 1,000 prompt tokens (0: none).
    #[arg(long, default_value_t = Timeouts::default().first_token_per_1k.as_secs_f64())]
    ttft_timeout_per_1k_s: f64,
    /// Longest gap between chunks, seconds.
    #[arg(long, default_value_t = Timeouts::default().idle.as_secs_f64())]
    idle_timeout_s: f64,
    /// Whole-request timeout, seconds.
    #[arg(long, default_value_t = Timeouts::default().total.as_secs_f64())]
    total_timeout_s: f64,
}

impl TimeoutArgs {
    /// The deadlines, each checked.
    pub(super) fn timeouts(&self) -> anyhow::Result<Timeouts> {
        Ok(Timeouts {
            connect: secs("connect-timeout-s", self.connect_timeout_s)?,
            first_token_base: secs("ttft-timeout-s", self.ttft_timeout_s)?,
            first_token_per_1k: if self.ttft_timeout_per_1k_s == 0.0 {
                Duration::ZERO
            } else {
                secs("ttft-timeout-per-1k-s", self.ttft_timeout_per_1k_s)?
            },
            idle: secs("idle-timeout-s", self.idle_timeout_s)?,
            total: secs("total-timeout-s", self.total_timeout_s)?,
            caps: Default::default(),
        })
    }
}

pub(super) use crate::drive::load::DEFAULT_WARMUP as LOAD_WARMUP;
pub(super) use crate::drive::sweep::DEFAULT_WARMUP as SWEEP_WARMUP;

/// Where results go, how a run resumes, its seed, its warm-up and its progress bar.
#[derive(Args, Debug)]
pub(super) struct RunArgs {
    /// Results file (JSONL); default results/<command>-<unix time>.jsonl. For capacity, the base
    /// path: step N goes to NAME.step-N.jsonl beside it.
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Continue the run in --out (same flags and --seed): what is there is kept and not run again.
    #[arg(long)]
    pub(super) resume: bool,
    /// Seed of the schedule and the prompts.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub(super) seed: u64,
    #[command(flatten)]
    pub(super) ids: IdRange,
    /// Warm-up requests, not recorded [default: 1 for sweep, before each context length: a
    /// length's first request pays for the server's compiling and allocating for it, and a sweep
    /// has few requests per length; 0 for load and capacity, before the run or each step: their
    /// figures come from many requests, and a cold start is part of what a load run measures].
    #[arg(long)]
    warmup: Option<u32>,
    /// No progress bar (drawn on stderr, only on a terminal).
    #[arg(long)]
    no_progress: bool,
}

impl RunArgs {
    /// The warm-up requests: as given, else `default` (the command's).
    pub(super) fn warmup(&self, default: u32) -> u32 {
        self.warmup.unwrap_or(default)
    }

    /// Whether to draw a progress bar: not with --no-progress, and only on a terminal.
    pub(super) fn progress(&self) -> bool {
        !self.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr())
    }
}

/// The requests of a load: lengths, shared prefixes, or a trace.
#[derive(Args, Debug)]
pub(super) struct WorkloadArgs {
    /// Prompt length distribution: 512, uniform:256:1024 or normal:1000:200 (k = 1,000); not
    /// with --trace (its lines give the lengths).
    #[arg(long, default_value = "512", conflicts_with = "trace")]
    pub(super) input_len: String,
    /// Output length distribution, same forms.
    #[arg(long, default_value = "128", conflicts_with = "trace")]
    pub(super) output_len: String,
    /// Shared-prefix workload: this many groups, each sharing a --prefix-len prefix.
    #[arg(long)]
    pub(super) prefix_groups: Option<u32>,
    /// Prefix length of the shared-prefix and native trace workloads; --input-len is added after it.
    #[arg(long, default_value_t = 0)]
    pub(super) prefix_len: u32,
    #[command(flatten)]
    pub(super) trace: super::trace::TraceArgs,
}

impl WorkloadArgs {
    /// Refuses prefix flags that would be ignored: `--prefix-groups` with a trace, and a
    /// `--prefix-len` with neither groups nor a trace (`traced`: a trace is replayed).
    pub(super) fn check_prefix(&self, traced: bool) -> anyhow::Result<()> {
        if traced && self.prefix_groups.is_some() {
            anyhow::bail!("--prefix-groups makes a workload of its own: leave it out with --trace");
        }
        if !traced && self.prefix_groups.is_none() && self.prefix_len > 0 {
            anyhow::bail!(
                "--prefix-len {} is the prefix of --prefix-groups (or of a native --trace): give one",
                self.prefix_len
            );
        }
        Ok(())
    }
}

/// How an open loop's requests arrive.
#[derive(Args, Debug)]
pub(super) struct ArrivalArgs {
    /// Open-loop arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    pub(super) arrival: crate::plan::ArrivalKind,
    /// Gamma shape (1 = Poisson; below 1 burstier, above 1 more regular); needs --arrival gamma.
    #[arg(long, default_value_t = 1.0)]
    pub(super) burstiness: f64,
    /// Open loop: at most N requests in flight (over all shards together); an arrival that finds N
    /// in flight waits, and the wait is its client_queue_time. Not with --concurrency.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) max_concurrency: Option<u32>,
}

/// The SLO and its gate.
#[derive(Args, Debug)]
pub(super) struct SloArgs {
    /// The objective, e.g. ttft=500,tpot=50 (ms): a request meets it when its TTFT (from its
    /// scheduled start) and its TPOT are at most these.
    #[arg(long)]
    pub(super) slo: Option<String>,
    /// The SLO gate: at least this share of the requests (failed ones count against it) must meet
    /// --slo, else the command exits 1 and its last line says `SLO gate: FAILED` [default: no gate
    /// for load and merge; 0.95 for capacity, a step's share to pass].
    #[arg(long, alias = "target")]
    slo_target: Option<f64>,
}

/// The share a capacity step's requests must meet the SLO in, when --slo-target is not given.
pub(super) const CAPACITY_TARGET: f64 = 0.95;

impl SloArgs {
    /// The SLO as given (none when left out).
    pub(super) fn slo(&self) -> anyhow::Result<Option<Slo>> {
        self.slo
            .as_deref()
            .map(|s| Slo::parse(s).map_err(anyhow::Error::msg))
            .transpose()
    }

    /// The gate's target, checked; `None` when not given.
    pub(super) fn target(&self) -> anyhow::Result<Option<f64>> {
        self.slo_target
            .map(|t| check_target(t).map_err(anyhow::Error::msg))
            .transpose()
    }
}
