//! The differential check: one battery of requests sent to a real server and to the mock, every
//! difference in behaviour (status, content type, stream end, in-band error) and in fields (JSON
//! key paths, metric names, token counts, error messages) printed, the known ones marked with
//! their reason from the committed list.
//!
//! Two ways to run it: live (`conformance diff --real URL [--mock URL]`, the mock embedded and set
//! up from the real server's `/server_info` when no `--mock` is given), and against a recorded
//! battery (`conformance diff --recorded DIR`), which `cargo test` does with the SGLang recording in
//! `fixtures/diff/`, so every laptop holds the mock against real SGLang with no server running.

mod battery;
mod compare;
mod known;
mod observe;
mod report;
mod run;

pub use battery::{battery, BatteryOptions, Case};
pub use compare::{compare, coverage, Difference, Kind};
pub use known::{matches, parse as parse_known, Known};
pub use observe::{observe, End, Observed, Tokens};
pub use report::{render, DiffReport};
pub use run::{load, mock_settings, save, send, Answer, Recording};

/// The committed list of known differences between SGLang and the mock.
pub const KNOWN_DIFFERENCES: &str = include_str!("../../known-differences.toml");

/// Compares answer pairs (real, mock) of one battery and marks the known differences.
pub fn diff(pairs: &[(Answer, Answer)], known: &[Known]) -> DiffReport {
    let observed: Vec<(Observed, Observed)> = pairs
        .iter()
        .map(|(r, m)| (r.observed(), m.observed()))
        .collect();
    let mut differences: Vec<Difference> = pairs
        .iter()
        .zip(&observed)
        .flat_map(|((r, _), (ro, mo))| compare(&r.case.name, ro, mo))
        .collect();
    let stale = known::apply(&mut differences, known)
        .into_iter()
        .map(|i| known[i].clone())
        .collect();
    let per_request = pairs
        .iter()
        .zip(&observed)
        .filter(|((r, _), _)| !r.case.is_info())
        .map(|(_, (ro, mo))| (ro, mo));
    DiffReport {
        cases: pairs.len(),
        differences,
        stale,
        coverage: coverage(per_request),
    }
}

/// Starts the embedded mock (the default preset) with `settings` on a free loopback port.
pub async fn start_mock(settings: &[(String, String)]) -> anyhow::Result<mock_server::MockServer> {
    let mut config = mock_server::Config::default();
    config
        .set("port", "0")
        .map_err(|e| anyhow::anyhow!("mock setting port=0: {e}"))?;
    for (k, v) in settings {
        config
            .set(k, v)
            .map_err(|e| anyhow::anyhow!("mock setting {k}={v}: {e}"))?;
    }
    mock_server::MockServer::start(config).await
}

/// Sends every recorded case to a fresh embedded mock set up as the recording says, and compares.
pub async fn against_recording(
    dir: &std::path::Path,
    known: &[Known],
) -> anyhow::Result<DiffReport> {
    let order: Vec<String> = battery(&BatteryOptions {
        model: String::new(),
        prompt_tokens: 1,
        too_long_tokens: 1,
        max_tokens: 1,
        seed: 0,
    })
    .into_iter()
    .map(|c| c.name)
    .collect();
    let (rec, real) = load(dir, &order).map_err(anyhow::Error::msg)?;
    let mock = start_mock(&rec.mock_settings).await?;
    let http = reqwest::Client::new();
    let mut pairs = Vec::new();
    for r in real {
        let m = send(
            &http,
            &mock.url(),
            &r.case,
            std::time::Duration::from_secs(60),
        )
        .await;
        pairs.push((r, m));
    }
    mock.shutdown().await;
    Ok(diff(&pairs, known))
}
