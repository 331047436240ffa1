//! Every dialect's sweep records, against the real mock, match the committed JSON Schema.

use crate::common::{paused_runtime, preset, start};
use bench_client::api::Dialect;
use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::net::stamped::Stamping;
use bench_client::plan::Timeouts;
use bench_client::Target;
use std::time::Duration;

#[test]
fn records_of_every_dialect_match_the_schema() {
    let schema: serde_json::Value = serde_json::from_str(include_str!(
        "../../../bench-client/schema/record.schema.json"
    ))
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    paused_runtime().block_on(async {
        for dialect in [Dialect::Sglang, Dialect::OpenAi, Dialect::OpenAiChat] {
            let server = start(preset("small-cpu-demo")).await;
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("r.jsonl");
            let cfg = SweepConfig {
                stamping: Stamping::Socket,
                contexts: vec![64, 256],
                output_tokens: 12,
                runs: 2,
                warmup: 0,
                seed: 3,
                timeouts: Timeouts::default(),
                crash_wait: Duration::from_secs(5),
                command: "test".into(),
                ..SweepConfig::new(out.clone())
            };
            let target = Target {
                base_url: server.url(),
                dialect,
                model: Some("mock/small-cpu-demo".into()),
                api_key: None,
            };
            let outcome = run_sweep(&Destination::server(target), &cfg).await.unwrap();
            assert_eq!(outcome.records.len(), 4, "{dialect:?}");
            let text = std::fs::read_to_string(&out).unwrap();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let errors: Vec<String> = validator
                    .iter_errors(&v)
                    .map(|e| format!("{e} at {}", e.instance_path))
                    .collect();
                assert!(errors.is_empty(), "{dialect:?}: {errors:?}");
                assert!(v["error"].is_null(), "{dialect:?}: {}", v["error"]);
            }
            server.shutdown().await;
        }
    });
}
