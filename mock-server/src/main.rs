//! The `mock-server` binary: parse SGLang-style flags, build a [`Config`], serve until SIGINT/SIGTERM
//! or an out-of-memory death (exit code 1). Run: `mock-server --preset kimi-k2.6-dflash-8xrtx-pro-6000`.

use clap::Parser;
use mock_server::{Config, MockServer};

#[derive(Parser, Debug)]
#[command(
    name = "mock-server",
    about = "A simulated SGLang server for benchmark regression checks"
)]
struct Args {
    /// Preset name (small-cpu-demo, kimi-k2.6-dflash-8xrtx-pro-6000).
    #[arg(long, default_value = "small-cpu-demo")]
    preset: String,
    #[arg(long)]
    host: Option<String>,
    #[arg(long)]
    port: Option<u16>,
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    #[arg(long, allow_hyphen_values = true)]
    chunked_prefill_size: Option<i64>,
    #[arg(long)]
    max_running_requests: Option<usize>,
    #[arg(long)]
    speculative_algorithm: Option<String>,
    #[arg(long)]
    speculative_num_draft_tokens: Option<usize>,
    #[arg(long)]
    enable_cache_report: bool,
    #[arg(long)]
    incremental_streaming_output: bool,
    #[arg(long)]
    stream_interval: Option<usize>,
    #[arg(long)]
    expandable_segments: bool,
    #[arg(long)]
    disable_radix_cache: bool,
    #[arg(long)]
    context_length: Option<usize>,
    #[arg(long)]
    seed: Option<u64>,
    #[arg(long)]
    time_scale: Option<f64>,
    #[arg(long)]
    api_key: Option<String>,
    #[arg(long)]
    restart_on_oom: bool,
    #[arg(long)]
    debug_endpoints: bool,
    /// Override any preset key: --set key=value (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

fn build(a: &Args) -> anyhow::Result<Config> {
    let mut c = Config::preset(&a.preset)?;
    let mut kv: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| kv.push((k.to_string(), v));
    if let Some(v) = &a.host {
        put("host", format!("{v:?}"));
    }
    if let Some(v) = a.port {
        put("port", v.to_string());
    }
    if let Some(v) = a.mem_fraction_static {
        put("mem_fraction_static", v.to_string());
    }
    if let Some(v) = a.chunked_prefill_size {
        put("chunked_prefill_size", v.to_string());
    }
    if let Some(v) = a.max_running_requests {
        put("max_running_requests", v.to_string());
    }
    if let Some(v) = &a.speculative_algorithm {
        put("speculative_algorithm", format!("{v:?}"));
    }
    if let Some(v) = a.speculative_num_draft_tokens {
        put("speculative_num_draft_tokens", v.to_string());
    }
    if let Some(v) = a.stream_interval {
        put("stream_interval", v.to_string());
    }
    if let Some(v) = a.context_length {
        put("context_length", v.to_string());
    }
    if let Some(v) = a.seed {
        put("seed", v.to_string());
    }
    if let Some(v) = a.time_scale {
        put("time_scale", v.to_string());
    }
    if let Some(v) = &a.api_key {
        put("api_key", format!("{v:?}"));
    }
    for (flag, key) in [
        (a.enable_cache_report, "enable_cache_report"),
        (
            a.incremental_streaming_output,
            "incremental_streaming_output",
        ),
        (a.expandable_segments, "expandable_segments"),
        (a.disable_radix_cache, "disable_radix_cache"),
        (a.restart_on_oom, "restart_on_oom"),
        (a.debug_endpoints, "debug_endpoints"),
    ] {
        if flag {
            put(key, "true".into());
        }
    }
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--set expects KEY=VALUE, got {s:?}"))?;
        put(k.trim(), v.trim().to_string());
    }
    for (k, v) in kv {
        c.set(&k, &v)?;
    }
    c.validate()?;
    Ok(c)
}

async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
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

async fn run(args: Args) -> anyhow::Result<i32> {
    let config = build(&args)?;
    let server = MockServer::start(config.clone()).await?;
    tracing::info!(
        "mock-server ({}) serving {} on {}",
        args.preset,
        config.served_model_name,
        server.url()
    );
    tokio::select! {
        _ = signal() => {
            tracing::info!("shutting down");
            server.shutdown().await;
            Ok(0)
        }
        reason = server.wait_crashed(), if !config.restart_on_oom => {
            tracing::error!("server died: {reason}");
            Ok(1)
        }
    }
}
