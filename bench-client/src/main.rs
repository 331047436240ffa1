//! `bench-client`: streaming LLM-serving benchmark. `bench-client sweep` (no `--url`: embedded mock),
//! `bench-client load`, `report`, `merge`. Parses the command line, sets up logging and hands over
//! to [`bench_client::cli::main`].

use std::process::ExitCode;

/// mimalloc: the engine path allocates and frees many small event and key buffers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The exit status of a command whose stdout was closed (`| head`), as a shell reports a tool
/// that SIGPIPE ended: 128 + 13.
const CLOSED_STDOUT_EXIT: i32 = 141;

/// A closed stdout ends the process quietly, as it ends other command-line tools, instead of a
/// panic in `print!`. Records are on disk as they arrive, so nothing is lost. (SIGPIPE stays
/// ignored: a socket whose peer went away must give an error, not end the process.)
fn end_quietly_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(CLOSED_STDOUT_EXIT);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    end_quietly_on_closed_stdout();
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
