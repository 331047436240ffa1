//! The command line: clap types and the wiring of each subcommand. Raw flags are checked and
//! turned into the library's configs here; the work itself is in `drive` and `report`.

#[cfg(feature = "embedded-mock")]
mod calibrate;
mod capacity;
mod common;
mod compare;
pub mod exit;
mod flags;
mod import;
mod load;
mod paths;
mod report;
mod sessions;
mod sweep;
mod trace;
#[cfg(feature = "embedded-mock")]
mod twin_table;

pub use common::parse_kv;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "embedded-mock")]
use calibrate::CalibrateArgs;
use capacity::CapacityArgs;
use compare::CompareArgs;
use import::ImportArgs;
use load::LoadArgs;
use report::{MergeArgs, ReportArgs};
use sweep::SweepArgs;

#[derive(Parser, Debug)]
#[command(
    name = "bench-client",
    version,
    about = "Streaming LLM-serving benchmark: TTFT, prefill and decode rates per context length"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Sweep context lengths, one isolated streaming request at a time.
    Sweep(Box<SweepArgs>),
    /// Redraw tables (and a plot) from results files.
    Report(ReportArgs),
    /// Serving benchmark under load: closed loop (--concurrency) or open loop (--request-rate).
    Load(Box<LoadArgs>),
    /// Merge load results from several processes or machines into one summary.
    Merge(MergeArgs),
    /// Compare two runs' results: NEW/BASE per statistic with a bootstrap interval and a verdict.
    Compare(CompareArgs),
    /// Import other tools' results (bench_serving, vLLM bench serve, guidellm, AIPerf) as records.
    Import(ImportArgs),
    /// Capacity under an SLO: step the open-loop request rate, bisect, and print the curve.
    Capacity(Box<CapacityArgs>),
    /// Fit the mock's cost model to a server's sweep (and load) results: write a twin preset.
    #[cfg(feature = "embedded-mock")]
    Calibrate(CalibrateArgs),
    /// A twin's closed-loop mean TTFT and TPOT for a table's rows or a grid of what-ifs.
    #[cfg(feature = "embedded-mock")]
    Predict(twin_table::PredictArgs),
}

/// Parse the command line and run it: what `main` does after setting up logging. A usage error
/// from clap exits with [`exit::USAGE`]; `--help` and `--version` with 0.
pub fn main() -> ExitCode {
    match Cli::try_parse() {
        Ok(cli) => run(cli),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            })
        }
    }
}

/// Run one parsed command line: builds the runtime, runs the subcommand, prints an error chain
/// and exits with the code [`exit`] defines for it.
pub fn run(cli: Cli) -> ExitCode {
    let simulate = match &cli.cmd {
        Cmd::Sweep(a) => a.simulate(),
        Cmd::Load(a) => a.simulate(),
        Cmd::Capacity(a) => a.simulate(),
        Cmd::Report(_) | Cmd::Merge(_) | Cmd::Compare(_) | Cmd::Import(_) => false,
        #[cfg(feature = "embedded-mock")]
        Cmd::Calibrate(_) | Cmd::Predict(_) => false,
    };
    // A simulated run is one thread on tokio's paused clock: time jumps to the next timer whenever
    // every task waits, so the mock's model time passes without waiting.
    let rt = if simulate {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let rt = match rt {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::OTHER);
        }
    };
    let result = match cli.cmd {
        Cmd::Sweep(a) => rt.block_on(sweep::run_sweep(*a)),
        Cmd::Report(a) => report::run_report(a),
        Cmd::Load(a) => rt.block_on(load::run_load(*a)),
        Cmd::Merge(a) => report::run_merge(a),
        Cmd::Compare(a) => compare::run_compare(a),
        Cmd::Import(a) => import::run_import(a),
        Cmd::Capacity(a) => rt.block_on(capacity::run_capacity(*a)),
        #[cfg(feature = "embedded-mock")]
        Cmd::Calibrate(a) => calibrate::run_calibrate(a),
        #[cfg(feature = "embedded-mock")]
        Cmd::Predict(a) => twin_table::run_predict(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}
