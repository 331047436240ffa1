//! JSON: the sweep report's per-context summaries, the load summary with all latencies in ms (its
//! prefix cache with TTFT by hit and miss among them), and comparisons.

use serde_json::{json, Value};

use super::{ms, PCTS};
use crate::measure::compare::Direction;
use crate::report::compare::CompareReport;
use crate::report::load::{LoadSummary, METRICS};
use crate::report::sweep::Report;

/// JSON: the summaries.
pub fn sweep(report: &Report) -> String {
    serde_json::to_string_pretty(&report.summary())
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The summary as JSON (all latencies in ms).
pub fn load(s: &LoadSummary) -> Value {
    let mut metrics = serde_json::Map::new();
    for (name, def) in METRICS {
        let Some(m) = s.metrics.get(name) else {
            continue;
        };
        let mut o = serde_json::Map::new();
        o.insert("definition".into(), json!(def));
        o.insert("count".into(), json!(m.count()));
        for (label, p) in PCTS {
            o.insert(format!("{label}_ms"), json!(m.percentile(p).map(ms)));
        }
        o.insert("max_ms".into(), json!(m.max().map(ms)));
        o.insert("mean_ms".into(), json!(m.mean().map(|v| v / 1e6)));
        metrics.insert(name.into(), Value::Object(o));
    }
    let tpc = &s.tokens_per_chunk;
    let t0 = s.timeline.keys().next().copied().unwrap_or(0);
    let mut out = json!({
        "requests": s.requests,
        "succeeded": s.succeeded,
        "failures": s.failures,
        "shards": s.shards,
        "slo": s.slo,
        "good": s.good,
        "prompt_tokens": s.prompt_tokens,
        "cached_tokens": s.cache.cached_tokens,
        "prefix_cache": s.cache.to_json(),
        "output_tokens": s.output_tokens,
        "per_chunk_counts_unknown": s.counts_unknown,
        "imported": s.imported,
        "derived": s.derived(),
        "tokens_per_chunk": {
            "p50": tpc.percentile(50.0), "p90": tpc.percentile(90.0), "p99": tpc.percentile(99.0),
            "max": tpc.max(),
        },
        "metrics": metrics,
        "timeline": s.timeline.iter().map(|(k, v)| json!({
            "second": k - t0, "unix_s": k, "sent": v.sent, "completed": v.completed,
            "failed": v.failed, "output_tokens": v.output_tokens,
        })).collect::<Vec<_>>(),
    });
    // Only multi-turn runs have turns; other summaries keep their shape.
    if !s.turns.is_empty() {
        out["turns"] = turns(&s.turns);
    }
    out
}

/// Multi-turn runs: one object per turn number (0 = the first), TTFT in ms from the scheduled start.
fn turns(t: &crate::report::turns::Turns) -> Value {
    t.0.iter()
        .map(|(k, s)| {
            json!({
                "turn": k, "requests": s.requests, "succeeded": s.succeeded,
                "ttft_mean_ms": s.ttft.mean().map(|v| v / 1e6),
                "ttft_p50_ms": s.ttft.percentile(50.0).map(ms),
                "ttft_p99_ms": s.ttft.percentile(99.0).map(ms),
                "prompt_tokens": s.cache.prompt_tokens, "cached_tokens": s.cache.cached_tokens,
                "cache_hit_ratio": s.hit_ratio(), "stand_in_tokens": s.stand_in_tokens,
                "cache": s.cache.to_json(),
            })
        })
        .collect()
}

/// The comparison as JSON: settings, manifest differences, rows, counts and notes. A row that
/// could not be compared has null numbers, `unclear` and its `error`.
pub fn compare(r: &CompareReport) -> Value {
    let rows: Vec<Value> = r
        .rows
        .iter()
        .map(|row| {
            let c = row.outcome.as_ref().ok();
            json!({
                "context_tokens": row.context_tokens,
                "metric": row.metric,
                "better": match row.direction {
                    Direction::LowerIsBetter => "lower",
                    Direction::HigherIsBetter => "higher",
                },
                "n_base": row.n_base,
                "n_new": row.n_new,
                "runs_base": row.runs_base,
                "runs_new": row.runs_new,
                "base": c.map(|c| c.base),
                "new": c.map(|c| c.new),
                "ratio": c.map(|c| c.ratio),
                "ci_low": c.map(|c| c.lo),
                "ci_high": c.map(|c| c.hi),
                "verdict": row.verdict().as_str(),
                "error": row.outcome.as_ref().err(),
            })
        })
        .collect();
    json!({
        "kind": r.kind.as_str(),
        "method": "ratio NEW/BASE of each statistic; 95% percentile bootstrap interval (Efron & Tibshirani, An Introduction to the Bootstrap, 1993), requests resampled with replacement on each side; a side of R > 1 runs resampled by run (R - 1 drawn; McCarthy & Snowden 1985), then by request (Davison & Hinkley 1997, 3.8)",
        "resamples": r.bootstrap.resamples,
        "seed": r.bootstrap.seed,
        "threshold": r.bootstrap.threshold,
        "workload_differences": r.workload,
        "differences": r.differences.iter().map(|d| json!({"key": d.key, "base": d.base, "new": d.new})).collect::<Vec<_>>(),
        "rows": rows,
        "counts": r.counts(),
        "notes": r.notes,
    })
}
