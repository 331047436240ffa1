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
    /// Server base URL; without it, an embedded mock server is started.
    #[arg(long)]
    url: Option<String>,
    /// API dialect (default: probe the server).
    #[arg(long, value_enum)]
    api: Option<Dialect>,
    /// Model name (default: the server's first model from /v1/models).
    #[arg(long)]
    model: Option<String>,
    /// API key (else env OPENAI_API_KEY or SGLANG_API_KEY); sent as a Bearer token, never recorded.
    #[arg(long)]
    api_key: Option<String>,
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
    /// Embedded mock preset.
    #[arg(long, default_value = "small-cpu-demo")]
    preset: String,
    /// Embedded mock setting, KEY=VALUE (repeatable), e.g. mem_fraction_static=0.94.
    #[arg(long = "mock-set", value_parser = parse_kv)]
    mock_set: Vec<(String, String)>,
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
    let api_key = a
        .api_key
        .clone()
        .or_else(|| std::env::var("OPENAI_API_KEY").ok())
        .or_else(|| std::env::var("SGLANG_API_KEY").ok())
        .filter(|k| !k.is_empty());

    #[cfg(feature = "embedded-mock")]
    let mut mock = None;
    let base_url = match &a.url {
        Some(u) => u.clone(),
        None => {
            #[cfg(feature = "embedded-mock")]
            {
                let m = bench_client::embedded::EmbeddedMock::start(&a.preset, &a.mock_set).await?;
                let url = m.url();
                eprintln!(
                    "started the embedded mock server (preset {}) at {url}",
                    a.preset
                );
                mock = Some(m);
                url
            }
            #[cfg(not(feature = "embedded-mock"))]
            {
                anyhow::bail!(
                    "no --url given and this build has no embedded mock (feature embedded-mock)"
                );
            }
        }
    };
    let http = client::http_client(&timeouts)?;
    let dialect = match a.api {
        Some(d) => d,
        None => client::probe_dialect(&http, &base_url, api_key.as_deref()).await,
    };
    let model = match &a.model {
        Some(m) => Some(m.clone()),
        None if dialect == Dialect::Sglang => None,
        None => client::first_model(&http, &base_url, api_key.as_deref()).await,
    };
    let out = a.out.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("results/sweep-{t}.jsonl"))
    });
    let command = redact_args(std::env::args());
    let cfg = SweepConfig {
        target: Target {
            base_url,
            dialect,
            model,
            api_key,
        },
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
    let outcome = sweep::run_sweep(&cfg).await;
    #[cfg(feature = "embedded-mock")]
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
