//! `long-prompt`: 185,000-token prompts: body serialisation outside the clock, TTFT against ground
//! truth.

use anyhow::{anyhow, Result};
use bench_client::api::Dialect;
use bench_client::measure::measure;
use bench_client::net;
use bench_client::net::stamped::Stamping;
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{RequestSpec, Timeouts};
use serde_json::json;
use tokio::time::Instant;

use crate::client::{bench_stamping, multi_thread_runtime, paused_runtime, target};
use crate::lags::lags;
use crate::mock::Mock;
use crate::report::Report;
use crate::DEMO;

const LONG: u32 = 185_000;
const LONG_REQUESTS: usize = 10;

pub(crate) fn run() -> Result<Report> {
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
        r.dist_row(
            format!(
                "body build + serialise, {} ({:.2} MB)",
                dialect.as_str(),
                size as f64 / 1e6
            ),
            "- (outside the clock)",
            &times,
        );
        r.set_dist(&format!("serialise_{}", dialect.as_str()), &times);
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
    r.dist_row(
        format!("TTFT - ground truth, real time, {LONG}-token prompt ({LONG_REQUESTS} requests)"),
        "small; no serialisation inside",
        &long.first,
    );
    r.dist_row(
        format!("TTFT - ground truth, real time, 1000-token prompt ({LONG_REQUESTS} requests)"),
        "-",
        &short.first,
    );
    r.dist_row(
        format!("client TTFT, {LONG}-token prompt (for scale)"),
        "-",
        &ttft,
    );
    r.row(
        "failed requests",
        "0",
        format!("{}", long.failed + short.failed),
    );
    r.set("paused_diff_ms", json!(paused_diff));
    r.set_dist("real_long_diff", &long.first);
    r.set_dist("real_short_diff", &short.first);
    r.set_dist("real_long_ttft", &ttft);
    Ok(r)
}
