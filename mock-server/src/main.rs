//! The `mock-server` binary: parse SGLang-style flags, build a [`Config`], serve until SIGINT/SIGTERM
//! or an out-of-memory death (exit code 1). Run: `mock-server --preset kimi-k2.6-dflash-8xrtx-pro-6000`.
//!
//! [`Config`]: mock_server::Config

use clap::Parser;
use mock_server::cli::{run, Args};

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let code = match run(args).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}
