//! Performance benchmarks of the mock server and the benchmark client, against their targets: the
//! mock paces 2,000 streams with a per-chunk error under 2 ms (p99) in under 200 MB; a paused-clock
//! sweep of the Kimi preset takes under 1 s; the client adds under 1 ms (p99) to the TTFT of one
//! stream and under 5 ms at 1,000 or 2,000 streams; its SSE layer decodes at least 1,000,000 events/s.
//! Run `cargo bench -p conformance --bench perf -- [SCENARIO ...] [--external]` (no scenario:
//! all but `soak`). Scenarios: `mock-streams`, `kimi-sweep-paused`, `client-overhead`, `sse-decode`,
//! `long-prompt`, `load-2000`, `twin-load`, `tcp-floor`, `engine-path`, `soak` (the mock's RSS over
//! 100,000 requests, see `soak`). `--external` runs the mock as a separate process (the `mock-server`
//! release binary, built with `cargo build --release -p mock-server` into the same target directory,
//! or the binary `PERF_MOCK_BIN` names) for `mock-streams`, `client-overhead` and `load-2000`; its
//! ground truth then comes from `/debug/requests/{rid}`. `PERF_OUTPUT_PER_REQUEST_S` overrides the
//! mock's output spread in `mock-streams`; `PERF_MOCK_WORKER_THREADS` sizes the external mock's
//! runtime and `PERF_MOCK_CPUS` pins it with `taskset -c` (run the bench itself under `taskset -c`
//! to pin the client apart). `PERF_CLIENT_STAMPING` (kernel, socket or task; default kernel) says
//! where the client stamps its streams (`bench-client --stamping`). `PERF_DUMP_PACING=FILE` writes every
//! chunk of `mock-streams` as CSV (modelled instant, output stage, connection; unix ns; request id).
//!
//! Each scenario prints a Markdown table (metric, target, measured) and writes its numbers as JSON to
//! `<target dir>/perf/<scenario>.json`. Nothing here asserts a target: the numbers are recorded in
//! BENCHMARKS.md as measured.
//!
//! Clocks: every instant is tokio's `Instant`. Wall time of paused-clock runs is read outside the
//! runtime, where tokio's clock is the real monotonic clock.
//!
//! One module per scenario (`mock_streams`, `kimi_sweep_paused`, `client_overhead`, `sse_decode`,
//! `long_prompt`, `load_2000`, `twin_load`, `tcp_floor`); shared: `report` (table and JSON), `machine` (CPU, memory and RSS
//! probes), `hiccup` (machine stalls), `mock` (the mock in-process or as a child), `client` (streams
//! through `bench_client::net`) and `lags` (the client against the mock's ground truth).

mod client;
mod hiccup;
mod lags;
mod machine;
mod mock;
mod report;

mod client_overhead;
mod engine_path;
mod kimi_sweep_paused;
mod load_2000;
mod long_prompt;
mod mock_streams;
mod soak;
mod sse_decode;
mod tcp_floor;
mod twin_load;

use anyhow::{bail, Result};

use machine::machine_line;

const SCENARIOS: &[&str] = &[
    "mock-streams",
    "kimi-sweep-paused",
    "client-overhead",
    "sse-decode",
    "long-prompt",
    "load-2000",
    "twin-load",
    "tcp-floor",
    "engine-path",
    "soak",
];
pub(crate) const DEMO: &str = "small-cpu-demo";
pub(crate) const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

fn main() {
    if let Err(e) = run() {
        eprintln!("perf: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let mut external = false;
    let mut chosen = Vec::new();
    for a in std::env::args().skip(1) {
        match a.as_str() {
            // cargo passes --bench to harness-less bench targets.
            "--bench" => {}
            "--external" => external = true,
            s if SCENARIOS.contains(&s) => chosen.push(s.to_string()),
            s => bail!(
                "unknown argument {s:?}; scenarios: {} (and --external)",
                SCENARIOS.join(", ")
            ),
        }
    }
    if chosen.is_empty() {
        // `soak` runs for up to an hour: only when named.
        chosen = SCENARIOS
            .iter()
            .filter(|s| **s != "soak")
            .map(|s| s.to_string())
            .collect();
    }
    println!("{}", machine_line());
    for s in chosen {
        let mut report = match s.as_str() {
            "mock-streams" => mock_streams::run(external)?,
            "kimi-sweep-paused" => kimi_sweep_paused::run()?,
            "client-overhead" => client_overhead::run(external)?,
            "sse-decode" => sse_decode::run()?,
            "long-prompt" => long_prompt::run()?,
            "load-2000" => load_2000::run(external)?,
            "twin-load" => twin_load::run()?,
            "tcp-floor" => tcp_floor::run()?,
            "engine-path" => engine_path::run()?,
            "soak" => soak::run()?,
            _ => continue,
        };
        report.print();
        report.save()?;
    }
    Ok(())
}
