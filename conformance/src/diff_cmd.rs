//! `conformance diff`: the differential check between a real server and the mock.

use clap::Args;
use conformance::diff::{self, Answer, BatteryOptions, Recording};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["real", "recorded"])))]
pub struct DiffArgs {
    /// Base URL of the real server (SGLang) to hold the mock against.
    #[arg(long)]
    real: Option<String>,
    /// A recorded battery (a directory written by `--save`) instead of a live server.
    #[arg(long, conflicts_with_all = ["mock", "save"])]
    recorded: Option<PathBuf>,
    /// Base URL of a running mock; when omitted the mock is started in-process with the settings
    /// the real server reports in /server_info.
    #[arg(long)]
    mock: Option<String>,
    /// An extra setting of the embedded mock (repeatable), as `mock-server --set`.
    #[arg(long = "mock-set", value_name = "KEY=VALUE", value_parser = bench_client::cli::parse_kv)]
    mock_set: Vec<(String, String)>,
    /// The known-differences list (default: the committed conformance/known-differences.toml).
    #[arg(long)]
    known: Option<PathBuf>,
    /// Save the real server's answers here as a recorded battery.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Seed of the battery's prompts (default: from the clock, so the server's prefix cache holds none of them).
    #[arg(long)]
    seed: Option<u64>,
    /// Prompt length of the ordinary cases.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(2..))]
    prompt_tokens: u32,
    /// Output tokens per request.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_s: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Print only the new differences and the summary, not the known ones.
    #[arg(long)]
    hide_known: bool,
}

/// Runs the check; 0 when every difference is known, 1 when one is not, 2 on an error.
pub async fn run(a: DiffArgs) -> ExitCode {
    match run_inner(a).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run_inner(a: DiffArgs) -> anyhow::Result<bool> {
    let known_text = match &a.known {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| anyhow::anyhow!("--known {}: {e}", p.display()))?,
        None => diff::KNOWN_DIFFERENCES.to_string(),
    };
    let known = diff::parse_known(&known_text).map_err(|e| anyhow::anyhow!("known list: {e}"))?;
    let report = match (&a.real, &a.recorded) {
        (_, Some(dir)) => diff::against_recording(dir, &known).await?,
        (Some(real), None) => live(&a, real, &known).await?,
        (None, None) => anyhow::bail!("give --real URL or --recorded DIR"),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", diff::render(&report, !a.hide_known));
    }
    Ok(report.passed())
}

async fn live(a: &DiffArgs, real: &str, known: &[diff::Known]) -> anyhow::Result<diff::DiffReport> {
    let timeout = Duration::from_secs(a.timeout_s);
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        let http = http.clone();
        let url = format!("{}{path}", real.trim_end_matches('/'));
        async move {
            let r = http.get(&url).timeout(timeout).send().await.ok()?;
            if !r.status().is_success() {
                return None;
            }
            r.json::<Value>().await.ok()
        }
    };
    let info = match get("/server_info").await {
        Some(v) => v,
        None => get("/get_server_info").await.ok_or_else(|| {
            anyhow::anyhow!("{real}: neither /server_info nor /get_server_info answered with JSON; is it an SGLang server?")
        })?,
    };
    let models = get("/v1/models").await;
    let first = models.as_ref().and_then(|m| m.get("data")?.get(0).cloned());
    let max_len = first
        .as_ref()
        .and_then(|m| m.get("max_model_len")?.as_u64());
    let model = info
        .get("served_model_name")
        .and_then(Value::as_str)
        .or_else(|| first.as_ref()?.get("id")?.as_str())
        .unwrap_or("default")
        .to_string();
    let mut settings = diff::mock_settings(&info, max_len);
    settings.extend(a.mock_set.iter().cloned());
    let context = settings
        .iter()
        .find(|(k, _)| k == "context_length")
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .unwrap_or(4096);
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let cases = diff::battery(&BatteryOptions {
        model,
        prompt_tokens: a.prompt_tokens,
        too_long_tokens: context.saturating_add(904),
        max_tokens: a.max_tokens,
        seed,
    });
    let embedded = match &a.mock {
        Some(_) => None,
        None => Some(diff::start_mock(&settings).await?),
    };
    let mock_url = match (&a.mock, &embedded) {
        (Some(u), _) => u.clone(),
        (None, Some(m)) => m.url(),
        (None, None) => anyhow::bail!("no mock to compare with"),
    };
    let mut pairs: Vec<(Answer, Answer)> = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        eprintln!("[{}/{}] {}", i + 1, cases.len(), c.name);
        let r = diff::send(&http, real, c, timeout).await;
        let m = diff::send(&http, &mock_url, c, timeout).await;
        pairs.push((r, m));
    }
    if let Some(m) = embedded {
        m.shutdown().await;
    }
    if let Some(dir) = &a.save {
        let version = info.get("version").and_then(Value::as_str).unwrap_or("?");
        let rec = Recording {
            server: format!("SGLang {version} at {real}"),
            recorded_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            mock_settings: settings.clone(),
            seed,
        };
        let real_answers: Vec<Answer> = pairs.iter().map(|(r, _)| r.clone()).collect();
        diff::save(dir, &rec, &real_answers)
            .map_err(|e| anyhow::anyhow!("--save {}: {e}", dir.display()))?;
        eprintln!("saved {} answers to {}", real_answers.len(), dir.display());
    }
    Ok(diff::diff(&pairs, known))
}
