//! `bench-client compare`: NEW's results against BASE's, one row per statistic with the ratio, its
//! bootstrap interval and a verdict; the statistics are in `measure::compare`, the rows in
//! `report::compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::common::Format;
use super::exit::{self, CliError};
use crate::measure::compare::Bootstrap;
use crate::report::compare::summary::{compare_summary, summary_of};
use crate::report::compare::truth::{truth, ImportedSide, TruthValues};
use crate::report::compare::{
    compare_records_with, manifest_differences, manifest_slo, read_side, workload_differences,
    CompareReport, Kind, Side,
};
use crate::report::Report;
use crate::report::{export, Slo};
use crate::results::read_manifest;

const ABOUT: &str = "\
Compare two runs: for each statistic (sweeps: TTFT, decode and prefill p50 per context length;
load runs: TTFT, TPOT, inter-chunk and end-to-end p50/p90/p99, output and request throughput,
goodput) the ratio NEW/BASE with a 95% interval, and a verdict.

The interval is the percentile bootstrap (Efron & Tibshirani, \"An Introduction to the
Bootstrap\", 1993, ch. 13): each side's requests are resampled with replacement --resamples times
(seeded by --seed), the statistic is recomputed on each resample, and the interval is the 2.5th
and 97.5th percentile of the ratios. A side of several runs (repeats: --base A1 A2 A3) is
resampled in two stages, R - 1 of its R runs and then their requests (Davison & Hinkley 1997, 3.8;
McCarthy & Snowden 1985), so the interval carries the run-to-run variance; with one run a side it covers only the noise within a
run. Throughputs are the tokens over the runs' durations; one run is one throughput, so they need
several runs a side for a verdict. Verdict: `same` when the interval lies within [1 - t, 1 + t] for --threshold t;
`better` or `worse` when it lies wholly beyond it (lower is better for latencies, higher for
rates); `unclear` otherwise. What differs between the runs' manifests is printed first.

Two runs of different workloads are different experiments, and a verdict between them says
nothing about the server: compare refuses them (exit 65), naming each difference (the dialect, a
closed loop's concurrency against an open loop's rate or a trace, input and output lengths,
shared prefixes, the trace's file, speedup, limit and scale, the sessions' settings).
--allow-different-workloads compares them anyway and prints the differences as a warning.

Exit codes: 0 compared, 1 a row is `worse` and --fail-on-regression was given, 64 bad usage,
65 files that cannot be compared (empty, failed-only, sweep against load, no shared context,
different workloads without --allow-different-workloads).";

/// The most bootstrap resamples `--resamples` takes.
const MAX_RESAMPLES: u32 = 100_000;
#[derive(Args, Debug)]
#[command(long_about = ABOUT)]
pub(super) struct CompareArgs {
    /// BASE and NEW results files, when each side is one file.
    #[arg(value_names = ["BASE", "NEW"], num_args = 0..=2, conflicts_with_all = ["base", "new"])]
    files: Vec<PathBuf>,
    /// BASE's results files (several: shards of one run, or repeats: each sweep file and each load
    /// run's start is one run, and several runs a side are resampled by run).
    #[arg(long, num_args = 1.., requires = "new")]
    base: Vec<PathBuf>,
    /// NEW's results files.
    #[arg(long, num_args = 1.., requires = "base")]
    new: Vec<PathBuf>,
    /// Threshold in percent (5 or 5%): changes within it count as `same`.
    #[arg(long, default_value = "5", allow_hyphen_values = true)]
    threshold: String,
    /// Bootstrap resamples (B), at most 100,000.
    #[arg(long, default_value_t = 2000)]
    resamples: u32,
    /// Seed of the bootstrap's resampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Goodput objective of load runs, e.g. ttft=500,tpot=50 (ms); default: the manifests' SLO.
    #[arg(long)]
    slo: Option<String>,
    /// Exit with 1 when any row is `worse` (for CI gates).
    #[arg(long)]
    fail_on_regression: bool,
    /// Output format (csv: the rows only; the manifest differences go to stderr).
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Write an SVG of both sweeps overlaid, with each row's ratio and interval (sweeps only).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write one self-contained HTML page: the differences, the rows, and the plot for sweeps.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Compare runs whose workloads differ (arrivals, lengths, prefixes, trace, sessions,
    /// dialect), with a warning, instead of refusing them.
    #[arg(long)]
    allow_different_workloads: bool,
    /// No progress bar (it shows only on a terminal, for sides of more than 1,000 records).
    #[arg(long)]
    no_progress: bool,
}

/// Records a side must exceed before the bootstrap shows its progress.
const PROGRESS_FROM: usize = 1000;

/// The bootstrap's progress bar on stderr, when it is a terminal and the input is long.
fn progress_bar(show: bool) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    if !(show && std::io::IsTerminal::is_terminal(&std::io::stderr())) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} bootstrap rounds, {elapsed} so far, about {eta} left",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// `--threshold` as a fraction: a percentage in (0, 100), with or without `%`.
fn parse_threshold(s: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let v: f64 = t
        .strip_suffix('%')
        .unwrap_or(t)
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--threshold {s:?}: expected a percentage, e.g. 5 or 5%"))?;
    if !(v.is_finite() && v > 0.0 && v < 100.0) {
        anyhow::bail!("--threshold {s:?}: must be a percentage above 0 and below 100");
    }
    Ok(v / 100.0)
}

/// The checked flags.
struct Checked {
    base: Vec<PathBuf>,
    new: Vec<PathBuf>,
    bootstrap: Bootstrap,
    slo: Option<Slo>,
}

/// Every flag checked before any file is read.
fn check(a: &CompareArgs) -> anyhow::Result<Checked> {
    let (base, new) = if !a.base.is_empty() {
        (
            super::report::results_files(&a.base),
            super::report::results_files(&a.new),
        )
    } else if let [b, n] = a.files.as_slice() {
        (vec![b.clone()], vec![n.clone()])
    } else {
        anyhow::bail!("compare needs BASE and NEW: two files, or --base FILE... --new FILE...");
    };
    // Each resample keeps a statistic a side: a billion of them is gigabytes, and a few thousand
    // already fix an interval's ends to well under its width.
    if !(1..=MAX_RESAMPLES).contains(&a.resamples) {
        anyhow::bail!(
            "--resamples must be from 1 to {MAX_RESAMPLES}, got {}",
            a.resamples
        );
    }
    let slo = a
        .slo
        .as_deref()
        .map(Slo::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let bootstrap = Bootstrap {
        resamples: a.resamples,
        seed: a.seed,
        threshold: parse_threshold(&a.threshold)?,
    };
    Ok(Checked {
        base,
        new,
        bootstrap,
        slo,
    })
}

pub(super) fn run_compare(a: CompareArgs) -> Result<ExitCode, CliError> {
    let Checked {
        base: base_files,
        new: new_files,
        bootstrap: b,
        slo,
    } = check(&a).map_err(CliError::Usage)?;
    let outputs =
        super::paths::written(&[("--plot", a.plot.as_ref()), ("--html", a.html.as_ref())]);
    super::paths::refuse_overwrites(
        &super::paths::results_and_manifests(
            "the results file",
            base_files.iter().chain(&new_files),
        ),
        &outputs,
    )
    .map_err(CliError::Usage)?;
    super::paths::check_all_writable(&outputs).map_err(CliError::Usage)?;
    let (workload, workload_notes) = workload_differences(&base_files, &new_files);
    if !workload.is_empty() && !a.allow_different_workloads {
        return Err(CliError::Data(anyhow::anyhow!(
            "the runs' workloads differ, so a verdict would compare two experiments, not two servers:\n  {}\nrerun one side with the other's workload, or pass --allow-different-workloads to compare anyway",
            workload.join("\n  ")
        )));
    }
    for w in &workload {
        eprintln!("WARNING: {w}");
    }
    if !workload.is_empty() {
        eprintln!("WARNING: compared anyway (--allow-different-workloads): the verdicts compare different workloads, not only the servers");
    }
    let summaries = (
        summary_of("BASE", &base_files).map_err(CliError::Data)?,
        summary_of("NEW", &new_files).map_err(CliError::Data)?,
    );
    if let (Some(b), Some(n)) = &summaries {
        return Err(CliError::Data(anyhow::anyhow!(
            "both sides are other tools' summaries ({} and {}): a summary has no requests to resample, so one side must be a run's records",
            b.file,
            n.file
        )));
    }
    let slo = slo
        .or_else(|| manifest_slo(&base_files).filter(|s| Some(*s) == manifest_slo(&new_files)))
        .unwrap_or_default();
    let read = |side: &str, files: &[PathBuf], summary: bool| {
        if summary {
            Ok(Side::default())
        } else {
            read_side(side, files, slo)
        }
    };
    let base = read("BASE", &base_files, summaries.0.is_some()).map_err(CliError::Data)?;
    let new = read("NEW", &new_files, summaries.1.is_some()).map_err(CliError::Data)?;
    let long = [&base, &new].iter().any(|side| side.total > PROGRESS_FROM);
    let bar = progress_bar(long && !a.no_progress);
    let tick = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let mut report = match &summaries {
        (Some(sum), _) => compare_summary(sum, true, &new, &b, &tick),
        (_, Some(sum)) => compare_summary(sum, false, &base, &b, &tick),
        _ => compare_records_with(&base, &new, &b, &tick),
    }
    .map_err(CliError::Data)?;
    bar.finish_and_clear();
    report.workload = workload;
    report.notes.extend(workload_notes);
    let (differences, notes) =
        manifest_differences(&base_files, &new_files).map_err(CliError::Data)?;
    // Manifests written before redaction may still hold secrets: none is shown.
    report.differences = differences
        .into_iter()
        .map(|mut d| {
            d.base = crate::net::redact::redact_shown(&d.key, &d.base);
            d.new = crate::net::redact::redact_shown(&d.key, &d.new);
            d
        })
        .collect();
    report.notes.extend(notes);
    // A summary's figures are the rows' own values: not repeated as manifest differences.
    report
        .differences
        .retain(|d| !d.key.starts_with("imported.summary."));
    if a.html.is_some() && report.kind == Kind::Load {
        report.truth = truth_section(
            &summaries,
            (&base_files, &base.truth),
            (&new_files, &new.truth),
        );
    }
    emit(&report, a.format)?;
    let plot = match report.kind {
        Kind::Sweep if a.plot.is_some() || a.html.is_some() => Some(export::svg::compare_sweeps(
            &Report::from_records(&base.sweep_files.concat()),
            &Report::from_records(&new.sweep_files.concat()),
            &report,
        )?),
        _ => None,
    };
    if let Some(p) = &a.plot {
        match &plot {
            Some(svg) => {
                super::paths::write_whole(p, svg)?;
                eprintln!("plot written to {}", p.display());
            }
            None => eprintln!("--plot: only sweep comparisons are plotted; no plot written"),
        }
    }
    if let Some(h) = &a.html {
        let page = export::html::compare_page(&report, plot.as_deref())?;
        super::paths::write_whole(h, &page)?;
        eprintln!("HTML report written to {}", h.display());
    }
    if a.fail_on_regression && report.any_worse() {
        eprintln!("regression: at least one row is worse beyond the threshold");
        return Ok(ExitCode::from(exit::REGRESSION));
    }
    Ok(ExitCode::SUCCESS)
}

/// The imported tool's name, when `files` are one imported run (its manifest says so).
fn imported_tool(files: &[PathBuf]) -> Option<String> {
    match files {
        [f] => read_manifest(f).ok().flatten()?.imported.map(|i| i.tool),
        _ => None,
    }
}

type SideFiles<'a> = (&'a [PathBuf], &'a TruthValues);

/// The page's ground-truth section, when exactly one side is imported (records or a summary): the
/// other side is this client's run, whose records carry the mock's truth where it reported it.
fn truth_section(
    summaries: &(
        Option<crate::report::compare::summary::SummarySide>,
        Option<crate::report::compare::summary::SummarySide>,
    ),
    base: SideFiles<'_>,
    new: SideFiles<'_>,
) -> Option<crate::report::compare::truth::Truth> {
    match summaries {
        (Some(s), None) => {
            return Some(truth(
                &s.tool,
                "BASE",
                ImportedSide::Summary(&s.figures),
                new.1,
            ))
        }
        (None, Some(s)) => {
            return Some(truth(
                &s.tool,
                "NEW",
                ImportedSide::Summary(&s.figures),
                base.1,
            ))
        }
        _ => {}
    }
    match (imported_tool(base.0), imported_tool(new.0)) {
        (Some(t), None) => Some(truth(&t, "BASE", ImportedSide::Records(base.1), new.1)),
        (None, Some(t)) => Some(truth(&t, "NEW", ImportedSide::Records(new.1), base.1)),
        _ => None,
    }
}

fn emit(r: &CompareReport, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => print!("{}", export::table::compare(r)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&export::json::compare(r))?
        ),
        Format::Csv => {
            for d in &r.differences {
                eprintln!("differs: {}: {} -> {}", d.key, d.base, d.new);
            }
            print!("{}", export::csv::compare(r)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_percentages_above_zero() {
        assert_eq!(parse_threshold("5").unwrap(), 0.05);
        assert_eq!(parse_threshold("2.5%").unwrap(), 0.025);
        for bad in ["0", "-5", "0%", "100", "abc", "nan", "inf", ""] {
            assert!(parse_threshold(bad).is_err(), "{bad}");
        }
    }
}
