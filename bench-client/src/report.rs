//! Reports from records: per-context statistics, mergeable, rendered as a table, JSON, CSV or an SVG plot.
//! Percentiles use [`crate::measure::percentile`] (linear interpolation, type 7).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::measure::percentile;
use crate::record::{Method, Record};

/// Raw values of one context length; merging concatenates, so merged reports are exact.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PointData {
    /// Streaming requests seen (ok + failed).
    pub requests: u64,
    /// TTFT of successful streaming requests.
    pub ttft_ms: Vec<f64>,
    /// Prefill rates.
    pub prefill_tok_s: Vec<f64>,
    /// Decode rates.
    pub decode_tok_s: Vec<f64>,
    /// Naive decode rates.
    pub naive_decode_tok_s: Vec<f64>,
    /// Every chunk's token count.
    pub tokens_per_chunk: Vec<f64>,
    /// Cached tokens reported.
    pub cached_tokens: Vec<f64>,
    /// Reasons the decode rate could not be measured, counted.
    pub decode_unavailable: BTreeMap<String, u64>,
    /// Token attribution methods seen, counted.
    pub attribution: BTreeMap<String, u64>,
    /// Where the successful requests' instants were taken (`trace.stamps`), counted.
    #[serde(default)]
    pub stamps: BTreeMap<String, u64>,
    /// Contaminated points.
    pub contaminated: u64,
    /// Streaming failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// Two-point pairs seen.
    pub two_point_pairs: u64,
    /// Two-point solved prefill rates.
    pub two_point_prefill_tok_s: Vec<f64>,
    /// Two-point solved decode rates.
    pub two_point_decode_tok_s: Vec<f64>,
    /// Two-point errors by kind.
    pub two_point_errors: BTreeMap<String, u64>,
}

/// A report: raw data per context length.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// By context length (tokens).
    pub points: BTreeMap<u32, PointData>,
}

fn add_map(a: &mut BTreeMap<String, u64>, b: BTreeMap<String, u64>) {
    for (k, v) in b {
        *a.entry(k).or_default() += v;
    }
}

fn push(v: &mut Vec<f64>, x: Option<f64>) {
    if let Some(x) = x.filter(|x| x.is_finite()) {
        v.push(x);
    }
}

impl PointData {
    fn merge(&mut self, o: PointData) {
        self.requests += o.requests;
        self.ttft_ms.extend(o.ttft_ms);
        self.prefill_tok_s.extend(o.prefill_tok_s);
        self.decode_tok_s.extend(o.decode_tok_s);
        self.naive_decode_tok_s.extend(o.naive_decode_tok_s);
        self.tokens_per_chunk.extend(o.tokens_per_chunk);
        self.cached_tokens.extend(o.cached_tokens);
        add_map(&mut self.decode_unavailable, o.decode_unavailable);
        add_map(&mut self.attribution, o.attribution);
        self.contaminated += o.contaminated;
        add_map(&mut self.failures, o.failures);
        self.two_point_pairs += o.two_point_pairs;
        self.two_point_prefill_tok_s
            .extend(o.two_point_prefill_tok_s);
        self.two_point_decode_tok_s.extend(o.two_point_decode_tok_s);
        add_map(&mut self.two_point_errors, o.two_point_errors);
        add_map(&mut self.stamps, o.stamps);
    }
}

impl Report {
    /// Build from records.
    pub fn from_records(records: &[Record]) -> Report {
        let mut r = Report::default();
        for rec in records {
            r.add(rec);
        }
        r
    }

    /// Add one record.
    pub fn add(&mut self, rec: &Record) {
        let p = self.points.entry(rec.context_tokens).or_default();
        match rec.method {
            Method::Streaming => {
                p.requests += 1;
                if rec.contaminated {
                    p.contaminated += 1;
                }
                if let Some(e) = &rec.error {
                    *p.failures.entry(e.kind.clone()).or_default() += 1;
                    return;
                }
                *p.attribution
                    .entry(rec.token_attribution.as_str().to_string())
                    .or_default() += 1;
                if let Some(t) = &rec.trace {
                    *p.stamps.entry(t.stamps.as_str().to_string()).or_default() += 1;
                }
                push(&mut p.ttft_ms, rec.ttft_ms);
                push(&mut p.prefill_tok_s, rec.prefill_tok_s);
                push(&mut p.decode_tok_s, rec.decode_tok_s);
                push(&mut p.naive_decode_tok_s, rec.naive_decode_tok_s);
                p.tokens_per_chunk
                    .extend(rec.tokens_per_chunk.iter().map(|&t| f64::from(t)));
                push(&mut p.cached_tokens, rec.cached_tokens.map(f64::from));
                if let Some(d) = &rec.decode_unavailable {
                    *p.decode_unavailable.entry(d.clone()).or_default() += 1;
                }
            }
            Method::TwoPoint => {
                p.two_point_pairs += 1;
                if let Some(e) = &rec.error {
                    *p.two_point_errors.entry(e.kind.clone()).or_default() += 1;
                    return;
                }
                push(&mut p.two_point_prefill_tok_s, rec.prefill_tok_s);
                push(&mut p.two_point_decode_tok_s, rec.decode_tok_s);
            }
        }
    }

    /// Merge another report into this one (exact: raw values are concatenated).
    pub fn merge(mut self, other: Report) -> Report {
        for (k, v) in other.points {
            self.points.entry(k).or_default().merge(v);
        }
        self
    }

    /// Summary rows, one per context length.
    pub fn summary(&self) -> Vec<Summary> {
        self.points
            .iter()
            .map(|(&ctx, p)| {
                let mean =
                    |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
                let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
                let total_fail: u64 = p.failures.values().sum();
                Summary {
                    context_tokens: ctx,
                    requests: p.requests,
                    ok: p.requests - total_fail,
                    ttft_ms_p50: percentile(&p.ttft_ms, 50.0),
                    ttft_ms_p90: percentile(&p.ttft_ms, 90.0),
                    prefill_tok_s_p50: percentile(&p.prefill_tok_s, 50.0),
                    decode_tok_s_p50: percentile(&p.decode_tok_s, 50.0),
                    decode_tok_s_p10: percentile(&p.decode_tok_s, 10.0),
                    naive_decode_tok_s_p50: percentile(&p.naive_decode_tok_s, 50.0),
                    tokens_per_chunk_mean: mean(&p.tokens_per_chunk),
                    cached_tokens_max: max(&p.cached_tokens).map(|c| c as u64),
                    contaminated: p.contaminated,
                    failures: p.failures.clone(),
                    decode_unavailable: p.decode_unavailable.clone(),
                    token_attribution: p.attribution.keys().cloned().collect::<Vec<_>>().join("+"),
                    two_point_pairs: p.two_point_pairs,
                    two_point_prefill_tok_s_p50: percentile(&p.two_point_prefill_tok_s, 50.0),
                    two_point_decode_tok_s_p50: percentile(&p.two_point_decode_tok_s, 50.0),
                    two_point_errors: p.two_point_errors.clone(),
                }
            })
            .collect()
    }

    /// Whether any two-point pair ran.
    pub fn has_two_point(&self) -> bool {
        self.points.values().any(|p| p.two_point_pairs > 0)
    }
}

/// Summary of one context length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Context length.
    pub context_tokens: u32,
    /// Streaming requests.
    pub requests: u64,
    /// Successful streaming requests.
    pub ok: u64,
    /// Median TTFT.
    pub ttft_ms_p50: Option<f64>,
    /// 90th percentile TTFT.
    pub ttft_ms_p90: Option<f64>,
    /// Median prefill rate.
    pub prefill_tok_s_p50: Option<f64>,
    /// Median decode rate.
    pub decode_tok_s_p50: Option<f64>,
    /// 10th percentile decode rate (slow tail).
    pub decode_tok_s_p10: Option<f64>,
    /// Median of the common (completion-1)/time formula.
    pub naive_decode_tok_s_p50: Option<f64>,
    /// Mean tokens per chunk.
    pub tokens_per_chunk_mean: Option<f64>,
    /// Largest cached-token count reported.
    pub cached_tokens_max: Option<u64>,
    /// Contaminated requests.
    pub contaminated: u64,
    /// Failures by kind.
    pub failures: BTreeMap<String, u64>,
    /// Decode-unmeasurable reasons by count.
    pub decode_unavailable: BTreeMap<String, u64>,
    /// Attribution methods seen.
    pub token_attribution: String,
    /// Two-point pairs.
    pub two_point_pairs: u64,
    /// Two-point median prefill.
    pub two_point_prefill_tok_s_p50: Option<f64>,
    /// Two-point median decode.
    pub two_point_decode_tok_s_p50: Option<f64>,
    /// Two-point errors by kind.
    pub two_point_errors: BTreeMap<String, u64>,
}

fn f(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

fn counts(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "0".into();
    }
    m.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A plain-text table, one row per context length.
pub fn render_table(report: &Report) -> String {
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
    let mut rows: Vec<Vec<String>> = Vec::new();
    for s in report.summary() {
        let mut row = vec![
            s.context_tokens.to_string(),
            format!("{}/{}", s.ok, s.requests),
            f(s.ttft_ms_p50, 1),
            f(s.ttft_ms_p90, 1),
            f(s.prefill_tok_s_p50, 0),
            f(s.decode_tok_s_p50, 1),
            f(s.decode_tok_s_p10, 1),
            f(s.naive_decode_tok_s_p50, 1),
            f(s.tokens_per_chunk_mean, 2),
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
            row.push(f(s.two_point_prefill_tok_s_p50, 0));
            row.push(f(s.two_point_decode_tok_s_p50, 1));
            row.push(counts(&s.two_point_errors));
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r));
        out.push('\n');
    }
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
    let mut stamps = BTreeMap::<String, u64>::new();
    for p in report.points.values() {
        add_map(&mut stamps, p.stamps.clone());
    }
    if !stamps.is_empty() {
        let counts: Vec<String> = stamps.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "instants stamped (requests): {} (kernel: kernel receive timestamps; socket: at the connection's reads; task: by the request's task).\n",
            counts.join(", ")
        ));
    }
    out
}

/// JSON: the summaries.
pub fn to_json(report: &Report) -> String {
    serde_json::to_string_pretty(&report.summary())
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// CSV: one row per context length; maps are written as `kind=count;...`.
pub fn to_csv(report: &Report) -> anyhow::Result<String> {
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

/// SVG with two panels: median TTFT and median decode rate against context length.
pub fn plot_svg(report: &Report, path: &std::path::Path) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let s = report.summary();
    let ttft: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|r| r.ttft_ms_p50.map(|t| (f64::from(r.context_tokens), t)))
        .collect();
    let dec: Vec<(f64, f64)> = s
        .iter()
        .filter_map(|r| r.decode_tok_s_p50.map(|d| (f64::from(r.context_tokens), d)))
        .collect();
    let root = SVGBackend::new(path, (900, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let panels = root.split_evenly((1, 2));
    for (area, (name, pts)) in panels
        .iter()
        .zip([("median TTFT (ms)", &ttft), ("median decode (tok/s)", &dec)])
    {
        let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 1.05;
        let ymax = pts.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("context tokens")
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), &BLUE))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, BLUE.filled())))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
