//! One self-contained HTML page from results files: the run manifests, the tables, the plots
//! (inline SVG), and the chunk timelines of the slowest requests. Inline CSS only: no script, no
//! network, no CDN, so the page opens anywhere and can be archived with the results.

use std::fmt::Write as _;

use serde_json::Value;

use super::{cell, svg, table};
use crate::report::cache::ServerCache;
use crate::report::compare::CompareReport;
use crate::report::load::LoadSummary;
use crate::report::sweep::Report;
use crate::results::{Manifest, Record};

/// What the page shows.
#[derive(Debug)]
pub struct Page<'a> {
    /// The results files, as given.
    pub files: Vec<String>,
    /// The first manifest line of each file (the run's own description), by file.
    pub manifests: Vec<(String, Manifest)>,
    /// The sweep records' report, when there are sweep records.
    pub sweep: Option<&'a Report>,
    /// The load records' summary, when there are load records.
    pub load: Option<&'a LoadSummary>,
    /// The server's prefix cache over the load run, from the `/metrics` scrapes in the manifests.
    pub server_cache: Option<ServerCache>,
    /// Records whose chunk timelines are shown, slowest first.
    pub slowest: Vec<&'a Record>,
}

/// `s` with the five characters HTML gives meaning to escaped.
pub(crate) fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A JSON value in a table cell: strings bare, the rest as compact JSON.
fn json_cell(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "-".into(),
        v => esc(&v.to_string()),
    }
}

pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}pre{background:#f8f8f8;padding:.5em;overflow-x:auto;font-size:.8em}\
figure{margin:1em 0}figcaption{font-size:.85em;color:#555}.plot svg{max-width:100%;height:auto}";

/// The page as HTML.
pub fn page(p: &Page<'_>) -> anyhow::Result<String> {
    let mut o = String::new();
    let title = format!("llm-bench report: {}", p.files.join(", "));
    let _ = writeln!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    manifests(&mut o, &p.manifests);
    if let Some(r) = p.sweep {
        o.push_str("<h2>Sweep</h2>\n");
        sweep_table(&mut o, r);
        let plot = svg::sweep(r)?;
        let _ = writeln!(
            o,
            "<figure class=\"plot\" id=\"sweep-plot\">{plot}<figcaption>Medians with their p10-p90 bands against context length. Decode is the tokens after the first chunk over the time after it; the naive rate, (completion tokens - 1) over the same time, overstates it when the first chunk carries several tokens.</figcaption></figure>"
        );
        let _ = writeln!(o, "<pre>{}</pre>", esc(&table::sweep(r)));
    }
    if let Some(s) = p.load {
        o.push_str("<h2>Load</h2>\n");
        prefix_cache(&mut o, s, p.server_cache.as_ref());
        let _ = writeln!(o, "<pre>{}</pre>", esc(&table::load(s)));
        if s.succeeded > 0 {
            let plot = svg::load(s)?;
            let _ = writeln!(
            o,
            "<figure class=\"plot\" id=\"load-plot\">{plot}<figcaption>Latency distributions of the successful requests (TTFT from the scheduled start), and throughput per second of the run.</figcaption></figure>"
            );
        }
    }
    if !p.slowest.is_empty() {
        o.push_str("<h2>Slowest requests</h2>\n<p>Each request's output tokens against the time after its send, one step per chunk.</p>\n");
        for rec in &p.slowest {
            if let Some(t) = &rec.trace {
                let plot = svg::timeline(t)?;
                let _ = writeln!(
            o,
            "<figure class=\"plot timeline\">{plot}<figcaption>{} ({} prompt tokens): end to end {} ms, TTFT {} ms, {} chunks</figcaption></figure>",
                    esc(&rec.rid),
                    rec.prompt_tokens.map_or("-".into(), |n| n.to_string()),
                    cell(rec.e2e_ms, 1),
                    cell(rec.ttft_ms, 1),
                    t.chunks.len()
                );
            }
        }
    }
    o.push_str("</body></html>\n");
    Ok(o)
}

/// The prefix cache of a load run: the responses' hit ratio, TTFT of the hits and the misses, and
/// the server's counters beside them. Nothing when neither side has a figure.
fn prefix_cache(o: &mut String, s: &LoadSummary, server: Option<&ServerCache>) {
    let c = &s.cache;
    if c.reported == 0 && server.is_none() {
        return;
    }
    let ms = |v: Option<u64>| cell(v.map(|v| v as f64 / 1e6), 1);
    o.push_str("<table id=\"prefix-cache\"><tr><th class=\"l\">prefix cache</th><th>requests</th><th>hit ratio</th><th>TTFT mean ms</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th></tr>\n");
    let _ = writeln!(
        o,
        "<tr><td class=\"l\">responses: cached / prompt tokens</td><td>{} of {}</td><td>{}</td><td></td><td></td><td></td></tr>",
        c.reported,
        s.succeeded,
        cell(c.hit_ratio(), 4)
    );
    for (label, m) in [
        ("hits (cached &gt; 0)", &c.hit),
        ("misses (cached = 0)", &c.miss),
    ] {
        let _ = writeln!(
            o,
            "<tr><td class=\"l\">{label}</td><td>{}</td><td></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            m.count(),
            cell(m.mean().map(|v| v / 1e6), 1),
            ms(m.percentile(50.0)),
            ms(m.percentile(99.0))
        );
    }
    if let Some(sc) = server {
        let _ = writeln!(
            o,
            "<tr><td class=\"l\">server: {} / {}</td><td></td><td>{}</td><td></td><td></td><td></td></tr>",
            esc(sc.hits_counter),
            esc(sc.queries_counter),
            cell(sc.ratio(), 4)
        );
    }
    o.push_str("</table>\n");
}

/// A manifest's text field as a cell: `-` when the manifest does not say.
fn text_cell(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).map_or_else(|| "-".into(), esc)
}

/// One table of what each run's manifest says: command, client, server, model, settings.
fn manifests(o: &mut String, ms: &[(String, Manifest)]) {
    if ms.is_empty() {
        o.push_str("<p>No manifest beside the results files (FILE.manifest.jsonl).</p>\n");
        return;
    }
    o.push_str("<h2>Runs</h2>\n<table id=\"manifest\"><tr><th class=\"l\">file</th><th class=\"l\">command</th><th class=\"l\">client</th><th class=\"l\">server</th><th class=\"l\">dialect</th><th class=\"l\">model</th></tr>\n");
    for (f, m) in ms {
        let dialect = m.dialect.and_then(|d| serde_json::to_value(d).ok());
        let _ = writeln!(
            o,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            esc(f),
            text_cell(Some(&m.command)),
            text_cell(Some(&m.client_version)),
            text_cell(m.url.as_deref()),
            json_cell(dialect.as_ref().unwrap_or(&Value::Null)),
            text_cell(m.model.as_deref()),
        );
    }
    o.push_str("</table>\n");
    for (f, m) in ms {
        let settings = m
            .settings
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok());
        for (key, v) in [
            ("settings", settings.as_ref()),
            ("server_info", m.server_info.as_ref()),
        ] {
            if let Some(v) = v.filter(|v| !v.is_null()) {
                let pretty = serde_json::to_string_pretty(v).unwrap_or_default();
                let _ = writeln!(
                    o,
                    "<details><summary>{} of {}</summary><pre>{}</pre></details>",
                    key.replace('_', " "),
                    esc(f),
                    esc(&pretty)
                );
            }
        }
    }
}

/// The sweep's summary as an HTML table, the cells of the text table.
fn sweep_table(o: &mut String, r: &Report) {
    let (header, rows) = table::sweep_cells(r);
    o.push_str("<table id=\"sweep-table\"><tr>");
    for h in header {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    o.push_str("</tr>\n");
    for row in rows {
        o.push_str("<tr>");
        for c in row {
            let _ = write!(o, "<td>{}</td>", esc(&c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
}

/// A comparison as one self-contained page ([`crate::report::compare::html`]).
pub fn compare_page(r: &CompareReport, svg: Option<&str>) -> String {
    crate::report::compare::html::page(r, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_files_cannot_become_markup() {
        assert_eq!(
            esc("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        let page = page(&Page {
            files: vec!["<b>.jsonl".into()],
            manifests: vec![(
                "<b>.jsonl".into(),
                Manifest {
                    command: "sweep --url <x>".into(),
                    ..Manifest::default()
                },
            )],
            sweep: None,
            load: None,
            server_cache: None,
            slowest: Vec::new(),
        })
        .unwrap();
        assert!(!page.contains("<b>") && !page.contains("<x>"), "{page}");
        assert!(page.contains("&lt;x&gt;"));
    }
}
