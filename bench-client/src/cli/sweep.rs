//! `bench-client sweep`: the flags of a context sweep and its run.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::exit::{self, CliError};

use super::common::Output;
use super::common::{default_out, redact_args, secs, simulated_note, ServerArgs};
use super::flags::{RunArgs, TimeoutArgs, SWEEP_WARMUP};
use super::report::emit;
use crate::drive::sweep::{self, OnCrash, SweepConfig};
use crate::plan;
use crate::report::Report;
use crate::results::{read_records, Method};

#[derive(Args, Debug)]
pub(super) struct SweepArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Context lengths, comma separated, k = 1,000 tokens.
    #[arg(long, default_value = plan::DEFAULT_CONTEXTS)]
    contexts: String,
    /// Output tokens per streaming request.
    #[arg(long, default_value_t = sweep::DEFAULT_OUTPUT_TOKENS)]
    output_tokens: u32,
    /// Measured runs per context length.
    #[arg(long, default_value_t = sweep::DEFAULT_RUNS)]
    runs: u32,
    /// Run the contexts round-robin (run 1 of each, then run 2 of each, ...), so that a drift of
    /// the server over the sweep falls on every context alike; default: context by context.
    #[arg(long)]
    interleave: bool,
    /// `two-point` runs the old two-request method beside the streaming one.
    #[arg(long, value_enum, default_value = "streaming")]
    method: Method,
    /// Two-point output length a.
    #[arg(long, default_value_t = sweep::DEFAULT_TWO_POINT_TOKENS.0)]
    two_point_a: u32,
    /// Two-point output length b.
    #[arg(long, default_value_t = sweep::DEFAULT_TWO_POINT_TOKENS.1)]
    two_point_b: u32,
    /// POST /flush_cache before each point (and between the two-point requests).
    #[arg(long)]
    flush_cache: bool,
    #[command(flatten)]
    run: RunArgs,
    /// Ask for per-chunk token ids (vLLM `return_token_ids`).
    #[arg(long)]
    return_token_ids: bool,
    /// Send text prompts of exactly N tokens under this local Hugging Face tokenizer.json (any
    /// --api; needs a build with `--features tokenizer`).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    /// When the server dies: wait for it or stop.
    #[arg(long, value_enum, default_value = "stop")]
    on_crash: OnCrash,
    /// How long --on-crash wait waits, seconds.
    #[arg(long, default_value_t = sweep::DEFAULT_CRASH_WAIT_S)]
    crash_wait_s: f64,
    #[command(flatten)]
    output: Output,
}

impl SweepArgs {
    /// Whether the run is simulated (`--simulate`).
    pub(super) fn simulate(&self) -> bool {
        self.server.paused()
    }
}

/// The sweep the flags ask for, every flag checked (the target is resolved after, by
/// `target_or_engine`): nothing is started before this returns.
fn sweep_config(
    a: &SweepArgs,
) -> anyhow::Result<(SweepConfig, sweep::Checked, sweep::PromptSource)> {
    a.server.check()?;
    let contexts = plan::parse_contexts(&a.contexts).context("--contexts")?;
    let mut timeouts = a.timeouts.timeouts()?;
    timeouts.caps = a.server.stream_caps()?;
    let crash_wait = secs("crash-wait-s", a.crash_wait_s)?;
    let prompt_source = prompt_source(a.tokenizer.as_deref(), a.run.seed)?;
    let out = a.run.out.clone().unwrap_or_else(|| default_out("sweep"));
    super::paths::refuse_overwrites(
        &super::paths::results_and_manifests("the results file", [&out]),
        &super::paths::written(&[("--plot", a.output.plot.as_ref())]),
    )?;
    if let Some(p) = &a.output.plot {
        super::paths::check_writable("--plot", p)?;
    }
    let cfg = SweepConfig {
        stamping: a.server.stamping(),
        simulated: a.server.paused(),
        contexts,
        output_tokens: a.output_tokens,
        runs: a.runs,
        warmup: a.run.warmup(SWEEP_WARMUP),
        interleave: a.interleave,
        method: a.method,
        flush_cache: a.flush_cache,
        two_point_tokens: (a.two_point_a, a.two_point_b),
        resume: a.run.resume,
        seed: a.run.seed,
        token_id_range: a.run.ids.range(),
        return_token_ids: a.return_token_ids,
        timeouts,
        on_crash: a.on_crash,
        crash_wait,
        progress: a.run.progress(),
        command: redact_args(std::env::args()),
        ..SweepConfig::new(out)
    };
    let checked = cfg.validate()?;
    Ok((cfg, checked, prompt_source))
}

pub(super) async fn run_sweep(a: SweepArgs) -> Result<ExitCode, CliError> {
    let (cfg, checked, prompt_source) = sweep_config(&a).map_err(CliError::Usage)?;
    let (server, mock) = super::common::destination(&a.server, &cfg.timeouts)
        .await
        .map_err(CliError::connecting)?;
    let out = cfg.out.clone();
    eprintln!(
        "sweeping {} context lengths against {} ({}), results in {}",
        cfg.contexts.len(),
        server.target.shown_url(),
        server.target.dialect.as_str(),
        out.display()
    );
    let (wall0, model0) = (std::time::Instant::now(), tokio::time::Instant::now());
    let outcome = sweep::run_sweep_with(&server, &cfg, checked, prompt_source).await;
    if cfg.simulated {
        let model = outcome
            .as_ref()
            .ok()
            .and_then(|o| o.model_time)
            .unwrap_or_else(|| model0.elapsed());
        simulated_note(wall0, model, a.server.simulate);
    }
    if let Some(m) = mock {
        m.shutdown().await;
    }
    let outcome = outcome?;
    let records = read_records(&out)?;
    emit(&Report::from_records(&records), &a.output)?;
    if outcome.skipped > 0 {
        eprintln!(
            "--resume: skipped {} points already in {}",
            outcome.skipped,
            out.display()
        );
    }
    if outcome.interrupted {
        eprintln!(
            "interrupted: {} records written this run are in {}; rerun with --resume to continue",
            outcome.records.len(),
            out.display()
        );
        return Ok(ExitCode::from(exit::INTERRUPTED));
    }
    if let Some(msg) = outcome.stopped {
        eprintln!("sweep stopped: {msg}");
        return Ok(ExitCode::from(exit::SERVER_GONE));
    }
    // A two-point pair that the method itself could not solve (`cache-hit`, ...) is its
    // finding, not a failed request.
    let failed = outcome
        .records
        .iter()
        .filter(|r| {
            r.error
                .as_ref()
                .is_some_and(|e| r.method == Method::Streaming || e.kind.request().is_some())
        })
        .count();
    if failed > 0 {
        eprintln!(
            "{failed} of {} records written this run failed; their errors are in {}",
            outcome.records.len(),
            out.display()
        );
        // As for a load run: the server went away when nothing succeeded and every failure
        // says it is away or refusing (no connection, HTTP 429/502/503/504).
        if outcome.records.iter().all(server_refused) {
            eprintln!("no request succeeded: the server refused every one");
            return Ok(ExitCode::from(exit::SERVER_GONE));
        }
        return Ok(ExitCode::from(exit::FAILED_REQUESTS));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a record failed because the server is away or refusing ([`server_away`]).
fn server_refused(r: &crate::results::Record) -> bool {
    use crate::drive::backoff::server_away;
    let tp = r.two_point.as_ref();
    r.error.is_some()
        && r.trace
            .iter()
            .chain(tp.and_then(|d| d.trace_a.as_ref()))
            .chain(tp.and_then(|d| d.trace_b.as_ref()))
            .any(server_away)
}

/// Prompts of the sweep: exact-length text under `--tokenizer`, else the default.
#[cfg(feature = "tokenizer")]
pub(super) fn prompt_source(
    tokenizer: Option<&std::path::Path>,
    seed: u64,
) -> anyhow::Result<sweep::PromptSource> {
    Ok(match tokenizer {
        Some(p) => sweep::PromptSource::Tokenizer(std::sync::Arc::new(
            crate::plan::tokenizer::TextPrompts::from_file(p, seed)
                .map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?,
        )),
        None => sweep::PromptSource::Default,
    })
}

#[cfg(not(feature = "tokenizer"))]
pub(super) fn prompt_source(
    tokenizer: Option<&std::path::Path>,
    _seed: u64,
) -> anyhow::Result<sweep::PromptSource> {
    match tokenizer {
        Some(_) => anyhow::bail!(
            "--tokenizer needs a build with the tokenizer feature: cargo build --release -p bench-client --features tokenizer"
        ),
        None => Ok(sweep::PromptSource::Default),
    }
}
