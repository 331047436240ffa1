//! `bench-client`: streaming LLM-serving benchmark. `bench-client sweep` (no `--url`: embedded mock),
//! `bench-client load`, `report`, `merge`. Parses the command line, sets up logging and hands over
//! to [`bench_client::cli::run`].

use std::process::ExitCode;

use bench_client::cli::Cli;
use clap::Parser;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    bench_client::cli::run(cli)
}
