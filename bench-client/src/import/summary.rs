//! Summary-only results (bench_serving without `--output-details`, `vllm bench serve` without
//! `--save-detailed`, AIPerf's `profile_export_aiperf.json`): no request of their own, only the
//! tool's aggregates. They are kept as the tool's figures under this project's row names
//! (`ttft_p99_ms`, `output_throughput_tok_s`), with the tool's definition of each family, so that
//! `compare` can hold them against a run's records; nothing is rebuilt from them.

use serde_json::Value;

use super::json::{number, Obj};
use super::ImportError;
pub use crate::results::Figures;

/// The statistics kept of each latency family, as (this project's suffix, percentile or mean).
pub const STATS: [&str; 4] = ["mean", "p50", "p90", "p99"];

/// bench_serving's and vLLM's family names, as (the tool's key part, this project's family).
const LINEAGE_FAMILIES: [(&str, &str); 5] = [
    ("ttft", "ttft"),
    ("tpot", "tpot"),
    ("itl", "inter_chunk"),
    ("e2e_latency", "e2e"),
    ("e2el", "e2e"),
];

/// The figures of a bench_serving line or a vLLM document without per-request arrays: `mean_X_ms`,
/// `median_X_ms` and `pNN_X_ms` (vLLM's `--metric-percentiles`), `output_throughput`,
/// `request_throughput`, `completed`, `failed`, `duration`.
pub fn lineage(o: &Obj<'_>, vllm: bool) -> Result<Figures, ImportError> {
    let mut f = Figures::default();
    for (tool, ours) in LINEAGE_FAMILIES {
        let keys = [
            (format!("mean_{tool}_ms"), "mean"),
            (format!("median_{tool}_ms"), "p50"),
            (format!("p50_{tool}_ms"), "p50"),
            (format!("p90_{tool}_ms"), "p90"),
            (format!("p99_{tool}_ms"), "p99"),
        ];
        for (key, stat) in keys {
            if let Some(v) = o.figure(&key)? {
                f.figures.insert(format!("{ours}_{stat}_ms"), v);
            }
        }
    }
    for (key, ours) in [
        ("output_throughput", "output_throughput_tok_s"),
        ("request_throughput", "request_throughput_req_s"),
    ] {
        if let Some(v) = o.figure(key)? {
            f.figures.insert(ours.to_string(), v);
        }
    }
    f.completed = o.num("completed")?;
    f.failed = o.num("failed")?;
    f.duration_s = o.num("duration")?;
    let itl = if vllm {
        "the gaps between successive chunks, pooled over all requests"
    } else {
        "the gaps between successive chunks, pooled over all requests (the sglang backend splits each chunk's gap evenly over its tokens: a gap per token)"
    };
    for (family, def) in [
        ("ttft", "from the request's send to its first chunk"),
        (
            "tpot",
            "(end-to-end - TTFT) / (output tokens - 1), per request of more than one token",
        ),
        ("inter_chunk", itl),
        ("e2e", "from the request's send to the end of its stream"),
        (
            "throughput",
            "output tokens (requests) of the completed requests / the benchmark's duration",
        ),
    ] {
        f.definitions.insert(family.to_string(), def.to_string());
    }
    Ok(f)
}

/// AIPerf's metric names, as (its metric, this project's family).
const AIPERF_FAMILIES: [(&str, &str); 4] = [
    ("time_to_first_token", "ttft"),
    ("inter_token_latency", "tpot"),
    ("inter_chunk_latency", "inter_chunk"),
    ("request_latency", "e2e"),
];

/// The figures of AIPerf's `profile_export_aiperf.json`: each metric an object of `avg`, `p50`,
/// `p90`, `p99` in its `unit` (ms for the latencies).
pub fn aiperf(o: &Obj<'_>) -> Result<Figures, ImportError> {
    let mut f = Figures::default();
    let stat = |name: &str, k: &str| -> Result<Option<f64>, ImportError> {
        match o.get(name).and_then(|m| m.get(k)) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => number(v).map(Some).ok_or_else(|| {
                o.err(
                    &format!("{name}.{k}"),
                    format!("expected a number, found {v}"),
                )
            }),
        }
    };
    for (name, _) in AIPERF_FAMILIES {
        if let Some(u) = o
            .get(name)
            .and_then(|m| m.get("unit"))
            .and_then(Value::as_str)
        {
            if u != "ms" {
                return Err(o.err(&format!("{name}.unit"), format!("expected ms, found {u:?}")));
            }
        }
    }
    for (name, ours) in AIPERF_FAMILIES {
        for (k, stat_name) in [
            ("avg", "mean"),
            ("p50", "p50"),
            ("p90", "p90"),
            ("p99", "p99"),
        ] {
            if let Some(v) = stat(name, k)? {
                f.figures.insert(format!("{ours}_{stat_name}_ms"), v);
            }
        }
    }
    for (name, ours) in [
        ("output_token_throughput", "output_throughput_tok_s"),
        ("request_throughput", "request_throughput_req_s"),
    ] {
        if let Some(v) = stat(name, "avg")? {
            f.figures.insert(ours.to_string(), v);
        }
    }
    f.completed = stat("request_count", "avg")?;
    f.duration_s = stat("benchmark_duration", "avg")?;
    for (family, def) in [
        ("ttft", "from the request's start to its first response carrying output"),
        (
            "tpot",
            "AIPerf's inter_token_latency: (request latency - TTFT) / (output tokens - 1), per request",
        ),
        (
            "inter_chunk",
            "AIPerf's inter_chunk_latency: the gaps between successive responses, each request's list aggregated",
        ),
        ("e2e", "AIPerf's request_latency: from the request's start to its last response"),
        (
            "throughput",
            "output tokens (requests) of the profiling phase / its duration",
        ),
    ] {
        f.definitions.insert(family.to_string(), def.to_string());
    }
    Ok(f)
}
