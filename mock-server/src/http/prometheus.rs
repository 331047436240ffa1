//! The Prometheus text behind `GET /metrics`: SGLang's gauges and counters, then the histograms.
//!
//! Written by hand, in the order and with the label placement Python's prometheus_client uses
//! (SGLang's exporter): `le` first on histogram buckets, numbers as Rust prints `f64`.

use crate::config::Config;
use crate::engine::Stats;

/// The exposition of `s` for a KV pool of `pool_tokens` on the server `c`, every series labelled
/// with the served model's name. The names are SGLang 0.5.23's.
pub(crate) fn text(s: &Stats, pool_tokens: usize, c: &Config) -> String {
    let (context_len, served_model_name) = (c.context_length, c.served_model_name.as_str());
    let drafts = if c.speculative() {
        c.speculative_num_draft_tokens
    } else {
        0
    };
    let pool = pool_tokens.max(1) as f64;
    let hit = if s.prompt_tokens_total > 0 {
        s.cached_tokens_total as f64 / s.prompt_tokens_total as f64
    } else {
        0.0
    };
    let accept = s.accept_length();
    // Every series carries the served model's name, as SGLang labels its metrics.
    let label = format!(
        "model_name={}",
        serde_json::to_string(served_model_name).unwrap_or_default()
    );
    let mut out = String::new();
    for (name, kind, v) in [
        ("sglang:num_running_reqs", "gauge", s.num_running as f64),
        ("sglang:num_queue_reqs", "gauge", s.num_waiting as f64),
        ("sglang:num_used_tokens", "gauge", s.kv_used_tokens as f64),
        ("sglang:kv_used_tokens", "gauge", s.kv_used_tokens as f64),
        (
            "sglang:kv_available_tokens",
            "gauge",
            pool - s.kv_used_tokens as f64,
        ),
        ("sglang:max_total_num_tokens", "gauge", pool),
        ("sglang:context_len", "gauge", context_len as f64),
        (
            "sglang:num_retracted_reqs",
            "gauge",
            s.retracted_last as f64,
        ),
        (
            "sglang:token_usage",
            "gauge",
            s.kv_used_tokens as f64 / pool,
        ),
        ("sglang:cache_hit_rate", "gauge", hit),
        ("sglang:gen_throughput", "gauge", s.last_gen_throughput),
        ("sglang:spec_accept_length", "gauge", accept),
        ("sglang:spec_accept_rate", "gauge", s.accept_rate(drafts)),
        (
            "sglang:full_token_usage",
            "gauge",
            s.kv_used_tokens as f64 / pool,
        ),
        // The mock pages KV one token at a time, and has no grammar queue or paused requests.
        ("sglang:page_size", "gauge", 1.0),
        ("sglang:num_grammar_queue_reqs", "gauge", 0.0),
        ("sglang:num_paused_reqs", "gauge", 0.0),
        (
            "sglang:prompt_tokens_total",
            "counter",
            s.prompt_tokens_total as f64,
        ),
        (
            "sglang:generation_tokens_total",
            "counter",
            s.generation_tokens_total as f64,
        ),
        (
            "sglang:cached_tokens_total",
            "counter",
            s.cached_tokens_total as f64,
        ),
        (
            "sglang:num_requests_total",
            "counter",
            s.requests_total as f64,
        ),
    ] {
        out.push_str(&format!(
            "# HELP {name} {name}\n# TYPE {name} {kind}\n{name}{{{label}}} {v}\n"
        ));
    }
    s.ttft.render(
        &mut out,
        &label,
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
    );
    s.itl.render(
        &mut out,
        &label,
        "sglang:inter_token_latency_seconds",
        "Histogram of token-to-token latency in seconds.",
    );
    s.queue.render(
        &mut out,
        &label,
        "sglang:queue_time_seconds",
        "Histogram of queueing time in seconds.",
    );
    s.e2e.render(
        &mut out,
        &label,
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
    );
    out
}
