//! `import` of the files captured from each real tool against the mock (fixtures/import/, see its
//! README): the records, manifest and check snapshotted; the binary as a user runs it, on good files
//! and on bad ones (exit 65, nothing written).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use bench_client::import::{self, check};
use serde_json::{json, Value};

mod support;
use support::{run, stderr};

fn fixture(name: &str) -> PathBuf {
    support::fixture("import", name)
}

/// What a snapshot holds: the manifest, the check against the tool's summary, the counts and the
/// first record, with what depends on the checkout (the path, a file's modification time) taken out.
fn imported(name: &str) -> Value {
    let path = fixture(name);
    let file = import::read(&path, None).unwrap();
    let recs = import::all_records(std::slice::from_ref(&file));
    let run = &file.runs[0];
    let mut manifest = import::manifest(&file, run, 0, "bench-client import").to_value();
    manifest["imported"]["file"] = json!(name);
    let mut first = serde_json::to_value(&recs[0]).unwrap();
    if run.rebuilt_schedule.is_some() {
        // bench_serving's file has no date: the run starts at the file's modification time.
        manifest["start_unix_ms"] = json!("<file modified>");
        first["load"]["start_unix_ms"] = json!("<file modified>");
    }
    json!({
        "manifest": manifest,
        "check": check::compare(run, &recs),
        "records": recs.len(),
        "failed": recs.iter().filter(|r| r.failed()).count(),
        "first_record": first,
    })
}

#[test]
fn bench_serving_native_backend() {
    insta::assert_json_snapshot!(imported("bench_serving-sglang.jsonl"));
}

#[test]
fn bench_serving_openai_backend() {
    insta::assert_json_snapshot!(imported("bench_serving-openai.jsonl"));
}

#[test]
fn vllm_bench_serve() {
    insta::assert_json_snapshot!(imported("vllm-bench-serve.json"));
}

#[test]
fn guidellm() {
    insta::assert_json_snapshot!(imported("guidellm.json"));
}

#[test]
fn aiperf() {
    insta::assert_json_snapshot!(imported("aiperf/profile_export.jsonl"));
}

#[test]
fn aiperf_raw_export() {
    insta::assert_json_snapshot!(imported("aiperf/profile_export_raw.jsonl"));
}

#[test]
fn aiperf_s_raw_export_gives_the_records_of_its_per_record_export() {
    let read = |name: &str| {
        let f = import::read(&fixture(name), None).unwrap();
        import::all_records(std::slice::from_ref(&f))
    };
    let (records, raw) = (
        read("aiperf/profile_export.jsonl"),
        read("aiperf/profile_export_raw.jsonl"),
    );
    assert_eq!(records.len(), raw.len());
    for (a, b) in records.iter().zip(&raw) {
        assert_eq!(a.load, b.load);
        assert_eq!(a.completion_tokens, b.completion_tokens);
        let chunks = |r: &bench_client::results::Record| r.trace.as_ref().unwrap().chunks.len();
        assert_eq!(chunks(a), chunks(b));
        // AIPerf's TTFT and gaps are its responses' instants, in ms to the ns.
        let (ta, tb) = (a.ttft_ms.unwrap(), b.ttft_ms.unwrap());
        assert!((ta - tb).abs() < 1e-3, "{ta} {tb}");
    }
}

const ALL: [&str; 6] = [
    "bench_serving-sglang.jsonl",
    "bench_serving-openai.jsonl",
    "vllm-bench-serve.json",
    "guidellm.json",
    "aiperf/profile_export.jsonl",
    "aiperf/profile_export_raw.jsonl",
];

#[test]
fn every_fixture_imports_with_its_figures_the_same_or_explained_and_reports_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("all.jsonl");
    let mut args = vec!["import".to_string()];
    args.extend(ALL.iter().map(|f| fixture(f).display().to_string()));
    args.extend(["--out".into(), out.display().to_string()]);
    let o = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stdout.contains("UNEXPLAINED"), "{stdout}");
    assert_eq!(stdout.matches(" run 0: ").count(), ALL.len(), "{stdout}");
    let manifests = std::fs::read_to_string(dir.path().join("all.jsonl.manifest.jsonl")).unwrap();
    assert_eq!(manifests.lines().count(), ALL.len());
    // Every record is one of the results schema's.
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/record.schema.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let records = std::fs::read_to_string(&out).unwrap();
    assert_eq!(records.lines().count(), 8 * ALL.len());
    for line in records.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
    let o = run(&["report", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        report.contains("were imported from another tool's results"),
        "{report}"
    );
    // One file per tool: compare, merge and the HTML page read them as they read a load run.
    let one = |f: &str, name: &str| {
        let out = dir.path().join(name);
        let o = run(&[
            "import",
            fixture(f).to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        out.display().to_string()
    };
    let (bs, vllm) = (
        one("bench_serving-sglang.jsonl", "bs.jsonl"),
        one("vllm-bench-serve.json", "vllm.jsonl"),
    );
    // The two tools spoke different dialects (SGLang's native, OpenAI's): compared only when allowed.
    let o = run(&["compare", &bs, &vllm]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("dialect differs: BASE sglang, NEW openai"));
    let o = run(&["compare", &bs, &vllm, "--allow-different-workloads"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let compared = String::from_utf8_lossy(&o.stdout);
    assert!(compared.contains("ttft_p50_ms"), "{compared}");
    assert!(compared.contains("imported.tool"), "{compared}");
    let o = run(&["merge", &bs, &vllm, "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let merged: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(merged["requests"], 16);
    let html = dir.path().join("page.html");
    let o = run(&["report", &bs, "--html", html.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .contains("bench_serving"));
}

/// `calibrate` fits the batch cost from an imported load run as from one of its own.
#[cfg(feature = "embedded-mock")]
#[test]
fn calibrate_fits_from_an_imported_load_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let o = run(&[
        "sweep",
        "--simulate",
        "--contexts",
        "256,1024,3000",
        "--runs",
        "3",
        "--output-tokens",
        "16",
        "--no-progress",
        "--out",
        &p("sweep.jsonl"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let f = fixture("bench_serving-sglang.jsonl");
    let o = run(&["import", f.to_str().unwrap(), "--out", &p("bs.jsonl")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&[
        "calibrate",
        &p("sweep.jsonl"),
        &p("bs.jsonl"),
        "--out",
        &p("twin.toml"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("and 1 load run(s)"), "{err}");
    assert!(std::path::Path::new(&p("twin.toml")).exists());
}

#[test]
fn a_bad_file_among_good_ones_exits_65_naming_it_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixture("guidellm.json");
    let text = std::fs::read_to_string(&good).unwrap();
    let truncated = dir.path().join("truncated.json");
    std::fs::write(&truncated, &text[..text.len() / 2]).unwrap();
    let mut mismatched: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("vllm-bench-serve.json")).unwrap())
            .unwrap();
    mismatched["output_lens"].as_array_mut().unwrap().pop();
    let mismatched_path = dir.path().join("mismatched.json");
    std::fs::write(&mismatched_path, mismatched.to_string()).unwrap();
    let unknown = dir.path().join("unknown.json");
    std::fs::write(&unknown, r#"{"results": []}"#).unwrap();
    let out = dir.path().join("out.jsonl");
    for (bad, says) in [
        (&truncated, "ends early"),
        (&mismatched_path, "field output_lens: "),
        (&unknown, "unknown format"),
    ] {
        let o = run(&[
            "import",
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(65), "{err}");
        assert!(
            err.contains(bad.to_str().unwrap()) && err.contains(says),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("out."))
            .collect();
        assert!(left.is_empty(), "wrote {left:?}");
    }
}

#[test]
fn an_existing_output_is_refused_as_usage() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    std::fs::write(&out, "keep me\n").unwrap();
    let f = fixture("guidellm.json");
    let o = run(&[
        "import",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me\n");
}
