//! `bench-client`: streaming LLM-serving benchmark. `bench-client sweep` (no `--url`: embedded mock),
//! `bench-client load`, `report`, `merge`. Parses the command line, sets up logging and hands over
//! to [`bench_client::cli::main`].

use std::process::ExitCode;

/// mimalloc: the engine path allocates and frees many small event and key buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    bench_client::cli::main()
}
