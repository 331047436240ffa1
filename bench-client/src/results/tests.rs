use crate::trace::RequestTrace;
use crate::trace::TokenAttribution;
use std::fs::OpenOptions;
use std::io::Write;

use super::*;
use crate::trace::Dialect;
use crate::trace::{Chunk, StreamEnd, Usage};

pub(crate) fn sample_trace(rid: &str) -> RequestTrace {
    let c = |at: u64, cum: u32, t: u32| Chunk {
        at_ns: at,
        tokens: Some(t),
        text_len: t,
        usage: Some(Usage {
            prompt_tokens: Some(16),
            completion_tokens: Some(cum),
            cached_tokens: Some(0),
        }),
        ..Chunk::default()
    };
    RequestTrace {
        rid: rid.into(),
        dialect: Dialect::Sglang,
        prompt_tokens_sent: Some(16),
        max_tokens: 4,
        status: Some(200),
        headers_ns: Some(1_000_000),
        reads: 3,
        chunks: vec![
            c(10_000_000, 2, 2),
            c(20_000_000, 3, 1),
            c(30_000_000, 4, 1),
        ],
        done_ns: Some(31_000_000),
        end: StreamEnd::Done,
        end_ns: 31_000_000,
        attribution: TokenAttribution::ServerCumulative,
        stamps: Default::default(),
        send_delay_ns: None,
    }
}

#[test]
fn torn_last_line_is_tolerated_and_cut_before_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let mut w = RecordWriter::open(&path).unwrap();
    w.append(&Record::streaming(sample_trace("a"), 16, 0))
        .unwrap();
    w.append(&Record::streaming(sample_trace("b"), 16, 1))
        .unwrap();
    drop(w);
    // Simulate a process killed mid-write.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"method\":\"streaming\",\"context_tok")
        .unwrap();
    drop(f);
    let recs = read_records(&path).unwrap();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[1].rid, "b");
    let mut w = RecordWriter::open(&path).unwrap();
    w.append(&Record::streaming(sample_trace("c"), 16, 2))
        .unwrap();
    let recs = read_records(&path).unwrap();
    assert_eq!(
        recs.iter().map(|r| r.rid.as_str()).collect::<Vec<_>>(),
        vec!["a", "b", "c"]
    );
}

#[test]
fn a_group_commit_appends_every_record_in_order_one_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let mut w = RecordWriter::open(&path).unwrap();
    w.append(&Record::streaming(sample_trace("a"), 16, 0))
        .unwrap();
    let batch: Vec<Record> = ["b", "c", "d"]
        .iter()
        .enumerate()
        .map(|(i, rid)| Record::streaming(sample_trace(rid), 16, i as u32 + 1))
        .collect();
    w.append_all(&batch).unwrap();
    w.append_all(&[]).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.ends_with('\n'));
    let recs = read_records(&path).unwrap();
    assert_eq!(
        recs.iter().map(|r| r.rid.as_str()).collect::<Vec<_>>(),
        vec!["a", "b", "c", "d"]
    );
}

#[test]
fn corrupt_middle_line_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let good = serde_json::to_string(&Record::streaming(sample_trace("a"), 16, 0)).unwrap();
    std::fs::write(&path, format!("garbage\n{good}\n")).unwrap();
    let e = read_records(&path).unwrap_err().to_string();
    assert!(e.contains("line 1"), "{e}");
}

#[test]
fn streaming_record_fields() {
    let r = Record::streaming(sample_trace("a"), 16, 0);
    assert_eq!(r.ttft_ms, Some(10.0));
    assert_eq!(r.tokens_per_chunk, vec![2, 1, 1]);
    assert!(!r.contaminated && r.error.is_none());
    let r = Record::streaming(sample_trace("a"), 32, 0);
    assert!(r.contaminated);
}
