//! `calibrate` and `--preset-file` as a user meets them: bad input gives one clear message, the
//! documented exit code and no preset; a good sweep gives a preset the embedded mock runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use crate::support::{run, stderr};

const KIMI: &str = include_str!("../../../fixtures/presets/kimi-k2.6-dflash-8xrtx-pro-6000.toml");

/// A simulated sweep of the embedded mock into `dir/name`, with extra flags.
fn sweep(dir: &Path, name: &str, contexts: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let mut args = vec![
        "sweep",
        "--simulate",
        "--contexts",
        contexts,
        "--output-tokens",
        "16",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args);
    out
}

/// `calibrate FILES --out dir/twin.toml` refused as bad data (65) with `want` in its one error
/// line, and no preset written.
fn refused(dir: &Path, files: &[&Path], want: &str) {
    let preset = dir.join("twin.toml");
    let mut args = vec!["calibrate", "--out", preset.to_str().unwrap()];
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let o = run(&args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(65), "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    assert!(line.contains(want), "{err}");
    assert!(!preset.exists(), "a preset was written: {err}");
}

#[test]
fn calibrate_refuses_what_cannot_determine_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let two = sweep(d, "two.jsonl", "1k,2k", &[]);
    refused(d, &[&two], "three or more context lengths (have 2)");
    let failed = sweep(
        d,
        "failed.jsonl",
        "1k,2k,3k",
        &["--mock-set", "context_length=32"],
    );
    refused(d, &[&failed], "no successful streaming request");
    let good = sweep(d, "good.jsonl", "1k,2k,3k", &[]);
    let torn = d.join("torn.jsonl");
    let mut text = std::fs::read_to_string(&good).unwrap();
    text.push_str("{\"method\":\"streaming\",\"context_tok");
    std::fs::write(&torn, text).unwrap();
    refused(d, &[&torn], "line 4 is not a whole record");
    let kimi = sweep(
        d,
        "kimi.jsonl",
        "1k,2k,3k",
        &["--preset", "kimi-k2.6-dflash-8xrtx-pro-6000"],
    );
    refused(d, &[&good, &kimi], "mixed servers");
}

#[test]
fn a_calibrated_preset_runs_as_the_embedded_mock() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = sweep(
        d,
        "good.jsonl",
        "1k,2k,3k,4k",
        &["--preset", "kimi-k2.6-dflash-8xrtx-pro-6000"],
    );
    let preset = d.join("twin.toml");
    let o = run(&[
        "calibrate",
        good.to_str().unwrap(),
        "--out",
        preset.to_str().unwrap(),
        "--kv-bytes-per-token",
        "70272",
        "--mem-bandwidth-gbs",
        "1792",
    ]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    for want in [
        "prefill pass",
        "decode step",
        "R-squared",
        "decode_per_request_s needs a load run at concurrency above 1",
        "of 1792 GB/s",
    ] {
        assert!(out.contains(want), "{want:?} missing from\n{out}");
    }
    let text = std::fs::read_to_string(&preset).unwrap();
    assert!(text.contains("prefill_base_s") && text.contains("# MEASURED: least squares"));
    let twin = d.join("twin.jsonl");
    let o = run(&[
        "sweep",
        "--simulate",
        "--preset-file",
        preset.to_str().unwrap(),
        "--contexts",
        "1k,8k",
        "--output-tokens",
        "16",
        "--runs",
        "1",
        "--no-progress",
        "--out",
        twin.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_table_twin_as_the_base_lends_no_discrepancy_to_the_new_fit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = sweep(d, "good.jsonl", "1k,2k,3k", &[]);
    let preset = d.join("twin.toml");
    let o = run(&[
        "calibrate",
        good.to_str().unwrap(),
        "--base",
        "qwen3-32b-h100-tp2-sglang",
        "--out",
        preset.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The base's rows were measured against its own model, which this fit replaced.
    let text = std::fs::read_to_string(&preset).unwrap();
    assert!(!text.contains("[[discrepancy]]"), "{text}");
    assert!(mock_server::Config::preset_file(&preset)
        .unwrap()
        .discrepancy
        .is_empty());
}

#[test]
fn a_preset_file_with_a_bad_key_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, key) in [
        (
            "unknown.toml",
            format!("{KIMI}\nprefill_speed = 3\n"),
            "prefill_speed",
        ),
        (
            "negative.toml",
            KIMI.replace("prefill_base_s = 0.05", "prefill_base_s = -0.05"),
            "prefill_base_s",
        ),
        (
            "pool.toml",
            KIMI.replace("kv_bytes_per_token = 70272", "kv_bytes_per_token = 7027200"),
            "context_length",
        ),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let out = dir.path().join("r.jsonl");
        let o = run(&[
            "sweep",
            "--simulate",
            "--preset-file",
            p.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.contains(key) && err.contains(name), "{name}: {err}");
        assert!(!err.contains("started the embedded mock"), "{err}");
        assert!(!out.exists());
    }
}

/// `src` rewritten as if the server had held its first `n` streams and sent each whole: their
/// chunks all arrive at the first chunk's instant.
fn held_whole(src: &Path, dst: &Path, n: usize) {
    let mut out = String::new();
    for (i, line) in std::fs::read_to_string(src).unwrap().lines().enumerate() {
        let mut r: serde_json::Value = serde_json::from_str(line).unwrap();
        if i >= n {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        // The compact trace counts each chunk's instant from the one before.
        let at = r["trace"]["chunks"]["at_ns"].as_array_mut().unwrap();
        assert!(at.len() > 1);
        for d in at.iter_mut().skip(1) {
            *d = 0.into();
        }
        out.push_str(&r.to_string());
        out.push('\n');
    }
    std::fs::write(dst, out).unwrap();
}

/// A stream the server held and sent whole at one instant times none of its passes: calibrate
/// leaves such requests out and says so; a file of nothing else is left out whole.
#[test]
fn streams_sent_whole_at_one_instant_are_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = sweep(d, "good.jsonl", "1k,2k,3k", &[]);
    let load = d.join("load.jsonl");
    let o = run(&[
        "load",
        "--simulate",
        "--concurrency",
        "2",
        "--num-requests",
        "6",
        "--input-len",
        "1k",
        "--output-len",
        "16",
        "--no-progress",
        "--out",
        load.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let preset = d.join("twin.toml");
    // Every stream of the load run held, or one: the run is left out whole either way (one held
    // stream hides its request from the batches of the others).
    for (n, count) in [(6, "6 requests"), (1, "1 requests")] {
        let held = d.join(format!("held{n}.jsonl"));
        held_whole(&load, &held, n);
        let o = run(&[
            "calibrate",
            good.to_str().unwrap(),
            held.to_str().unwrap(),
            "--out",
            preset.to_str().unwrap(),
        ]);
        let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains("3 sweep requests and 0 load run(s)"), "{err}");
        let want = format!("left out {count} whose whole stream arrived at one instant");
        assert!(err.contains(&want), "{err}");
        assert!(err.contains(&format!("held{n}.jsonl")), "{err}");
        // The held load run fits nothing: the batch cost is the base preset's.
        assert!(
            out.contains("decode_per_request_s needs a load run"),
            "{out}"
        );
    }
}

/// `--contexts` fits the sweep at those lengths alone and holds the others out; too few left is
/// refused as ever.
#[test]
fn contexts_held_out_are_left_out_of_the_fit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sweep4 = sweep(d, "four.jsonl", "1k,2k,3k,4k", &["--interleave"]);
    let preset = d.join("twin.toml");
    let o = run(&[
        "calibrate",
        sweep4.to_str().unwrap(),
        "--contexts",
        "1k,2k,4k",
        "--out",
        preset.to_str().unwrap(),
    ]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("sweep requests at 3000 tokens held out"),
        "{err}"
    );
    assert!(err.contains("calibrating from 3 sweep requests"), "{err}");
    assert!(
        out.contains("context 4000") && !out.contains("context 3000"),
        "{out}"
    );
    let o = run(&[
        "calibrate",
        sweep4.to_str().unwrap(),
        "--contexts",
        "1k,2k",
        "--out",
        preset.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("(have 2)"), "{}", stderr(&o));
}
