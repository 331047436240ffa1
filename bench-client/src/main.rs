//! `bench-client`: streaming LLM-serving benchmark. `bench-client sweep` (no `--url`: embedded mock),
//! `bench-client report RESULTS.jsonl`. Parsing and wiring only; the work is in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use bench_client::client::{self, Target, Timeouts};
use bench_client::record::{read_records, Method};
use bench_client::report::{self, Report};
use bench_client::sweep::{self, OnCrash, SweepConfig};
use bench_client::wire::Stamping;
use bench_client::Dialect;
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "bench-client",
    version,
    about = "Streaming LLM-serving benchmark: TTFT, prefill and decode rates per context length"
)]
struct Cli {
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
}

/// Where to send requests: a server, or the embedded mock when no `--url` is given.
#[derive(Args, Debug)]
struct ServerArgs {
    /// Server base URL; without it, an embedded mock server is started.
    #[arg(long)]
    url: Option<String>,
    /// API dialect (default: probe the server); load runs need sglang or openai (token-id prompts).
    #[arg(long, value_enum)]
    api: Option<Dialect>,
    /// Model name (default: the server's first model from /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// API key (else env OPENAI_API_KEY or SGLANG_API_KEY); sent as a Bearer token, never recorded.
    #[arg(long)]
    api_key: Option<String>,
    /// Embedded mock preset.
    #[arg(long, default_value = "small-cpu-demo")]
    preset: String,
    /// Embedded mock setting, KEY=VALUE (repeatable), e.g. mem_fraction_static=0.94.
    #[arg(long = "mock-set", value_parser = parse_kv)]
    mock_set: Vec<(String, String)>,
    /// Where streams to plain-HTTP servers are stamped: at the socket, each read by the kernel's
    /// receive timestamp (Linux) or by the connection's read; or by the request's task (reqwest).
    #[arg(long, value_enum, default_value = "kernel")]
    stamping: Stamping,
}

#[derive(Args, Debug)]
struct LoadArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Closed loop: keep N requests in flight (over all shards together).
    #[arg(long, conflicts_with_all = ["request_rate", "trace"])]
    concurrency: Option<u32>,
    /// Open loop: requests per second (over all shards together).
    #[arg(long, conflicts_with = "trace")]
    request_rate: Option<f64>,
    /// Open loop (rate or trace): at most N requests in flight (over all shards together); an arrival
    /// that finds N in flight waits, and the wait is its client_queue_time.
    #[arg(long, conflicts_with = "concurrency", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrency: Option<u32>,
    /// Open-loop arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    arrival: bench_client::load::ArrivalKind,
    /// Gamma shape (1 = Poisson; below 1 burstier, above 1 more regular); needs --arrival gamma.
    #[arg(long, default_value_t = 1.0)]
    burstiness: f64,
    /// Measured requests (over all shards together).
    #[arg(long, conflicts_with = "duration")]
    num_requests: Option<u64>,
    /// Run length, e.g. 60s, 5m, 500ms (no request is started or scheduled after it).
    #[arg(long)]
    duration: Option<String>,
    /// Warm-up requests before the run (not recorded).
    #[arg(long, default_value_t = 0)]
    warmup: u32,
    /// Prompt length distribution: 512, uniform:256:1024 or normal:1000:200 (k = 1,000).
    #[arg(long, default_value = "512")]
    input_len: String,
    /// Output length distribution, same forms.
    #[arg(long, default_value = "128")]
    output_len: String,
    /// Shared-prefix workload: this many groups, each sharing a --prefix-len prefix.
    #[arg(long)]
    prefix_groups: Option<u32>,
    /// Prefix length of the shared-prefix and replay workloads; --input-len is added after it.
    #[arg(long, default_value_t = 0)]
    prefix_len: u32,
    /// Replay a JSONL trace of {"offset_ms", "input_len", "output_len"[, "prefix_group"]}.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Run the I-th of N slices of the same schedule (0-based), e.g. 0/4.
    #[arg(long, default_value = "0/1")]
    shard: String,
    /// Shared start time, unix ms; every shard of a run gets the same value.
    #[arg(long)]
    start_at: Option<u64>,
    /// Goodput objective, e.g. ttft=500,tpot=50 (ms).
    #[arg(long)]
    slo: Option<String>,
    /// Results file (JSONL); default results/load-<unix time>.jsonl.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip request indices already in --out (same --seed and --shard).
    #[arg(long)]
    resume: bool,
    /// Seed of the schedule and the prompts.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Smallest prompt token id.
    #[arg(long, default_value_t = 100)]
    token_id_min: u32,
    /// Prompt token ids are below this.
    #[arg(long, default_value_t = 4000)]
    token_id_max: u32,
    /// Do not scrape /metrics before and after.
    #[arg(long)]
    no_metrics: bool,
    /// Time-to-first-token timeout, seconds, fixed part.
    #[arg(long, default_value_t = 600.0)]
    ttft_timeout_s: f64,
    /// Longest gap between chunks, seconds.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout_s: f64,
    /// Whole-request timeout, seconds.
    #[arg(long, default_value_t = 3600.0)]
    total_timeout_s: f64,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Summary format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

#[derive(Args, Debug)]
struct MergeArgs {
    /// Load results files (JSONL) from the shards of one run.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Goodput objective, e.g. ttft=500,tpot=50 (ms).
    #[arg(long)]
    slo: Option<String>,
    /// Summary format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Args, Debug)]
struct Output {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Write an SVG plot of TTFT and decode rate against context length.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct SweepArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Context lengths, comma separated, k = 1,000 tokens.
    #[arg(long, default_value = sweep::DEFAULT_CONTEXTS)]
    contexts: String,
    /// Output tokens per streaming request.
    #[arg(long, default_value_t = 64)]
    output_tokens: u32,
    /// Measured runs per context length.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Warm-up requests per context length (not recorded).
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// `two-point` runs the old two-request method beside the streaming one.
    #[arg(long, value_enum, default_value = "streaming")]
    method: Method,
    /// Two-point output length a.
    #[arg(long, default_value_t = 1)]
    two_point_a: u32,
    /// Two-point output length b.
    #[arg(long, default_value_t = 17)]
    two_point_b: u32,
    /// POST /flush_cache before each point (and between the two-point requests).
    #[arg(long)]
    flush_cache: bool,
    /// Results file (JSONL); default results/sweep-<unix time>.jsonl.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip points already measured in --out.
    #[arg(long)]
    resume: bool,
    /// Prompt seed.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Smallest prompt token id.
    #[arg(long, default_value_t = 100)]
    token_id_min: u32,
    /// Prompt token ids are below this.
    #[arg(long, default_value_t = 4000)]
    token_id_max: u32,
    /// Ask for per-chunk token ids (vLLM `return_token_ids`).
    #[arg(long)]
    return_token_ids: bool,
    /// Send text prompts of exactly N tokens under this local Hugging Face tokenizer.json (any
    /// --api; needs a build with `--features tokenizer`).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Connect timeout, seconds.
    #[arg(long, default_value_t = 10.0)]
    connect_timeout_s: f64,
    /// Time-to-first-token timeout, seconds, fixed part.
    #[arg(long, default_value_t = 60.0)]
    ttft_timeout_s: f64,
    /// Time-to-first-token timeout, seconds added per 1,000 prompt tokens.
    #[arg(long, default_value_t = 2.0)]
    ttft_timeout_per_1k_s: f64,
    /// Longest gap between chunks, seconds.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout_s: f64,
    /// Whole-request timeout, seconds.
    #[arg(long, default_value_t = 3600.0)]
    total_timeout_s: f64,
    /// When the server dies: wait for it or stop.
    #[arg(long, value_enum, default_value = "stop")]
    on_crash: OnCrash,
    /// How long --on-crash wait waits, seconds.
    #[arg(long, default_value_t = 600.0)]
    crash_wait_s: f64,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
    #[command(flatten)]
    output: Output,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// Results files (merged).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    output: Output,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    if v.is_finite() && v > 0.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        anyhow::bail!("--{name} must be a positive number of seconds, got {v}")
    }
}

fn emit(report: &Report, out: &Output) -> anyhow::Result<()> {
    match out.format {
        Format::Table => print!("{}", report::render_table(report)),
        Format::Json => println!("{}", report::to_json(report)),
        Format::Csv => print!("{}", report::to_csv(report)?),
    }
    if let Some(p) = &out.plot {
        report::plot_svg(report, p)?;
        eprintln!("plot written to {}", p.display());
    }
    Ok(())
}

async fn run_sweep(a: SweepArgs) -> anyhow::Result<ExitCode> {
    let contexts = sweep::parse_contexts(&a.contexts).map_err(anyhow::Error::msg)?;
    let timeouts = Timeouts {
        connect: secs("connect-timeout-s", a.connect_timeout_s)?,
        first_token_base: secs("ttft-timeout-s", a.ttft_timeout_s)?,
        first_token_per_1k: if a.ttft_timeout_per_1k_s == 0.0 {
            Duration::ZERO
        } else {
            secs("ttft-timeout-per-1k-s", a.ttft_timeout_per_1k_s)?
        },
        idle: secs("idle-timeout-s", a.idle_timeout_s)?,
        total: secs("total-timeout-s", a.total_timeout_s)?,
    };
    let crash_wait = secs("crash-wait-s", a.crash_wait_s)?;
    let prompt_source = prompt_source(a.tokenizer.as_deref(), a.seed)?;
    let (target, mock) = connect(&a.server, &timeouts).await?;
    let out = a.out.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("results/sweep-{t}.jsonl"))
    });
    let command = redact_args(std::env::args());
    let cfg = SweepConfig {
        stamping: a.server.stamping,
        target,
        contexts,
        output_tokens: a.output_tokens,
        runs: a.runs,
        warmup: a.warmup,
        method: a.method,
        flush_cache: a.flush_cache,
        two_point_tokens: (a.two_point_a, a.two_point_b),
        out: out.clone(),
        resume: a.resume,
        seed: a.seed,
        token_id_range: (a.token_id_min, a.token_id_max),
        return_token_ids: a.return_token_ids,
        timeouts,
        on_crash: a.on_crash,
        crash_wait,
        progress: !a.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        command,
    };
    eprintln!(
        "sweeping {} context lengths against {} ({}), results in {}",
        cfg.contexts.len(),
        cfg.target.base_url,
        cfg.target.dialect.as_str(),
        out.display()
    );
    let outcome = sweep::run_sweep_with(&cfg, prompt_source).await;
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
        return Ok(ExitCode::from(130));
    }
    if let Some(msg) = outcome.stopped {
        eprintln!("sweep stopped: {msg}");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prompts of the sweep: exact-length text under `--tokenizer`, else the default.
#[cfg(feature = "tokenizer")]
fn prompt_source(
    tokenizer: Option<&std::path::Path>,
    seed: u64,
) -> anyhow::Result<sweep::PromptSource> {
    Ok(match tokenizer {
        Some(p) => sweep::PromptSource::Tokenizer(std::sync::Arc::new(
            bench_client::tokenizer::TextPrompts::from_file(p, seed)
                .map_err(|e| anyhow::anyhow!("--tokenizer: {e}"))?,
        )),
        None => sweep::PromptSource::Default,
    })
}

#[cfg(not(feature = "tokenizer"))]
fn prompt_source(
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

#[cfg(feature = "embedded-mock")]
type Mock = bench_client::embedded::EmbeddedMock;

/// Without the embedded mock there is never one to shut down.
#[cfg(not(feature = "embedded-mock"))]
enum Mock {}

#[cfg(not(feature = "embedded-mock"))]
impl Mock {
    async fn shutdown(self) {
        match self {}
    }
}

/// Resolve the target: the given URL, or an embedded mock started here (returned, so the caller shuts
/// it down after the run); the API key from the flag or `OPENAI_API_KEY` / `SGLANG_API_KEY`; the
/// dialect and the model probed from the server when not given.
async fn connect(s: &ServerArgs, timeouts: &Timeouts) -> anyhow::Result<(Target, Option<Mock>)> {
    let api_key = s
        .api_key
        .clone()
        .or_else(|| std::env::var("OPENAI_API_KEY").ok())
        .or_else(|| std::env::var("SGLANG_API_KEY").ok())
        .filter(|k| !k.is_empty());
    let (base_url, mock) = match &s.url {
        Some(u) => (u.clone(), None),
        None => start_mock(&s.preset, &s.mock_set).await?,
    };
    let http = client::http_client(timeouts)?;
    let dialect = match s.api {
        Some(d) => d,
        None => client::probe_dialect(&http, &base_url, api_key.as_deref()).await,
    };
    let model = match &s.model {
        Some(m) => Some(m.clone()),
        None if dialect == Dialect::Sglang => None,
        None => client::first_model(&http, &base_url, api_key.as_deref()).await,
    };
    let target = Target {
        base_url,
        dialect,
        model,
        api_key,
    };
    Ok((target, mock))
}

#[cfg(feature = "embedded-mock")]
async fn start_mock(
    preset: &str,
    sets: &[(String, String)],
) -> anyhow::Result<(String, Option<Mock>)> {
    let m = bench_client::embedded::EmbeddedMock::start(preset, sets).await?;
    let url = m.url();
    eprintln!("started the embedded mock server (preset {preset}) at {url}");
    Ok((url, Some(m)))
}

#[cfg(not(feature = "embedded-mock"))]
async fn start_mock(
    _preset: &str,
    _sets: &[(String, String)],
) -> anyhow::Result<(String, Option<Mock>)> {
    anyhow::bail!("no --url given and this build has no embedded mock (feature embedded-mock)")
}

/// The command line for the manifest, with any `--api-key` value removed.
fn redact_args(args: impl Iterator<Item = String>) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args {
        if hide_next {
            out.push("<redacted>".to_string());
            hide_next = false;
        } else if a == "--api-key" {
            out.push(a);
            hide_next = true;
        } else if a.starts_with("--api-key=") {
            out.push("--api-key=<redacted>".to_string());
        } else {
            out.push(a);
        }
    }
    out.join(" ")
}

fn run_report(a: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    for f in &a.files {
        let recs = read_records(f).with_context(|| format!("reading {}", f.display()))?;
        report = report.merge(Report::from_records(&recs));
    }
    emit(&report, &a.output)?;
    Ok(ExitCode::SUCCESS)
}

fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--duration {s:?}: expected e.g. 60s, 5m, 500ms"))?;
    secs("duration", v * mult)
}

fn print_load(summary: &bench_client::load::LoadSummary, format: Format) -> anyhow::Result<()> {
    use bench_client::load::summary;
    match format {
        Format::Table => print!("{}", summary::render_table(summary)),
        Format::Json => println!("{}", summary::to_json(summary)),
        Format::Csv => anyhow::bail!("load summaries are printed as table or json"),
    }
    Ok(())
}

async fn run_load(a: LoadArgs) -> anyhow::Result<ExitCode> {
    use bench_client::load::{self, Arrivals, LenDist, Schedule, Shard, Slo, Stop, Workload};
    let slo = match &a.slo {
        Some(s) => Slo::parse(s).map_err(anyhow::Error::msg)?,
        None => Slo::default(),
    };
    let shard = Shard::parse(&a.shard).map_err(anyhow::Error::msg)?;
    let input = LenDist::parse(&a.input_len).map_err(|e| anyhow::anyhow!("--input-len: {e}"))?;
    let output = LenDist::parse(&a.output_len).map_err(|e| anyhow::anyhow!("--output-len: {e}"))?;
    let (workload, arrivals) = match (&a.trace, a.prefix_groups) {
        (Some(path), _) => {
            let entries = load::workload::read_trace(path)?;
            let offsets_ns = entries
                .iter()
                .map(|e| (e.offset_ms * 1e6).round() as u64)
                .collect();
            (
                Workload::Replay {
                    entries,
                    prefix_len: a.prefix_len,
                },
                Arrivals::Trace { offsets_ns },
            )
        }
        (None, groups) => {
            let w = match groups {
                Some(groups) => Workload::SharedPrefix {
                    groups,
                    prefix_len: a.prefix_len,
                    input,
                    output,
                },
                None => Workload::Random { input, output },
            };
            let arr = match (a.concurrency, a.request_rate) {
                (Some(c), None) => Arrivals::Closed { concurrency: c },
                (None, Some(rate)) => Arrivals::Open {
                    rate,
                    kind: a.arrival,
                    burstiness: a.burstiness,
                },
                _ => anyhow::bail!("give --concurrency N (closed loop) or --request-rate R (open loop), or --trace"),
            };
            (w, arr)
        }
    };
    let stop = match (&a.duration, a.num_requests, &arrivals) {
        (Some(d), None, _) => Stop::Duration(parse_duration(d)?),
        (None, Some(n), _) => Stop::Requests(n),
        (None, None, Arrivals::Trace { offsets_ns }) => Stop::Requests(offsets_ns.len() as u64),
        (None, None, _) => anyhow::bail!("give --num-requests N or --duration (e.g. 60s)"),
        (Some(_), Some(_), _) => anyhow::bail!("give --num-requests or --duration, not both"),
    };
    let schedule = Schedule::new(arrivals, stop, a.seed).map_err(anyhow::Error::msg)?;
    let timeouts = Timeouts {
        connect: Duration::from_secs(10),
        first_token_base: secs("ttft-timeout-s", a.ttft_timeout_s)?,
        first_token_per_1k: Duration::ZERO,
        idle: secs("idle-timeout-s", a.idle_timeout_s)?,
        total: secs("total-timeout-s", a.total_timeout_s)?,
    };
    let (target, mock) = connect(&a.server, &timeouts).await?;
    let out = a.out.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("results/load-{t}.jsonl"))
    });
    let cfg = load::LoadConfig {
        stamping: a.server.stamping,
        target,
        timeouts,
        schedule,
        workload,
        warmup: a.warmup,
        max_concurrency: a.max_concurrency,
        shard,
        start_at_unix_ms: a.start_at,
        prompt_salt: None,
        out: out.clone(),
        resume: a.resume,
        seed: a.seed,
        token_id_range: (a.token_id_min, a.token_id_max),
        slo,
        scrape_metrics: !a.no_metrics,
        progress: !a.no_progress && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        command: redact_args(std::env::args()),
    };
    eprintln!(
        "load run against {} ({}), shard {}, results in {}",
        cfg.target.base_url,
        cfg.target.dialect.as_str(),
        cfg.shard,
        out.display()
    );
    let cpu0 = load::process_cpu_seconds();
    let wall0 = tokio::time::Instant::now();
    let outcome = load::run_load(&cfg).await;
    let cpu = load::process_cpu_seconds().zip(cpu0).map(|(a, b)| a - b);
    let wall = wall0.elapsed().as_secs_f64();
    let embedded = mock.is_some();
    if let Some(m) = mock {
        m.shutdown().await;
    }
    let outcome = outcome?;
    print_load(&outcome.summary, a.format)?;
    match cpu {
        Some(c) if wall > 0.0 => eprintln!(
            "client CPU: {c:.2} s user + system over {wall:.2} s wall ({:.0}% of one core){}",
            100.0 * c / wall,
            if embedded {
                "; this process also ran the embedded mock server"
            } else {
                ""
            }
        ),
        _ => eprintln!("client CPU: not available on this system"),
    }
    if let Some(m) = &outcome.metrics {
        if matches!(a.format, Format::Table) {
            print!("{}", m.render());
        } else {
            eprint!("{}", m.render());
        }
    }
    if outcome.skipped > 0 {
        eprintln!(
            "--resume: skipped {} requests already in {}; `bench-client merge {}` summarises the whole file",
            outcome.skipped,
            out.display(),
            out.display()
        );
    }
    eprintln!("{} records written to {}", outcome.written, out.display());
    if outcome.interrupted {
        eprintln!("interrupted: rerun with --resume (same --seed and --shard) to continue");
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_merge(a: MergeArgs) -> anyhow::Result<ExitCode> {
    use bench_client::load::{self, Slo};
    let slo = match &a.slo {
        Some(s) => Slo::parse(s).map_err(anyhow::Error::msg)?,
        None => Slo::default(),
    };
    let (summary, ignored) = load::merge_files(&a.files, slo)?;
    if ignored > 0 {
        eprintln!("ignored {ignored} records that are not from load runs");
    }
    if summary.requests == 0 {
        anyhow::bail!("no load records in the given files");
    }
    // The shards' /metrics scrapes, from the manifests beside the results files.
    let server = load::metrics::merge_files(&a.files)?;
    match a.format {
        Format::Json => {
            let mut v = load::summary::to_json(&summary);
            v["server_metrics"] = server.to_json();
            println!("{v}");
        }
        _ => {
            print_load(&summary, a.format)?;
            if server.is_empty() {
                eprintln!(
                    "no /metrics scrapes found beside the results files (FILE.manifest.jsonl)"
                );
            } else {
                print!("{}", server.render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.cmd {
        Cmd::Sweep(a) => rt.block_on(run_sweep(*a)),
        Cmd::Report(a) => run_report(a),
        Cmd::Load(a) => rt.block_on(run_load(*a)),
        Cmd::Merge(a) => run_merge(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
