//! `bench-client report` and `merge`: tables, JSON, CSV and plots from results files alone.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::exit::CliError;

use super::common::{Format, Output};
use super::load::print_load;
use crate::report::export::csv::LoadRequests;
use crate::report::{export, LoadSummary, Report, Slo};
use crate::results::{each_record, read_manifest, Record};

#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// Results files (merged): sweep records give the per-context view, load records the load
    /// summary.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    output: Output,
    /// Write one self-contained HTML page (manifests, tables, plots, the slowest requests).
    #[arg(long)]
    html: Option<PathBuf>,
    /// How many of the slowest requests the HTML page shows with their chunk timelines.
    #[arg(long, default_value_t = 5)]
    slowest: usize,
    /// Goodput objective of the load records, e.g. ttft=500,tpot=50 (ms): the summary's goodput
    /// and the plot's SLO lines. Default: the SLO the load runs' manifests record, when they agree.
    #[arg(long)]
    slo: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct MergeArgs {
    /// Load results files (JSONL) from the shards of one run.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The objective (default: the one the runs' manifests store) and the gate.
    #[command(flatten)]
    slo: super::flags::SloArgs,
    /// Summary format: table, json, or csv (one row per request of the files).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
}

pub(super) fn emit(report: &Report, out: &Output) -> anyhow::Result<()> {
    match out.format {
        Format::Table => print!("{}", export::table::sweep(report)),
        Format::Json => println!("{}", export::json::sweep(report)),
        Format::Csv => print!("{}", export::csv::sweep(report)?),
    }
    if let Some(p) = &out.plot {
        let svg = export::svg::sweep(report)?;
        super::paths::write_whole(p, &svg)?;
        eprintln!("plot written to {}", p.display());
    }
    Ok(())
}

pub(super) fn run_report(mut a: ReportArgs) -> Result<ExitCode, CliError> {
    a.files = results_files(&a.files);
    let outputs = super::paths::written(&[
        ("--plot", a.output.plot.as_ref()),
        ("--html", a.html.as_ref()),
    ]);
    super::paths::refuse_overwrites(
        &super::paths::results_and_manifests("the results file", &a.files),
        &outputs,
    )
    .map_err(CliError::Usage)?;
    super::paths::check_all_writable(&outputs).map_err(CliError::Usage)?;
    let slo = match &a.slo {
        Some(text) => Slo::parse(text).map_err(|e| CliError::Usage(anyhow::Error::msg(e)))?,
        None => crate::report::compare::manifest_slo(&a.files).unwrap_or_default(),
    };
    // Read one record at a time: a load record goes into the summary and is kept only where
    // the output needs it (CSV's per-request rows, the HTML page's slowest), so that a file of
    // millions of requests is never held whole.
    let mut sweep_recs: Vec<Record> = Vec::new();
    let mut summary = LoadSummary::new(slo);
    let mut load_count = 0u64;
    let mut csv_rows = match a.output.format {
        Format::Csv => Some(LoadRequests::new(slo).map_err(CliError::Data)?),
        _ => None,
    };
    let mut load_recs: Vec<Record> = Vec::new();
    let keep_slowest = if a.html.is_some() { a.slowest } else { 0 };
    let mut manifests = Vec::new();
    for f in &a.files {
        each_record(f, |r| {
            if r.load.is_none() {
                sweep_recs.push(r);
                return Ok(());
            }
            summary.add(&r);
            load_count += 1;
            if let Some(rows) = csv_rows.as_mut() {
                rows.add(&r)?;
            }
            if keep_slowest > 0 && is_timed(&r) {
                load_recs.push(r);
                if load_recs.len() >= keep_slowest.max(64).saturating_mul(2) {
                    slowest_first(&mut load_recs, keep_slowest);
                }
            }
            Ok(())
        })
        .with_context(|| format!("reading {}", f.display()))
        .map_err(CliError::Data)?;
        if let Some(m) = read_manifest(f).map_err(CliError::Data)? {
            // A manifest written before redaction may still hold secrets: none is shown.
            let mut v = m.to_value();
            crate::net::redact::redact_json(&mut v, None);
            let m = serde_json::from_value(v)
                .with_context(|| format!("reading the manifest of {}", f.display()))
                .map_err(CliError::Data)?;
            manifests.push((f.display().to_string(), m));
        }
    }
    let sweep = (!sweep_recs.is_empty()).then(|| Report::from_records(&sweep_recs));
    let load = (load_count > 0).then_some(summary);
    if sweep.is_none() && load.is_none() {
        return Err(CliError::Data(anyhow::anyhow!(
            "no sweep records and no load records in the given files"
        )));
    }
    if let Some(r) = &sweep {
        emit(r, &a.output)?;
    }
    if let Some(s) = &load {
        if let (Some(p), None) = (&a.output.plot, &sweep) {
            let svg = export::svg::load(s)?;
            super::paths::write_whole(p, &svg)?;
            eprintln!("plot written to {}", p.display());
        }
        print_load(s, a.output.format, || match csv_rows {
            Some(rows) => rows.finish(),
            None => Ok(String::new()),
        })?;
    }
    if let Some(path) = &a.html {
        let mut slowest: Vec<&Record> = sweep_recs
            .iter()
            .chain(&load_recs)
            .filter(|r| is_timed(r))
            .collect();
        slowest_first(&mut slowest, a.slowest);
        // The server's own prefix-cache counters, from the load runs' /metrics scrapes.
        let server_cache = match &load {
            Some(_) => crate::report::server_metrics::merge_files(&a.files)
                .map_err(CliError::Data)?
                .cache(),
            None => None,
        };
        let page = export::html::page(&export::html::Page {
            files: a.files.iter().map(|f| f.display().to_string()).collect(),
            manifests,
            sweep: sweep.as_ref(),
            load: load.as_ref(),
            server_cache,
            slowest,
        })?;
        super::paths::write_whole(path, &page)?;
        eprintln!("HTML report written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the HTML page can show a record among the slowest: it has a trace and an end.
fn is_timed(r: &Record) -> bool {
    r.trace.is_some() && r.e2e_ms.is_some()
}

/// The `n` slowest by end-to-end time, slowest first; a tie keeps the earlier record.
fn slowest_first<R: std::borrow::Borrow<Record>>(recs: &mut Vec<R>, n: usize) {
    recs.sort_by(|x, y| {
        let (x, y) = (x.borrow(), y.borrow());
        y.e2e_ms
            .partial_cmp(&x.e2e_ms)
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    recs.truncate(n);
}

pub(super) fn run_merge(a: MergeArgs) -> Result<ExitCode, CliError> {
    use crate::report::{load, server_metrics};
    let given = a.slo.slo().map_err(CliError::Usage)?;
    let target = a.slo.target().map_err(CliError::Usage)?;
    // `merge shard-*.jsonl` also matches each shard's manifest (`shard-0.jsonl.manifest.jsonl`):
    // a manifest given beside its own results file is read from there, not as results.
    let files = results_files(&a.files);
    let slo = match given {
        Some(s) => s,
        None => manifest_slo(&files).map_err(CliError::Data)?,
    };
    if target.is_some() && !slo.is_set() {
        return Err(CliError::Usage(anyhow::anyhow!(
            "--slo-target needs an SLO: give --slo, or merge files whose manifests store one"
        )));
    }
    let (summary, ignored) = load::merge_files(&files, slo).map_err(CliError::Data)?;
    if ignored > 0 {
        eprintln!("ignored {ignored} records that are not from load runs");
    }
    if summary.requests == 0 {
        return Err(CliError::Data(anyhow::anyhow!(
            "no load records in the given files"
        )));
    }
    // The shards' /metrics scrapes, from the manifests beside the results files.
    let server = server_metrics::merge_files(&files).map_err(CliError::Data)?;
    match a.format {
        Format::Json => {
            let mut v = export::json::load(&summary);
            v["server_metrics"] = server.to_json();
            println!("{v}");
        }
        Format::Csv => {
            print_load(&summary, a.format, || LoadRequests::of_files(&files, slo))?;
        }
        Format::Table => {
            print_load(&summary, a.format, || Ok(String::new()))?;
            if server.is_empty() {
                eprintln!(
                    "no /metrics scrapes found beside the results files (FILE.manifest.jsonl)"
                );
            } else {
                print!("{}", server.render());
            }
        }
    }
    if let Some(t) = target {
        let gate = crate::report::gate::SloGate::new(&slo, t, summary.good, summary.requests);
        if super::load::print_gate(&gate, a.format) {
            return Ok(ExitCode::from(super::exit::SLO_GATE));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The SLO the files' manifests store (load runs write the `--slo` they ran with): none when no
/// manifest stores one; an error when two differ.
fn manifest_slo(files: &[PathBuf]) -> anyhow::Result<Slo> {
    let mut found: Option<(Slo, &PathBuf)> = None;
    for f in files {
        let Some(m) = read_manifest(f)? else { continue };
        let Some(slo) = m.slo else {
            continue;
        };
        if !slo.is_set() {
            continue;
        }
        match &found {
            Some((s, g)) if *s != slo => anyhow::bail!(
                "the manifests of {} and {} store different SLOs ({} and {}): give --slo",
                g.display(),
                f.display(),
                crate::report::gate::describe(s),
                crate::report::gate::describe(&slo)
            ),
            Some(_) => {}
            None => found = Some((slo, f)),
        }
    }
    if let Some((s, _)) = &found {
        eprintln!(
            "SLO from the manifests: {}",
            crate::report::gate::describe(s)
        );
    }
    Ok(found.map(|(s, _)| s).unwrap_or_default())
}

/// Whether `f` is the manifest of a results file that is also in `all`.
fn is_manifest_of_a_given_file(f: &std::path::Path, all: &[std::path::PathBuf]) -> bool {
    all.iter()
        .any(|r| r.as_path() != f && crate::results::manifest_path(r) == f)
}

/// The results files among `files`: `results/*.jsonl` also matches each file's manifest
/// (`RUN.jsonl.manifest.jsonl`), which is read with its results file, not as results; skipped,
/// and said so.
pub(super) fn results_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let kept: Vec<PathBuf> = files
        .iter()
        .filter(|f| !is_manifest_of_a_given_file(f, files))
        .cloned()
        .collect();
    if kept.len() < files.len() {
        eprintln!(
            "skipped {} manifest files given beside their results files (read with them)",
            files.len() - kept.len()
        );
    }
    kept
}
