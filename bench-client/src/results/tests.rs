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
        output_ids: None,
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
fn a_gaps_timeout_says_how_long_after_the_last_chunk() {
    let mut t = sample_trace("a");
    let last = t.chunks.last().unwrap().at_ns;
    t.end = StreamEnd::Timeout {
        phase: crate::trace::TimeoutPhase::Idle,
    };
    t.end_ns = last + 60_000_000_000;
    let msg = t.failure().unwrap().message;
    assert!(
        msg.starts_with("timed out waiting for the next chunk: 60000.0 ms after the last chunk ("),
        "{msg}"
    );
    t.chunks.clear();
    t.end = StreamEnd::Timeout {
        phase: crate::trace::TimeoutPhase::FirstToken,
    };
    let msg = t.failure().unwrap().message;
    assert!(
        msg.starts_with("timed out waiting for the first token: "),
        "{msg}"
    );
    assert!(msg.ends_with(" ms after the send"), "{msg}");
}

/// `r.jsonl` in `dir`, holding one record written whole.
fn one_record_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("r.jsonl");
    let mut w = RecordWriter::open(&path).unwrap();
    w.append(&Record::streaming(sample_trace("a"), 16, 0))
        .unwrap();
    path
}

#[test]
fn a_whole_last_line_that_is_no_record_is_an_error_not_a_torn_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = one_record_file(dir.path());
    // A record's field spoiled, or a foreign line, with its newline: no killed writer leaves it.
    for bad in ["{\"foo\":1}\n", "{\"schema\":2,\"ttft_ms\":\"abc\"}\n"] {
        let spoiled = dir.path().join("spoiled.jsonl");
        std::fs::copy(&path, &spoiled).unwrap();
        let mut f = OpenOptions::new().append(true).open(&spoiled).unwrap();
        f.write_all(bad.as_bytes()).unwrap();
        let err = read_records(&spoiled).unwrap_err().to_string();
        assert!(err.contains("line 2 is not a record"), "{err}");
    }
}

#[test]
fn a_torn_line_longer_than_a_read_block_is_cut_and_a_device_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = one_record_file(dir.path());
    let whole = std::fs::metadata(&path).unwrap().len();
    // A torn line of 200 KB: three blocks back to the last newline.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&vec![b'x'; 200_000]).unwrap();
    drop(f);
    let mut w = RecordWriter::open(&path).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
    w.append(&Record::streaming(sample_trace("b"), 16, 1))
        .unwrap();
    let recs = read_records(&path).unwrap();
    assert_eq!(
        recs.iter().map(|r| r.rid.as_str()).collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    // A file that is all one torn line keeps nothing of it.
    let torn = dir.path().join("torn.jsonl");
    std::fs::write(&torn, vec![b'{'; 70_000]).unwrap();
    drop(RecordWriter::open(&torn).unwrap());
    assert_eq!(std::fs::metadata(&torn).unwrap().len(), 0);
    // A device opens without being read: /dev/zero never ends.
    #[cfg(unix)]
    drop(RecordWriter::open("/dev/zero").unwrap());
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

/// A trace with every kind of chunk field: usage that follows the token counts, jumps, and goes
/// missing; server timing that appears and changes; finish reasons, errors, flags, unknown counts,
/// instants out of order.
fn varied_trace() -> RequestTrace {
    use crate::trace::ServerTiming;
    let mut t = sample_trace("v");
    let usage = |cum| {
        Some(Usage {
            prompt_tokens: Some(16),
            completion_tokens: Some(cum),
            cached_tokens: Some(4),
        })
    };
    let timing = |q, f| ServerTiming::reported(q, f).map(std::sync::Arc::new);
    t.chunks = vec![
        Chunk {
            at_ns: 5,
            role_only: true,
            ..Chunk::default()
        },
        Chunk {
            at_ns: 10,
            tokens: Some(2),
            text_len: 3,
            usage: usage(2),
            server_timing: timing(Some(0.25), None),
            content_event: true,
            ..Chunk::default()
        },
        Chunk {
            at_ns: 9,
            tokens: Some(1),
            text_len: 1,
            usage: usage(3),
            server_timing: timing(Some(0.25), None),
            ..Chunk::default()
        },
        Chunk {
            at_ns: 20,
            tokens: None,
            text_len: 2,
            usage: usage(7),
            server_timing: timing(Some(0.25), Some(0.5)),
            ..Chunk::default()
        },
        Chunk {
            at_ns: 30,
            tokens: Some(1),
            text_len: 0,
            usage: None,
            finish_reason: Some("length".into()),
            ..Chunk::default()
        },
        Chunk {
            at_ns: 31,
            usage: usage(8),
            usage_only: true,
            ..Chunk::default()
        },
        Chunk {
            at_ns: u64::MAX,
            error: Some("boom".into()),
            ..Chunk::default()
        },
    ];
    t.stamps = crate::trace::Stamps::Kernel;
    t.send_delay_ns = Some(17);
    t.output_ids = Some(vec![5, 0, u32::MAX]);
    t
}

#[test]
fn a_record_reads_back_the_same_from_its_line() {
    let mut two = Record::streaming(sample_trace("b"), 16, 1);
    two.two_point = Some(TwoPointDetail {
        a_tokens: 1,
        b_tokens: 4,
        t_a_ms: Some(1.0),
        t_b_ms: None,
        cached_tokens_b: None,
        flushed: true,
        trace_a: Some(varied_trace()),
        trace_b: None,
    });
    for rec in [Record::streaming(varied_trace(), 16, 0), two] {
        let line = serde_json::to_string(&rec).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert!(v["trace"]["chunks"].is_object(), "{line}");
        let back: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(back, rec);
    }
}

/// The line schema 1 wrote for `rec`: no `schema` field, each trace's chunks as a list of objects.
pub(crate) fn schema_1_line(rec: &Record) -> String {
    let mut v = serde_json::to_value(rec).unwrap();
    let obj = v.as_object_mut().unwrap();
    obj.remove("schema");
    obj.insert("trace".into(), serde_json::to_value(&rec.trace).unwrap());
    if let Some(tp) = &rec.two_point {
        obj.insert("two_point".into(), serde_json::to_value(tp).unwrap());
        obj["two_point"]["trace_a"] = serde_json::to_value(&tp.trace_a).unwrap();
        obj["two_point"]["trace_b"] = serde_json::to_value(&tp.trace_b).unwrap();
    }
    serde_json::to_string(&v).unwrap()
}

#[test]
fn a_schema_1_line_reads_as_the_same_record() {
    let rec = Record::streaming(varied_trace(), 16, 0);
    let line = schema_1_line(&rec);
    assert!(line.contains("\"chunks\":[{"), "{line}");
    let back: Record = serde_json::from_str(&line).unwrap();
    assert_eq!(back.schema, 1);
    assert_eq!(
        Record {
            schema: SCHEMA,
            ..back
        },
        rec
    );
}

#[test]
fn a_line_of_a_newer_schema_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let mut v = serde_json::to_value(Record::streaming(sample_trace("a"), 16, 0)).unwrap();
    v["schema"] = serde_json::json!(SCHEMA + 1);
    std::fs::write(&path, format!("{v}\n{v}\n")).unwrap();
    let e = read_records(&path).unwrap_err().to_string();
    assert!(
        e.contains("newer bench-client") && e.contains("line 1"),
        "{e}"
    );
}

#[test]
fn chunk_columns_of_unequal_length_are_an_error() {
    let rec = Record::streaming(sample_trace("a"), 16, 0);
    let mut v = serde_json::to_value(&rec).unwrap();
    v["trace"]["chunks"]["text_len"] = serde_json::json!([1]);
    let e = serde_json::from_value::<Record>(v).unwrap_err().to_string();
    assert!(e.contains("unequal length"), "{e}");
}

#[test]
fn the_record_writer_feeds_every_record_and_syncs_at_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let (tx, rx) = std::sync::mpsc::channel();
    let w = RecordWriter::open(&path).unwrap();
    let t = std::thread::spawn(move || write_records(w, &rx));
    for i in 0..5u32 {
        tx.send(Record::streaming(sample_trace(&format!("r{i}")), 16, i))
            .unwrap();
        // Each record is in the file as soon as the writer has it, before any sync.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read_records(&path).unwrap().len() < i as usize + 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "record {i} not written"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    drop(tx);
    t.join().unwrap().unwrap();
    assert_eq!(read_records(&path).unwrap().len(), 5);
}

#[test]
fn failure_kinds_read_and_write_their_names_and_keep_unknown_ones() {
    for name in [
        "connect-refused",
        "stream-cut",
        "flush-refused",
        "no-output",
        "cache-hit",
        "invalid-rate",
        "imported-failure",
        "a-kind-of-a-newer-version",
    ] {
        let k: ErrorKind = serde_json::from_value(serde_json::json!(name)).unwrap();
        assert_eq!(k, name);
        assert_eq!(serde_json::to_value(&k).unwrap(), serde_json::json!(name));
    }
    assert_eq!(
        ErrorKind::parse("stream-cut").request(),
        Some(crate::trace::FailureKind::StreamCut)
    );
    assert_eq!(ErrorKind::parse("cache-hit").request(), None);
    assert_eq!(
        ErrorKind::parse("a-kind-of-a-newer-version"),
        ErrorKind::Other("a-kind-of-a-newer-version".into())
    );
}
