//! guidellm's benchmarks JSON: a document of `benchmarks`, each with its requests (`successful`,
//! `errored`, `incomplete`) and their unix-second timings. It keeps the first and last token
//! instants of each request and the number of stream iterations between them, not each iteration's
//! instant or tokens: a rebuilt trace has those two chunks only.

use serde_json::Value;

use super::check::{Notes, ToolSummary};
use super::json::{self, count, Obj};
use super::{ImportError, Request, Run, Source, TpotDef};
use crate::trace::{Dialect, TokenAttribution};

/// One request of a benchmark, in unix seconds.
struct Timed {
    scheduled: f64,
    start: f64,
    first: Option<f64>,
    last: Option<f64>,
    end: f64,
    input: Option<u32>,
    output: u32,
    error: Option<String>,
}

fn timed(o: &Obj<'_>, status: &str) -> Result<Timed, ImportError> {
    let info = o.obj("info")?;
    let t = info.obj("timings")?;
    let start = t.secs("request_start")?.or(o.secs("request_start_time")?);
    let start = start.ok_or_else(|| t.err("request_start", "missing"))?;
    let end = t
        .secs("request_end")?
        .or(o.secs("request_end_time")?)
        .unwrap_or(start);
    let output = o.get("output_tokens").and_then(count).unwrap_or(0);
    let error = match status {
        "successful" => None,
        "errored" => Some(info.str("error").unwrap_or("errored").to_string()),
        _ => Some("incomplete: still running when the benchmark stopped".to_string()),
    };
    Ok(Timed {
        scheduled: t.secs("targeted_start")?.unwrap_or(start).min(start),
        start,
        first: t.secs("first_token_iteration")?,
        last: t.secs("last_token_iteration")?,
        end,
        input: o.get("prompt_tokens").and_then(count),
        output,
        error,
    })
}

/// The runs (one per benchmark) of a guidellm document.
pub fn runs(file: &str, text: &str) -> Result<Vec<Run>, ImportError> {
    let doc = json::parse(file, None, text)?;
    let top = Obj::top(file, None, &doc);
    let benchmarks = top.arr("benchmarks")?;
    let version = top
        .get("metadata")
        .and_then(|m| m.get("guidellm_version"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let spec = doc.pointer("/config/spec");
    let backend = spec.and_then(|s| s.get("backend"));
    let format = backend
        .and_then(|b| b.get("request_format"))
        .and_then(Value::as_str)
        .unwrap_or("/v1/completions");
    let mut out = Vec::new();
    for (k, b) in benchmarks.iter().enumerate() {
        let b = top.item("benchmarks", k, b)?;
        let reqs = b.obj("requests")?;
        let mut all = Vec::new();
        for status in ["successful", "errored", "incomplete"] {
            let Some(list) = reqs.get(status) else {
                continue;
            };
            let list = list
                .as_array()
                .ok_or_else(|| reqs.err(status, "expected an array of requests"))?;
            for (i, r) in list.iter().enumerate() {
                all.push(timed(&reqs.item(status, i, r)?, status)?);
            }
        }
        if all.is_empty() {
            return Err(reqs.err(
                "successful",
                "no requests: the file holds the summary only (guidellm keeps per-request data unless sampled away; rerun without a sample size of 0)",
            ));
        }
        all.sort_by(|a, c| a.start.total_cmp(&c.start));
        let origin = all
            .iter()
            .map(|r| r.scheduled)
            .fold(f64::INFINITY, f64::min);
        let start_unix_ms = (origin * 1e3).floor().max(0.0) as u64;
        let base = start_unix_ms as f64 / 1e3;
        let requests = all
            .iter()
            .map(|r| {
                let first = r.first.unwrap_or(r.end);
                let last = r.last.unwrap_or(first).max(first);
                Request {
                    scheduled_s: Some(r.scheduled - base),
                    sent_s: Some(r.start - base),
                    ttft_s: (first - r.start).max(0.0),
                    gaps_s: if last > first {
                        vec![last - first]
                    } else {
                        Vec::new()
                    },
                    chunk_tokens: None,
                    e2e_s: Some((r.end - r.start).max(0.0)),
                    input_len: r.input,
                    output_len: r.output,
                    error: r.error.clone(),
                }
            })
            .collect();
        let metric = |name: &str, stat: &str| {
            b.v.pointer(&format!("/metrics/{name}/successful/{stat}"))
                .and_then(json::number)
        };
        let settings = serde_json::json!({
            "strategy": b.v.pointer("/config/strategy"),
            "constraints": spec.and_then(|s| s.get("constraints")),
            "data": spec.and_then(|s| s.get("data")),
            "request_format": format,
        });
        out.push(Run {
            source: Source::Guidellm,
            version: version.clone(),
            dialect: if format.contains("chat") {
                Dialect::OpenAiChat
            } else {
                Dialect::OpenAi
            },
            start_unix_ms,
            start_from: "the requests' own unix times",
            settings,
            url: backend
                .and_then(|b| b.get("target"))
                .and_then(Value::as_str)
                .map(str::to_string),
            model: backend
                .and_then(|b| b.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string),
            server_info: None,
            requests,
            attribution: TokenAttribution::ImportedUnknown,
            tpot: TpotDef::LastMinusFirst,
            rebuilt_schedule: None,
            summary: Some(ToolSummary {
                mean_ttft_ms: metric("time_to_first_token_ms", "mean"),
                p99_ttft_ms: metric("time_to_first_token_ms", "percentiles/p99"),
                mean_tpot_ms: metric("inter_token_latency_ms", "mean"),
                output_throughput: metric("output_tokens_per_second", "mean"),
            }),
            notes: Notes {
                p99_ttft: Some("guidellm's percentiles are not interpolated between ranks (with few requests its p99 is the largest); the records' are (numpy's default)".into()),
                mean_tpot: Some("guidellm's mean inter-token latency is over tokens (each request weighted by its output tokens - 1); the records' is over requests".into()),
                ..Notes::default()
            },
            figures: None,
        });
    }
    Ok(out)
}
