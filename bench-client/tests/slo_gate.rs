//! The SLO gate (`--slo-target`) of `load`, `merge` and `capacity`, CSV wherever `--format csv`
//! is offered, and the flags `sweep`, `load` and `capacity` share: the same flag, help and default
//! in each.

use std::path::Path;

mod support;
use support::{run, stderr, stdout};

/// A simulated closed-loop load of 50 requests into `out`, with `extra` flags.
fn load(out: &Path, extra: &[&str]) -> std::process::Output {
    let o = out.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "load",
        "--simulate",
        "--concurrency",
        "4",
        "--num-requests",
        "50",
        "--output-len",
        "16",
        "--no-metrics",
        "--out",
        o,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

#[test]
fn load_and_merge_exit_1_when_fewer_requests_meet_the_slo_than_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    let o = load(
        &bad,
        &["--slo", "ttft=0.001,tpot=20", "--slo-target", "0.95"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out.lines().last(),
        Some("SLO gate: FAILED: 0.0% of 50 requests met ttft<=0.001ms,tpot<=20ms (target 95.0%)"),
        "{out}"
    );
    // JSON on stdout stays one document; the gate's line is the last of stderr.
    let good = dir.path().join("good.jsonl");
    let o = load(
        &good,
        &[
            "--slo",
            "ttft=100000",
            "--slo-target",
            "0.95",
            "--format",
            "json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("stdout is JSON");
    let err = stderr(&o);
    assert!(
        err.lines()
            .last()
            .is_some_and(|l| l.starts_with("SLO gate: PASSED: 100.0% of 50 requests")),
        "{err}"
    );
    // Without --slo-target there is no gate: the same run exits 0.
    let o = load(&dir.path().join("nogate.jsonl"), &["--slo", "ttft=0.001"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout(&o).contains("SLO gate"));
    // A gate needs an SLO.
    let o = load(&dir.path().join("x.jsonl"), &["--slo-target", "0.9"]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("--slo-target"), "{}", stderr(&o));

    // merge judges by the SLO the manifest stores when none is given.
    let b = bad.to_str().unwrap();
    let o = run(&["merge", b, "--slo-target", "0.95"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l
                .starts_with("SLO gate: FAILED: 0.0% of 50 requests met ttft<=0.001ms,tpot<=20ms")),
        "{out}"
    );
    // A given SLO wins over the manifest's.
    let o = run(&["merge", b, "--slo", "ttft=100000", "--slo-target", "0.95"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("SLO gate: PASSED"), "{}", stdout(&o));
    // Two manifests with different SLOs: say so, and ask for --slo.
    let g = good.to_str().unwrap();
    let o = run(&["merge", b, g, "--slo-target", "0.95"]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("different SLOs"), "{}", stderr(&o));
}

#[test]
fn capacity_ends_with_the_gate_of_its_highest_passing_rate() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("c.jsonl");
    let r = run(&[
        "capacity",
        "--simulate",
        "--slo",
        "ttft=100000",
        "--slo-target",
        "0.9",
        "--rates",
        "1,2",
        "--refine",
        "0",
        "--num-requests",
        "20",
        "--output-len",
        "8",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let out = stdout(&r);
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("SLO gate: PASSED: 100.0% of ")
            && last.contains("at 2.000 req/s, the highest passing (target 90.0%)"),
        "{out}"
    );
    let r = run(&[
        "capacity",
        "--simulate",
        "--slo",
        "ttft=0.001",
        "--rates",
        "1",
        "--refine",
        "0",
        "--num-requests",
        "10",
        "--out",
        dir.path().join("d.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    let out = stdout(&r);
    assert!(
        out.lines().last().is_some_and(
            |l| l.starts_with("SLO gate: FAILED: 0.0% of ") && l.contains("no rate passed")
        ),
        "{out}"
    );
}

#[test]
fn csv_is_one_row_per_request_of_a_load_and_per_step_of_a_capacity_search() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("l.jsonl");
    let o = load(&f, &["--slo", "ttft=100000", "--format", "csv"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let csv = stdout(&o);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 51, "{csv}");
    assert!(lines[0].starts_with("index,shard,rid,") && lines[0].ends_with(",met_slo"));
    assert!(lines[1..].iter().all(|l| l.ends_with(",,true")), "{csv}");
    let p = f.to_str().unwrap();
    for args in [
        vec!["merge", p, "--format", "csv"],
        vec!["report", p, "--format", "csv"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o).lines().count(), 51, "{args:?}: {}", stdout(&o));
    }
    let o = run(&[
        "capacity",
        "--simulate",
        "--slo",
        "ttft=100000",
        "--rates",
        "1,2",
        "--refine",
        "0",
        "--num-requests",
        "20",
        "--output-len",
        "8",
        "--format",
        "csv",
        "--out",
        dir.path().join("c.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let csv = stdout(&o);
    let steps = csv.lines().skip(1).count();
    assert!(csv.starts_with("step,rate,requests,"), "{csv}");
    assert!(steps >= 2, "{csv}");
}

/// The help block of `flag` in `cmd --help`: its line and the lines of its text, with white space
/// made single spaces (clap lays a block out by the width of the widest in the command).
fn help_of(cmd: &str, flag: &str) -> String {
    let o = run(&[cmd, "--help"]);
    let help = stdout(&o);
    let mut block = Vec::new();
    let mut inside = false;
    for l in help.lines() {
        let t = l.trim_start();
        if t.starts_with('-') {
            inside = t.starts_with(&format!("{flag} ")) || t == flag;
        }
        if inside {
            block.push(t.to_string());
        }
    }
    assert!(!block.is_empty(), "{cmd} has no {flag}:\n{help}");
    block
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn shared_flags_are_the_same_flag_with_the_same_default_in_every_command() {
    let everywhere = [
        "--connect-timeout-s",
        "--ttft-timeout-s",
        "--ttft-timeout-per-1k-s",
        "--idle-timeout-s",
        "--total-timeout-s",
        "--seed",
        "--out",
        "--resume",
        "--warmup",
        "--no-progress",
        "--token-id-min",
        "--token-id-max",
    ];
    for flag in everywhere {
        let sweep = help_of("sweep", flag);
        assert_eq!(sweep, help_of("load", flag), "{flag}");
        assert_eq!(sweep, help_of("capacity", flag), "{flag}");
    }
    let loads = [
        "--input-len",
        "--output-len",
        "--prefix-groups",
        "--prefix-len",
        "--trace",
        "--arrival",
        "--burstiness",
        "--max-concurrency",
        "--slo",
        "--slo-target",
    ];
    for flag in loads {
        assert_eq!(help_of("load", flag), help_of("capacity", flag), "{flag}");
    }
    assert_eq!(
        help_of("load", "--slo-target"),
        help_of("merge", "--slo-target")
    );
    assert!(help_of("load", "--seed").contains("[default: 24301]"));
    assert!(help_of("sweep", "--ttft-timeout-s").contains("[default: 600]"));
}
