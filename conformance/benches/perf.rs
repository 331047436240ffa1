//! Performance benchmarks of the mock server and the benchmark client, with the targets of issues 3, 4
//! and 7. Run `cargo bench -p conformance --bench perf -- [SCENARIO ...] [--external]` (no scenario:
//! all). Scenarios: `mock-streams`, `kimi-sweep-paused`, `client-overhead`, `sse-decode`,
//! `long-prompt`, `load-2000`. `--external` runs the mock as a separate process (the `mock-server`
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

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bench_client::api::sse::SseDecoder;
use bench_client::api::Dialect;
use bench_client::drive::sweep::{run_sweep, OnCrash, SweepConfig};
use bench_client::measure::{measure, percentile};
use bench_client::net::stamped::Stamping;
use bench_client::net::{self, Target};
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{parse_contexts, DEFAULT_CONTEXTS};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::results::Method;
use bench_client::stream::StreamAssembler;
use bench_client::trace::RequestTrace;
use mock_server::{Config, MockServer, RequestTruth};
use serde_json::{json, Value};
use tokio::time::Instant;

const SCENARIOS: &[&str] = &[
    "mock-streams",
    "kimi-sweep-paused",
    "client-overhead",
    "sse-decode",
    "long-prompt",
    "load-2000",
];
const DEMO: &str = "small-cpu-demo";
const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

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
        chosen = SCENARIOS.iter().map(|s| s.to_string()).collect();
    }
    println!("{}", machine_line());
    for s in chosen {
        let mut report = match s.as_str() {
            "mock-streams" => mock_streams(external)?,
            "kimi-sweep-paused" => kimi_sweep_paused()?,
            "client-overhead" => client_overhead(external)?,
            "sse-decode" => sse_decode()?,
            "long-prompt" => long_prompt()?,
            "load-2000" => load_2000(external)?,
            _ => continue,
        };
        report.print();
        report.save()?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------------------------

struct Report {
    name: String,
    notes: Vec<String>,
    rows: Vec<[String; 3]>,
    data: Value,
}

impl Report {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            notes: Vec::new(),
            rows: Vec::new(),
            data: json!({ "scenario": name, "machine": machine_json() }),
        }
    }

    fn row(
        &mut self,
        metric: impl Into<String>,
        target: impl Into<String>,
        measured: impl Into<String>,
    ) {
        self.rows
            .push([metric.into(), target.into(), measured.into()]);
    }

    fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }

    fn set(&mut self, key: &str, v: Value) {
        self.data[key] = v;
    }

    fn print(&self) {
        println!("\n## {}\n", self.name);
        for n in &self.notes {
            println!("- {n}");
        }
        if !self.notes.is_empty() {
            println!();
        }
        println!("| metric | target | measured |");
        println!("|---|---|---|");
        for [m, t, v] in &self.rows {
            println!("| {m} | {t} | {v} |");
        }
    }

    fn save(&mut self) -> Result<()> {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|[m, t, v]| json!({"metric": m, "target": t, "measured": v}))
            .collect();
        self.data["rows"] = json!(rows);
        self.data["notes"] = json!(self.notes);
        let dir = target_dir()?.join("perf");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}.json", self.name));
        let text = serde_json::to_string_pretty(&self.data)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        println!("\n(JSON: {})", path.display());
        Ok(())
    }
}

/// `<target>/release/deps/perf-HASH` -> `<target>`.
fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    exe.ancestors()
        .nth(3)
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("unexpected bench executable path {}", exe.display()))
}

/// p50 / p99 / max of a sample, or why there is none.
#[derive(Clone, Copy, Debug)]
struct Dist {
    n: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

fn dist(v: &[f64]) -> Option<Dist> {
    Some(Dist {
        n: v.len(),
        p50: percentile(v, 50.0)?,
        p99: percentile(v, 99.0)?,
        max: percentile(v, 100.0)?,
    })
}

fn fmt_ms(d: Option<Dist>) -> String {
    match d {
        Some(d) => format!(
            "p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (n = {})",
            d.p50, d.p99, d.max, d.n
        ),
        None => "no samples".to_string(),
    }
}

fn dist_json(d: Option<Dist>) -> Value {
    match d {
        Some(d) => json!({"n": d.n, "p50_ms": d.p50, "p99_ms": d.p99, "max_ms": d.max}),
        None => Value::Null,
    }
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

// ---------------------------------------------------------------------------------------------
// The machine and the process
// ---------------------------------------------------------------------------------------------

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn mem_total_kb() -> Option<u64> {
    status_field("/proc/meminfo", "MemTotal")
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn machine_json() -> Value {
    json!({
        "nproc": nproc(),
        "cpu": cpu_model(),
        "mem_total_kb": mem_total_kb(),
        "loadavg_at_start": loadavg(),
    })
}

fn machine_line() -> String {
    format!(
        "machine: {} cpus, {}, {} MiB memory; load average {}; this process on CPUs {}, an \
         external mock on CPUs {}",
        nproc(),
        cpu_model(),
        mem_total_kb().map_or(0, |k| k / 1024),
        loadavg(),
        cpus_allowed(),
        std::env::var("PERF_MOCK_CPUS").unwrap_or_else(|_| "(not pinned)".into()),
    )
}

/// This process's CPU affinity, as /proc/self/status lists it.
fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .map(|l| {
                    l.trim_start_matches("Cpus_allowed_list:")
                        .trim()
                        .to_string()
                })
        })
        .unwrap_or_else(|| "(unknown)".into())
}

/// A `Name:   123 kB` field of a /proc status-like file, in kB.
fn status_field(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.split(':').next() == Some(field))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn proc_path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(p) => format!("/proc/{p}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// User + system CPU seconds of a process (clock ticks assumed 100 Hz, Linux's USER_HZ).
fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let s = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}

/// On-CPU time of the calling thread in ns (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Samples VmRSS of a process every 100 ms on a plain thread until stopped.
struct RssSampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<u64>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: Option<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let stop = stop.clone();
            let samples = samples.clone();
            let path = proc_path(pid, "status");
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kb) = status_field(&path, "VmRSS") {
                        samples.lock().unwrap_or_else(|p| p.into_inner()).push(kb);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Self {
            stop,
            samples,
            handle: Some(handle),
        }
    }

    /// Median and largest VmRSS sample, in MiB.
    fn finish(mut self) -> (Option<f64>, Option<f64>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let v: Vec<f64> = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|kb| *kb as f64 / 1024.0)
            .collect();
        (percentile(&v, 50.0), percentile(&v, 100.0))
    }
}

/// A thread that only sleeps, 1 ms at a time, and records how late it wakes up: a wake-up more
/// than 2 ms late means the machine itself stalled (the hypervisor took the virtual CPU away, or
/// every core was taken for that long). A thread that barely runs is woken first by Linux's
/// scheduler, so the processes under test rarely delay it; their own stalls do not show here.
struct HiccupMeter {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<f64>>>,
}

impl HiccupMeter {
    const PERIOD: Duration = Duration::from_millis(1);

    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut late_ms = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = std::time::Instant::now();
                    std::thread::sleep(Self::PERIOD);
                    let over = t.elapsed().saturating_sub(Self::PERIOD);
                    if over > Duration::from_millis(2) {
                        late_ms.push(over.as_secs_f64() * 1e3);
                    }
                }
                late_ms
            })
        };
        Self {
            stop,
            handle: Some(handle),
        }
    }

    /// The wake-ups more than 2 ms late, in ms.
    fn finish(mut self) -> Vec<f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// "N over 2 ms (M over 5 ms), largest X ms" for a hiccup meter's late wake-ups.
fn fmt_hiccups(late_ms: &[f64]) -> String {
    let over5 = late_ms.iter().filter(|m| **m > 5.0).count();
    let max = late_ms.iter().copied().fold(0.0, f64::max);
    format!(
        "{} over 2 ms ({over5} over 5 ms), largest {max:.1} ms",
        late_ms.len()
    )
}

fn mib(kb: Option<u64>) -> String {
    kb.map_or("unavailable".into(), |k| {
        format!("{:.1} MiB", k as f64 / 1024.0)
    })
}

// ---------------------------------------------------------------------------------------------
// The mock: in this process or as a child process
// ---------------------------------------------------------------------------------------------

enum Mock {
    InProcess(MockServer),
    Child {
        child: std::process::Child,
        url: String,
    },
}

impl Mock {
    /// Starts `preset` with `key=value` overrides on a free loopback port.
    async fn start(preset: &str, sets: &[(&str, String)], external: bool) -> Result<Mock> {
        if !external {
            let mut c = Config::preset(preset)?;
            c.host = "127.0.0.1".into();
            c.port = 0;
            for (k, v) in sets {
                c.set(k, v)?;
            }
            return Ok(Mock::InProcess(MockServer::start(c).await?));
        }
        // PERF_MOCK_BIN runs another build of the mock (for A/B runs against one client build).
        let bin = match std::env::var_os("PERF_MOCK_BIN") {
            Some(p) => std::path::PathBuf::from(p),
            None => target_dir()?.join("release").join("mock-server"),
        };
        if !bin.exists() {
            bail!(
                "{} not found: build it first with `cargo build --release -p mock-server` \
                 (same CARGO_TARGET_DIR)",
                bin.display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        // PERF_MOCK_CPUS pins the mock to those CPUs (`taskset -c`, which execs it in place, so
        // the child's pid is the mock's); pin this process apart with `taskset -c` on the bench.
        let mut cmd = match std::env::var("PERF_MOCK_CPUS") {
            Ok(cpus) => {
                let mut c = std::process::Command::new("taskset");
                c.args(["-c", &cpus]).arg(&bin);
                c
            }
            Err(_) => std::process::Command::new(&bin),
        };
        cmd.args([
            "--preset",
            preset,
            "--host",
            "127.0.0.1",
            "--debug-endpoints",
        ])
        .args(["--port", &port.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null());
        // TOKIO_WORKER_THREADS sizes this process's runtime (the client); the mock's runtime is sized
        // by PERF_MOCK_WORKER_THREADS, or by tokio's default (one worker per core).
        cmd.env_remove("TOKIO_WORKER_THREADS");
        if let Ok(n) = std::env::var("PERF_MOCK_WORKER_THREADS") {
            cmd.env("TOKIO_WORKER_THREADS", n);
        }
        for (k, v) in sets {
            cmd.arg("--set").arg(format!("{k}={v}"));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mock = Mock::Child {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !net::health(&http, &mock.url(), None).await {
            if Instant::now() > deadline {
                mock.stop().await;
                bail!("the mock-server process did not become healthy within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(mock)
    }

    fn url(&self) -> String {
        match self {
            Mock::InProcess(s) => s.url(),
            Mock::Child { url, .. } => url.clone(),
        }
    }

    /// The process that runs the mock (`None`: this one).
    fn pid(&self) -> Option<u32> {
        match self {
            Mock::InProcess(_) => None,
            Mock::Child { child, .. } => Some(child.id()),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Mock::InProcess(_) => "in-process (mock and load generator share one process)",
            Mock::Child { .. } => {
                "separate process (mock-server binary; this process is the client)"
            }
        }
    }

    async fn truth(&self, http: &reqwest::Client, rid: &str) -> Result<RequestTruth> {
        match self {
            Mock::InProcess(s) => s
                .truth()
                .request(rid)
                .ok_or_else(|| anyhow!("no ground truth for {rid}")),
            Mock::Child { url, .. } => {
                let r = http
                    .get(format!("{url}/debug/requests/{rid}"))
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("GET /debug/requests/{rid}: HTTP {}", r.status());
                }
                Ok(r.json::<RequestTruth>().await?)
            }
        }
    }

    async fn stop(self) {
        match self {
            Mock::InProcess(s) => s.shutdown().await,
            Mock::Child { mut child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn target(url: String) -> Target {
    Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    }
}

/// `n` streams at once through `net::send`, each with its own prompt.
async fn wave(
    http: &net::Http,
    target: &Target,
    tag: &str,
    n: usize,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<RequestTrace>> {
    let gen = PromptGen::new(0x5eed);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let http = http.clone();
        let target = target.clone();
        let prompt = Prompt::TokenIds(gen.token_ids(prompt_tokens, hash_index(tag, i)));
        let spec = RequestSpec::new(format!("{tag}-{i}"), prompt, max_tokens);
        tasks.push(tokio::spawn(async move {
            let (tr, sent) = net::send_traced(&http, &target, &spec, &Timeouts::default()).await;
            stamp_sent(&tr, sent);
            tr
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await?);
    }
    Ok(out)
}

/// `workers` tasks, each sending `rounds` requests one after another; returns (round, trace).
/// Output lengths vary from `max_tokens / 2` to `max_tokens * 3 / 2` by request, so the workers
/// drift apart after the first round instead of finishing and restarting in lockstep.
async fn closed_loop(
    http: &net::Http,
    target: &Target,
    tag: &str,
    workers: usize,
    rounds: usize,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<(usize, RequestTrace)>> {
    let gen = PromptGen::new(0x10ad);
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let (http, target, gen) = (http.clone(), target.clone(), gen.clone());
        let tag = tag.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(rounds);
            for k in 0..rounds {
                let i = w * rounds + k;
                let h = hash_index(&tag, i);
                let prompt = Prompt::TokenIds(gen.token_ids(prompt_tokens, h));
                let tokens = max_tokens / 2 + (h % u64::from(max_tokens + 1)) as u32;
                let spec = RequestSpec::new(format!("{tag}-{i}"), prompt, tokens);
                let (tr, sent) =
                    net::send_traced(&http, &target, &spec, &Timeouts::default()).await;
                stamp_sent(&tr, sent);
                out.push((k, tr));
            }
            out
        }));
    }
    let mut out = Vec::with_capacity(workers * rounds);
    for t in tasks {
        out.extend(t.await?);
    }
    Ok(out)
}

/// Real-time-clock instants (ns since the Unix epoch) at which the client started each request's
/// clock, by rid. With the mock's `received_unix_ns` they split the client's TTFT overhead into the
/// request's way in (send to the mock's handler) and the first chunk's way out.
fn sent_unix() -> &'static std::sync::Mutex<std::collections::HashMap<String, u64>> {
    static M: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Records, on the real-time clock, the instant the trace's times count from (its send, as
/// `net::send_traced` returns it): the real-time clock now, less the time since.
fn stamp_sent(tr: &RequestTrace, sent: Instant) {
    let started = unix_now_ns().saturating_sub(sent.elapsed().as_nanos() as u64);
    if let Ok(mut m) = sent_unix().lock() {
        m.insert(tr.rid.clone(), started);
    }
}

/// A prompt index unique to (tag, i), so no two requests of a run share a prefix.
fn hash_index(tag: &str, i: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (i as u64)
}

/// Client TTFT minus ground-truth TTFT (ms) per request, and every chunk's client arrival minus its
/// ground-truth emission (ms). Failed requests and chunk-count mismatches are counted.
struct Lags {
    /// Client TTFT minus the ground truth counted from the mock's handler (ms).
    first: Vec<f64>,
    /// Client TTFT minus the wire-level ground truth: from the request's arrival at the mock's
    /// socket (kernel receive timestamp) to the first chunk's hand-off to the connection (ms).
    first_wire: Vec<f64>,
    /// The mock's intake: its handler received the request minus the request's arrival at its
    /// socket (ms).
    intake_ms: Vec<f64>,
    /// Requests stamped with `stamp_send`: arrival at the mock's socket minus the client's send
    /// (ms).
    to_socket_ms: Vec<f64>,
    all: Vec<f64>,
    failed: usize,
    mismatched: usize,
    per_request_max_pacing_ms: Vec<f64>,
    /// Every streamed chunk's pacing error: sent by the mock's HTTP layer minus modelled (ms).
    pacing_ms: Vec<f64>,
    /// The same for first chunks only (they leave while other requests still arrive).
    first_pacing_ms: Vec<f64>,
    /// The same for every chunk after each stream's first.
    later_pacing_ms: Vec<f64>,
    /// Requests stamped with `stamp_send`: the mock's handler received the request minus the
    /// client's send, on the shared real-time clock (ms).
    way_in_ms: Vec<f64>,
    /// The same requests: client TTFT minus way in minus the first chunk's `sent_ns` (ms).
    way_out_ms: Vec<f64>,
    /// The same requests, every chunk: the client's arrival minus the mock's `sent_ns`, both on
    /// the real-time clock (the request's way in taken out), in ms.
    delivery_ms: Vec<f64>,
    /// Socket stamping: the client's time from the call to the write of the request's first byte,
    /// which is not in its TTFT (ms).
    send_delay_ms: Vec<f64>,
    /// How many traces had each kind of stamps.
    stamps: std::collections::BTreeMap<String, usize>,
}

async fn lags(mock: &Mock, http: &reqwest::Client, traces: &[RequestTrace]) -> Result<Lags> {
    let mut l = Lags {
        first: Vec::new(),
        first_wire: Vec::new(),
        intake_ms: Vec::new(),
        to_socket_ms: Vec::new(),
        all: Vec::new(),
        failed: 0,
        mismatched: 0,
        per_request_max_pacing_ms: Vec::new(),
        pacing_ms: Vec::new(),
        first_pacing_ms: Vec::new(),
        later_pacing_ms: Vec::new(),
        way_in_ms: Vec::new(),
        way_out_ms: Vec::new(),
        delivery_ms: Vec::new(),
        send_delay_ms: Vec::new(),
        stamps: Default::default(),
    };
    for tr in traces {
        *l.stamps.entry(tr.stamps.as_str().to_string()).or_default() += 1;
        let truth = mock.truth(http, &tr.rid).await?;
        l.per_request_max_pacing_ms
            .push(ns_to_ms(truth.max_pacing_error_ns));
        l.pacing_ms.extend(
            truth
                .chunks
                .iter()
                .filter_map(|c| c.sent_ns.map(|s| ns_to_ms(s) - ns_to_ms(c.model_ns))),
        );
        for (k, c) in truth.chunks.iter().enumerate() {
            if let Some(s) = c.sent_ns {
                let e = ns_to_ms(s) - ns_to_ms(c.model_ns);
                if k == 0 {
                    l.first_pacing_ms.push(e);
                } else {
                    l.later_pacing_ms.push(e);
                }
            }
        }
        let Ok(m) = measure(tr) else {
            l.failed += 1;
            continue;
        };
        let Some(t0) = truth.chunks.first() else {
            l.failed += 1;
            continue;
        };
        if let Some(d) = tr.send_delay_ns {
            l.send_delay_ms.push(ns_to_ms(d));
        }
        // The mock's emission of a chunk: when its HTTP layer handed the bytes to the connection.
        let sent = |c: &mock_server::ChunkTruth| ns_to_ms(c.sent_ns.unwrap_or(c.at_ns));
        l.first.push(m.ttft_ms - sent(t0));
        let stamped = sent_unix()
            .lock()
            .ok()
            .and_then(|m| m.get(&tr.rid).copied());
        let way_in = match (stamped, truth.received_unix_ns > 0) {
            (Some(s), true) => Some((truth.received_unix_ns as f64 - s as f64) / 1e6),
            _ => None,
        };
        if let Some(w) = way_in {
            l.way_in_ms.push(w);
            l.way_out_ms.push(m.ttft_ms - w - sent(t0));
        }
        if let Some(intake) = intake_ms(&truth) {
            l.intake_ms.push(intake);
            l.first_wire.push(m.ttft_ms - intake - sent(t0));
            if let Some(w) = way_in {
                l.to_socket_ms.push(w - intake);
            }
        }
        let client_chunks: Vec<u64> = tr
            .chunks
            .iter()
            .filter(|c| c.carries_output())
            .map(|c| c.at_ns)
            .collect();
        if client_chunks.len() != truth.chunks.len() {
            l.mismatched += 1;
            continue;
        }
        for (c, t) in client_chunks.iter().zip(&truth.chunks) {
            l.all.push(ns_to_ms(*c) - sent(t));
            if let Some(w) = way_in {
                l.delivery_ms.push(ns_to_ms(*c) - w - sent(t));
            }
        }
    }
    Ok(l)
}

/// The overhead rows of one set of requests: against the wire-level ground truth (the target),
/// split into the request's way to the mock's socket and the first chunk's way back, then against
/// the ground truth counted from the mock's handler, whose difference is the mock's intake.
fn overhead_rows(r: &mut Report, what: &str, target: &str, l: &Lags) {
    r.row(
        format!("overhead, {what}"),
        target,
        fmt_ms(dist(&l.first_wire)),
    );
    r.row("  traces by stamps", "-", fmt_counts(&l.stamps));
    r.row(
        "  of which the request's way to the mock's socket (socket arrival - client sent, real-time clock)",
        "-",
        fmt_ms(dist(&l.to_socket_ms)),
    );
    r.row(
        "  of which the first chunk's way back (client arrival - the mock's hand-off to the connection)",
        "-",
        fmt_ms(dist(&l.way_out_ms)),
    );
    if !l.send_delay_ms.is_empty() {
        r.row(
            "  not in it: the client's send delay (call to the write of the request's first byte)",
            "-",
            fmt_ms(dist(&l.send_delay_ms)),
        );
    }
    r.row(
        "  overhead counted from the mock's handler instead (the previous definition: adds the mock's intake)",
        "-",
        fmt_ms(dist(&l.first)),
    );
    r.row(
        "  the mock's intake: the request in its socket before the handler (received - socket arrival)",
        "-",
        fmt_ms(dist(&l.intake_ms)),
    );
}

/// How long the request waited between its arrival at the mock's socket and the mock's handler
/// (ms), where the mock recorded both.
fn intake_ms(truth: &mock_server::RequestTruth) -> Option<f64> {
    match (truth.socket_arrival_unix_ns, truth.received_unix_ns) {
        (Some(a), r) if r > 0 => Some((r as f64 - a as f64) / 1e6),
        _ => None,
    }
}

/// Where the client stamps its streams: `PERF_CLIENT_STAMPING` = kernel (the default), socket or
/// task.
fn fmt_counts(m: &std::collections::BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn stamping_name() -> &'static str {
    match bench_stamping() {
        Stamping::Kernel => "kernel",
        Stamping::Socket => "socket",
        Stamping::Task => "task",
    }
}

fn bench_stamping() -> Stamping {
    match std::env::var("PERF_CLIENT_STAMPING").as_deref() {
        Ok("socket") => Stamping::Socket,
        Ok("task") => Stamping::Task,
        _ => Stamping::Kernel,
    }
}

fn multi_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn paused_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?)
}

// ---------------------------------------------------------------------------------------------
// 1. mock-streams
// ---------------------------------------------------------------------------------------------

const STREAMS: usize = 2000;
const STREAM_PROMPT: u32 = 1024;
/// With small-cpu-demo's costs a decode step of 2,000 requests takes about 0.2 s of model time and
/// emits ~2.5 tokens per request (DFLASH acceptance), so 160 tokens last about 13 s.
const STREAM_OUTPUT: u32 = 160;

fn mock_streams(external: bool) -> Result<Report> {
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        // PERF_OUTPUT_PER_REQUEST_S overrides the preset's output spread (0 = a pass's chunks all
        // due at one instant) to measure how pacing depends on it.
        let mut sets = vec![("max_running_requests", STREAMS.to_string())];
        if let Ok(v) = std::env::var("PERF_OUTPUT_PER_REQUEST_S") {
            sets.push(("output_per_request_s", v));
        }
        let mock = Mock::start(DEMO, &sets, external).await?;
        let mut r = Report::new(if external {
            "mock-streams-external"
        } else {
            "mock-streams"
        });
        r.note(format!(
            "mock: {}; preset {DEMO} with max_running_requests = {STREAMS}; {STREAMS} streams sent \
             at once through bench_client::net::send (SGLang native, cumulative output), prompt \
             {STREAM_PROMPT} tokens, {STREAM_OUTPUT} output tokens; multi-thread tokio runtime with \
             {} worker threads; release build",
            mock.label(),
            nproc()
        ));
        let http = net::http_client_with(&Timeouts::default(), bench_stamping())?;
        let t = target(mock.url());
        let cpu0_self = cpu_seconds(None);
        let cpu0_mock = mock.pid().and_then(|p| cpu_seconds(Some(p)));
        let sampler = RssSampler::start(mock.pid());
        let hiccups = HiccupMeter::start();
        let started = Instant::now();
        let traces = wave(&http, &t, "streams", STREAMS, STREAM_PROMPT, STREAM_OUTPUT).await?;
        let wall = started.elapsed().as_secs_f64();
        let (rss_median, rss_max) = sampler.finish();
        let hiccups = hiccups.finish();
        let hwm = status_field(&proc_path(mock.pid(), "status"), "VmHWM");
        let cpu_self = cpu_seconds(None).zip(cpu0_self).map(|(a, b)| a - b);
        let cpu_mock = mock
            .pid()
            .and_then(|p| cpu_seconds(Some(p)))
            .zip(cpu0_mock)
            .map(|(a, b)| a - b);

        let l = lags(&mock, &http, &traces).await?;
        // PERF_DUMP_PACING=FILE writes every chunk as CSV: modelled instant, the output stage's
        // hand-off, the HTTP layer's hand-off to the connection (unix ns), request id.
        if let Ok(path) = std::env::var("PERF_DUMP_PACING") {
            let mut out = String::new();
            for tr in &traces {
                let t = mock.truth(&http, &tr.rid).await?;
                for c in &t.chunks {
                    out.push_str(&format!(
                        "{},{},{},{}\n",
                        t.received_unix_ns + c.model_ns,
                        t.received_unix_ns + c.at_ns,
                        t.received_unix_ns + c.sent_ns.unwrap_or(0),
                        tr.rid
                    ));
                }
            }
            std::fs::write(path, out)?;
        }
        let ok = traces.len() - l.failed;
        r.row("streams completed", format!("{STREAMS}"), format!("{ok} ({} failed)", l.failed));
        r.row("run wall time", "~10-20 s", format!("{wall:.2} s"));
        r.row(
            "pacing error per chunk (sent by the mock's HTTP layer - modelled)",
            "p99 < 2 ms",
            fmt_ms(dist(&l.pacing_ms)),
        );
        r.row(
            "  of which first chunks (sent while other requests still arrive)",
            "-",
            fmt_ms(dist(&l.first_pacing_ms)),
        );
        r.row(
            "  of which every later chunk (all streams running)",
            "-",
            fmt_ms(dist(&l.later_pacing_ms)),
        );
        r.row(
            "largest pacing error per request",
            "-",
            fmt_ms(dist(&l.per_request_max_pacing_ms)),
        );
        r.row(
            "chunk lag from the client's send (client arrival - mock emission, each on its own \
             process's clock: includes the request's way in, queued behind the other uploads)",
            "-",
            fmt_ms(dist(&l.all)),
        );
        r.row(
            "chunk delivery (client arrival - mock emission on the shared real-time clock)",
            "-",
            fmt_ms(dist(&l.delivery_ms)),
        );
        r.row(
            "peak RSS (VmHWM) of the mock's process",
            "< 200 MB",
            mib(hwm),
        );
        r.row(
            "RSS during the run (VmRSS, sampled every 100 ms)",
            "< 200 MB",
            format!(
                "median {}, max {}",
                rss_median.map_or("n/a".into(), |m| format!("{m:.1} MiB")),
                rss_max.map_or("n/a".into(), |m| format!("{m:.1} MiB"))
            ),
        );
        r.row(
            "CPU of the bench process (user + system)",
            "-",
            cpu_self.map_or("n/a".into(), |c| format!("{c:.2} s ({:.0}% of one core)", 100.0 * c / wall)),
        );
        if let Some(c) = cpu_mock {
            r.row(
                "CPU of the mock process (user + system)",
                "-",
                format!("{c:.2} s ({:.0}% of one core)", 100.0 * c / wall),
            );
        }
        r.row(
            "machine stalls during the run (wake-ups of a thread sleeping 1 ms at a time, late by)",
            "-",
            fmt_hiccups(&hiccups),
        );
        if l.mismatched > 0 {
            r.note(format!(
                "{} streams had a different number of output chunks at the client than in ground truth",
                l.mismatched
            ));
        }
        r.set("wall_s", json!(wall));
        r.set("pacing_per_chunk", dist_json(dist(&l.pacing_ms)));
        r.set("pacing_first_chunks", dist_json(dist(&l.first_pacing_ms)));
        r.set("pacing_later_chunks", dist_json(dist(&l.later_pacing_ms)));
        r.set("pacing_per_request_max", dist_json(dist(&l.per_request_max_pacing_ms)));
        r.set("chunk_lag", dist_json(dist(&l.all)));
        r.set("chunk_delivery", dist_json(dist(&l.delivery_ms)));
        r.set("first_chunk_lag", dist_json(dist(&l.first)));
        r.set("vm_hwm_kb", json!(hwm));
        r.set("rss_median_mib", json!(rss_median));
        r.set("rss_max_mib", json!(rss_max));
        r.set("cpu_self_s", json!(cpu_self));
        r.set("cpu_mock_s", json!(cpu_mock));
        r.set("machine_stalls_ms", json!(hiccups));
        r.set("failed", json!(l.failed));
        r.set("external", json!(external));
        mock.stop().await;
        Ok(r)
    })
}

// ---------------------------------------------------------------------------------------------
// 2. kimi-sweep-paused
// ---------------------------------------------------------------------------------------------

const SWEEP_REPEATS: usize = 3;

fn kimi_sweep_paused() -> Result<Report> {
    let mut r = Report::new("kimi-sweep-paused");
    let contexts = parse_contexts(DEFAULT_CONTEXTS).map_err(|e| anyhow!(e))?;
    r.note(format!(
        "preset {KIMI} with mem_fraction_static 0.93, chunked_prefill_size 4096, expandable_segments; \
         contexts {DEFAULT_CONTEXTS}; runs 1, warm-up 1 (the CLI default), 64 output tokens; \
         bench_client::drive::sweep::run_sweep (net::send over loopback HTTP, JSONL records) on a \
         current-thread runtime with a paused clock; wall time includes mock start-up; {SWEEP_REPEATS} repeats"
    ));
    let mut walls = Vec::new();
    let mut simulated = Vec::new();
    let mut records = 0;
    let mut failures = 0;
    let mut decode = Vec::new();
    let mut errors = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..SWEEP_REPEATS {
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("kimi.jsonl");
        let rt = paused_runtime()?;
        // Outside the runtime tokio's clock is the real one.
        let wall0 = Instant::now();
        let cpu0 = cpu_seconds(None);
        let (sim, recs) = rt.block_on(async {
            let sim0 = Instant::now();
            let sets = [
                ("mem_fraction_static", "0.93".to_string()),
                ("chunked_prefill_size", "4096".to_string()),
                ("expandable_segments", "true".to_string()),
            ];
            let mock = Mock::start(KIMI, &sets, false).await?;
            let cfg = SweepConfig {
                // The paused clock: the kernel's real-time stamps mean nothing on it.
                stamping: Stamping::Socket,
                target: target(mock.url()),
                contexts: contexts.clone(),
                output_tokens: 64,
                runs: 1,
                warmup: 1,
                method: Method::Streaming,
                flush_cache: false,
                two_point_tokens: (1, 17),
                out: out.clone(),
                resume: false,
                seed: 7,
                token_id_range: bench_client::plan::prompt::DEFAULT_ID_RANGE,
                return_token_ids: false,
                timeouts: Timeouts::default(),
                on_crash: OnCrash::Stop,
                crash_wait: Duration::from_secs(0),
                progress: false,
                command: "perf kimi-sweep-paused".into(),
            };
            let outcome = run_sweep(&cfg).await?;
            mock.stop().await;
            anyhow::Ok((sim0.elapsed().as_secs_f64(), outcome.records))
        })?;
        walls.push(wall0.elapsed().as_secs_f64());
        if let Some(c) = cpu_seconds(None).zip(cpu0).map(|(a, b)| a - b) {
            cpus.push(c);
        }
        errors = recs
            .iter()
            .filter_map(|x| {
                x.error
                    .as_ref()
                    .map(|e| format!("{}: {} ({})", x.context_tokens, e.kind, e.message))
            })
            .collect::<Vec<_>>();
        simulated.push(sim);
        records = recs.len();
        failures = recs.iter().filter(|x| x.error.is_some()).count();
        decode = recs
            .iter()
            .map(|x| (x.context_tokens, x.decode_tok_s))
            .collect::<Vec<_>>();
    }
    let wd = percentile(&walls, 50.0);
    let wmax = percentile(&walls, 100.0);
    r.row(
        "wall time of the full sweep",
        "< 1 s",
        format!(
            "median {}, max {} over {SWEEP_REPEATS} runs",
            wd.map_or("n/a".into(), |w| format!("{w:.3} s")),
            wmax.map_or("n/a".into(), |w| format!("{w:.3} s"))
        ),
    );
    r.row(
        "CPU time of the process (user + system) per sweep",
        "-",
        percentile(&cpus, 50.0).map_or("n/a".into(), |c| format!("median {c:.2} s")),
    );
    for e in &errors {
        r.note(format!("failed point: {e}"));
    }
    r.row(
        "simulated (paused-clock) time",
        "-",
        percentile(&simulated, 50.0).map_or("n/a".into(), |s| format!("{s:.1} s")),
    );
    r.row(
        "records / failed",
        format!("{}", contexts.len()),
        format!("{records} / {failures}"),
    );
    let at = |c: u32| {
        decode
            .iter()
            .find(|(x, _)| *x == c)
            .and_then(|(_, d)| *d)
            .map_or("n/a".to_string(), |d| format!("{d:.1} tok/s"))
    };
    r.row(
        "decode rate at 1k / 8k (sanity: story says ~109 / ~13.8)",
        "-",
        format!("{} / {}", at(1000), at(8000)),
    );
    r.set("wall_s", json!(walls));
    r.set("simulated_s", json!(simulated));
    r.set("records", json!(records));
    r.set("errors", json!(errors));
    r.set("cpu_s", json!(cpus));
    r.set("failed", json!(failures));
    r.set(
        "decode_tok_s",
        json!(decode
            .iter()
            .map(|(c, d)| json!({"context": c, "decode_tok_s": d}))
            .collect::<Vec<_>>()),
    );
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// 3. client-overhead
// ---------------------------------------------------------------------------------------------

const SEQUENTIAL: usize = 300;
const CONCURRENT: usize = 1000;
const ROUNDS: usize = 6;

fn client_overhead(external: bool) -> Result<Report> {
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        let mut r = Report::new(if external {
            "client-overhead-external"
        } else {
            "client-overhead"
        });
        let http = net::http_client_with(&Timeouts::default(), bench_stamping())?;

        // One stream at a time.
        let mock = Mock::start(DEMO, &[], external).await?;
        r.note(format!(
            "mock: {}; preset {DEMO}; client stamping: {} (PERF_CLIENT_STAMPING); overhead = client \
             TTFT minus ground-truth TTFT (from the request's arrival at the mock's socket, the \
             kernel's receive timestamp, to the mock's hand-off of the first chunk to the connection, \
             sent_ns). The client's TTFT runs from its send (socket stamping: the write of the \
             request's first byte; task stamping: the hand-off to reqwest) to the first chunk's \
             arrival (kernel stamping: the kernel's receive timestamp of the read that brought it; \
             socket: that read; task: the request task's turn). The time the request waited in the \
             mock's socket is server time",
            mock.label(),
            stamping_name()
        ));
        let t = target(mock.url());
        let gen = PromptGen::new(11);
        let mut seq = Vec::new();
        for i in 0..(SEQUENTIAL + 10) {
            let spec = RequestSpec::new(
                format!("seq-{i}"),
                Prompt::TokenIds(gen.token_ids(256, i as u64)),
                8,
            );
            let (tr, sent) = net::send_traced(&http, &t, &spec, &Timeouts::default()).await;
            stamp_sent(&tr, sent);
            // The first ten requests warm the connection and are not measured.
            if i >= 10 {
                seq.push(tr);
            }
        }
        let l1 = lags(&mock, &http, &seq).await?;
        mock.stop().await;
        overhead_rows(
            &mut r,
            &format!("1 stream ({SEQUENTIAL} sequential requests, 256-token prompt, 8 tokens)"),
            "p99 < 1 ms",
            &l1,
        );
        r.row("failed requests (1 stream)", "0", format!("{}", l1.failed));

        // Many streams at once: a closed loop of CONCURRENT workers, each sending ROUNDS requests
        // back to back. The first round starts all streams at one instant (a synchronized burst
        // of connections, uploads and first chunks); later rounds are the steady state of
        // CONCURRENT streams in flight, where the target applies. Both are reported.
        let sets = [("max_running_requests", CONCURRENT.to_string())];
        let mock = Mock::start(DEMO, &sets, external).await?;
        let t = target(mock.url());
        let rounds = closed_loop(&http, &t, "conc", CONCURRENT, ROUNDS, 256, 32).await?;
        let burst: Vec<RequestTrace> = rounds.iter().filter(|(k, _)| *k == 0).map(|(_, tr)| tr.clone()).collect();
        let steady: Vec<RequestTrace> = rounds.iter().filter(|(k, _)| *k > 0).map(|(_, tr)| tr.clone()).collect();
        let lb = lags(&mock, &http, &burst).await?;
        let lc = lags(&mock, &http, &steady).await?;
        mock.stop().await;
        overhead_rows(
            &mut r,
            &format!(
                "{CONCURRENT} concurrent streams, steady state (closed loop of {CONCURRENT} \
                 workers, rounds 2..{ROUNDS}, 256-token prompt, 16 to 48 tokens, \
                 max_running_requests = {CONCURRENT})"
            ),
            "p99 < 5 ms",
            &lc,
        );
        r.row(
            format!("overhead, first round ({CONCURRENT} streams started at one instant)"),
            "-",
            fmt_ms(dist(&lb.first_wire)),
        );
        r.row(
            format!("every chunk's lag at {CONCURRENT} streams, steady state (from the client's send; includes the request's way in)"),
            "-",
            fmt_ms(dist(&lc.all)),
        );
        r.row(
            format!("every chunk's delivery at {CONCURRENT} streams, steady state (client arrival - mock emission on the shared real-time clock)"),
            "-",
            fmt_ms(dist(&lc.delivery_ms)),
        );
        r.row(
            format!("the mock's pacing error per chunk at {CONCURRENT} streams, steady state (sent - modelled)"),
            "-",
            fmt_ms(dist(&lc.pacing_ms)),
        );
        r.row(
            format!("failed requests ({CONCURRENT} streams)"),
            "0",
            format!("{}", lc.failed + lb.failed),
        );
        r.set("concurrent_first_round", dist_json(dist(&lb.first_wire)));
        r.set("one_stream", dist_json(dist(&l1.first_wire)));
        r.set("concurrent_first", dist_json(dist(&lc.first_wire)));
        r.set("one_stream_from_handler", dist_json(dist(&l1.first)));
        r.set("concurrent_first_from_handler", dist_json(dist(&lc.first)));
        r.set("concurrent_intake", dist_json(dist(&lc.intake_ms)));
        r.set("concurrent_all_chunks", dist_json(dist(&lc.all)));
        r.set("external", json!(external));
        Ok(r)
    })
}

// ---------------------------------------------------------------------------------------------
// 4. sse-decode
// ---------------------------------------------------------------------------------------------

/// The exact bytes of one stream from the mock, captured under a paused clock.
async fn capture(
    mock: &Mock,
    dialect: Dialect,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<u8>> {
    let spec = RequestSpec::new(
        format!("capture-{}", dialect.as_str()),
        Prompt::TokenIds(PromptGen::new(3).token_ids(prompt_tokens, 0)),
        max_tokens,
    );
    let body = dialect
        .build_body(&spec, Some("mock/small-cpu-demo"))
        .map_err(|e| anyhow!(e))?;
    let resp = reqwest::Client::new()
        .post(format!("{}{}", mock.url(), dialect.path()))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("capture {}: HTTP {}", dialect.as_str(), resp.status());
    }
    Ok(resp.bytes().await?.to_vec())
}

/// One read per SSE event, as the mock (and uvicorn) write them.
fn per_event_reads(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < stream.len() {
        if stream[i] == b'\n' && stream[i + 1] == b'\n' {
            out.push(stream[start..i + 2].to_vec());
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < stream.len() {
        out.push(stream[start..].to_vec());
    }
    out
}

fn fixed_reads(stream: &[u8], size: usize) -> Vec<Vec<u8>> {
    stream.chunks(size).map(<[u8]>::to_vec).collect()
}

/// Events per wall second and per on-CPU second of this thread through `f`, repeated until the
/// thread has run at least `min_cpu_s` seconds on a CPU (other load on the machine stretches the
/// wall time, not the CPU time). Errors when `f` does not see the expected events.
fn rate(
    events_per_pass: usize,
    min_cpu_s: f64,
    mut f: impl FnMut() -> usize,
) -> Result<(f64, Option<f64>)> {
    // One untimed pass warms caches.
    std::hint::black_box(f());
    let t0 = Instant::now();
    let c0 = thread_cpu_ns();
    let mut passes = 0usize;
    loop {
        let seen = std::hint::black_box(f());
        if seen != events_per_pass {
            bail!("a pass decoded {seen} events, expected {events_per_pass}");
        }
        passes += 1;
        if passes % 64 != 0 {
            continue;
        }
        let wall = t0.elapsed().as_secs_f64();
        let cpu = thread_cpu_ns()
            .zip(c0)
            .map(|(a, b)| a.saturating_sub(b) as f64 / 1e9);
        let done = match cpu {
            Some(c) => c >= min_cpu_s,
            None => wall >= min_cpu_s,
        };
        if done {
            let n = (passes * events_per_pass) as f64;
            return Ok((n / wall, cpu.filter(|c| *c > 0.0).map(|c| n / c)));
        }
    }
}

fn per_s(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.0}"))
}

fn sse_decode() -> Result<Report> {
    let mut r = Report::new("sse-decode");
    let rt = paused_runtime()?;
    let (native, openai) = rt.block_on(async {
        let sets = [("enable_cache_report", "true".to_string())];
        let mock = Mock::start(DEMO, &sets, false).await?;
        let native = capture(&mock, Dialect::Sglang, 1000, 128).await?;
        let openai = capture(&mock, Dialect::OpenAi, 1000, 128).await?;
        mock.stop().await;
        anyhow::Ok((native, openai))
    })?;
    drop(rt);
    r.note(
        "streams captured byte-for-byte from the mock (preset small-cpu-demo, DFLASH speculative \
         chunks, 1000-token prompt, 128 output tokens): SGLang native /generate with cumulative text, \
         output_ids and meta_info; OpenAI /v1/completions with stream_options include_usage + \
         continuous_usage_stats. Decoded on the main thread (one core), each pass a fresh decoder over \
         the whole stream, repeated until the thread has had >= 1 s of CPU (read from /proc/thread-self/schedstat, so \
         other load on the machine does not lower the per-CPU-second rate)",
    );
    let min_s = 1.0;
    let mut data = Vec::new();
    for (name, dialect, bytes) in [
        ("SGLang native cumulative", Dialect::Sglang, &native),
        ("OpenAI continuous-usage", Dialect::OpenAi, &openai),
    ] {
        let events = SseDecoder::new().push(bytes).len();
        if events == 0 {
            bail!("captured {name} stream has no events");
        }
        let avg = bytes.len() as f64 / events as f64;
        for (reads_name, reads) in [
            ("one read per event", per_event_reads(bytes)),
            ("4 KiB reads", fixed_reads(bytes, 4096)),
        ] {
            let (sse_wall, sse_cpu) = rate(events, min_s, || {
                let mut d = SseDecoder::new();
                let mut out = Vec::new();
                let mut n = 0;
                for rd in &reads {
                    d.push_into(rd, &mut out);
                    n += out.len();
                    out.clear();
                }
                n
            })?;
            let (full_wall, full_cpu) = rate(events, min_s, || {
                let mut a = StreamAssembler::new(dialect);
                for (i, rd) in reads.iter().enumerate() {
                    a.push(rd, i as u64);
                }
                a.chunks.len() + usize::from(a.done_ns.is_some())
            })?;
            r.row(
                format!("{name}, {reads_name}: SSE layer"),
                ">= 1,000,000 events/s",
                format!(
                    "{} events per CPU-second ({:.0} MB/s; {} per wall second; {events} events, {avg:.0} B/event)",
                    per_s(sse_cpu),
                    sse_cpu.unwrap_or(sse_wall) * avg / 1e6,
                    per_s(Some(sse_wall)),
                ),
            );
            r.row(
                format!("{name}, {reads_name}: SSE + JSON dialect decoding"),
                "-",
                format!(
                    "{} events per CPU-second ({:.0} MB/s; {} per wall second)",
                    per_s(full_cpu),
                    full_cpu.unwrap_or(full_wall) * avg / 1e6,
                    per_s(Some(full_wall)),
                ),
            );
            data.push(
                json!({"stream": name, "reads": reads_name, "events": events,
                "bytes_per_event": avg, "sse_events_per_wall_s": sse_wall,
                "sse_events_per_cpu_s": sse_cpu, "sse_dialect_events_per_wall_s": full_wall,
                "sse_dialect_events_per_cpu_s": full_cpu}),
            );
        }
    }
    r.set("results", json!(data));
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// 5. long-prompt
// ---------------------------------------------------------------------------------------------

const LONG: u32 = 185_000;
const LONG_REQUESTS: usize = 10;

fn long_prompt() -> Result<Report> {
    let mut r = Report::new("long-prompt");
    r.note(format!(
        "{LONG}-token token-id prompts (unique per request), preset {DEMO}, 16 output tokens. \
         Serialisation = Dialect::build_body + serde_json::to_vec, the work net::send does before \
         it starts the clock"
    ));
    // Serialisation cost.
    let gen = PromptGen::new(21);
    for dialect in [Dialect::Sglang, Dialect::OpenAi] {
        let mut times = Vec::new();
        let mut size = 0;
        for i in 0..20 {
            let spec = RequestSpec::new(
                format!("ser-{i}"),
                Prompt::TokenIds(gen.token_ids(LONG, i)),
                16,
            );
            let t0 = Instant::now();
            let body = dialect
                .build_body(&spec, Some("m"))
                .map_err(|e| anyhow!(e))?;
            let bytes = serde_json::to_vec(&body)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
            size = bytes.len();
            std::hint::black_box(bytes);
        }
        r.row(
            format!(
                "body build + serialise, {} ({:.2} MB)",
                dialect.as_str(),
                size as f64 / 1e6
            ),
            "- (outside the clock)",
            fmt_ms(dist(&times)),
        );
        r.set(
            &format!("serialise_{}", dialect.as_str()),
            dist_json(dist(&times)),
        );
        r.set(&format!("body_bytes_{}", dialect.as_str()), json!(size));
    }

    // Paused clock: the client's TTFT against ground truth, exactly.
    let rt = paused_runtime()?;
    let paused_diff = rt.block_on(async {
        let mock = Mock::start(DEMO, &[], false).await?;
        // The paused clock: the kernel's real-time stamps mean nothing on it.
        let http = net::http_client_with(&Timeouts::default(), Stamping::Socket)?;
        let spec = RequestSpec::new(
            "long-paused",
            Prompt::TokenIds(gen.token_ids(LONG, 999)),
            16,
        );
        let tr = net::send(&http, &target(mock.url()), &spec, &Timeouts::default()).await;
        let l = lags(&mock, &http, &[tr]).await?;
        mock.stop().await;
        anyhow::Ok(l.first)
    })?;
    drop(rt);
    r.row(
        "TTFT - ground truth, paused clock (1 request)",
        "0",
        paused_diff
            .first()
            .map_or("request failed".into(), |d| format!("{:.6} ms", d)),
    );

    // Real time: long prompts against short ones.
    let rt = multi_thread_runtime()?;
    let (long, short, ttft) = rt.block_on(async {
        let mock = Mock::start(DEMO, &[], false).await?;
        let http = net::http_client_with(&Timeouts::default(), bench_stamping())?;
        let t = target(mock.url());
        let mut long = Vec::new();
        let mut short = Vec::new();
        for i in 0..(LONG_REQUESTS + 1) {
            let a = RequestSpec::new(
                format!("long-{i}"),
                Prompt::TokenIds(gen.token_ids(LONG, 1000 + i as u64)),
                16,
            );
            let b = RequestSpec::new(
                format!("short-{i}"),
                Prompt::TokenIds(gen.token_ids(1000, 2000 + i as u64)),
                16,
            );
            let ta = net::send(&http, &t, &a, &Timeouts::default()).await;
            let tb = net::send(&http, &t, &b, &Timeouts::default()).await;
            // The first pair warms the connection.
            if i > 0 {
                long.push(ta);
                short.push(tb);
            }
        }
        let ll = lags(&mock, &http, &long).await?;
        let ls = lags(&mock, &http, &short).await?;
        let ttft: Vec<f64> = long
            .iter()
            .filter_map(|t| measure(t).ok())
            .map(|m| m.ttft_ms)
            .collect();
        mock.stop().await;
        anyhow::Ok((ll, ls, ttft))
    })?;
    r.row(
        format!("TTFT - ground truth, real time, {LONG}-token prompt ({LONG_REQUESTS} requests)"),
        "small; no serialisation inside",
        fmt_ms(dist(&long.first)),
    );
    r.row(
        format!("TTFT - ground truth, real time, 1000-token prompt ({LONG_REQUESTS} requests)"),
        "-",
        fmt_ms(dist(&short.first)),
    );
    r.row(
        format!("client TTFT, {LONG}-token prompt (for scale)"),
        "-",
        fmt_ms(dist(&ttft)),
    );
    r.row(
        "failed requests",
        "0",
        format!("{}", long.failed + short.failed),
    );
    r.set("paused_diff_ms", json!(paused_diff));
    r.set("real_long_diff", dist_json(dist(&long.first)));
    r.set("real_short_diff", dist_json(dist(&short.first)));
    r.set("real_long_ttft", dist_json(dist(&ttft)));
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// 6. load-2000
// ---------------------------------------------------------------------------------------------

const LOAD_CONCURRENCY: u32 = 2000;
const LOAD_REQUESTS: u64 = 8000;

/// `bench_client::drive::run_load`, closed loop at 2,000 concurrent streams, against the mock; each
/// record's TTFT against the mock's ground truth (from the request's arrival at the mock's socket to
/// the instant its HTTP layer sent the first chunk).
fn load_2000(external: bool) -> Result<Report> {
    use bench_client::drive::LoadConfig;
    use bench_client::plan::{Arrivals, LenDist, Schedule, Shard, Stop, Workload};
    use bench_client::report::Slo;
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        let sets = [("max_running_requests", "2048".to_string())];
        let mock = Mock::start(DEMO, &sets, external).await?;
        let mut r = Report::new(if external { "load-2000-external" } else { "load-2000" });
        r.note(format!(
            "mock: {}; preset {DEMO} with max_running_requests = 2048; bench_client::drive::run_load, \
             closed loop at concurrency {LOAD_CONCURRENCY}, {LOAD_REQUESTS} requests, input 256 \
             tokens, output uniform 32..96 tokens (so the workers drift apart after the first round); \
             client stamping: {} (PERF_CLIENT_STAMPING); overhead = the record's TTFT (from its \
             send; the time from its scheduled start to the send is client_queue_time) minus the \
             ground truth (from the request's arrival at the mock's socket to the first chunk's \
             sent_ns)",
            mock.label(),
            stamping_name()
        ));
        let dir = tempfile::tempdir()?;
        let out = dir.path().join("load.jsonl");
        let cfg = LoadConfig {
            stamping: bench_stamping(),
            target: target(mock.url()),
            timeouts: Timeouts::default(),
            schedule: Schedule::new(
                Arrivals::Closed { concurrency: LOAD_CONCURRENCY },
                Stop::Requests(LOAD_REQUESTS),
                5,
            )
            .map_err(|e| anyhow!(e))?,
            workload: Workload::Random {
                input: LenDist::Fixed { n: 256 },
                output: LenDist::Uniform { lo: 32, hi: 96 },
            },
            warmup: 0,
            max_concurrency: None,
            shard: Shard::default(),
            start_at_unix_ms: None,
            prompt_salt: Some(5),
            out: out.clone(),
            resume: false,
            seed: 5,
            token_id_range: (100, 30000),
            slo: Slo::default(),
            scrape_metrics: false,
            progress: false,
            command: "perf load-2000".into(),
        };
        let cpu0 = cpu_seconds(None);
        let started = Instant::now();
        let outcome = bench_client::drive::run_load(&cfg).await?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(None).zip(cpu0).map(|(a, b)| a - b);
        let recs = bench_client::results::read_records(&out)?;
        let http = reqwest::Client::new();
        let (mut all, mut steady, mut queue) = (Vec::new(), Vec::new(), Vec::new());
        let mut steady_queue = Vec::new();
        let mut stamps = std::collections::BTreeMap::<String, usize>::new();
        let (mut steady_handler, mut steady_intake) = (Vec::new(), Vec::new());
        let mut first_pacing = Vec::new();
        let mut failed = 0usize;
        for rec in &recs {
            if let Some(t) = &rec.trace {
                *stamps.entry(t.stamps.as_str().to_string()).or_default() += 1;
            }
            let (Some(ttft), Some(load)) = (rec.ttft_ms, rec.load.as_ref()) else {
                failed += 1;
                continue;
            };
            let truth = mock.truth(&http, &rec.rid).await?;
            let Some(first) = truth.chunks.first() else {
                failed += 1;
                continue;
            };
            let lag = ttft - ns_to_ms(first.sent_ns.unwrap_or(first.at_ns));
            let intake = intake_ms(&truth);
            if let Some(i) = intake {
                all.push(lag - i);
            }
            if load.index >= u64::from(LOAD_CONCURRENCY) {
                if let Some(i) = intake {
                    steady.push(lag - i);
                    steady_intake.push(i);
                }
                steady_handler.push(lag);
                if let Some(s) = first.sent_ns {
                    first_pacing.push(ns_to_ms(s) - ns_to_ms(first.model_ns));
                }
            }
            queue.push(ns_to_ms(load.client_queue_ns));
            if load.index >= u64::from(LOAD_CONCURRENCY) {
                steady_queue.push(ns_to_ms(load.client_queue_ns));
            }
        }
        mock.stop().await;
        r.row("requests", format!("{LOAD_REQUESTS}"), format!("{} written, {failed} failed or without a first chunk", outcome.written));
        r.row(
            "TTFT - ground truth, requests after the first 2,000 (steady state)",
            "p99 < 5 ms",
            fmt_ms(dist(&steady)),
        );
        r.row("  records by stamps", "-", fmt_counts(&stamps));
        r.row(
            "  the same counted from the mock's handler (the previous definition: adds the mock's intake)",
            "-",
            fmt_ms(dist(&steady_handler)),
        );
        r.row(
            "  the mock's intake: the request in its socket before the handler (received - socket arrival)",
            "-",
            fmt_ms(dist(&steady_intake)),
        );
        r.row(
            "TTFT - ground truth, all requests (the first 2,000 start at one instant)",
            "-",
            fmt_ms(dist(&all)),
        );
        r.row(
            "the mock's pacing error of those first chunks (sent - modelled)",
            "-",
            fmt_ms(dist(&first_pacing)),
        );
        r.row(
            "client_queue_time (scheduled start to send; with socket stamping, to the write of the request's first byte)",
            "-",
            fmt_ms(dist(&queue)),
        );
        r.row(
            "  the same, requests after the first 2,000 (steady state)",
            "-",
            fmt_ms(dist(&steady_queue)),
        );
        r.row(
            "achieved concurrency",
            "2000",
            outcome
                .summary
                .derived()
                .achieved_concurrency
                .map_or("n/a".into(), |c| format!("{c:.1}")),
        );
        r.row("run wall time", "-", format!("{wall:.2} s"));
        r.row(
            "CPU of the client (this process)",
            "reported",
            cpu.map_or("n/a".into(), |c| format!("{c:.2} s ({:.0}% of one core)", 100.0 * c / wall)),
        );
        r.set("steady", dist_json(dist(&steady)));
        r.set("steady_from_handler", dist_json(dist(&steady_handler)));
        r.set("steady_intake", dist_json(dist(&steady_intake)));
        r.set("all", dist_json(dist(&all)));
        r.set("client_queue", dist_json(dist(&queue)));
        r.set("cpu_s", json!(cpu));
        r.set("wall_s", json!(wall));
        r.set("external", json!(external));
        Ok(r)
    })
}
