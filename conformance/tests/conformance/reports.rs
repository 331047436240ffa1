//! Reports of a fixed, seeded run against the mock on the paused clock, snapshotted in every output
//! format; and the merge property: merging the reports of two result sets equals the report of both.

use std::time::Duration;

use bench_client::api::Dialect;
use bench_client::drive::sweep::{run_sweep, SweepConfig};
use bench_client::drive::Destination;
use bench_client::net::stamped::Stamping;
use bench_client::plan::Timeouts;
use bench_client::report::export::{csv, json, table};
use bench_client::report::Report;
use bench_client::results::{read_records, Method, Record};
use proptest::prelude::*;

use crate::common;

fn seeded_records() -> Vec<Record> {
    let rt = common::paused_runtime();
    rt.block_on(async {
        let server = common::start(common::preset("small-cpu-demo")).await;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("r.jsonl");
        let cfg = SweepConfig {
            stamping: Stamping::Socket,
            contexts: vec![1000, 4000, 16_000],
            output_tokens: 32,
            method: Method::TwoPoint,
            seed: 42,
            timeouts: Timeouts::default(),
            crash_wait: Duration::from_secs(0),
            command: "conformance reports".into(),
            ..SweepConfig::new(out.clone())
        };
        run_sweep(
            &Destination::server(common::target(&server, Dialect::Sglang)),
            &cfg,
        )
        .await
        .unwrap();
        server.shutdown().await;
        read_records(&out).unwrap()
    })
}

#[test]
fn seeded_run_reports_are_stable() {
    let recs = seeded_records();
    assert_eq!(
        recs.len(),
        3 * 3 * 2,
        "3 contexts x 3 runs x (streaming + two-point)"
    );
    let report = Report::from_records(&recs);
    insta::assert_snapshot!("seeded_table", table::sweep(&report));
    insta::assert_snapshot!("seeded_json", json::sweep(&report));
    insta::assert_snapshot!("seeded_csv", csv::sweep(&report).unwrap());
    // The same seeded run twice gives the same report.
    let again = Report::from_records(&seeded_records());
    assert_eq!(table::sweep(&again), table::sweep(&report));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    /// merge(report(a), report(b)) == report(a ++ b), for any split of a result set.
    #[test]
    fn merging_reports_equals_reporting_the_concatenation(cut in 0usize..=18, rot in 0usize..18) {
        let mut recs = RECORDS.with(|r| r.clone());
        let n = recs.len();
        recs.rotate_left(rot % n);
        let cut = cut.min(recs.len());
        let (a, b) = recs.split_at(cut);
        let merged = Report::from_records(a).merge(Report::from_records(b));
        let whole = Report::from_records(&recs);
        prop_assert_eq!(json::sweep(&merged), json::sweep(&whole));
        prop_assert_eq!(table::sweep(&merged), table::sweep(&whole));
    }
}

thread_local! {
    static RECORDS: Vec<Record> = seeded_records();
}
