//! Plain-text tables: one row per context length for sweeps, one row per metric for load runs, one
//! row per statistic for comparisons.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{cell, ms, PCTS};
use crate::measure::compare::Direction;
use crate::report::compare::CompareReport;
use crate::report::grid::{Align, Col, Grid};
use crate::report::load::{LoadSummary, Metric, METRICS};
use crate::report::sweep::Report;

fn counts(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "0".into();
    }
    m.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The sweep table's header and cells, one row per context length (the text and HTML tables).
pub(super) fn sweep_cells(report: &Report) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let tp = report.has_two_point();
    let mut header = vec![
        "context",
        "ok/n",
        "TTFT p50 ms",
        "TTFT p90 ms",
        "prefill tok/s",
        "decode tok/s p50",
        "decode p10",
        "naive decode",
        "tok/chunk",
        "cached",
        "contam",
        "failures",
        "attribution",
    ];
    if tp {
        header.extend(["2pt prefill", "2pt decode", "2pt errors"]);
    }
    let split = report.has_server_timing();
    if split {
        header.push("TTFT server queue/prefill/rest ms");
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in report.summary() {
        let mut row = vec![
            s.context_tokens.to_string(),
            format!("{}/{}", s.ok, s.requests),
            cell(s.ttft_ms_p50, 1),
            cell(s.ttft_ms_p90, 1),
            cell(s.prefill_tok_s_p50, 0),
            cell(s.decode_tok_s_p50, 1),
            cell(s.decode_tok_s_p10, 1),
            cell(s.naive_decode_tok_s_p50, 1),
            cell(s.tokens_per_chunk_mean, 2),
            s.cached_tokens_max.map_or("-".into(), |c| c.to_string()),
            s.contaminated.to_string(),
            counts(&s.failures),
            if s.token_attribution.is_empty() {
                "-".into()
            } else {
                s.token_attribution.clone()
            },
        ];
        if tp {
            row.push(cell(s.two_point_prefill_tok_s_p50, 0));
            row.push(cell(s.two_point_decode_tok_s_p50, 1));
            row.push(counts(&s.two_point_errors));
        }
        if split {
            row.push(format!(
                "{}/{}/{}",
                cell(s.server_queue_ms_p50, 1),
                cell(s.server_prefill_ms_p50, 1),
                cell(s.ttft_rest_ms_p50, 1)
            ));
        }
        rows.push(row);
    }
    (header, rows)
}

/// A plain-text table, one row per context length.
pub fn sweep(report: &Report) -> String {
    let (header, rows) = sweep_cells(report);
    let mut g = Grid::spaced(&vec![Align::Right; header.len()], 2);
    g.row(header);
    for r in rows {
        g.row(r);
    }
    let mut out = g.render();
    let notes: Vec<String> = report
        .summary()
        .iter()
        .flat_map(|s| {
            s.decode_unavailable.iter().map(move |(k, v)| {
                format!(
                    "{} tokens: decode not measured for {v} request(s): {k}",
                    s.context_tokens
                )
            })
        })
        .collect();
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out.push_str("decode = tokens after the first chunk / (t_last - t_first); naive = (completion_tokens - 1) / (t_last - t_first).\n");
    let stamps = report.stamps();
    if !stamps.is_empty() {
        let counts: Vec<String> = stamps.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "instants stamped (requests): {} (kernel: kernel receive timestamps; socket: at the connection's reads; task: by the request's task).\n",
            counts.join(", ")
        ));
    }
    out
}

/// The summary as a text table.
pub fn load(s: &LoadSummary) -> String {
    let d = s.derived();
    let mut o = String::new();
    let shards: Vec<&str> = s.shards.iter().map(String::as_str).collect();
    let _ = writeln!(o, "load summary (shards {})", shards.join(", "));
    // Each figure, then its value and definition: the names' column is as wide in every part.
    let name = Col::left().min(21).gap(2);
    let mut g = Grid::new(&[name, Col::left()]);
    g.row([
        "requests".to_string(),
        format!(
            "{} measured, {} ok, {} failed",
            s.requests,
            s.succeeded,
            s.requests - s.succeeded
        ),
    ]);
    o.push_str(&g.render());
    let rows: [(&str, String, &str); 9] = [
        (
            "duration",
            cell(d.duration_s, 3),
            "s, first scheduled start to last stream end",
        ),
        (
            "request throughput",
            cell(d.request_throughput, 2),
            "req/s, successful requests / duration",
        ),
        (
            "output throughput",
            cell(d.output_throughput, 1),
            "tok/s, output tokens / duration",
        ),
        (
            "input throughput",
            cell(d.input_throughput, 1),
            "tok/s, prompt tokens / duration",
        ),
        (
            "arrival rate",
            cell(d.arrival_rate, 2),
            "req/s, (sends - 1) / (last send - first send)",
        ),
        (
            "achieved concurrency",
            cell(d.achieved_concurrency, 2),
            "mean in flight, sum(send-to-end) / duration",
        ),
        (
            "cache hit rate",
            cell(d.cache_hit_rate, 4),
            "cached / prompt tokens of the requests that reported a cached count",
        ),
        (
            "tokens per chunk",
            cell(d.tokens_per_chunk_mean, 3),
            "mean output tokens per output chunk",
        ),
        ("goodput", cell(d.goodput, 2), "req/s meeting the SLO"),
    ];
    let mut g = Grid::new(&[name, Col::left().min(12), Col::left()]);
    for (k, v, def) in rows {
        g.row([k.to_string(), v, def.to_string()]);
    }
    o.push_str(&g.render());
    let mut g = Grid::new(&[name, Col::left()]);
    if s.slo.is_set() {
        g.row([
            "slo".to_string(),
            format!(
                "ttft <= {} ms, tpot <= {} ms: {} of {} requests",
                cell(s.slo.ttft_ms, 1),
                cell(s.slo.tpot_ms, 1),
                s.good,
                s.requests
            ),
        ]);
    }
    let c = &s.cache;
    if c.reported > 0 {
        g.row([
            "prefix cache".to_string(),
            format!(
                "{} of {} ok requests reported a cached count: {} hits (cached > 0), {} misses",
                c.reported,
                s.succeeded,
                c.hit.count(),
                c.miss.count()
            ),
        ]);
    } else if s.succeeded > 0 {
        g.row([
            "prefix cache",
            "no request reported a cached count (SGLang's OpenAI API: --enable-cache-report; vLLM: --enable-prompt-tokens-details)",
        ]);
    }
    o.push_str(&g.render());
    if s.counts_unknown > 0 {
        let _ = writeln!(
            o,
            "  note: {} requests had no per-chunk token counts; TPOT and per-token latency exclude them",
            s.counts_unknown
        );
    }
    if s.imported > 0 {
        let _ = writeln!(
            o,
            "  note: {} requests were imported from another tool's results: their instants are the tool's, their tokens per chunk only where it kept them, their records' decode rate and TPOT otherwise the tool's definition (named in the manifest)",
            s.imported
        );
    }
    let mut g = Grid::new(&[
        Col::left().min(18).gap(2),
        Col::right().min(7),
        Col::right().min(10),
        Col::right().min(10),
        Col::right().min(10),
        Col::right().min(10),
        Col::right().min(10),
        Col::right().min(10),
    ]);
    g.row([
        "latency (ms)",
        "n",
        "p50",
        "p90",
        "p95",
        "p99",
        "max",
        "mean",
    ]);
    let latency = |g: &mut Grid, name: &str, m: &Metric| {
        let mut row = vec![name.to_string(), m.count().to_string()];
        row.extend(PCTS.map(|(_, p)| cell(m.percentile(p).map(ms), 3)));
        row.push(cell(m.max().map(ms), 3));
        row.push(cell(m.mean().map(|v| v / 1e6), 3));
        g.row(row);
    };
    // The hit/miss split sits under the TTFT it splits, when the server reported cached counts.
    let split = [("ttft_cache_hit", &c.hit), ("ttft_cache_miss", &c.miss)];
    for (name, _) in METRICS {
        let Some(m) = s.metrics.get(name) else {
            continue;
        };
        latency(&mut g, name, m);
        if name == "ttft" && c.reported > 0 {
            for (n, m) in split {
                latency(&mut g, n, m);
            }
        }
    }
    o.push('\n');
    o.push_str(&g.render());
    o.push_str(&turns(&s.turns));
    let _ = writeln!(o, "\n  definitions:");
    let mut g = Grid::new(&[Col::left().min(18).gap(4), Col::left()]);
    for (name, def) in METRICS {
        g.row([name, def]);
        if name == "ttft" && c.reported > 0 {
            g.row([
                "ttft_cache_hit",
                "TTFT of the requests that reported cached_tokens > 0",
            ]);
            g.row([
                "ttft_cache_miss",
                "TTFT of the requests that reported cached_tokens = 0",
            ]);
        }
    }
    o.push_str(&g.render());
    if !s.failures.is_empty() {
        let _ = writeln!(o, "\n  failures by cause:");
        let mut g = Grid::new(&[Col::left().min(24).gap(4), Col::left()]);
        for (k, v) in &s.failures {
            g.row([k.to_string(), v.to_string()]);
        }
        o.push_str(&g.render());
    }
    if let Some(&t0) = s.timeline.keys().next() {
        let _ = writeln!(o, "\n  timeline (s: sent, completed, failed, output tok)");
        let mut g = Grid::new(&[
            Col::right().min(5).gap(4),
            Col::right().min(7),
            Col::right().min(9),
            Col::right().min(6),
            Col::right().min(10),
        ]);
        for (k, v) in &s.timeline {
            g.row([
                (k - t0).to_string(),
                v.sent.to_string(),
                v.completed.to_string(),
                v.failed.to_string(),
                v.output_tokens.to_string(),
            ]);
        }
        o.push_str(&g.render());
    }
    o
}

/// Multi-turn runs: one row per turn number (empty for runs without sessions).
fn turns(t: &crate::report::turns::Turns) -> String {
    let mut o = String::new();
    if t.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "\n  by turn (0 = the first; TTFT from the end of the turn before plus the think time)"
    );
    let mut g = Grid::new(&[
        Col::right().min(6).gap(2),
        Col::right().min(7),
        Col::right().min(7),
        Col::right().min(12),
        Col::right().min(10),
        Col::right().min(10),
        Col::right().min(12),
        Col::right().min(12),
        Col::right().min(9),
        Col::right().min(12),
    ]);
    g.row([
        "turn",
        "n",
        "ok",
        "TTFT mean ms",
        "p50 ms",
        "p99 ms",
        "prompt tok",
        "cached tok",
        "hit",
        "stand-in tok",
    ]);
    let mut stand_in = false;
    for (k, s) in &t.0 {
        stand_in |= s.stand_in_tokens > 0;
        g.row([
            k.to_string(),
            s.requests.to_string(),
            s.succeeded.to_string(),
            cell(s.ttft.mean().map(|v| v / 1e6), 3),
            cell(s.ttft.percentile(50.0).map(ms), 3),
            cell(s.ttft.percentile(99.0).map(ms), 3),
            s.cache.prompt_tokens.to_string(),
            s.cache.cached_tokens.to_string(),
            cell(s.hit_ratio(), 4),
            s.stand_in_tokens.to_string(),
        ]);
    }
    o.push_str(&g.render());
    if stand_in {
        let _ = writeln!(
            o,
            "  note: stand-in tokens replace outputs the server listed no token ids for; they are not its output, so its cache misses there"
        );
    }
    o
}

/// The comparison as text: the manifest differences first, then one row per statistic.
pub fn compare(r: &CompareReport) -> String {
    let mut o = String::new();
    for w in &r.workload {
        let _ = writeln!(o, "WARNING: {w}");
    }
    if r.differences.is_empty() {
        let _ = writeln!(o, "manifests: no differences in server, model or settings");
    } else {
        let _ = writeln!(o, "what differs between the runs (BASE -> NEW):");
        let mut g = Grid::new(&[Col::left().gap(2), Col::left().gap(2)]);
        for d in &r.differences {
            g.row([d.key.clone(), format!("{} -> {}", d.base, d.new)]);
        }
        o.push_str(&g.render());
    }
    let _ = writeln!(o);
    let header = [
        "context",
        "metric",
        "BASE",
        "NEW",
        "NEW/BASE",
        "95% interval",
        "verdict",
        "n",
        "better",
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut reasons = Vec::new();
    for row in &r.rows {
        let ctx = row.context_tokens.map_or("-".into(), |c| c.to_string());
        let (b, n, ratio, ci) = match &row.outcome {
            Ok(c) => (
                format!("{:.3}", c.base),
                format!("{:.3}", c.new),
                format!("{:.3}", c.ratio),
                format!("[{:.3}, {:.3}]", c.lo, c.hi),
            ),
            Err(e) => {
                reasons.push(format!("{} {}: {e}", ctx, row.metric));
                ("-".into(), "-".into(), "-".into(), "-".into())
            }
        };
        rows.push(vec![
            ctx,
            row.metric.to_string(),
            b,
            n,
            ratio,
            ci,
            row.verdict().as_str().to_string(),
            format!("{}/{}", row.n_base, row.n_new),
            match row.direction {
                Direction::LowerIsBetter => "lower".into(),
                Direction::HigherIsBetter => "higher".into(),
            },
        ]);
    }
    // The metric, verdict, n and better read left to right; the figures line up on the right.
    let (left, right) = (Align::Left, Align::Right);
    let mut g = Grid::spaced(
        &[right, left, right, right, right, right, left, left, left],
        2,
    );
    g.row(header);
    for row in rows {
        g.row(row);
    }
    o.push_str(&g.render());
    let counts: Vec<String> = r.counts().iter().map(|(k, v)| format!("{v} {k}")).collect();
    let t = r.bootstrap.threshold;
    let _ = writeln!(
        o,
        "\n{} rows: {}. NEW/BASE with a 95% percentile-bootstrap interval (Efron & Tibshirani 1993; B = {}, seed {}); same: the interval lies within [{:.3}, {:.3}], better/worse: wholly beyond it.",
        r.rows.len(),
        counts.join(", "),
        r.bootstrap.resamples,
        r.bootstrap.seed,
        1.0 - t,
        1.0 + t
    );
    for n in r.notes.iter().chain(&reasons) {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
