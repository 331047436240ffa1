//! The live protocol checks (`conformance --url`) run against the mock, so the mock passes exactly
//! what a real SGLang server passes, and a mock without a prefix cache is told apart.

use bench_client::api::Dialect;
use conformance::checks::{run_checks, CheckOptions, CheckResult, Outcome};

use crate::common;

fn outcome(results: &[CheckResult], id: &str) -> Outcome {
    results
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("no check {id}"))
        .outcome
}

async fn run(cfg: mock_server::Config, dialect: Option<Dialect>) -> Vec<CheckResult> {
    run_with(cfg, dialect, CheckOptions::new(String::new()).prompt_tokens).await
}

async fn run_with(
    cfg: mock_server::Config,
    dialect: Option<Dialect>,
    prompt_tokens: u32,
) -> Vec<CheckResult> {
    let server = common::start(cfg).await;
    let mut opts = CheckOptions::new(server.url());
    opts.dialect = dialect;
    opts.prompt_tokens = prompt_tokens;
    let results = run_checks(opts).await;
    server.shutdown().await;
    results
}

#[test]
fn mock_passes_every_check_in_both_dialects() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        for dialect in [None, Some(Dialect::Sglang), Some(Dialect::OpenAi)] {
            let mut cfg = common::preset("small-cpu-demo");
            cfg.enable_cache_report = true;
            let results = run(cfg, dialect).await;
            let table = conformance::checks::render_table(&results);
            for r in &results {
                assert_eq!(r.outcome, Outcome::Pass, "{dialect:?}: {}\n{table}", r.id);
            }
            assert!(results.len() >= 14, "{table}");
        }
    });
}

#[test]
fn probing_picks_the_native_dialect_on_an_sglang_server() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let results = run(common::preset("small-cpu-demo"), None).await;
        let models = results.iter().find(|r| r.id == "models").unwrap();
        assert!(
            models.evidence.contains("dialect sglang"),
            "{}",
            models.evidence
        );
    });
}

#[test]
fn checks_tell_a_server_without_prefix_cache_apart() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let mut cfg = common::preset("small-cpu-demo");
        cfg.disable_radix_cache = true;
        // Long prompts: the check's fallback compares TTFTs, and the paused clock counts whole
        // milliseconds, so a TTFT of 1-2 ms would differ by half from one request to the next.
        let results = run_with(cfg, Some(Dialect::Sglang), 50_000).await;
        assert_eq!(outcome(&results, "prefix-cache"), Outcome::NotSupported);
        assert_eq!(outcome(&results, "cache-busting"), Outcome::Pass);
    });
}

#[test]
fn checks_fail_when_the_server_is_down() {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let url = server.url();
        server.shutdown().await;
        let results = run_checks(CheckOptions::new(url)).await;
        assert_eq!(outcome(&results, "health"), Outcome::Fail);
        assert_eq!(outcome(&results, "stream-done"), Outcome::Fail);
    });
}
