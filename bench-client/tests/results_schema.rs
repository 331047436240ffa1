//! Results files of schema 1 (written by the client before schema 2, committed under
//! `fixtures/results/`) read back to the same records as the schema-2 file of the same run: the
//! measurement replayed from each trace and `bench-client report` (table and JSON) give the same
//! numbers from both files, and a 128-token request's schema-2 record is at most 3 KB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use bench_client::measure::measure;
use bench_client::results::{read_records, Record, RecordWriter, SCHEMA};
use bench_client::trace::{Chunk, Dialect, RequestTrace, StreamEnd, TokenAttribution, Usage};

/// The record size the results file promises for a 128-token request.
const MAX_RECORD_BYTES: usize = 3 * 1024;

fn fixture(name: &str) -> PathBuf {
    support::fixture("results", name)
}

/// The schema-1 fixture rewritten by this build, with its manifest beside it.
fn rewrite(old: &Path, dir: &Path) -> PathBuf {
    let new = dir.join(old.file_name().unwrap());
    let mut w = RecordWriter::open(&new).unwrap();
    w.append_all(&read_records(old).unwrap()).unwrap();
    let manifest = format!("{}.manifest.jsonl", old.display());
    if Path::new(&manifest).exists() {
        std::fs::copy(&manifest, format!("{}.manifest.jsonl", new.display())).unwrap();
    }
    new
}

fn report(path: &Path, format: &str) -> String {
    let o = support::run(&["report", path.to_str().unwrap(), "--format", format]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn schema_1_and_schema_2_files_of_one_run_give_the_same_numbers() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "load-sglang.jsonl",
        "load-openai.jsonl",
        "sweep-two-point.jsonl",
    ] {
        let old = fixture(name);
        let text = std::fs::read_to_string(&old).unwrap();
        assert!(
            !text.contains("\"schema\""),
            "{name} is not a schema-1 file"
        );
        let new = rewrite(&old, dir.path());
        let (a, b) = (read_records(&old).unwrap(), read_records(&new).unwrap());
        assert!(!a.is_empty(), "{name}");
        assert!(a.iter().all(|r| r.schema == 1) && b.iter().all(|r| r.schema == SCHEMA));
        // The same records, traces included: nothing was lost in the compact form.
        let same_schema = |r: &Record| Record {
            schema: 0,
            ..r.clone()
        };
        assert_eq!(
            a.iter().map(same_schema).collect::<Vec<_>>(),
            b.iter().map(same_schema).collect::<Vec<_>>(),
            "{name}"
        );
        // Replayed measurements.
        for (ra, rb) in a.iter().zip(&b) {
            for (ta, tb) in [
                (ra.trace.as_ref(), rb.trace.as_ref()),
                (
                    ra.two_point.as_ref().and_then(|t| t.trace_a.as_ref()),
                    rb.two_point.as_ref().and_then(|t| t.trace_a.as_ref()),
                ),
            ] {
                if let (Some(ta), Some(tb)) = (ta, tb) {
                    assert_eq!(format!("{:?}", measure(ta)), format!("{:?}", measure(tb)));
                }
            }
        }
        for format in ["table", "json"] {
            assert_eq!(
                report(&old, format),
                report(&new, format),
                "{name} {format}"
            );
        }
        let old_bytes = text.len();
        let new_bytes = std::fs::metadata(&new).unwrap().len() as usize;
        assert!(new_bytes < old_bytes, "{name}: {new_bytes} >= {old_bytes}");
    }
}

#[test]
fn a_record_of_a_128_token_request_is_at_most_3_kb() {
    // The fixtures' streams, as the mock sent them.
    let dir = tempfile::tempdir().unwrap();
    for name in ["load-sglang.jsonl", "load-openai.jsonl"] {
        let new = rewrite(&fixture(name), dir.path());
        for line in std::fs::read_to_string(&new).unwrap().lines() {
            let r: Record = serde_json::from_str(line).unwrap();
            assert_eq!(r.output_tokens, 128, "{name}");
            assert!(line.len() <= MAX_RECORD_BYTES, "{name}: {} B", line.len());
        }
    }
    // The longest such stream: 128 events of one token each (1 to 7 bytes of text), usage on every
    // one, 1-31 ms apart, kernel stamps and a send delay.
    let mut chunks = Vec::new();
    let mut at = 180_123_456u64;
    for k in 1..=128u32 {
        at += 1_000_000 + u64::from(k) * 234_567;
        chunks.push(Chunk {
            at_ns: at,
            tokens: Some(1),
            text_len: 1 + k % 7,
            usage: Some(Usage {
                prompt_tokens: Some(1024),
                completion_tokens: Some(k),
                cached_tokens: Some(512),
            }),
            finish_reason: (k == 128).then(|| "length".into()),
            ..Chunk::default()
        });
    }
    let trace = RequestTrace {
        rid: "ld-5eed-1764590000000-1999".into(),
        dialect: Dialect::Sglang,
        prompt_tokens_sent: Some(1024),
        max_tokens: 128,
        status: Some(200),
        headers_ns: Some(150_000),
        reads: 128,
        chunks,
        done_ns: Some(at + 20_000),
        end: StreamEnd::Done,
        end_ns: at + 25_000,
        attribution: TokenAttribution::ServerCumulative,
        stamps: bench_client::trace::Stamps::Kernel,
        send_delay_ns: Some(12_345),
        output_ids: None,
    };
    let info = bench_client::results::LoadInfo {
        index: 1999,
        shard: Default::default(),
        seed: 0x5eed,
        start_unix_ms: 1_764_590_000_000,
        scheduled_ns: 12_345_678_901,
        sent_ns: 12_345_691_246,
        client_queue_ns: 12_345,
        ttft_from_schedule_ms: None,
        prefix_group: None,
        session: None,
    };
    let rec = bench_client::results::load_record(trace, 1024, info);
    let line = serde_json::to_string(&rec).unwrap();
    assert!(line.len() <= MAX_RECORD_BYTES, "{} B: {line}", line.len());
}
