//! The trace readers and the Mooncake prompt builder against the fixture slice and hand-made lines.

use std::sync::Arc;

use super::*;
use crate::plan::prompt::DEFAULT_ID_RANGE;
use crate::plan::workload::{Planner, Workload};

const MOONCAKE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/traces/mooncake-conversation-300.jsonl"
));
const AZURE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/traces/azure-constructed.csv"
));

fn opts() -> TraceOptions {
    TraceOptions::default()
}

fn parse(text: &str, o: &TraceOptions) -> Result<Trace, TraceError> {
    Trace::parse(text, "t", o)
}

/// The fixture's lines as written: (timestamp, input_length, output_length, hash_ids).
fn raw_lines() -> Vec<(f64, u64, u64, Vec<u64>)> {
    MOONCAKE
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            (
                v["timestamp"].as_f64().unwrap(),
                v["input_length"].as_u64().unwrap(),
                v["output_length"].as_u64().unwrap(),
                ids,
            )
        })
        .collect()
}

fn scaled(n: u64, f: f64) -> usize {
    ((n as f64 * f).round() as usize).max(1)
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What the trace's `hash_ids` say two requests share: their common leading blocks (of those their
/// lengths use) times the block size, cut to the shorter prompt.
fn expected_shared(a: (&[u64], usize), b: (&[u64], usize), block: usize) -> usize {
    fn used(ids: &[u64], len: usize, block: usize) -> &[u64] {
        &ids[..len.div_ceil(block).min(ids.len())]
    }
    let (ua, ub) = (used(a.0, a.1, block), used(b.0, b.1, block));
    let common = ua.iter().zip(ub).take_while(|(x, y)| x == y).count();
    (common * block).min(a.1).min(b.1)
}

fn prompts(trace: Trace, seed: u64, salt: u64) -> Vec<Vec<u32>> {
    let n = trace.len() as u64;
    let p = Planner::new(Workload::Trace(Arc::new(trace)), seed, DEFAULT_ID_RANGE)
        .unwrap()
        .salted(salt);
    (0..n).map(|i| p.request(i).unwrap().prompt).collect()
}

#[test]
fn every_pair_of_the_fixture_shares_exactly_its_common_leading_blocks() {
    let raw = raw_lines();
    assert_eq!(raw.len(), 300);
    for (scale, block) in [(1.0, 512), (1.0 / 32.0, 16)] {
        let trace = parse(MOONCAKE, &TraceOptions { scale, ..opts() }).unwrap();
        assert_eq!(trace.block_size(), block as u32);
        let built = prompts(trace, 7, 3);
        let lens: Vec<usize> = raw.iter().map(|r| scaled(r.1, scale)).collect();
        let (mut sharing, mut deep) = (0, 0);
        for i in 0..raw.len() {
            assert_eq!(built[i].len(), lens[i], "request {i}");
            for j in 0..i {
                let want = expected_shared((&raw[i].3, lens[i]), (&raw[j].3, lens[j]), block);
                let got = common_prefix(&built[i], &built[j]);
                assert_eq!(got, want, "scale {scale}: requests {j} and {i}");
                sharing += usize::from(want > 0);
                deep += usize::from(want >= 2 * block);
            }
        }
        // The slice exercises the rule: nearly every pair shares block 0, 22 pairs two blocks or more.
        assert!(sharing > 40_000 && deep >= 20, "{sharing} {deep}");
    }
}

#[test]
fn blocks_depend_on_the_seed_and_salt_and_not_on_the_request() {
    let t = || parse(MOONCAKE, &opts()).unwrap();
    let a = prompts(t(), 7, 3);
    assert_eq!(a, prompts(t(), 7, 3));
    // Requests 0 and 1 share block 0 (512 tokens); another salt changes it.
    assert_eq!(a[0][..512], a[1][..512]);
    let b = prompts(t(), 7, 4);
    assert_ne!(a[0][0], b[0][0]);
    assert_ne!(a[0][1..512], b[0][1..512]);
    assert_eq!(b[0][..512], b[1][..512]);
}

#[test]
fn a_limited_slice_builds_the_same_prompts_as_the_whole_slice() {
    let whole = prompts(parse(MOONCAKE, &opts()).unwrap(), 1, 1);
    let first = prompts(
        parse(
            MOONCAKE,
            &TraceOptions {
                limit: Some(40),
                ..opts()
            },
        )
        .unwrap(),
        1,
        1,
    );
    assert_eq!(first.len(), 40);
    assert_eq!(first[..], whole[..40]);
}

#[test]
fn the_format_is_told_from_the_content_or_forced() {
    let native = "{\"offset_ms\": 0, \"input_len\": 8, \"output_len\": 2}\n";
    assert_eq!(
        parse(MOONCAKE, &opts()).unwrap().format(),
        TraceFormat::Mooncake
    );
    assert_eq!(parse(AZURE, &opts()).unwrap().format(), TraceFormat::Azure);
    assert_eq!(
        parse(native, &opts()).unwrap().format(),
        TraceFormat::Native
    );
    let e = parse("a,b,c\n1,2,3\n", &opts()).unwrap_err();
    assert_eq!((e.line, e.field), (Some(1), None));
    assert!(e.message.contains("--trace-format"), "{e}");
    // Forced: a Mooncake line read as native names what it lacks.
    let forced = TraceOptions {
        format: Some(TraceFormat::Native),
        ..opts()
    };
    let e = parse(MOONCAKE, &forced).unwrap_err();
    assert_eq!((e.line, e.field), (Some(1), Some("offset_ms")), "{e}");
}

#[test]
fn speedup_limit_and_scale() {
    let raw = raw_lines();
    let t = parse(
        MOONCAKE,
        &TraceOptions {
            speedup: 4.0,
            limit: Some(25),
            scale: 0.1,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(t.len(), 25);
    assert_eq!(t.block_size(), 51);
    let offsets = t.offsets_ns();
    for (i, (r, (input, output))) in raw.iter().zip(t.lengths()).enumerate() {
        let want = ((r.0 - raw[0].0) * 1e6 / 4.0).round() as u64;
        assert_eq!(offsets[i], want, "request {i}");
        assert_eq!(input as usize, scaled(r.1, 0.1));
        assert_eq!(output as usize, scaled(r.2, 0.1));
    }
    // Azure: offsets from the first row, to the 100 ns the dates carry.
    let a = parse(AZURE, &opts()).unwrap();
    assert_eq!(a.len(), 40);
    let o = a.offsets_ns();
    assert_eq!(o[0], 0);
    assert_eq!(o[1], 265_065_500);
    assert_eq!(a.lengths()[0], (1027, 323));
    let fast = parse(
        AZURE,
        &TraceOptions {
            speedup: 2.0,
            scale: 0.001,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(fast.offsets_ns()[1], 132_532_750);
    // 1027 and 323 tokens at 0.001: rounded, at least 1.
    assert_eq!(fast.lengths()[0], (1, 1));
    for bad in [
        TraceOptions {
            speedup: 0.0,
            ..opts()
        },
        TraceOptions {
            scale: f64::NAN,
            ..opts()
        },
        TraceOptions {
            limit: Some(0),
            ..opts()
        },
        TraceOptions {
            block_size: 0,
            ..opts()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn a_line_past_the_limit_is_not_read() {
    let text = "{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [0]}\nnot json\n";
    let limited = TraceOptions {
        limit: Some(1),
        ..opts()
    };
    assert_eq!(parse(text, &limited).unwrap().len(), 1);
    assert_eq!(parse(text, &opts()).unwrap_err().line, Some(2));
}

/// Each bad line is refused with its line and field.
#[test]
fn bad_lines_name_their_line_and_field() {
    let m = |body: &str| {
        format!("{{\"timestamp\": 0, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [0]}}\n{body}\n")
    };
    // (text, line, field, what the message says)
    let cases: Vec<(String, u64, Option<&str>, &str)> = vec![
        (m("{\"timestamp\": 5, \"input_length\": 9,"), 2, None, "not valid JSON"),
        (
            m("{\"timestamp\": 5, \"output_length\": 2, \"hash_ids\": []}"),
            2,
            Some("input_length"),
            "missing",
        ),
        (
            m("{\"timestamp\": 5, \"input_length\": -3, \"output_length\": 2, \"hash_ids\": []}"),
            2,
            Some("input_length"),
            "at least 1",
        ),
        (
            m("{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 0, \"hash_ids\": []}"),
            2,
            Some("output_length"),
            "at least 1",
        ),
        (
            m("{\"timestamp\": 5, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1, -2]}"),
            2,
            Some("hash_ids"),
            "non-negative",
        ),
        (
            m("{\"timestamp\": \"soon\", \"input_length\": 3, \"output_length\": 1, \"hash_ids\": []}"),
            2,
            Some("timestamp"),
            "a number",
        ),
        (
            "{\"timestamp\": 5, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [0]}\n{\"timestamp\": 4, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [0]}\n".into(),
            2,
            Some("timestamp"),
            "backwards",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,5,5\n2023-11-16 18:15:46.5,5,5\n".into(),
            3,
            Some("TIMESTAMP"),
            "backwards",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,5,5\nyesterday,5,5\n".into(),
            3,
            Some("TIMESTAMP"),
            "not a date",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,5\n2023-11-16 18:15:47,-5,5\n".into(),
            3,
            Some("ContextTokens"),
            "at least 1",
        ),
        (
            "{\"offset_ms\": 0, \"input_len\": 8, \"output_len\": 2}\n{\"offset_ms\": 1, \"input_len\": 0, \"output_len\": 2}\n".into(),
            2,
            Some("input_len"),
            "at least 1",
        ),
        // A prompt is built whole: four billion tokens would take 16 GB.
        (
            m("{\"timestamp\": 5, \"input_length\": 4000000000, \"output_length\": 2, \"hash_ids\": [1]}"),
            2,
            Some("input_length"),
            "more than 16777216",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,5\n2023-11-16 18:15:47,4000000000,5\n".into(),
            3,
            Some("ContextTokens"),
            "more than 16777216",
        ),
    ];
    for (text, line, field, says) in cases {
        let e = parse(&text, &opts()).unwrap_err();
        assert_eq!((e.line, e.field), (Some(line), field), "{text}: {e}");
        assert!(e.message.contains(says), "{text}: {e}");
        assert!(
            e.to_string().starts_with(&format!("trace t line {line}")),
            "{e}"
        );
    }
    for empty in ["", "\n\n", "TIMESTAMP,ContextTokens,GeneratedTokens\n"] {
        let e = parse(empty, &opts()).unwrap_err();
        assert!(e.message.contains("no requests"), "{empty:?}: {e}");
    }
}

#[test]
fn azure_dates_with_an_offset_and_without_are_read() {
    let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.0097640+00:00,10,2\n2024-05-10 02:00:00.5+02:00,10,2\n2024-05-10 00:00:01,10,2\n";
    let t = parse(text, &opts()).unwrap();
    assert_eq!(t.offsets_ns(), [0, 490_236_000, 990_236_000]);
}

/// Moved from `workload`: the native format, as it was read before.
#[test]
fn native_traces_are_validated() {
    let ok = "{\"offset_ms\": 0, \"input_len\": 8, \"output_len\": 2}\n{\"offset_ms\": 5.5, \"input_len\": 9, \"output_len\": 3, \"prefix_group\": 1}\n";
    assert_eq!(parse(ok, &opts()).unwrap().len(), 2);
    let back = "{\"offset_ms\": 5, \"input_len\": 8, \"output_len\": 2}\n{\"offset_ms\": 1, \"input_len\": 8, \"output_len\": 2}\n";
    assert!(parse(back, &opts())
        .unwrap_err()
        .to_string()
        .contains("line 2"));
    let zero = "{\"offset_ms\": 0, \"input_len\": 0, \"output_len\": 2}\n";
    assert!(parse(zero, &opts()).is_err());
    let unknown = "{\"offset_ms\": 0, \"input_len\": 8, \"output_len\": 2, \"group\": 1}\n";
    assert!(parse(unknown, &opts())
        .unwrap_err()
        .message
        .contains("unknown field \"group\""));
}

#[test]
fn native_groups_share_exactly_their_scaled_prefix() {
    let text = "{\"offset_ms\": 0, \"input_len\": 60, \"output_len\": 2, \"prefix_group\": 1}\n{\"offset_ms\": 2, \"input_len\": 50, \"output_len\": 2, \"prefix_group\": 1}\n{\"offset_ms\": 3, \"input_len\": 30, \"output_len\": 2}\n";
    let o = TraceOptions {
        prefix_len: 40,
        scale: 0.5,
        ..opts()
    };
    let t = parse(text, &o).unwrap();
    assert_eq!(t.offsets_ns(), [0, 2_000_000, 3_000_000]);
    let p = prompts(t, 5, 5);
    assert_eq!((p[0].len(), p[1].len(), p[2].len()), (30, 25, 15));
    assert_eq!(common_prefix(&p[0], &p[1]), 20);
    assert_eq!(common_prefix(&p[0], &p[2]), 0);
    // A group's request shorter than the prefix is refused, with its line.
    let short = TraceOptions {
        prefix_len: 55,
        ..opts()
    };
    let e = parse(text, &short).unwrap_err();
    assert_eq!((e.line, e.field), (Some(2), Some("input_len")), "{e}");
}
