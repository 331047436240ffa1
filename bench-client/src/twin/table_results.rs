//! Results files as table rows, so that `calibrate --table` fits them beside the table's rows: a
//! sweep's requests of one (context, output) are a row at concurrency 1; a closed-loop load run of
//! fixed lengths (its own or an imported tool's) is a row at its concurrency and mean lengths; an
//! imported summary of such a run is a row of the tool's means. Each row holds the means of its
//! successful requests, as a table's do: TTFT, and TPOT = (e2e - TTFT) / (output tokens - 1).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;

use crate::import::{closed_concurrency, fixed_lengths};
use crate::results::manifest::{Imported, KIND_LOAD};
use crate::results::settings::{Recorded, ScheduleRecord};
use crate::results::table::TableRow;
use crate::results::{each_record_strict, read_manifest, Figures, Method, Record};

/// A streaming request's TTFT and TPOT (ms) as a table counts them, where it succeeded with two
/// or more output tokens (a two-point pair measures no closed loop).
fn times(r: &Record) -> Option<(f64, f64)> {
    if r.error.is_some() || r.method != Method::Streaming {
        return None;
    }
    let (ttft, e2e, n) = (r.ttft_ms?, r.e2e_ms?, r.completion_tokens?);
    (n >= 2 && e2e >= ttft).then(|| (ttft, (e2e - ttft) / f64::from(n - 1)))
}

/// The row of `requests` at `(isl, osl, concurrency)`: their mean TTFT and TPOT.
fn row(isl: u32, osl: u32, concurrency: u32, requests: &[(f64, f64)]) -> TableRow {
    let n = requests.len() as f64;
    let mean = (
        requests.iter().map(|r| r.0).sum::<f64>() / n,
        requests.iter().map(|r| r.1).sum::<f64>() / n,
    );
    row_of_means((isl, osl, concurrency), mean)
}

/// A row of no table line: its shape and mean TTFT and TPOT (ms).
fn row_of_means((isl, osl, concurrency): (u32, u32, u32), (ttft, tpot): (f64, f64)) -> TableRow {
    TableRow {
        line: 0,
        deployment: None,
        backend: None,
        gpu: None,
        isl,
        osl,
        concurrency,
        ttft_ms: Some(ttft),
        tpot_ms: Some(tpot),
    }
}

/// The rows of one results file; a load run that is not a closed loop of fixed lengths is
/// refused, naming the file.
pub fn rows_of_file(file: &Path) -> anyhow::Result<Vec<TableRow>> {
    let name = file.display();
    // Each record is read into its lengths and times, one at a time.
    let (mut records, mut any_load, mut done) = (0usize, false, Vec::new());
    each_record_strict(file, |r| {
        records += 1;
        any_load |= r.load.is_some();
        if let Some(t) = times(&r) {
            done.push(((r.context_tokens, r.output_tokens), t));
        }
        Ok(())
    })?;
    let manifest = read_manifest(file)?;
    if records == 0 {
        if let Some(i) = manifest.as_ref().and_then(|m| m.imported.as_ref()) {
            if let Some(summary) = i.summary.as_ref().and_then(Figures::from_value) {
                return summary_row(&name.to_string(), i, &summary).map(|r| vec![r]);
            }
        }
    }
    let load = manifest.as_ref().and_then(|m| m.kind.as_deref()) == Some(KIND_LOAD) || any_load;
    if done.is_empty() {
        bail!("{name}: no successful request with two or more output tokens ({records} records)");
    }
    if !load {
        let mut groups: BTreeMap<(u32, u32), Vec<(f64, f64)>> = BTreeMap::new();
        for &(shape, t) in &done {
            groups.entry(shape).or_default().push(t);
        }
        return Ok(groups
            .into_iter()
            .map(|((isl, osl), g)| row(isl, osl, 1, &g))
            .collect());
    }
    let Some(manifest) = manifest else {
        bail!("{name}: a load run without its manifest: its concurrency is not known");
    };
    let concurrency = match (&manifest.schedule, &manifest.imported) {
        (Some(Recorded::Typed(ScheduleRecord::Closed { concurrency })), _) => *concurrency,
        (Some(s), _) => bail!(
            "{name}: a table row is a closed loop, and this load run's arrivals are {s:?}: give runs of --concurrency N"
        ),
        (None, Some(i)) => closed_concurrency(i).ok_or_else(|| {
            anyhow::anyhow!(
                "{name}: a table row is a closed loop, and {}'s settings in the manifest give no requests in flight without a rate",
                i.tool
            )
        })?,
        (None, None) => bail!("{name}: the manifest gives no schedule: its concurrency is not known"),
    };
    // One row at the mean lengths, where every request's are within a quarter of them (a tool's
    // prompts of one asked length tokenize a few tokens apart).
    let n = done.len() as f64;
    let mean =
        |f: &dyn Fn(&(u32, u32)) -> u32| done.iter().map(|d| f64::from(f(&d.0))).sum::<f64>() / n;
    let (isl, osl) = (mean(&|s| s.0), mean(&|s| s.1));
    let near = |v: u32, mean: f64| (f64::from(v) - mean).abs() <= SPREAD * mean;
    if let Some(((i, o), _)) = done
        .iter()
        .find(|d| !near(d.0 .0, isl) || !near(d.0 .1, osl))
    {
        bail!(
            "{name}: a table row has one input and one output length, and this load run has a request of {i} in and {o} out against means of {isl:.0} and {osl:.0}: give runs of fixed lengths (each within {:.0}% of the mean)",
            SPREAD * 100.0
        );
    }
    let times: Vec<(f64, f64)> = done.iter().map(|d| d.1).collect();
    let round = |v: f64| (v.round() as u32).max(1);
    Ok(vec![row(round(isl), round(osl), concurrency, &times)])
}

/// How far a closed-loop run's request lengths may stray from their mean and still be one row.
const SPREAD: f64 = 0.25;

/// The row of an imported summary without requests (`import` of a tool's summary file): the
/// tool's mean TTFT and TPOT, at its closed loop's concurrency and its fixed lengths
/// (bench_serving's `random_input_len` and `random_output_len` at a range ratio of 1).
fn summary_row(name: &str, i: &Imported, summary: &Figures) -> anyhow::Result<TableRow> {
    let refuse = |why: &str| anyhow::anyhow!("{name}: {}'s summary {why}", i.tool);
    let concurrency = closed_concurrency(i)
        .ok_or_else(|| refuse("is not of a closed loop (requests in flight at no rate)"))?;
    let (isl, osl) = fixed_lengths(i).ok_or_else(|| {
        refuse("gives no fixed input and output lengths (random_input_len and random_output_len at a range ratio of 1)")
    })?;
    let figure = |key: &str| {
        summary
            .figures
            .get(key)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let (Some(ttft), Some(tpot)) = (figure("ttft_mean_ms"), figure("tpot_mean_ms")) else {
        return Err(refuse("has no mean TTFT and TPOT"));
    };
    Ok(row_of_means((isl, osl, concurrency), (ttft, tpot)))
}
