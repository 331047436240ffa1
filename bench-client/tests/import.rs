//! `import` of the files captured from each real tool against the mock (fixtures/import/, see its
//! README): the records, manifest and check snapshotted; the binary as a user runs it, on good files
//! and on bad ones (exit 65, nothing written).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

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
    // One file named twice (another spelling too) would import its requests twice.
    let again = good.parent().unwrap().join(".").join("guidellm.json");
    let o = run(&[
        "import",
        good.to_str().unwrap(),
        again.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(stderr(&o).contains("is given twice"), "{}", stderr(&o));
    assert!(!out.exists());
}

#[test]
fn records_that_cannot_be_written_leave_neither_them_nor_their_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    // The records go to a temporary file beside --out first; a folder in its place fails them.
    std::fs::create_dir(dir.path().join("out.jsonl.tmp")).unwrap();
    let f = fixture("bench_serving-sglang.jsonl");
    let o = run(&[
        "import",
        f.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("out.jsonl.tmp"), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec!["out.jsonl.tmp".to_string()]);
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

/// Import `name` with the binary into `dir`; the results file's path.
fn import_to(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(format!("{}.imported.jsonl", name.replace('/', "-")));
    let o = run(&[
        "import",
        fixture(name).to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

fn manifest_of(results: &Path) -> Value {
    let m = std::fs::read_to_string(format!("{}.manifest.jsonl", results.display())).unwrap();
    serde_json::from_str(m.lines().next().unwrap()).unwrap()
}

fn read_json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let first = text.lines().next().unwrap().replace("Infinity", "null");
    serde_json::from_str(&first)
        .or_else(|_| serde_json::from_str(&text))
        .unwrap()
}

#[test]
fn summary_only_files_import_as_the_tools_figures_without_records() {
    let dir = tempfile::tempdir().unwrap();
    // (fixture, the tool, [(our figure, the file's own value)]), the values read from the file.
    let bs = read_json("bench_serving-summary.jsonl");
    let vl = read_json("vllm-bench-serve-summary.json");
    let ai = read_json("aiperf/profile_export_aiperf.json");
    let cases = [
        (
            "bench_serving-summary.jsonl",
            "bench_serving",
            vec![
                ("ttft_mean_ms", &bs["mean_ttft_ms"]),
                ("ttft_p50_ms", &bs["median_ttft_ms"]),
                ("ttft_p99_ms", &bs["p99_ttft_ms"]),
                ("tpot_mean_ms", &bs["mean_tpot_ms"]),
                ("inter_chunk_p99_ms", &bs["p99_itl_ms"]),
                ("e2e_mean_ms", &bs["mean_e2e_latency_ms"]),
                ("output_throughput_tok_s", &bs["output_throughput"]),
            ],
        ),
        (
            "vllm-bench-serve-summary.json",
            "vllm",
            vec![
                ("ttft_mean_ms", &vl["mean_ttft_ms"]),
                ("tpot_p99_ms", &vl["p99_tpot_ms"]),
                ("request_throughput_req_s", &vl["request_throughput"]),
            ],
        ),
        (
            "aiperf/profile_export_aiperf.json",
            "aiperf",
            vec![
                ("ttft_mean_ms", &ai["time_to_first_token"]["avg"]),
                ("ttft_p90_ms", &ai["time_to_first_token"]["p90"]),
                ("tpot_mean_ms", &ai["inter_token_latency"]["avg"]),
                ("e2e_p99_ms", &ai["request_latency"]["p99"]),
                (
                    "output_throughput_tok_s",
                    &ai["output_token_throughput"]["avg"],
                ),
            ],
        ),
    ];
    for (name, tool, figures) in cases {
        let out = import_to(dir.path(), name);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "",
            "{name}: no records"
        );
        let m = manifest_of(&out);
        assert_eq!(m["imported"]["tool"], tool, "{name}");
        let s = &m["imported"]["summary"];
        for (ours, theirs) in figures {
            assert!(theirs.is_number(), "{name}: {ours}");
            assert_eq!(&s["figures"][ours], theirs, "{name}: {ours}");
        }
        assert!(s["definitions"]["ttft"].is_string(), "{name}: {s}");
    }
    // A file with per-request data still imports as records, with no summary in its manifest.
    let full = import_to(dir.path(), "vllm-bench-serve.json");
    assert!(manifest_of(&full)["imported"].get("summary").is_none());
}

/// This client's small load against the embedded mock reporting its timings: on the engine path
/// (virtual time, where the way there and back is 0), or over HTTP on loopback (where it is not).
fn own_load(dir: &Path, simulate: bool) -> PathBuf {
    let out = dir.join("own.jsonl");
    let path = if simulate {
        "--simulate"
    } else {
        "--mock-set=time_scale=0.25"
    };
    let o = run(&[
        "load",
        path,
        "--api",
        "sglang",
        "--concurrency",
        "2",
        "--num-requests",
        "8",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--mock-set",
        "enable_metrics=true",
        "--no-progress",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    out
}

fn records_of(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn a_summary_compares_with_a_run_on_the_figures_both_have() {
    let dir = tempfile::tempdir().unwrap();
    let summary = import_to(dir.path(), "bench_serving-summary.jsonl");
    let own = own_load(dir.path(), true);
    let own_ttft: Vec<f64> = records_of(&own)
        .iter()
        .map(|r| r["load"]["ttft_from_schedule_ms"].as_f64().unwrap())
        .collect();
    let figures = &manifest_of(&summary)["imported"]["summary"]["figures"];
    for (base, new, summary_is_base) in [(&summary, &own, true), (&own, &summary, false)] {
        let o = run(&[
            "compare",
            base.to_str().unwrap(),
            new.to_str().unwrap(),
            "--format",
            "json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let rows = v["rows"].as_array().unwrap();
        let row = |m: &str| rows.iter().find(|r| r["metric"] == m).unwrap();
        let (fixed, resampled) = if summary_is_base {
            ("base", "new")
        } else {
            ("new", "base")
        };
        // Every figure of the summary is a row, its value the tool's; this client's side is its own.
        let names = figures.as_object().unwrap();
        assert_eq!(rows.len(), names.len(), "{rows:?}");
        for (name, value) in names {
            assert_eq!(&row(name)[fixed], value, "{name}");
        }
        let t = row("ttft_mean_ms");
        assert!((t[resampled].as_f64().unwrap() - mean(&own_ttft)).abs() < 1e-9);
        // Each percentile of this client's side is that percentile of its own requests.
        let mut pcts = 0;
        for (name, _) in names {
            let Some(p) = name
                .strip_prefix("ttft_p")
                .and_then(|n| n.strip_suffix("_ms"))
            else {
                continue;
            };
            let want = percentile(&own_ttft, p.parse().unwrap());
            let got = row(name)[resampled].as_f64().unwrap();
            assert!((got - want).abs() < 1e-9, "{name}: {got} against {want}");
            pcts += 1;
        }
        assert!(pcts >= 2, "{names:?}");
        // The interval is this client's resamples against the fixed figure: it holds the ratio.
        let (lo, hi, ratio) = (
            t["ci_low"].as_f64().unwrap(),
            t["ci_high"].as_f64().unwrap(),
            t["ratio"].as_f64().unwrap(),
        );
        assert!(lo < hi && lo <= ratio && ratio <= hi, "{t}");
        assert_eq!(row("output_throughput_tok_s")["verdict"], "unclear");
        let notes = v["notes"].to_string();
        assert!(notes.contains("it has no resamples"), "{notes}");
        assert!(
            notes.contains("the summary does not have them: ttft_p90_ms"),
            "{notes}"
        );
        assert!(
            notes.contains("bench_serving's ttft: from the request's send"),
            "{notes}"
        );
    }
    // Two summaries have nothing to resample.
    let o = run(&[
        "compare",
        summary.to_str().unwrap(),
        summary.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("both sides are other tools' summaries"));
}

/// The `p`th percentile of `v`, interpolated between the values at the ranks around it.
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * p / 100.0;
    let (lo, hi) = (v[h.floor() as usize], v[h.ceil() as usize]);
    lo + (h - h.floor()) * (hi - lo)
}

/// The cells of the table `id` of an HTML page, row by row (header left out).
fn table(html: &str, id: &str) -> Vec<Vec<String>> {
    let start = html.find(&format!("<table id=\"{id}\">")).unwrap();
    let end = start + html[start..].find("</table>").unwrap();
    html[start..end]
        .split("<tr>")
        .skip(2)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|c| {
                    let c = &c[c.find('>').unwrap() + 1..];
                    c[..c.find("</td>").unwrap()].to_string()
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_page_holds_the_mocks_ground_truth_beside_the_imported_and_own_figures() {
    let dir = tempfile::tempdir().unwrap();
    // Over HTTP: the truth and this client's TTFT differ by the way there and back.
    let own = own_load(dir.path(), false);
    let recs = records_of(&own);
    let truth: Vec<f64> = recs
        .iter()
        .map(|r| r["ttft_ms"].as_f64().unwrap() - r["ttft_split"]["rest_ms"].as_f64().unwrap())
        .collect();
    let own_ttft: Vec<f64> = recs
        .iter()
        .map(|r| r["ttft_ms"].as_f64().unwrap())
        .collect();
    let num = |s: &str| s.split_whitespace().next().unwrap().parse::<f64>().unwrap();
    // A summary, and records rebuilt from per-request data: the imported column is the tool's.
    let summary = import_to(dir.path(), "bench_serving-summary.jsonl");
    let records = import_to(dir.path(), "bench_serving-sglang.jsonl");
    let imported_ttft: Vec<f64> = records_of(&records)
        .iter()
        .filter(|r| r["error"].is_null())
        .map(|r| r["ttft_ms"].as_f64().unwrap())
        .collect();
    let summary_mean = manifest_of(&summary)["imported"]["summary"]["figures"]["ttft_mean_ms"]
        .as_f64()
        .unwrap();
    for (imported, imported_mean) in [(&summary, summary_mean), (&records, mean(&imported_ttft))] {
        let page = dir.path().join("page.html");
        let _ = std::fs::remove_file(&page);
        let o = run(&[
            "compare",
            imported.to_str().unwrap(),
            own.to_str().unwrap(),
            "--html",
            page.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let html = std::fs::read_to_string(&page).unwrap();
        let rows = table(&html, "truth-table");
        assert_eq!(rows.len(), 4, "{rows:?}");
        let m = &rows[0];
        assert_eq!(m[0], "TTFT mean");
        let close = |a: f64, b: f64| (a - b).abs() < 0.0015;
        assert!(close(num(&m[1]), mean(&truth)), "{m:?}");
        assert!(close(num(&m[2]), imported_mean), "{m:?}");
        assert!(close(num(&m[3]), imported_mean - mean(&truth)), "{m:?}");
        assert!(close(num(&m[4]), mean(&own_ttft)), "{m:?}");
        assert!(close(num(&m[5]), mean(&own_ttft) - mean(&truth)), "{m:?}");
        assert!(html.contains("id=\"truth-note\""));
    }
    // Two runs of this client: no imported tool, no truth section.
    let page = dir.path().join("own.html");
    let o = run(&[
        "compare",
        own.to_str().unwrap(),
        own.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!std::fs::read_to_string(&page)
        .unwrap()
        .contains("truth-table"));
}

#[test]
fn a_run_whose_every_request_failed_is_imported_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = read_json("vllm-bench-serve.json");
    let n = v["errors"].as_array().unwrap().len();
    v["errors"] = Value::from(vec!["Server disconnected without sending a response."; n]);
    let failed = dir.path().join("failed.json");
    std::fs::write(&failed, v.to_string()).unwrap();
    let out = dir.path().join("out.jsonl");
    let o = run(&[
        "import",
        failed.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "note: every request failed in {} run 0 ({n} requests)",
            failed.display()
        )),
        "{err}"
    );
    let recs = records_of(&out);
    assert_eq!(recs.len(), n);
    assert!(recs.iter().all(|r| !r["error"].is_null()));
    // A run with successes says nothing of the kind.
    let o = run(&[
        "import",
        fixture("vllm-bench-serve.json").to_str().unwrap(),
        "--out",
        dir.path().join("ok.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("every request failed"),
        "{}",
        stderr(&o)
    );
}
