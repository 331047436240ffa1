//! Helpers shared by the integration tests: running the `bench-client` binary as a user does,
//! what it printed, fixtures, a paused runtime, a plain SGLang target, the real-time clock, and
//! small HTTP servers ([`server`]). Each test crate uses some of them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod server;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bench_client::{Dialect, Target};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_bench-client");

/// Run the binary with `args` (no `RUST_LOG`, so its log level is the default).
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

/// What the run wrote to stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What the run wrote to stdout.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The run's stdout as JSON; a panic that shows both streams when it is not.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            stderr(o)
        )
    })
}

/// Refused before anything starts: exit code 64, stderr begins with `error: ` and names `flag`, no
/// mock started, no file written at `out`. Returns the run.
pub fn refused_before_start(args: &[&str], flag: &str, out: &Path) -> Output {
    let o = run(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(64), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(flag),
        "{args:?}: {err}"
    );
    assert!(
        !err.contains("started the embedded mock"),
        "{args:?}: {err}"
    );
    assert!(!out.exists(), "{args:?} wrote {}", out.display());
    o
}

/// [`refused_before_start`], said in one `error:` line, nothing on stdout.
pub fn refused_usage(args: &[&str], flag: &str, out: &Path) {
    let o = refused_before_start(args, flag, out);
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line expected, got {err:?}");
    assert!(
        !err.contains(&format!("{flag}: {flag}")),
        "{args:?}: the flag is named twice: {err}"
    );
    assert!(o.stdout.is_empty(), "{args:?} printed {:?}", o.stdout);
}

/// Lines in a file (0 when absent).
pub fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.matches('\n').count())
        .unwrap_or(0)
}

/// A file of the workspace's `fixtures/<folder>/`.
pub fn fixture(folder: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(folder)
        .join(name)
}

/// A current-thread runtime on tokio's paused clock.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// An SGLang server at `url`, no model named, no API key.
pub fn sglang(url: &str) -> Target {
    Target {
        base_url: url.to_string(),
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    }
}

/// Now, as unix ns.
pub fn unix_ns() -> u64 {
    bench_client::net::unix::unix_ns_now()
}

/// Now, as unix ms.
pub fn unix_ms() -> u64 {
    bench_client::net::unix::unix_ms_now()
}
