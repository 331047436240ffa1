//! `bench-client import`: other tools' result files into one results file and its manifest, written
//! whole or not at all, and each tool's own summary held against the records rebuilt from it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::common::redact_args;
use super::exit::CliError;
use crate::import::{self, check, Imported, Source};
use crate::results::manifest_path;

const ABOUT: &str = "\
Import other tools' results: each request becomes a load record of this project, each run a
manifest line (the tool, its version and settings where the file has them, the server), so that
report, report --html, compare, merge and calibrate read them unchanged.

Formats (detected from the content, or named with --from): SGLang bench_serving's JSON lines
(--output-details), vLLM's `bench serve --save-detailed` JSON, guidellm's benchmarks JSON, AIPerf's
profile_export.jsonl (its profile_export_aiperf.json summary read from beside it).

Summary-only files (bench_serving without --output-details, `vllm bench serve` without
--save-detailed, AIPerf's profile_export_aiperf.json alone) give no records: the tool's figures
(TTFT, TPOT, ITL and end-to-end mean/p50/p90/p99 where it has them, throughputs) and its
definitions go into the manifest line, and `compare SUMMARY.jsonl RUN.jsonl` holds them against a
run's records.

Where a file does not say how many tokens each chunk carried, the records say so
(token_attribution imported-unknown) and their decode rate and TPOT are the source's definition;
where it has no start times (bench_serving), the schedule is rebuilt as a closed loop of its
--max-concurrency, and the manifest says so. The tool's own summary, where the file has one, is
printed beside the same figures from the records, with the reason for each difference.

Exit codes: 0 imported (a run whose every request failed too, with a note that says so); 64 bad usage (an --out that exists); 65 a file that cannot be imported
(unknown format, truncated JSON, neither per-request data nor a summary, arrays of different lengths); nothing is
written then.";

#[derive(Args, Debug)]
#[command(long_about = ABOUT)]
pub(super) struct ImportArgs {
    /// Result files of another tool.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The results file to write (JSONL); its manifest is written beside it.
    #[arg(long)]
    out: PathBuf,
    /// The tool that wrote the files (default: detected from each file's content).
    #[arg(long, value_enum)]
    from: Option<Source>,
}

fn jsonl<T: serde::Serialize>(lines: &[T]) -> anyhow::Result<String> {
    let mut out = String::new();
    for l in lines {
        out.push_str(&serde_json::to_string(l).context("serialising")?);
        out.push('\n');
    }
    Ok(out)
}

/// What a summary-only run gives: the tool's figures, kept in the manifest for `compare`.
fn summary_lines(file: &str, i: usize, run: &import::Run, f: &import::summary::Figures) -> String {
    let mut out = format!(
        "{file} run {i}: {} {}, summary only (no per-request data): {} figures kept in the manifest for compare, no records\n",
        run.source.as_str(),
        run.version.as_deref().unwrap_or("(version not in the file)"),
        f.figures.len(),
    );
    for (k, v) in &f.figures {
        out.push_str(&format!("  {k:<26} {v:>12.3}\n"));
    }
    out
}

pub(super) fn run_import(a: ImportArgs) -> Result<ExitCode, CliError> {
    let manifest_out = manifest_path(&a.out);
    let kept: Vec<_> = a
        .files
        .iter()
        .map(|f| ("an imported file", f.clone()))
        .collect();
    super::paths::refuse_overwrites(
        &kept,
        &super::paths::written(&[
            ("--out", Some(&a.out)),
            ("the manifest beside --out", Some(&manifest_out)),
        ]),
    )
    .map_err(CliError::Usage)?;
    for p in [a.out.clone(), manifest_path(&a.out)] {
        if std::fs::metadata(&p).is_ok() {
            return Err(CliError::Usage(anyhow::anyhow!(
                "{} exists; import writes a new results file: remove it or choose another --out",
                p.display()
            )));
        }
    }
    // A file named twice would import its requests twice.
    let mut seen = std::collections::HashSet::new();
    for f in &a.files {
        let key = f.canonicalize().unwrap_or_else(|_| f.clone());
        if !seen.insert(key) {
            return Err(CliError::Usage(anyhow::anyhow!(
                "{} is given twice: its requests would be imported twice",
                f.display()
            )));
        }
    }
    // Every file is read and checked before anything is written: a bad one leaves no output.
    let files: Vec<Imported> = a
        .files
        .iter()
        .map(|f| import::read(f, a.from))
        .collect::<Result<_, _>>()
        .map_err(|e| CliError::Data(e.into()))?;
    let command = redact_args(std::env::args());
    let manifests: Vec<_> = files
        .iter()
        .flat_map(|f| {
            f.runs
                .iter()
                .enumerate()
                .map(|(i, run)| import::manifest(f, run, i, &command))
        })
        .collect();
    // The manifest first: results without their manifest would compare as another tool's run. A
    // manifest whose results could not be written is removed again.
    let manifest = manifest_path(&a.out);
    super::paths::write_whole(&manifest, &jsonl(&manifests)?)?;
    let mut report = String::new();
    let mut written = 0;
    // Runs whose every request failed: imported (their records keep the errors), and said.
    let mut all_failed = Vec::new();
    // Each record is written as it is built: a run of millions of chunks is never held.
    let wrote = super::paths::write_whole_with(&a.out, |w| {
        for f in &files {
            for (i, run) in f.runs.iter().enumerate() {
                if let Some(figures) = &run.figures {
                    report.push_str(&summary_lines(&f.file, i, run, figures));
                    continue;
                }
                let mut tally = check::Tally::new(run);
                for rec in import::records(run, i) {
                    tally.add(&rec);
                    serde_json::to_writer(&mut *w, &rec).context("serialising a record")?;
                    w.write_all(b"\n")?;
                }
                written += tally.records;
                let failed = tally.failed;
                report.push_str(&format!(
                    "{} run {i}: {} {}, {} requests ({failed} failed), token attribution {}{}\n",
                    f.file,
                    run.source.as_str(),
                    run.version
                        .as_deref()
                        .unwrap_or("(version not in the file)"),
                    tally.records,
                    run.attribution.as_str(),
                    run.rebuilt_schedule.map_or(String::new(), |r| format!(
                        ", no start times: schedule rebuilt as a closed loop of {}",
                        r.concurrency
                    )),
                ));
                if failed > 0 && failed == tally.records {
                    all_failed.push(format!("{} run {i} ({failed} requests)", f.file));
                }
                let rows = tally.rows(run);
                if rows.is_empty() {
                    report
                        .push_str("  the file has no summary of the tool's own to check against\n");
                } else {
                    report.push_str(&check::render(&rows));
                }
            }
        }
        Ok(())
    });
    if let Err(e) = wrote {
        let _ = std::fs::remove_file(&manifest);
        return Err(e.into());
    }
    print!("{report}");
    eprintln!("{written} records written to {}", a.out.display());
    if !all_failed.is_empty() {
        eprintln!(
            "note: every request failed in {}: their records hold only the errors (`report` counts them); no latency figure comes from them",
            all_failed.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
