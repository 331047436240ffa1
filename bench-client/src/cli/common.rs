//! What every subcommand shares: the server flags and connecting to it (or to the embedded mock),
//! output formats, and the small flag parsers.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::drive::Destination;
use crate::net::{self, stamped::Stamping, Target};
use crate::plan::Timeouts;
use crate::trace::Dialect;

/// Where to send requests: a server, or the embedded mock when no `--url` is given.
#[derive(Args, Debug)]
pub(super) struct ServerArgs {
    /// Server base URL; without it, an embedded mock server is started.
    #[arg(long)]
    pub(super) url: Option<String>,
    /// API dialect (default: probe the server); load runs need sglang or openai (token-id prompts).
    #[arg(long, value_enum)]
    pub(super) api: Option<Dialect>,
    /// Model name (default: the server's first model from /v1/models).
    #[arg(long)]
    pub(super) model: Option<String>,
    /// API key (else env OPENAI_API_KEY or SGLANG_API_KEY); sent as a Bearer token, never recorded.
    #[arg(long)]
    pub(super) api_key: Option<String>,
    /// Before probing, wait up to this long (e.g. 30s, 5m; 0: do not wait) for the server to
    /// answer GET /health (and SGLang's /health_generate) with success.
    #[arg(long, default_value = "0s")]
    pub(super) wait_ready: String,
    /// Largest response body, in bytes (e.g. 64MiB, 500kB); one SSE line may hold at most the
    /// smaller of this and 4 MiB. A stream past it fails as `stream-too-large`.
    #[arg(long, default_value = "64MiB")]
    pub(super) max_stream_bytes: String,
    /// Embedded mock preset.
    #[arg(long, default_value = "small-cpu-demo")]
    pub(super) preset: String,
    /// Embedded mock preset file (e.g. one `calibrate` wrote), instead of a named --preset.
    #[arg(long, conflicts_with = "preset")]
    pub(super) preset_file: Option<PathBuf>,
    /// Embedded mock setting, KEY=VALUE (repeatable), e.g. mem_fraction_static=0.94.
    #[arg(long = "mock-set", value_parser = parse_kv)]
    pub(super) mock_set: Vec<(String, String)>,
    /// Where streams to plain-HTTP servers are stamped: at the socket, each read by the kernel's
    /// receive timestamp (Linux) or by the connection's read; or by the request's task (reqwest).
    #[arg(long, value_enum, default_value = "kernel")]
    pub(super) stamping: Stamping,
    /// Run the embedded mock's engine on an exact virtual clock, without HTTP: the same results
    /// files, every instant where the mock's model puts it, a long what-if in well under a
    /// second. Not with --url.
    #[arg(long)]
    pub(super) simulate: bool,
    /// Run against the embedded mock over HTTP on tokio's paused clock: every byte through the
    /// real client (instants up to 1 ms late). Not with --url.
    #[arg(long, conflicts_with = "simulate")]
    pub(super) simulate_http: bool,
}

impl ServerArgs {
    /// A simulated run, on either path: the runtime runs on tokio's paused clock.
    pub(super) fn paused(&self) -> bool {
        self.simulate || self.simulate_http
    }

    /// The size caps of every response (`--max-stream-bytes`).
    pub(super) fn stream_caps(&self) -> anyhow::Result<crate::plan::StreamCaps> {
        parse_bytes("max-stream-bytes", &self.max_stream_bytes).map(crate::plan::StreamCaps::body)
    }

    /// How long to wait for the server to be ready (`--wait-ready`).
    pub(super) fn wait_ready(&self) -> anyhow::Result<Duration> {
        if self.wait_ready.trim().trim_end_matches(['s', 'm', 'h']) == "0" {
            return Ok(Duration::ZERO);
        }
        parse_duration_of("wait-ready", &self.wait_ready)
    }

    /// The target of a run on the engine path.
    #[cfg(feature = "embedded-mock")]
    pub(super) fn engine_target(&self) -> Target {
        Target {
            base_url: crate::drive::ENGINE_URL.into(),
            dialect: Dialect::Sglang,
            model: self.model.clone(),
            api_key: None,
        }
    }

    /// Checks the server flags before anything starts: `--url` must be an `http://` or
    /// `https://` URL with a host.
    pub(super) fn check(&self) -> anyhow::Result<()> {
        if self.paused() && self.url.is_some() {
            anyhow::bail!(
                "--simulate and --simulate-http run the embedded mock and cannot drive a real server: leave out --url"
            );
        }
        if self.simulate && self.api.is_some_and(|d| d != Dialect::Sglang) {
            anyhow::bail!(
                "--simulate runs the mock's engine, which takes SGLang's native requests: leave out --api, or use --simulate-http for --api {}",
                self.api.map_or("", |d| d.as_str())
            );
        }
        if self.url.is_some() && self.preset_file.is_some() {
            anyhow::bail!("--preset-file configures the embedded mock: leave out --url");
        }
        self.stream_caps()?;
        self.wait_ready()?;
        if self.url.is_none() {
            // The embedded mock's configuration is checked before anything starts.
            self.mock_config()?;
        }
        if let Some(u) = &self.url {
            let parsed = reqwest::Url::parse(u).map_err(|e| {
                anyhow::anyhow!("--url {u:?} is not a URL ({e}); give e.g. http://127.0.0.1:30000")
            })?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                anyhow::bail!(
                    "--url {u:?} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:30000"
                );
            }
        }
        Ok(())
    }

    /// The embedded mock's configuration: the preset (named or a file), then every `--mock-set`,
    /// on a free port; validated.
    #[cfg(feature = "embedded-mock")]
    pub(super) fn mock_config(&self) -> anyhow::Result<mock_server::Config> {
        crate::drive::embedded::EmbeddedMock::config(
            &self.preset,
            self.preset_file.as_deref(),
            &self.mock_set,
        )
    }

    /// Without the embedded mock there is no configuration to check.
    #[cfg(not(feature = "embedded-mock"))]
    pub(super) fn mock_config(&self) -> anyhow::Result<()> {
        Ok(())
    }

    /// What the embedded mock runs, for messages: the preset's name or file.
    #[cfg_attr(not(feature = "embedded-mock"), allow(dead_code))]
    fn mock_name(&self) -> String {
        self.preset_file
            .as_ref()
            .map_or_else(|| self.preset.clone(), |p| p.display().to_string())
    }

    /// Where streams are stamped: as asked, except that a simulated run stamps at the socket on
    /// the paused clock (the kernel's real-time stamps mean nothing there).
    pub(super) fn stamping(&self) -> Stamping {
        if self.paused() && self.stamping == Stamping::Kernel {
            Stamping::Socket
        } else {
            self.stamping
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(super) enum Format {
    Table,
    Json,
    Csv,
}

#[derive(Args, Debug)]
pub(super) struct Output {
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub(super) format: Format,
    /// Write an SVG plot of TTFT and decode rate against context length.
    #[arg(long)]
    pub(super) plot: Option<PathBuf>,
}

/// A `KEY=VALUE` flag value (`--mock-set`), both sides trimmed; the key must not be empty.
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// The items of the comma list flag `--{flag}` ([`crate::plan::list::items`]): at least one, and
/// none empty.
pub(super) fn list_items<'a>(flag: &str, s: &'a str) -> anyhow::Result<Vec<&'a str>> {
    let items = crate::plan::list::items(s).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))?;
    if items.is_empty() {
        anyhow::bail!("--{flag} is empty: give a comma list");
    }
    Ok(items)
}

pub(super) use crate::plan::{compact, MAX_FLAG_SECS};

pub(super) fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    if v.is_finite() && v > 0.0 && v <= MAX_FLAG_SECS {
        Ok(Duration::from_secs_f64(v))
    } else {
        anyhow::bail!(
            "--{name} must be a positive number of seconds, at most 30 days ({MAX_FLAG_SECS}), got {}",
            compact(v)
        )
    }
}

#[cfg(feature = "embedded-mock")]
pub(super) type Mock = crate::drive::embedded::EmbeddedMock;

/// Without the embedded mock there is never one to shut down.
#[cfg(not(feature = "embedded-mock"))]
pub(super) enum Mock {}

#[cfg(not(feature = "embedded-mock"))]
impl Mock {
    pub(super) async fn shutdown(self) {
        match self {}
    }
}

/// Resolve the target: the given URL, or an embedded mock started here (returned, so the caller shuts
/// it down after the run); the API key from the flag or `OPENAI_API_KEY` / `SGLANG_API_KEY`; the
/// dialect and the model probed from the server when not given.
pub(super) async fn connect(
    s: &ServerArgs,
    timeouts: &Timeouts,
) -> anyhow::Result<(Target, Option<Mock>)> {
    // An empty variable is no key: the next one is read (an empty flag is: no key).
    let env = |name| std::env::var(name).ok().filter(|k: &String| !k.is_empty());
    let api_key = match &s.api_key {
        Some(k) => Some(k.clone()).filter(|k| !k.is_empty()),
        None => env("OPENAI_API_KEY").or_else(|| env("SGLANG_API_KEY")),
    };
    let (base_url, mock) = match &s.url {
        Some(u) if api_key.is_some() => (without_credentials(u), None),
        Some(u) => (u.clone(), None),
        None => start_mock(s).await?,
    };
    let http = net::http_client(timeouts)?;
    let wait = s.wait_ready()?;
    if !wait.is_zero() {
        eprintln!("waiting up to {wait:?} for the server to be ready (GET /health)");
        net::wait_ready(&http, &base_url, api_key.as_deref(), wait).await?;
    }
    let dialect = match s.api {
        Some(d) => d,
        None => net::probe_dialect_checked(&http, &base_url, api_key.as_deref()).await?,
    };
    let model = match &s.model {
        Some(m) => Some(m.clone()),
        None if dialect == Dialect::Sglang => None,
        None => net::first_model(&http, &base_url, api_key.as_deref()).await,
    };
    let target = Target {
        base_url,
        dialect,
        model,
        api_key,
    };
    Ok((target, mock))
}

/// `url` without its `user:password@`: a request carries one Authorization header, and with an
/// API key the key's bearer header is it (the URL's would go as basic auth and shadow it).
fn without_credentials(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            eprintln!("note: the URL's user:password@ is not sent: the API key authenticates");
            let text = u.to_string();
            // The parser adds a path of "/" to a bare host; the URL as given had none.
            match text.strip_suffix('/') {
                Some(t) if !url.ends_with('/') => t.to_string(),
                _ => text,
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(feature = "embedded-mock")]
pub(super) async fn start_mock(s: &ServerArgs) -> anyhow::Result<(String, Option<Mock>)> {
    let config = s.mock_config()?;
    note_model_alone(&config);
    let m = crate::drive::embedded::EmbeddedMock::start_config(config).await?;
    let url = m.url();
    eprintln!(
        "started the embedded mock server (preset {}) at {url}",
        s.mock_name()
    );
    Ok((url, Some(m)))
}

/// A preset fitted to a table: what a run on it gives apart from `predict`, and where its rows
/// end ([`mock_server::Config::fitted_rows_note`]); with mixed passes, how its rows' loops spread
/// their output lengths.
#[cfg(feature = "embedded-mock")]
fn note_model_alone(config: &mock_server::Config) {
    let Some(note) = config.fitted_rows_note() else {
        return;
    };
    eprintln!("note: {note}");
    if config.mixed_batches {
        eprintln!(
            "note: its rows were fitted with each loop's output lengths spread by {:.0}%: with prefill and decode in one pass, a closed loop of one output length stays in waves that measured runs come out of (TTFT up to a wave's prefill); to compare with its rows, give --output-len uniform:LO:HI",
            crate::drive::engine::closed::MIXED_OUTPUT_SPREAD * 100.0
        );
    }
}

#[cfg(not(feature = "embedded-mock"))]
pub(super) async fn start_mock(_s: &ServerArgs) -> anyhow::Result<(String, Option<Mock>)> {
    anyhow::bail!("no --url given and this build has no embedded mock (feature embedded-mock)")
}

/// Resolves where a run goes, once: the engine path with `--simulate` (nothing started), else
/// [`connect`] (a server, or the embedded mock started here and returned).
pub(super) async fn destination(
    s: &ServerArgs,
    timeouts: &Timeouts,
) -> anyhow::Result<(Destination, Option<Mock>)> {
    if s.simulate {
        return Ok((engine_path(s)?, None));
    }
    let (target, mock) = connect(s, timeouts).await?;
    Ok((Destination::server(target), mock))
}

/// A run on the engine path (`--simulate`): the engine's target and the mock's configuration,
/// checked; nothing is started.
#[cfg(feature = "embedded-mock")]
fn engine_path(s: &ServerArgs) -> anyhow::Result<Destination> {
    let config = s.mock_config()?;
    eprintln!(
        "simulating the embedded mock's engine (preset {}) on its exact virtual clock",
        s.mock_name()
    );
    note_model_alone(&config);
    let d = Destination {
        target: s.engine_target(),
        engine: Some(config),
    };
    Ok(d)
}

#[cfg(not(feature = "embedded-mock"))]
fn engine_path(_s: &ServerArgs) -> anyhow::Result<Destination> {
    anyhow::bail!("--simulate needs a build with the embedded mock (feature embedded-mock)")
}

/// The command line for the manifest, with any `--api-key` value and the `user:password@` of any
/// URL removed.
pub(super) fn redact_args(args: impl Iterator<Item = String>) -> String {
    let mut out = Vec::new();
    let mut hide_next = false;
    for a in args.map(|a| net::redact::redact_text(&a)) {
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

pub(super) fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    parse_duration_of("duration", s)
}

/// A byte count: a whole number with an optional unit, B, kB, MB, GB (powers of 1,000) or KiB,
/// MiB, GiB (powers of 1,024); at least 1 kB.
pub(super) fn parse_bytes(name: &str, s: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => anyhow::bail!("--{name} {s:?}: expected bytes, e.g. 64MiB, 4MB, 500kB"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("--{name} {s:?}: expected bytes, e.g. 64MiB, 4MB, 500kB"))?;
    match n.checked_mul(mult) {
        Some(b) if b >= 1_000 => Ok(b),
        _ => anyhow::bail!("--{name} {s:?}: must be at least 1kB and fit in 64 bits"),
    }
}

/// A duration flag ([`crate::plan::duration::parse_secs`]: a number with ms, s, m or h, seconds
/// without a unit), above zero.
pub(super) fn parse_duration_of(name: &str, s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let v = crate::plan::duration::parse_secs(s)
        .ok_or_else(|| anyhow::anyhow!("--{name} {s:?}: expected e.g. 60s, 5m, 500ms"))?;
    secs(name, v)
}

/// The default results file of a `kind` run: `results/KIND-<unix seconds>.jsonl`.
pub(super) fn default_out(kind: &str) -> PathBuf {
    let t = net::unix::unix_s_now();
    PathBuf::from(format!("results/{kind}-{t}.jsonl"))
}

/// The token ids of generated prompts, `[min, max)`: the default suits tiny test models with a
/// 4,096-token vocabulary.
#[derive(Args, Debug)]
pub(super) struct IdRange {
    /// Smallest prompt token id.
    #[arg(long, default_value_t = 100)]
    token_id_min: u32,
    /// Prompt token ids are below this.
    #[arg(long, default_value_t = 4000)]
    token_id_max: u32,
}

impl IdRange {
    /// The range, `(min, max)`.
    pub(super) fn range(&self) -> (u32, u32) {
        (self.token_id_min, self.token_id_max)
    }
}

/// Says that a run was simulated, and how much model time it covered in how much wall time.
pub(super) fn simulated_note(wall0: std::time::Instant, model: Duration, engine_path: bool) {
    let how = if engine_path {
        "the embedded mock's engine on its exact virtual clock"
    } else {
        "the embedded mock over HTTP on a paused clock"
    };
    eprintln!(
        "simulated run ({how}): {:.2} s of model time in {:.2} s of wall time",
        model.as_secs_f64(),
        wall0.elapsed().as_secs_f64()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn with_an_api_key_the_url_s_credentials_are_not_sent() {
        use super::without_credentials as strip;
        assert_eq!(
            strip("http://u:p@127.0.0.1:30000"),
            "http://127.0.0.1:30000"
        );
        assert_eq!(strip("https://u@h.example/v1/"), "https://h.example/v1/");
        assert_eq!(strip("http://h:1/base"), "http://h:1/base");
    }
}
