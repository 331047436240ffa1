//! The comparison as one self-contained HTML page: a one-line headline, the workload warnings, the
//! rows as a table with a coloured verdict each, what differs between the manifests, the notes,
//! and the overlay plot for sweeps. Every text from the files is escaped.

use askama::Template;

use super::{CompareReport, Difference, Row};
use crate::measure::compare::Verdict;
use crate::report::export::html::STYLE;

/// Verdict colours: green better, red worse, grey same, amber unclear.
const VERDICTS: &str = "td.better{background:#d4f4d4;color:#0a5a0a;font-weight:bold}\
td.worse{background:#f8d0d0;color:#8a0a0a;font-weight:bold}td.same{background:#eee;color:#444}\
td.unclear{background:#fbeccb;color:#7a5200}p.headline{font-size:1.25em;font-weight:bold}\
div.warning{border:2px solid #c00;background:#fff0f0;padding:.5em 1em;margin:1em 0}";

/// A metric's name as people say it: `ttft_p50_ms` is `TTFT p50`.
fn label(metric: &str) -> String {
    let words: Vec<String> = metric
        .split('_')
        .filter(|w| !matches!(*w, "ms" | "s" | "tok" | "req"))
        .map(|w| match w {
            "ttft" | "tpot" | "e2e" => w.to_uppercase(),
            other => other.to_string(),
        })
        .collect();
    words.join(" ")
}

fn rows(n: usize) -> String {
    if n == 1 {
        "1 row".into()
    } else {
        format!("{n} rows")
    }
}

/// The change NEW/BASE - 1 in percent, signed.
fn change(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

/// One line: which way NEW went overall, then the headline rows with their change and verdict,
/// e.g. `NEW is better: TTFT p50 -12.0% (better), TPOT p50 +1.0% (same)`.
pub fn headline(r: &CompareReport) -> String {
    let count = |v: Verdict| r.rows.iter().filter(|x| x.verdict() == v).count();
    let (better, worse) = (count(Verdict::Better), count(Verdict::Worse));
    let overall = match (better, worse) {
        (0, 0) if count(Verdict::Same) > 0 => "NEW is the same as BASE".to_string(),
        (0, 0) => "the data cannot tell NEW from BASE".to_string(),
        (_, 0) => format!("NEW is better ({} better, none worse)", rows(better)),
        (0, _) => format!("NEW is worse ({} worse, none better)", rows(worse)),
        _ => format!(
            "mixed: NEW is better in {} and worse in {worse}",
            rows(better)
        ),
    };
    let key = [
        "ttft_p50_ms",
        "tpot_p50_ms",
        "decode_p50_tok_s",
        "output_throughput_tok_s",
    ];
    let parts: Vec<String> = key
        .iter()
        .filter_map(|k| r.rows.iter().rev().find(|x| x.metric == *k))
        .filter_map(|x| {
            let c = x.outcome.as_ref().ok()?;
            let at = x
                .context_tokens
                .map_or(String::new(), |t| format!(" at {t} tokens"));
            Some(format!(
                "{}{at} {} ({})",
                label(x.metric),
                change(c.ratio),
                x.verdict().as_str()
            ))
        })
        .collect();
    if parts.is_empty() {
        overall
    } else {
        format!("{overall}: {}", parts.join(", "))
    }
}

/// The page's template (`templates/compare.html`): every value it inserts is escaped, except the
/// style sheet and the plot, which this crate draws.
#[derive(Template)]
#[template(path = "compare.html")]
struct ComparePage<'a> {
    title: String,
    style: String,
    headline: String,
    workload: &'a [String],
    rows: Vec<RowView>,
    resamples: u32,
    seed: u64,
    threshold_pct: f64,
    plot: Option<&'a str>,
    truth: Option<TruthView>,
    differences: &'a [Difference],
    notes: &'a [String],
}

/// One row's cells.
struct RowView {
    context: String,
    metric: String,
    base: String,
    new: String,
    change: String,
    interval: String,
    verdict: &'static str,
    n_base: usize,
    n_new: usize,
    better: &'static str,
}

fn row_view(x: &Row) -> RowView {
    let (base, new, change_, interval) = match &x.outcome {
        Ok(c) => (
            format!("{:.3}", c.base),
            format!("{:.3}", c.new),
            change(c.ratio),
            format!("[{}, {}]", change(c.lo), change(c.hi)),
        ),
        Err(e) => ("-".into(), "-".into(), "-".into(), e.clone()),
    };
    RowView {
        context: x.context_tokens.map_or("-".into(), |c| c.to_string()),
        metric: label(x.metric),
        base,
        new,
        change: change_,
        interval,
        verdict: x.verdict().as_str(),
        n_base: x.n_base,
        n_new: x.n_new,
        better: match x.direction {
            crate::measure::compare::Direction::LowerIsBetter => "lower",
            crate::measure::compare::Direction::HigherIsBetter => "higher",
        },
    }
}

/// A figure less the truth, in ms and in percent of the truth.
fn error(e: Option<f64>, truth: Option<f64>) -> String {
    match (e, truth) {
        (Some(e), Some(t)) if t > 0.0 => format!("{e:+.3} ({:+.1}%)", e / t * 100.0),
        (Some(e), _) => format!("{e:+.3}"),
        _ => "-".into(),
    }
}

fn figure(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The mock's ground truth beside the imported tool's figure and this client's, with each one's
/// error against the truth.
struct TruthView {
    tool: String,
    side: &'static str,
    rows: Vec<TruthRowView>,
    note: String,
}

struct TruthRowView {
    metric: String,
    truth: String,
    imported: String,
    imported_error: String,
    own: String,
    own_error: String,
}

fn truth_view(t: &super::truth::Truth) -> TruthView {
    let rows = t
        .rows
        .iter()
        .map(|x| TruthRowView {
            metric: label(x.metric),
            truth: figure(x.truth),
            imported: figure(x.imported),
            imported_error: error(x.imported_error(), x.truth),
            own: figure(x.own),
            own_error: error(x.own_error(), x.truth),
        })
        .collect();
    let note = if t.with_truth == 0 {
        format!(
            "This client's records carry no ground truth (none of its {} requests has the server's own timing): run it against the embedded mock with its timings reported (--mock-set enable_metrics=true) to fill the first column.",
            t.own_requests
        )
    } else {
        format!(
            "Ground truth: the mock's own first-token latency of each request of this client's run ({} of {} requests), as it reported it; both tools are held against it, as the server's part of a request that neither tool adds. Each TTFT here is from the request's send to its first chunk. Error: the tool's figure less the truth; what remains is the way there and back and the tool's own time.",
            t.with_truth, t.own_requests
        )
    };
    TruthView {
        tool: t.tool.clone(),
        side: t.imported_side,
        rows,
        note,
    }
}

/// The page; `svg` is the overlay plot of sweeps.
pub fn page(r: &CompareReport, svg: Option<&str>) -> anyhow::Result<String> {
    let mut html = ComparePage {
        title: format!("llm-bench compare ({})", r.kind.as_str()),
        style: format!("{STYLE}{VERDICTS}"),
        headline: headline(r),
        workload: &r.workload,
        rows: r.rows.iter().map(row_view).collect(),
        resamples: r.bootstrap.resamples,
        seed: r.bootstrap.seed,
        threshold_pct: r.bootstrap.threshold * 100.0,
        plot: svg,
        truth: r.truth.as_ref().map(truth_view),
        differences: &r.differences,
        notes: &r.notes,
    }
    .render()?;
    html.push('\n');
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::compare::{Bootstrap, Comparison, Direction};
    use crate::report::compare::{Difference, Kind};

    fn row(metric: &'static str, ratio: f64, verdict: Verdict) -> Row {
        Row {
            context_tokens: None,
            metric,
            direction: Direction::LowerIsBetter,
            n_base: 10,
            n_new: 10,
            runs_base: 1,
            runs_new: 1,
            outcome: Ok(Comparison {
                base: 100.0,
                new: 100.0 * ratio,
                ratio,
                lo: ratio - 0.01,
                hi: ratio + 0.01,
                base_runs: 1,
                new_runs: 1,
                verdict,
            }),
        }
    }

    fn report() -> CompareReport {
        CompareReport {
            kind: Kind::Load,
            bootstrap: Bootstrap::default(),
            workload: vec!["workload differs: BASE is <x>, NEW & y".into()],
            differences: vec![Difference {
                key: "url".into(),
                base: "<script>".into(),
                new: "\"q\"".into(),
            }],
            rows: vec![
                row("ttft_p50_ms", 0.88, Verdict::Better),
                row("tpot_p50_ms", 1.01, Verdict::Same),
            ],
            notes: vec!["a <note>".into()],
            truth: None,
        }
    }

    #[test]
    fn the_headline_names_the_direction_and_the_key_rows() {
        assert_eq!(
            headline(&report()),
            "NEW is better (1 row better, none worse): TTFT p50 -12.0% (better), TPOT p50 +1.0% (same)"
        );
    }

    #[test]
    fn the_page_is_a_table_with_coloured_verdicts_and_escaped_text() {
        let p = page(&report(), None).unwrap();
        assert!(p.contains("<td class=\"better\">better</td>"), "{p}");
        assert!(p.contains("<td class=\"same\">same</td>"), "{p}");
        assert!(p.contains("<table id=\"compare-table\">"), "{p}");
        assert!(!p.contains("<pre"), "{p}");
        for raw in ["<script>", "<x>", "<note>", "\"q\""] {
            assert!(!p.contains(raw), "{raw} unescaped: {p}");
        }
        assert!(
            p.contains("&#60;script&#62;") && p.contains("&#60;x&#62;"),
            "{p}"
        );
    }
}
