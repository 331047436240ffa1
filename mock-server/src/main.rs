//! The `mock-server` binary: parse SGLang-style flags, build a [`Config`], serve until SIGINT/SIGTERM
//! or an out-of-memory death (exit code 1). Run: `mock-server --preset kimi-k2.6-dflash-8xrtx-pro-6000`.
//!
//! [`Config`]: mock_server::Config

use clap::Parser;
use mock_server::cli::{run, Args};

/// mimalloc rather than glibc's malloc: glibc keeps an arena per thread that touched the heap
/// under contention, each holding its own free fragments, so a long run's RSS rose by 10-20 MiB at
/// unforeseeable moments (BENCHMARKS.md, `soak`); mimalloc returns freed pages to the system.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
