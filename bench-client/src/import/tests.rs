//! The import of small hand-made files: chunks rebuilt from the latencies, the source's decode
//! definition, the rebuilt closed loop, failures, secrets, and each kind of bad input named.

use serde_json::json;

use super::*;
use crate::report::{LoadSummary, Slo};

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn bench_serving_line(backend: &str) -> serde_json::Value {
    json!({
        "backend": backend, "max_concurrency": 2, "request_rate": "Infinity",
        "server_info": {"api_key": "sk-secret", "chunked_prefill_size": 8192},
        "mean_ttft_ms": 15.0, "p99_ttft_ms": 19.9, "mean_tpot_ms": 2.0, "output_throughput": 200.0,
        "input_lens": [100, 100, 100],
        "output_lens": [4, 4, 0],
        "ttfts": [0.010, 0.020, 0.0],
        "itls": [[0.003, 0.002, 0.002], [0.002, 0.002, 0.002], []],
        "errors": ["", "", "Internal Server Error"],
    })
}

fn import_one(text: &str) -> Result<(Imported, Vec<Record>), ImportError> {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "in.jsonl", text);
    let i = read(&p, None)?;
    let recs = all_records(std::slice::from_ref(&i));
    Ok((i, recs))
}

#[test]
fn bench_serving_native_runs_of_equal_latencies_are_chunks_with_exact_decode() {
    let (i, recs) = import_one(&bench_serving_line("sglang").to_string()).unwrap();
    let run = &i.runs[0];
    assert_eq!(run.source, Source::BenchServing);
    assert_eq!(run.attribution, TokenAttribution::ImportedItlRuns);
    let r = &recs[0];
    // 4 tokens, 3 per-token latencies: the first chunk carried 1, then 1, then 2 (0.002 twice).
    assert_eq!(r.tokens_per_chunk, vec![1, 1, 2]);
    let decode = r.decode_tok_s.unwrap();
    assert!((decode - 3.0 / 0.007).abs() < 1e-6, "{decode}");
    assert_eq!(r.token_attribution.as_str(), "imported-itl-runs");
    // The second request's three equal latencies are one chunk of three.
    assert_eq!(recs[1].tokens_per_chunk, vec![1, 3]);
}

#[test]
fn without_per_chunk_counts_the_decode_rate_is_the_source_s_definition() {
    let (_, recs) = import_one(&bench_serving_line("sglang-oai").to_string()).unwrap();
    let r = &recs[0];
    assert_eq!(r.token_attribution, TokenAttribution::ImportedUnknown);
    assert!(r.tokens_per_chunk.is_empty());
    // No latencies in the file: the end is the last chunk, 0.007 s after the first; 3 tokens after it.
    let tpot = r.tpot_ms.unwrap();
    assert!((tpot - 7.0 / 3.0).abs() < 1e-6, "{tpot}");
    assert!((r.decode_tok_s.unwrap() - 3.0 / 0.007).abs() < 1e-6);
    assert!(r.decode_unavailable.is_none());
    // The load summary keeps its own TPOT for known counts only, and says the request was imported.
    let s = LoadSummary::from_records(&recs, Slo::default());
    assert_eq!(s.counts_unknown, 2);
    assert_eq!(s.imported, 2);
    assert!(!s.metrics.contains_key("tpot"));
}

#[test]
fn without_start_times_the_closed_loop_is_rebuilt_in_the_file_s_order() {
    let (i, recs) = import_one(&bench_serving_line("sglang").to_string()).unwrap();
    assert_eq!(i.runs[0].rebuilt_schedule, Some(Rebuilt { concurrency: 2 }));
    let sent: Vec<u64> = recs
        .iter()
        .map(|r| r.load.as_ref().unwrap().sent_ns)
        .collect();
    // Two slots: requests 0 and 1 at 0; request 2 when request 0 ended (0.010 + 0.007 s).
    assert_eq!(sent, vec![0, 0, 17_000_000]);
}

#[test]
fn a_failed_request_is_a_failed_record_and_secrets_stay_out_of_the_manifest() {
    let (i, recs) = import_one(&bench_serving_line("sglang").to_string()).unwrap();
    let e = recs[2].error.as_ref().unwrap();
    assert_eq!(e.kind, "imported-failure");
    assert!(e.message.contains("Internal Server Error"), "{}", e.message);
    let s = LoadSummary::from_records(&recs, Slo::default());
    assert_eq!(
        (s.succeeded, s.failures.get("imported-failure")),
        (2, Some(&1))
    );
    let m = manifest(&i, &i.runs[0], 0, "import").to_value();
    assert_eq!(m["server_info"]["api_key"], "<redacted>");
    assert_eq!(m["server_info"]["chunked_prefill_size"], 8192);
    assert_eq!(m["imported"]["settings"]["request_rate"], "Infinity");
    // The client's own rules: a URL's credentials and any secret-named key, at any depth.
    let mut line = bench_serving_line("sglang");
    line["tokenizer_id"] = json!("https://user:hunter2@hub.example/tok");
    line["server_info"]["hf_token"] = json!("hf_abc");
    line["model_id"] = json!("https://dave:pw9@hf.example/m");
    line["errors"][2] = json!("500, url=http://alice:pw8@gpu.example:30000/generate");
    let (i, recs) = import_one(&line.to_string()).unwrap();
    let m = manifest(&i, &i.runs[0], 0, "import").to_value();
    let text = m.to_string() + &serde_json::to_string(&recs).unwrap();
    for secret in ["hunter2", "hf_abc", "sk-secret", "pw9", "pw8"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert_eq!(m["model"], "https://<redacted>@hf.example/m");
    assert_eq!(
        m["imported"]["settings"]["tokenizer_id"],
        "https://<redacted>@hub.example/tok"
    );
}

#[test]
fn the_check_finds_the_tool_s_own_figures_and_names_what_differs() {
    let (i, recs) = import_one(&bench_serving_line("sglang").to_string()).unwrap();
    let rows = check::compare(&i.runs[0], &recs);
    assert_eq!(rows[0].verdict, check::Verdict::Same, "{rows:?}");
    // p99 of 10 and 20 ms by linear interpolation: 19.9.
    assert_eq!(rows[1].verdict, check::Verdict::Same, "{rows:?}");
    // (end - ttft) / (n - 1) is 7/3 and 2 ms, not the summary's 2.0: the file keeps no latencies,
    // so the end is the last chunk, and the check says so.
    assert_eq!(rows[2].verdict, check::Verdict::Explained, "{rows:?}");
    assert!(rows[2]
        .why
        .as_deref()
        .unwrap_or("")
        .contains("no per-request end-to-end latency"));
    // The closed loop rebuilt without the tool's turnaround: a shorter span, explained.
    assert_eq!(rows[3].verdict, check::Verdict::Explained, "{rows:?}");
    // With the latencies in the file there is no such reason: the same gap is unexplained.
    let mut with_latencies = bench_serving_line("sglang");
    with_latencies["latencies"] = json!([0.017, 0.026, 0.0]);
    let (i, recs) = import_one(&with_latencies.to_string()).unwrap();
    let rows = check::compare(&i.runs[0], &recs);
    assert_eq!(rows[2].verdict, check::Verdict::Unexplained, "{rows:?}");
}

fn err(text: &str) -> String {
    import_one(text).map(|_| ()).unwrap_err().to_string()
}

#[test]
fn bad_input_names_the_file_and_the_field() {
    let unknown = err(r#"{"hello": 1}"#);
    assert!(unknown.contains("in.jsonl: unknown format"), "{unknown}");

    let truncated = err(r#"{"benchmarks": [{"requests": {"successful": ["#);
    assert!(
        truncated.contains("in.jsonl: line 1, column"),
        "{truncated}"
    );
    assert!(truncated.contains("ends early"), "{truncated}");

    let mut summary_only = bench_serving_line("sglang");
    for k in ["ttfts", "itls", "input_lens", "output_lens", "errors"] {
        summary_only.as_object_mut().unwrap().remove(k);
    }
    // The summary alone imports as the tool's figures, no requests; with no figures either, the
    // missing arrays are named.
    let (i, recs) = import_one(&summary_only.to_string()).unwrap();
    let figures = i.runs[0].figures.as_ref().unwrap();
    assert!(recs.is_empty() && i.runs[0].requests.is_empty());
    assert_eq!(figures.figures["ttft_mean_ms"], 15.0);
    assert_eq!(figures.figures["ttft_p99_ms"], 19.9);
    // A figure of no values (NaN) is left out, the others kept.
    let mut nan = summary_only.clone();
    nan["mean_tpot_ms"] = json!("NaN");
    let (i, _) = import_one(&nan.to_string()).unwrap();
    let figures = i.runs[0].figures.as_ref().unwrap();
    assert!(
        !figures.figures.contains_key("tpot_mean_ms"),
        "{:?}",
        figures.figures
    );
    assert_eq!(figures.figures["ttft_mean_ms"], 15.0);
    for k in ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"] {
        summary_only.as_object_mut().unwrap().remove(k);
    }
    summary_only["mean_ttft_ms"] = json!(null);
    let e = err(&summary_only.to_string());
    assert!(e.contains("field ttfts: missing"), "{e}");
    assert!(e.contains("--output-details"), "{e}");

    let mut short = bench_serving_line("sglang");
    short["itls"] = json!([[0.001], [0.001]]);
    let e = err(&short.to_string());
    assert!(e.contains("field itls: 2 entries, but ttfts has 3"), "{e}");

    let mut negative = bench_serving_line("sglang");
    negative["ttfts"][1] = json!("NaN");
    let e = err(&negative.to_string());
    assert!(e.contains("field ttfts[1]: expected seconds"), "{e}");
    // A summary figure of no values (bench_serving writes NaN for a mean of none) is left out;
    // the requests import.
    let mut nan_figure = bench_serving_line("sglang");
    nan_figure["mean_tpot_ms"] = json!("NaN");
    nan_figure["p99_itl_ms"] = json!(null);
    let (_, recs) = import_one(&nan_figure.to_string()).unwrap();
    assert_eq!(recs.len(), 3);
    // A finite time past 1e10 s is a unit slip or garbage: refused too, not a 1e300 s run.
    negative["ttfts"][1] = json!(1e300);
    let e = err(&negative.to_string());
    assert!(
        e.contains("field ttfts[1]: expected seconds (0 to 1e10)"),
        "{e}"
    );

    let raw = err(
        r#"{"metadata": {"request_start_ns": 1}, "start_perf_ns": 5, "responses": [{"perf_ns": 9, "packets": [{"name": "data", "value": "{\"choices\": [{\"text\": \" a\"}]}"}]}]}"#,
    );
    assert!(raw.contains("line 1: field responses: no usage"), "{raw}");

    let aiperf_summary = err(r#"{"aiperf_version": "0.13.0", "benchmark_duration": {"avg": 1.0}}"#);
    assert!(
        aiperf_summary.contains("profile_export.jsonl"),
        "{aiperf_summary}"
    );
}

#[test]
fn a_bench_serving_file_of_several_runs_gives_a_run_each_on_its_line() {
    let line = bench_serving_line("sglang").to_string();
    let (i, recs) = import_one(&format!("{line}\n{line}\n")).unwrap();
    assert_eq!(i.runs.len(), 2);
    assert_eq!(recs.len(), 6);
    // The runs stay apart: `compare` groups load records by their run's start.
    assert_ne!(i.runs[0].start_unix_ms, i.runs[1].start_unix_ms);
    let mut bad = bench_serving_line("sglang");
    bad["ttfts"] = json!("x");
    let e = err(&format!("{line}\n{bad}\n"));
    assert!(e.contains("line 2: field ttfts"), "{e}");
    // A pretty-printed document cut short is one document that ends early, not a bad first line.
    let pretty = serde_json::to_string_pretty(&bench_serving_line("sglang")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "cut.json", &pretty[..pretty.len() / 2]);
    let e = read(&p, Some(Source::Vllm)).unwrap_err().to_string();
    assert!(e.contains("ends early") && !e.contains("line 1,"), "{e}");
}

#[test]
fn aiperf_lines_keep_their_own_schedule_and_skip_warm_up() {
    let line = |phase: &str, issued: u64, start: u64| {
        json!({
            "metadata": {"benchmark_phase": phase, "credit_issued_ns": issued, "request_start_ns": start},
            "metrics": {
                "time_to_first_token": {"value": 10.0, "unit": "ms"},
                "inter_chunk_latency": {"value": [2.0, 3.0], "unit": "ms"},
                "request_latency": {"value": 20.0, "unit": "ms"},
                "output_sequence_length": {"value": 6, "unit": "tokens"},
                "input_sequence_length": {"value": 50, "unit": "tokens"},
            }
        })
        .to_string()
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let text = [
        line("warmup", t0 - 5_000_000, t0 - 5_000_000),
        line("profiling", t0, t0 + 1_000_000),
        line("profiling", t0 + 2_000_000, t0 + 2_000_000),
    ]
    .join("\n");
    let (i, recs) = import_one(&text).unwrap();
    assert_eq!(i.runs[0].source, Source::Aiperf);
    assert_eq!(recs.len(), 2);
    let l = recs[0].load.as_ref().unwrap();
    assert_eq!(
        (l.start_unix_ms, l.scheduled_ns, l.sent_ns),
        (1_700_000_000_000, 0, 1_000_000)
    );
    assert_eq!(l.ttft_from_schedule_ms, Some(11.0));
    // (20 - 10) / (6 - 1) ms: AIPerf's inter-token latency.
    assert!((recs[0].tpot_ms.unwrap() - 2.0).abs() < 1e-9);
    assert_eq!(recs[0].trace.as_ref().unwrap().chunks.len(), 3);
}
