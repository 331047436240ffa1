//! AIPerf's per-record export (`profile_export.jsonl`): a line per request with its unix-ns
//! metadata (credit issued, request start and end) and its metrics (TTFT, the gaps between chunks,
//! latency, sequence lengths), warm-up lines marked as such; its summary
//! (`profile_export_aiperf.json`) is read from beside it when present. The raw export
//! (`profile_export_raw.jsonl`, `--export-level raw`) is read too: each response's `perf_ns`
//! against the request's `start_perf_ns` is a chunk's instant, its SSE data its text and usage.

use std::path::Path;

use serde_json::Value;

use super::check::{Notes, ToolSummary};
use super::json::{self, count, number, Obj};
use super::{ImportError, Request, Run, Source, TpotDef};
use crate::trace::{Dialect, TokenAttribution};

/// One line, in unix ns and ms as AIPerf keeps them.
struct Line {
    issued_ns: u64,
    start_ns: u64,
    ttft_ms: f64,
    gaps_ms: Vec<f64>,
    latency_ms: Option<f64>,
    input: Option<u32>,
    output: u32,
    error: Option<String>,
}

/// A unix-ns instant, read as an integer: as a float it would lose the last few hundred ns.
fn unix_ns(o: &Obj<'_>, key: &str) -> Result<Option<u64>, ImportError> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| o.err(key, format!("expected unix ns, found {v}"))),
    }
}

/// A metric's `value` (AIPerf writes `{"value": .., "unit": ..}`).
fn metric<'a>(m: &Obj<'a>, name: &str) -> Option<&'a Value> {
    m.get(name)
        .and_then(|v| v.get("value"))
        .filter(|v| !v.is_null())
}

fn line(o: &Obj<'_>) -> Result<Option<Line>, ImportError> {
    let meta = o.obj("metadata")?;
    if meta.str("benchmark_phase") == Some("warmup") {
        return Ok(None);
    }
    let start_ns = unix_ns(&meta, "request_start_ns")?
        .ok_or_else(|| meta.err("request_start_ns", "missing"))?;
    let m = o.obj("metrics")?;
    let num = |name: &str| -> Result<Option<f64>, ImportError> {
        match metric(&m, name) {
            None => Ok(None),
            Some(v) => number(v).map(Some).ok_or_else(|| {
                m.err(
                    &format!("{name}.value"),
                    format!("expected a number, found {v}"),
                )
            }),
        }
    };
    let error = o.get("error").map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .map_or_else(|| e.to_string(), str::to_string)
    });
    let ttft_ms = num("time_to_first_token")?;
    if error.is_none() && ttft_ms.is_none() {
        return Err(m.err(
            "time_to_first_token",
            "missing on a successful request (was the run made without --streaming?)",
        ));
    }
    let gaps_ms = match metric(&m, "inter_chunk_latency") {
        None => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| {
                number(v).filter(|x| *x >= 0.0).ok_or_else(|| {
                    m.err(
                        &format!("inter_chunk_latency.value[{i}]"),
                        format!("expected ms, found {v}"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(m.err(
                "inter_chunk_latency.value",
                format!("expected an array, found {v}"),
            ))
        }
    };
    let tokens = |name: &str| metric(&m, name).and_then(count);
    Ok(Some(Line {
        issued_ns: unix_ns(&meta, "credit_issued_ns")?
            .unwrap_or(start_ns)
            .min(start_ns),
        start_ns,
        ttft_ms: ttft_ms.unwrap_or(0.0),
        gaps_ms,
        latency_ms: num("request_latency")?,
        input: tokens("input_sequence_length").or(tokens("usage_prompt_tokens")),
        output: tokens("output_sequence_length")
            .or(tokens("usage_completion_tokens"))
            .unwrap_or(0),
        error,
    }))
}

/// One line of the raw export: the chunks that carried text, at their responses' instants.
fn raw_line(o: &Obj<'_>) -> Result<Option<Line>, ImportError> {
    let meta = o.obj("metadata")?;
    if meta.str("benchmark_phase") == Some("warmup") {
        return Ok(None);
    }
    let start_ns = unix_ns(&meta, "request_start_ns")?
        .ok_or_else(|| meta.err("request_start_ns", "missing"))?;
    let start_perf =
        unix_ns(o, "start_perf_ns")?.ok_or_else(|| o.err("start_perf_ns", "missing"))?;
    let mut at_ms = Vec::new();
    let mut last_ms = 0.0f64;
    let (mut input, mut output) = (None, None);
    for (i, r) in o.arr("responses")?.iter().enumerate() {
        let r = o.item("responses", i, r)?;
        let perf = unix_ns(&r, "perf_ns")?.ok_or_else(|| r.err("perf_ns", "missing"))?;
        let ms = perf.saturating_sub(start_perf) as f64 / 1e6;
        last_ms = last_ms.max(ms);
        let Some(packets) = r.get("packets").and_then(Value::as_array) else {
            continue;
        };
        for p in packets
            .iter()
            .filter(|p| p.get("name").and_then(Value::as_str) == Some("data"))
        {
            let Some(data) = p.get("value").and_then(Value::as_str) else {
                continue;
            };
            if data.trim() == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(data).map_err(|e| {
                r.err(
                    "packets",
                    format!("an SSE data line that is not JSON ({e})"),
                )
            })?;
            let choice = v.pointer("/choices/0");
            let text = choice
                .and_then(|c| c.get("text").or_else(|| c.pointer("/delta/content")))
                .and_then(Value::as_str)
                .unwrap_or("");
            if !text.is_empty() {
                at_ms.push(ms);
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                input = u.get("prompt_tokens").and_then(count).or(input);
                output = u.get("completion_tokens").and_then(count).or(output);
            }
        }
    }
    let mut error = o.get("error").map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .map_or_else(|| e.to_string(), str::to_string)
    });
    if error.is_none() && at_ms.is_empty() {
        error = Some("no response carried output text".into());
    }
    if error.is_none() && output.is_none() {
        return Err(o.err(
            "responses",
            "no usage with completion_tokens in any response: per-request output tokens unknown (run AIPerf with --use-server-token-count, or import profile_export.jsonl)",
        ));
    }
    let end_ms = match unix_ns(&meta, "request_end_ns")? {
        Some(end) => end.saturating_sub(start_ns) as f64 / 1e6,
        None => last_ms,
    };
    let ttft_ms = at_ms.first().copied().unwrap_or(0.0);
    Ok(Some(Line {
        issued_ns: unix_ns(&meta, "credit_issued_ns")?
            .unwrap_or(start_ns)
            .min(start_ns),
        start_ns,
        ttft_ms,
        gaps_ms: at_ms.windows(2).map(|w| w[1] - w[0]).collect(),
        latency_ms: Some(end_ms.max(last_ms)),
        input,
        output: output.unwrap_or(0),
        error,
    }))
}

/// The tool's version, dialect, URL, model and settings, as its summary document says them.
struct Described {
    version: Option<String>,
    dialect: Dialect,
    url: Option<String>,
    model: Option<String>,
    settings: Value,
}

fn described(s: Option<&Value>) -> Described {
    let config = s.and_then(|d| d.get("input_config"));
    let endpoint = config.and_then(|c| c.get("endpoint"));
    let settings = config.cloned().unwrap_or(Value::Null);
    Described {
        version: s
            .and_then(|d| d.get("aiperf_version"))
            .and_then(Value::as_str)
            .map(str::to_string),
        dialect: match endpoint.and_then(|e| e.get("type")).and_then(Value::as_str) {
            Some(t) if t.contains("chat") => Dialect::OpenAiChat,
            _ => Dialect::OpenAi,
        },
        url: endpoint
            .and_then(|e| e.pointer("/urls/0"))
            .and_then(Value::as_str)
            .map(str::to_string),
        model: config
            .and_then(|c| c.pointer("/models/items/0/name"))
            .and_then(Value::as_str)
            .map(str::to_string),
        settings,
    }
}

/// A summary document alone: the tool's figures, no requests.
fn summary_run(file: &str, doc: &Value) -> Result<Run, ImportError> {
    let figures = super::summary::aiperf(&Obj::top(file, None, doc))?;
    if figures.is_empty() {
        return Err(ImportError::new(
            file,
            "an AIPerf summary without any figure (time_to_first_token, output_token_throughput): import profile_export.jsonl from the same directory",
        ));
    }
    let d = described(Some(doc));
    // AIPerf's start_time is a local ISO instant (`2026-12-03T04:32:49.399769`), read as UTC
    // to the second.
    let start_unix_ms = doc
        .get("start_time")
        .and_then(Value::as_str)
        .and_then(|t| t.get(..19))
        .and_then(|t| {
            let compact: String = t.chars().filter(|c| !matches!(c, '-' | ':')).collect();
            super::bench_serving::date_ms(&compact.replace('T', "-"))
        })
        .unwrap_or(0);
    Ok(Run {
        source: Source::Aiperf,
        version: d.version,
        dialect: d.dialect,
        start_unix_ms,
        start_from: "the summary's start_time",
        settings: d.settings,
        url: d.url,
        model: d.model,
        server_info: None,
        requests: Vec::new(),
        attribution: TokenAttribution::ImportedUnknown,
        tpot: TpotDef::EndMinusFirst,
        rebuilt_schedule: None,
        summary: None,
        notes: Notes::default(),
        figures: Some(figures),
    })
}

/// The run of an AIPerf `profile_export.jsonl` (its summary read from beside it).
pub fn runs(path: &Path, file: &str, text: &str) -> Result<Vec<Run>, ImportError> {
    // The summary alone (profile_export_aiperf.json): one document, no per-request lines.
    if let Ok(doc) = json::parse(file, None, text) {
        if doc.get("metadata").is_none()
            && (doc.get("aiperf_version").is_some() || doc.get("benchmark_duration").is_some())
        {
            return summary_run(file, &doc).map(|r| vec![r]);
        }
    }
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v = json::parse(file, Some(i + 1), l)?;
        let o = Obj::top(file, Some(i + 1), &v);
        let parsed = if o.get("metrics").is_none() && o.get("responses").is_some() {
            raw_line(&o)?
        } else {
            line(&o)?
        };
        if let Some(line) = parsed {
            lines.push(line);
        }
    }
    if lines.is_empty() {
        return Err(ImportError::new(
            file,
            "no profiling records (only warm-up lines, or none)",
        ));
    }
    lines.sort_by_key(|l| l.start_ns);
    let origin_ns = lines.iter().map(|l| l.issued_ns).min().unwrap_or(0);
    let start_unix_ms = origin_ns / 1_000_000;
    let base_ns = start_unix_ms * 1_000_000;
    let rel = |ns: u64| ns.saturating_sub(base_ns) as f64 / 1e9;
    let requests = lines
        .iter()
        .map(|l| Request {
            scheduled_s: Some(rel(l.issued_ns)),
            sent_s: Some(rel(l.start_ns)),
            ttft_s: l.ttft_ms / 1e3,
            gaps_s: l.gaps_ms.iter().map(|g| g / 1e3).collect(),
            chunk_tokens: None,
            e2e_s: l.latency_ms.map(|v| v / 1e3),
            input_len: l.input,
            output_len: l.output,
            error: l.error.clone(),
        })
        .collect();
    let summary_path = path.with_file_name("profile_export_aiperf.json");
    let summary_doc = std::fs::read_to_string(&summary_path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&json::standard(&t)).ok());
    let s = summary_doc.as_ref();
    let stat = |name: &str, k: &str| {
        s.and_then(|d| d.get(name))
            .and_then(|m| m.get(k))
            .and_then(number)
    };
    let d = described(s);
    Ok(vec![Run {
        source: Source::Aiperf,
        version: d.version,
        dialect: d.dialect,
        start_unix_ms,
        start_from: "the requests' own unix times (credit issued)",
        settings: d.settings,
        url: d.url,
        model: d.model,
        server_info: None,
        requests,
        attribution: TokenAttribution::ImportedUnknown,
        tpot: TpotDef::EndMinusFirst,
        rebuilt_schedule: None,
        summary: s.map(|_| ToolSummary {
            mean_ttft_ms: stat("time_to_first_token", "avg"),
            p99_ttft_ms: stat("time_to_first_token", "p99"),
            mean_tpot_ms: stat("inter_token_latency", "avg"),
            output_throughput: stat("output_token_throughput", "avg"),
        }),
        notes: Notes::default(),
        figures: None,
    }])
}
