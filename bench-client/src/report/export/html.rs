//! One self-contained HTML page from results files: the run manifests, the tables, the plots
//! (inline SVG), and the chunk timelines of the slowest requests. Inline CSS only: no script, no
//! network, no CDN, so the page opens anywhere and can be archived with the results.

use askama::Template;
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

/// A JSON value in a table cell: strings bare, the rest as compact JSON.
fn json_cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        v => v.to_string(),
    }
}

pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1200px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:right}\
th{background:#f4f4f4}td.l,th.l{text-align:left}pre{background:#f8f8f8;padding:.5em;overflow-x:auto;font-size:.8em}\
figure{margin:1em 0}figcaption{font-size:.85em;color:#555}.plot svg{max-width:100%;height:auto}";

/// The page's template (`templates/report.html`): every value it inserts is escaped, except the
/// style sheet and the plots, which this crate draws.
#[derive(Template)]
#[template(path = "report.html")]
struct ReportPage {
    title: String,
    style: &'static str,
    manifests: Vec<ManifestRow>,
    details: Vec<Detail>,
    sweep: Option<SweepView>,
    load: Option<LoadView>,
    /// `None` when no record is shown; the records with a trace otherwise.
    slowest: Option<Vec<TimelineView>>,
}

/// What a run's manifest says, a cell each (`-` where it does not say).
struct ManifestRow {
    file: String,
    command: String,
    client: String,
    server: String,
    dialect: String,
    model: String,
}

/// A manifest's JSON field (settings, server info), folded.
struct Detail {
    what: String,
    file: String,
    json: String,
}

struct SweepView {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    plot: String,
    text: String,
}

struct LoadView {
    cache: Option<CacheView>,
    text: String,
    plot: Option<String>,
}

/// The prefix cache of a load run: the responses' hit ratio, TTFT of the hits and the misses, and
/// the server's counters beside them.
struct CacheView {
    reported: u64,
    succeeded: u64,
    hit_ratio: String,
    ttft: Vec<TtftRow>,
    server: Option<ServerCacheView>,
}

struct TtftRow {
    label: &'static str,
    count: u64,
    mean: String,
    p50: String,
    p99: String,
}

struct ServerCacheView {
    hits: &'static str,
    queries: &'static str,
    ratio: String,
}

struct TimelineView {
    plot: String,
    rid: String,
    prompt_tokens: String,
    e2e_ms: String,
    ttft_ms: String,
    chunks: usize,
}

/// The page as HTML.
pub fn page(p: &Page<'_>) -> anyhow::Result<String> {
    let (manifests, details) = manifests(&p.manifests);
    let sweep = match p.sweep {
        Some(r) => {
            let (header, rows) = table::sweep_cells(r);
            Some(SweepView {
                header,
                rows,
                plot: svg::sweep(r)?,
                text: table::sweep(r),
            })
        }
        None => None,
    };
    let load = match p.load {
        Some(s) => Some(LoadView {
            cache: prefix_cache(s, p.server_cache.as_ref()),
            text: table::load(s),
            plot: if s.succeeded > 0 {
                Some(svg::load(s)?)
            } else {
                None
            },
        }),
        None => None,
    };
    let slowest = if p.slowest.is_empty() {
        None
    } else {
        let mut shown = Vec::new();
        for rec in &p.slowest {
            if let Some(t) = &rec.trace {
                shown.push(TimelineView {
                    plot: svg::timeline(t)?,
                    rid: rec.rid.clone(),
                    prompt_tokens: rec.prompt_tokens.map_or("-".into(), |n| n.to_string()),
                    e2e_ms: cell(rec.e2e_ms, 1),
                    ttft_ms: cell(rec.ttft_ms, 1),
                    chunks: t.chunks.len(),
                });
            }
        }
        Some(shown)
    };
    let mut html = ReportPage {
        title: format!("llm-bench report: {}", p.files.join(", ")),
        style: STYLE,
        manifests,
        details,
        sweep,
        load,
        slowest,
    }
    .render()?;
    html.push('\n');
    Ok(html)
}

/// The prefix cache table's figures; `None` when neither the responses nor the server have one.
fn prefix_cache(s: &LoadSummary, server: Option<&ServerCache>) -> Option<CacheView> {
    let c = &s.cache;
    if c.reported == 0 && server.is_none() {
        return None;
    }
    let ms = |v: Option<u64>| cell(v.map(|v| v as f64 / 1e6), 1);
    let ttft = [
        ("hits (cached > 0)", &c.hit),
        ("misses (cached = 0)", &c.miss),
    ]
    .map(|(label, m)| TtftRow {
        label,
        count: m.count(),
        mean: cell(m.mean().map(|v| v / 1e6), 1),
        p50: ms(m.percentile(50.0)),
        p99: ms(m.percentile(99.0)),
    });
    Some(CacheView {
        reported: c.reported,
        succeeded: s.succeeded,
        hit_ratio: cell(c.hit_ratio(), 4),
        ttft: ttft.into(),
        server: server.map(|sc| ServerCacheView {
            hits: sc.hits_counter,
            queries: sc.queries_counter,
            ratio: cell(sc.ratio(), 4),
        }),
    })
}

/// A manifest's text field as a cell: `-` when the manifest does not say.
fn text_cell(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty())
        .map_or_else(|| "-".into(), String::from)
}

/// What each run's manifest says (command, client, server, model), and its settings and server
/// info as JSON.
fn manifests(ms: &[(String, Manifest)]) -> (Vec<ManifestRow>, Vec<Detail>) {
    let rows = ms
        .iter()
        .map(|(f, m)| {
            let dialect = m.dialect.and_then(|d| serde_json::to_value(d).ok());
            ManifestRow {
                file: f.clone(),
                command: text_cell(Some(&m.command)),
                client: text_cell(Some(&m.client_version)),
                server: text_cell(m.url.as_deref()),
                dialect: json_cell(dialect.as_ref().unwrap_or(&Value::Null)),
                model: text_cell(m.model.as_deref()),
            }
        })
        .collect();
    let mut details = Vec::new();
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
                details.push(Detail {
                    what: key.replace('_', " "),
                    file: f.clone(),
                    json: serde_json::to_string_pretty(v).unwrap_or_default(),
                });
            }
        }
    }
    (rows, details)
}

/// A comparison as one self-contained page ([`crate::report::compare::html`]).
pub fn compare_page(r: &CompareReport, svg: Option<&str>) -> anyhow::Result<String> {
    crate::report::compare::html::page(r, svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_files_cannot_become_markup() {
        let page = page(&Page {
            files: vec!["<b>.jsonl".into()],
            manifests: vec![(
                "<b>.jsonl".into(),
                Manifest {
                    command: "sweep --url <x>".into(),
                    model: Some("m\"><i>".into()),
                    server_info: Some(serde_json::json!({"version": "</pre><script>"})),
                    ..Manifest::default()
                },
            )],
            sweep: None,
            load: None,
            server_cache: None,
            slowest: Vec::new(),
        })
        .unwrap();
        for raw in ["<b>", "<x>", "<i>", "<script>", "m\">"] {
            assert!(!page.contains(raw), "{raw} unescaped: {page}");
        }
        assert!(
            page.contains("<td class=\"l\">sweep --url &#60;x&#62;</td>"),
            "{page}"
        );
        assert!(page.contains("&#60;/pre&#62;&#60;script&#62;"), "{page}");
        assert!(page.ends_with("</body></html>\n"), "{page}");
    }
}
