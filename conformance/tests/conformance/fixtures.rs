//! Fixture transcripts (fixtures/streams, constructed and recorded) replayed through the client's
//! decoding and measurement, snapshotted with insta; and decoding invariance under any split of the
//! same bytes into reads.

use std::path::{Path, PathBuf};

use bench_client::measure::measure;
use bench_client::stream::replay::{self, Read, Transcript};
use proptest::prelude::*;

fn transcripts() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/streams");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let name = p
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .replace(['/', '\\'], "__");
                out.push((name.trim_end_matches(".json").to_string(), p));
            }
        }
    }
    out.sort();
    assert!(
        out.len() >= 10,
        "expected the fixture transcripts, found {}",
        out.len()
    );
    out
}

#[test]
fn every_transcript_replays_to_its_snapshot() {
    for (name, path) in transcripts() {
        let t = replay::load(&path).unwrap();
        assert!(
            !t.source.trim().is_empty(),
            "{name}: a transcript must say where its format comes from"
        );
        if !t.recorded {
            assert!(
                t.source.contains("constructed"),
                "{name}: a constructed transcript must say so"
            );
        }
        let trace = replay::replay(&t);
        let measurement = measure(&trace).map_err(|e| e.to_string());
        let failure = trace
            .failure()
            .map(|f| format!("{}: {}", f.kind.as_str(), f.message));
        insta::assert_json_snapshot!(
            name.clone(),
            serde_json::json!({
                "description": t.description,
                "trace": trace,
                "failure": failure,
                "measurement": measurement,
            })
        );
    }
}

/// What the constructed fixtures must show, asserted directly (the snapshots pin the rest).
#[test]
fn fixture_semantics() {
    let load = |n: &str| {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/streams")
            .join(n);
        replay::replay(&replay::load(&p).unwrap())
    };
    let spec = measure(&load("sglang-native-speculative.json")).unwrap();
    assert_eq!(spec.tokens_per_chunk, vec![3, 4, 2, 3]);
    // 9 tokens after the first chunk over 90 ms.
    assert!((spec.decode_tok_s.unwrap() - 100.0).abs() < 1e-9);
    assert!((spec.naive_decode_tok_s.unwrap() - 11.0 / 0.09).abs() < 1e-9);
    assert!((spec.ttft_ms - 80.0).abs() < 1e-9);

    let chat = measure(&load("openai-chat-role-first.json")).unwrap();
    assert!(
        (chat.ttft_ms - 45.0).abs() < 1e-9,
        "the role-only chunk is not the first token"
    );

    let usage = measure(&load("openai-completions-usage-chunk.json")).unwrap();
    assert_eq!(usage.completion_tokens, Some(4));

    let vllm = measure(&load("vllm-completions-continuous-usage.json")).unwrap();
    assert_eq!(vllm.tokens_per_chunk, vec![2, 1, 3, 2]);

    for failing in [
        "sglang-native-inband-error.json",
        "sglang-native-cut-no-done.json",
        "openai-http-400.json",
    ] {
        let t = load(failing);
        assert!(t.failure().is_some(), "{failing} must be a failed request");
        assert!(
            measure(&t).is_err(),
            "{failing} must not be measured as a success"
        );
    }
    let hit = load("sglang-native-cache-hit.json");
    assert_eq!(hit.cached_tokens(), Some(31));
    let rec = bench_client::results::Record::streaming(hit, 32, 0);
    assert!(rec.contaminated);
}

/// All the bytes of a transcript, in one string.
fn all_bytes(t: &Transcript) -> String {
    t.reads.iter().map(|r| r.data.as_str()).collect()
}

fn resplit(t: &Transcript, cuts: &[usize]) -> Transcript {
    let bytes = all_bytes(t);
    let b = bytes.as_bytes();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (b.len() + 1)).collect();
    points.push(0);
    points.push(b.len());
    points.sort_unstable();
    points.dedup();
    let mut reads = Vec::new();
    for w in points.windows(2) {
        // Reads are bytes; the transcript format stores text, so only cut at char boundaries.
        if let Some(s) = bytes.get(w[0]..w[1]) {
            reads.push(Read {
                at_ms: 10.0,
                data: s.to_string(),
            });
        } else {
            return single(t);
        }
    }
    Transcript { reads, ..t.clone() }
}

fn single(t: &Transcript) -> Transcript {
    Transcript {
        reads: vec![Read {
            at_ms: 10.0,
            data: all_bytes(t),
        }],
        ..t.clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any split of the same bytes into reads decodes to the same events and the same metrics.
    #[test]
    fn decoding_is_invariant_to_read_boundaries(which in 0usize..64, cuts in prop::collection::vec(any::<usize>(), 0..40)) {
        let all = transcripts();
        let (name, path) = &all[which % all.len()];
        let t = replay::load(path).unwrap();
        let whole = replay::replay(&single(&t));
        let split = replay::replay(&resplit(&t, &cuts));
        prop_assert_eq!(&whole.chunks, &split.chunks, "{}", name);
        prop_assert_eq!(&whole.end, &split.end, "{}", name);
        prop_assert_eq!(measure(&whole).ok(), measure(&split).ok(), "{}", name);
    }
}
