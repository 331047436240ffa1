//! CSV: one row per context length of a sweep.

use std::collections::BTreeMap;

use crate::report::sweep::Report;

/// CSV: one row per context length; maps are written as `kind=count;...`.
pub fn sweep(report: &Report) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "context_tokens",
        "requests",
        "ok",
        "ttft_ms_p50",
        "ttft_ms_p90",
        "prefill_tok_s_p50",
        "decode_tok_s_p50",
        "decode_tok_s_p10",
        "naive_decode_tok_s_p50",
        "tokens_per_chunk_mean",
        "cached_tokens_max",
        "contaminated",
        "failures",
        "token_attribution",
        "two_point_pairs",
        "two_point_prefill_tok_s_p50",
        "two_point_decode_tok_s_p50",
        "two_point_errors",
    ])?;
    let o = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    let m = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")
    };
    for s in report.summary() {
        w.write_record([
            s.context_tokens.to_string(),
            s.requests.to_string(),
            s.ok.to_string(),
            o(s.ttft_ms_p50),
            o(s.ttft_ms_p90),
            o(s.prefill_tok_s_p50),
            o(s.decode_tok_s_p50),
            o(s.decode_tok_s_p10),
            o(s.naive_decode_tok_s_p50),
            o(s.tokens_per_chunk_mean),
            s.cached_tokens_max.map_or(String::new(), |c| c.to_string()),
            s.contaminated.to_string(),
            m(&s.failures),
            s.token_attribution.clone(),
            s.two_point_pairs.to_string(),
            o(s.two_point_prefill_tok_s_p50),
            o(s.two_point_decode_tok_s_p50),
            m(&s.two_point_errors),
        ])?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}
