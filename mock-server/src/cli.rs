//! The command line: SGLang-named flags (clap), the [`Config`] they build (preset, then flags,
//! then every `--set`), and the serve loop the binary runs.

use crate::config::{Config, ConfigError};
use crate::conn::Timeouts;
use crate::server::{MockServer, ServeOptions};
use clap::Parser;

/// Errors in the flags, before the server starts.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--set expects KEY=VALUE, got {0:?}")]
    SetSyntax(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--{flag} {value}: {reason}")]
    BadFlag {
        flag: &'static str,
        value: String,
        reason: &'static str,
    },
}

#[derive(Parser, Debug)]
#[command(
    name = "mock-server",
    about = "A simulated SGLang server for benchmark regression checks"
)]
pub struct Args {
    /// Preset name: small-cpu-demo, kimi-k2.6-dflash-8xrtx-pro-6000, or a GPU twin fitted to
    /// public data: qwen3-32b-h100-tp2-sglang, llama-3.1-70b-fp8-h200-tp2-vllm.
    #[arg(long, default_value = "small-cpu-demo")]
    pub preset: String,
    /// Preset TOML file (e.g. one `bench-client calibrate` wrote), instead of a named --preset;
    /// an unknown key or an impossible value is refused with the key named.
    #[arg(long, conflicts_with = "preset")]
    pub preset_file: Option<std::path::PathBuf>,
    /// Address to listen on (SGLang `--host`; default from the preset, 127.0.0.1).
    #[arg(long)]
    pub host: Option<String>,
    /// Model path reported by /get_model_info (SGLang `--model-path`; nothing is loaded).
    #[arg(long)]
    pub model_path: Option<String>,
    /// Model name of the OpenAI endpoints and /v1/models (SGLang `--served-model-name`).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Port to listen on (SGLang `--port`; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Share of GPU memory for weights and KV pool; the rest is headroom for activations (SGLang `--mem-fraction-static`).
    #[arg(long)]
    pub mem_fraction_static: Option<f64>,
    /// Most prompt tokens prefilled per pass; -1 turns chunking off (SGLang `--chunked-prefill-size`).
    #[arg(long, allow_hyphen_values = true)]
    pub chunked_prefill_size: Option<i64>,
    /// Most requests decoding at once (SGLang `--max-running-requests`).
    #[arg(long)]
    pub max_running_requests: Option<usize>,
    /// Decode the running batch in the same pass as the prefill, its tokens counted in the chunked prefill size (SGLang `--enable-mixed-chunk`; vLLM's scheduler always does).
    #[arg(long)]
    pub enable_mixed_chunk: bool,
    /// Speculative decoding, e.g. EAGLE or NGRAM: chunks carry several tokens (SGLang `--speculative-algorithm`).
    #[arg(long)]
    pub speculative_algorithm: Option<String>,
    /// Draft tokens verified per step (SGLang `--speculative-num-draft-tokens`).
    #[arg(long)]
    pub speculative_num_draft_tokens: Option<usize>,
    /// Report cached prompt tokens in usage (SGLang `--enable-cache-report`).
    #[arg(long)]
    pub enable_cache_report: bool,
    /// Serve /metrics and the scheduler's timings in meta_info (SGLang `--enable-metrics`; without it /metrics is a 404).
    #[arg(long)]
    pub enable_metrics: bool,
    /// Stream only each event's new text and ids, not the cumulative output (SGLang `--incremental-streaming-output`).
    #[arg(long)]
    pub incremental_streaming_output: bool,
    /// Send a stream event every N output tokens (SGLang `--stream-interval`).
    #[arg(long)]
    pub stream_interval: Option<usize>,
    /// No allocator fragmentation on top of activation peaks (PyTorch `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`).
    #[arg(long)]
    pub expandable_segments: bool,
    /// No prefix cache: every prompt is prefilled in full (SGLang `--disable-radix-cache`).
    #[arg(long)]
    pub disable_radix_cache: bool,
    /// Longest prompt plus output accepted (SGLang `--context-length`).
    #[arg(long)]
    pub context_length: Option<usize>,
    /// Seed of every random draw: same seed, same run (SGLang `--random-seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Model time runs this many times faster than real time (mock only; 20 = twenty times as fast).
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Require this Bearer token on every request (SGLang `--api-key`).
    #[arg(long)]
    pub api_key: Option<String>,
    /// After an out-of-memory crash, answer 503 for the start-up time and come back with an empty cache (mock only; SGLang exits).
    #[arg(long)]
    pub restart_on_oom: bool,
    /// Serve each request's ground truth at /debug/requests/{rid} (mock only).
    #[arg(long)]
    pub debug_endpoints: bool,
    /// Keep the ground truth of this many ended requests (every running request's is kept); older
    /// ones are dropped, so a long run holds constant memory (mock only).
    #[arg(long, default_value_t = crate::truth::DEFAULT_TRUTH_WINDOW)]
    pub truth_window: usize,
    /// Close a connection idle this many seconds after its last response (uvicorn's
    /// `--timeout-keep-alive`; SGLang sets 5 through `SGLANG_TIMEOUT_KEEP_ALIVE`).
    #[arg(long, default_value_t = 5.0)]
    pub timeout_keep_alive: f64,
    /// Close a connection whose next request header is not complete this many seconds after it
    /// was ready for it (accepted, or its previous response ended).
    #[arg(long, default_value_t = 30.0)]
    pub header_read_timeout: f64,
    /// Override any preset key: --set key=value (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// The preset, then the SGLang-named flags (typed values onto the preset's fields), then every
/// `--set` in order (a TOML key and value); validated.
pub fn build(a: &Args) -> Result<Config, CliError> {
    let mut c = match &a.preset_file {
        Some(p) => Config::preset_file(p)?,
        None => Config::preset(&a.preset)?,
    };
    fn put<T: Clone>(field: &mut T, flag: &Option<T>) {
        if let Some(v) = flag {
            *field = v.clone();
        }
    }
    put(&mut c.host, &a.host);
    put(&mut c.model_path, &a.model_path);
    put(&mut c.served_model_name, &a.served_model_name);
    put(&mut c.port, &a.port);
    put(&mut c.mem_fraction_static, &a.mem_fraction_static);
    put(&mut c.chunked_prefill_size, &a.chunked_prefill_size);
    put(&mut c.max_running_requests, &a.max_running_requests);
    put(&mut c.speculative_algorithm, &a.speculative_algorithm);
    put(
        &mut c.speculative_num_draft_tokens,
        &a.speculative_num_draft_tokens,
    );
    put(&mut c.stream_interval, &a.stream_interval);
    put(&mut c.context_length, &a.context_length);
    put(&mut c.seed, &a.seed);
    put(&mut c.time_scale, &a.time_scale);
    if a.api_key.is_some() {
        c.api_key.clone_from(&a.api_key);
    }
    // A switch turns its setting on; absent, the preset's value stands.
    for (flag, field) in [
        (a.enable_cache_report, &mut c.enable_cache_report),
        (a.enable_metrics, &mut c.enable_metrics),
        (
            a.incremental_streaming_output,
            &mut c.incremental_streaming_output,
        ),
        (a.expandable_segments, &mut c.expandable_segments),
        (a.disable_radix_cache, &mut c.disable_radix_cache),
        (a.restart_on_oom, &mut c.restart_on_oom),
        (a.debug_endpoints, &mut c.debug_endpoints),
        (a.enable_mixed_chunk, &mut c.mixed_batches),
    ] {
        *field |= flag;
    }
    for s in &a.set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| CliError::SetSyntax(s.clone()))?;
        c.set(k.trim(), v.trim())?;
    }
    c.validate()?;
    Ok(c)
}

/// The serving options the flags give: the ground truth window and the connection timeouts.
pub fn serve_options(a: &Args) -> Result<ServeOptions, CliError> {
    let secs = |flag: &'static str, v: f64| {
        if v.is_finite() && v > 0.0 && v < 1e9 {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(CliError::BadFlag {
                flag,
                value: v.to_string(),
                reason: "must be a positive number of seconds",
            })
        }
    };
    if a.truth_window == 0 {
        return Err(CliError::BadFlag {
            flag: "truth-window",
            value: "0".into(),
            reason: "must keep at least 1 request",
        });
    }
    Ok(ServeOptions {
        truth_window: a.truth_window,
        timeouts: Timeouts {
            keep_alive: secs("timeout-keep-alive", a.timeout_keep_alive)?,
            header_read: secs("header-read-timeout", a.header_read_timeout)?,
        },
    })
}

/// Resolves on SIGINT or (on Unix) SIGTERM.
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

/// Starts the server and serves until SIGINT/SIGTERM (exit code 0) or, without
/// `--restart-on-oom`, an out-of-memory death (exit code 1).
pub async fn run(args: Args) -> anyhow::Result<i32> {
    let config = build(&args)?;
    let server = MockServer::start_with(config.clone(), serve_options(&args)?).await?;
    tracing::info!(
        target: "mock_server",
        "mock-server ({}) serving {} on {}",
        args.preset_file
            .as_ref()
            .map_or(args.preset.clone(), |p| p.display().to_string()),
        config.served_model_name,
        server.url()
    );
    if let Some(note) = config.fitted_rows_note() {
        tracing::info!(target: "mock_server", "{note}");
    }
    tokio::select! {
        _ = signal() => {
            tracing::info!(target: "mock_server", "shutting down");
            server.shutdown().await;
            Ok(0)
        }
        reason = server.wait_crashed(), if !config.restart_on_oom => {
            tracing::error!(target: "mock_server", "server died: {reason}");
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_says_what_it_does() {
        use clap::CommandFactory;
        for a in Args::command().get_arguments() {
            assert!(
                a.get_help().is_some_and(|h| !h.to_string().is_empty()),
                "--{} has no description",
                a.get_id()
            );
        }
    }

    fn parse(args: &[&str]) -> anyhow::Result<Config> {
        let a = Args::try_parse_from(std::iter::once("mock-server").chain(args.iter().copied()))?;
        Ok(build(&a)?)
    }

    #[test]
    fn no_flags_give_the_default_preset() {
        assert_eq!(parse(&[]).unwrap(), Config::default());
    }

    #[test]
    fn sglang_named_flags_override_the_preset() {
        let c = parse(&[
            "--preset",
            "kimi-k2.6-dflash-8xrtx-pro-6000",
            "--host",
            "0.0.0.0",
            "--port",
            "31000",
            "--model-path",
            "org/model \"quoted\"",
            "--served-model-name",
            "kimi",
            "--mem-fraction-static",
            "0.93",
            "--chunked-prefill-size",
            "-1",
            "--max-running-requests",
            "7",
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-draft-tokens",
            "3",
            "--stream-interval",
            "2",
            "--context-length",
            "200000",
            "--seed",
            "9",
            "--time-scale",
            "4",
            "--api-key",
            "s3cr=t",
            "--enable-cache-report",
            "--incremental-streaming-output",
            "--expandable-segments",
            "--disable-radix-cache",
            "--restart-on-oom",
            "--debug-endpoints",
            "--enable-mixed-chunk",
        ])
        .unwrap();
        let mut want = Config::preset("kimi-k2.6-dflash-8xrtx-pro-6000").unwrap();
        want.host = "0.0.0.0".into();
        want.port = 31000;
        want.model_path = "org/model \"quoted\"".into();
        want.served_model_name = "kimi".into();
        want.mem_fraction_static = 0.93;
        want.chunked_prefill_size = -1;
        want.max_running_requests = 7;
        want.speculative_algorithm = "EAGLE".into();
        want.speculative_num_draft_tokens = 3;
        want.stream_interval = 2;
        want.context_length = 200_000;
        want.seed = 9;
        want.time_scale = 4.0;
        want.api_key = Some("s3cr=t".into());
        want.enable_cache_report = true;
        want.incremental_streaming_output = true;
        want.expandable_segments = true;
        want.disable_radix_cache = true;
        want.restart_on_oom = true;
        want.debug_endpoints = true;
        want.mixed_batches = true;
        assert_eq!(c, want);
    }

    #[test]
    fn set_overrides_any_key_and_wins_over_flags() {
        let c = parse(&[
            "--mem-fraction-static",
            "0.8",
            "--set",
            "mem_fraction_static=0.7",
            "--set",
            "spec_accept_rates=[0.5, 0.25]",
            "--set",
            " startup_s = 3 ",
            "--set",
            "served_model_name=a=b",
        ])
        .unwrap();
        assert_eq!(c.mem_fraction_static, 0.7);
        assert_eq!(c.spec_accept_rates, vec![0.5, 0.25]);
        assert_eq!(c.startup_s, 3.0);
        assert_eq!(c.served_model_name, "a=b");
    }

    #[test]
    fn a_preset_file_is_read_and_a_bad_one_refused_with_the_key_named() {
        let dir = std::env::temp_dir().join(format!("mock-cli-preset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kimi = include_str!("../../fixtures/presets/kimi-k2.6-dflash-8xrtx-pro-6000.toml");
        let good = dir.join("good.toml");
        std::fs::write(&good, kimi).unwrap();
        let c = parse(&["--preset-file", good.to_str().unwrap(), "--port", "0"]).unwrap();
        let mut want = Config::preset("kimi-k2.6-dflash-8xrtx-pro-6000").unwrap();
        want.port = 0;
        assert_eq!(c, want);
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, format!("{kimi}\ndecode_speed = 2\n")).unwrap();
        let e = format!(
            "{:#}",
            parse(&["--preset-file", bad.to_str().unwrap()]).unwrap_err()
        );
        assert!(e.contains("decode_speed") && e.contains("bad.toml"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_flags_are_clear_errors() {
        let msg = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
        assert!(msg(&["--set", "nokey"]).contains("KEY=VALUE"));
        assert!(msg(&["--set", "nope=1"]).contains("unknown configuration key"));
        assert!(msg(&["--set", "port=banana"]).contains("port"));
        assert!(msg(&["--preset", "nope"]).contains("unknown preset"));
        assert!(msg(&["--mem-fraction-static", "1.5"]).contains("mem_fraction_static"));
        assert!(msg(&["--port", "99999"]).contains("99999"));
        assert!(msg(&["--no-such-flag"]).contains("no-such-flag"));
        let opts = |args: &[&str]| {
            let a =
                Args::try_parse_from(std::iter::once("mock-server").chain(args.iter().copied()))
                    .unwrap();
            serve_options(&a).map_err(|e| e.to_string())
        };
        assert!(opts(&["--truth-window", "0"])
            .unwrap_err()
            .contains("truth-window"));
        assert!(opts(&["--timeout-keep-alive", "0"])
            .unwrap_err()
            .contains("timeout-keep-alive"));
        assert!(opts(&["--header-read-timeout", "NaN"])
            .unwrap_err()
            .contains("header-read-timeout"));
        assert_eq!(opts(&[]).unwrap(), ServeOptions::default());
        let o = opts(&["--truth-window", "9", "--timeout-keep-alive", "0.5"]).unwrap();
        assert_eq!(o.truth_window, 9);
        assert_eq!(o.timeouts.keep_alive, std::time::Duration::from_millis(500));
        let e = msg(&[
            "--preset",
            "kimi-k2.6-dflash-8xrtx-pro-6000",
            "--mem-fraction-static",
            "0.5",
        ]);
        assert!(e.contains("Not enough memory"), "{e}");
    }
}
