//! `bench-client report` and `merge`: tables, JSON, CSV and plots from results files alone.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::exit::CliError;

use super::common::{Format, Output};
use super::load::print_load;
use crate::report::{export, Report};
use crate::results::read_records;

#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// Results files (merged).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    output: Output,
}

#[derive(Args, Debug)]
pub(super) struct MergeArgs {
    /// Load results files (JSONL) from the shards of one run.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Goodput objective, e.g. ttft=500,tpot=50 (ms).
    #[arg(long)]
    slo: Option<String>,
    /// Summary format.
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
        std::fs::write(p, svg).with_context(|| format!("writing {}", p.display()))?;
        eprintln!("plot written to {}", p.display());
    }
    Ok(())
}

pub(super) fn run_report(a: ReportArgs) -> Result<ExitCode, CliError> {
    let mut report = Report::default();
    for f in &a.files {
        let recs = read_records(f)
            .with_context(|| format!("reading {}", f.display()))
            .map_err(CliError::Data)?;
        report = report.merge(Report::from_records(&recs));
    }
    if report.points.is_empty() {
        return Err(CliError::Data(anyhow::anyhow!(
            "no sweep records in the given files"
        )));
    }
    emit(&report, &a.output)?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn run_merge(a: MergeArgs) -> Result<ExitCode, CliError> {
    use crate::report::{load, server_metrics, Slo};
    let slo = match &a.slo {
        Some(s) => Slo::parse(s)
            .map_err(anyhow::Error::msg)
            .map_err(CliError::Usage)?,
        None => Slo::default(),
    };
    if matches!(a.format, Format::Csv) {
        return Err(CliError::Usage(anyhow::anyhow!(
            "--format csv: load summaries are printed as table or json"
        )));
    }
    let (summary, ignored) = load::merge_files(&a.files, slo).map_err(CliError::Data)?;
    if ignored > 0 {
        eprintln!("ignored {ignored} records that are not from load runs");
    }
    if summary.requests == 0 {
        return Err(CliError::Data(anyhow::anyhow!(
            "no load records in the given files"
        )));
    }
    // The shards' /metrics scrapes, from the manifests beside the results files.
    let server = server_metrics::merge_files(&a.files).map_err(CliError::Data)?;
    match a.format {
        Format::Json => {
            let mut v = export::json::load(&summary);
            v["server_metrics"] = server.to_json();
            println!("{v}");
        }
        _ => {
            print_load(&summary, a.format)?;
            if server.is_empty() {
                eprintln!(
                    "no /metrics scrapes found beside the results files (FILE.manifest.jsonl)"
                );
            } else {
                print!("{}", server.render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
