//! Results files as table rows, so that `calibrate --table` fits them beside the table's rows: a
//! sweep's requests of one (context, output) are a row at concurrency 1; a closed-loop load run of
//! fixed lengths is a row at its concurrency. Each row holds the means of its successful
//! requests, as a table's do: TTFT, and TPOT = (e2e - TTFT) / (output tokens - 1).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::bail;

use crate::results::manifest::KIND_LOAD;
use crate::results::settings::{Recorded, ScheduleRecord};
use crate::results::table::TableRow;
use crate::results::{read_manifest, read_records_strict, Method, Record};

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
    TableRow {
        line: 0,
        deployment: None,
        backend: None,
        isl,
        osl,
        concurrency,
        ttft_ms: Some(requests.iter().map(|r| r.0).sum::<f64>() / n),
        tpot_ms: Some(requests.iter().map(|r| r.1).sum::<f64>() / n),
    }
}

/// The rows of one results file; a load run that is not a closed loop of fixed lengths is
/// refused, naming the file.
pub fn rows_of_file(file: &Path) -> anyhow::Result<Vec<TableRow>> {
    let name = file.display();
    let records = read_records_strict(file)?;
    let manifest = read_manifest(file)?;
    let load = manifest.as_ref().and_then(|m| m.kind.as_deref()) == Some(KIND_LOAD)
        || records.iter().any(|r| r.load.is_some());
    let mut groups: BTreeMap<(u32, u32), Vec<(f64, f64)>> = BTreeMap::new();
    for r in &records {
        if let Some(t) = times(r) {
            groups
                .entry((r.context_tokens, r.output_tokens))
                .or_default()
                .push(t);
        }
    }
    if groups.is_empty() {
        bail!(
            "{name}: no successful request with two or more output tokens ({} records)",
            records.len()
        );
    }
    if !load {
        return Ok(groups
            .into_iter()
            .map(|((isl, osl), g)| row(isl, osl, 1, &g))
            .collect());
    }
    let concurrency = match manifest.and_then(|m| m.schedule) {
        Some(Recorded::Typed(ScheduleRecord::Closed { concurrency })) => concurrency,
        Some(s) => bail!(
            "{name}: a table row is a closed loop, and this load run's arrivals are {s:?}: give runs of --concurrency N"
        ),
        None => bail!("{name}: a load run without its manifest: its concurrency is not known"),
    };
    if groups.len() > 1 {
        bail!(
            "{name}: a table row has one input and one output length, and this load run has {} (input, output) pairs: give runs of fixed lengths",
            groups.len()
        );
    }
    Ok(groups
        .into_iter()
        .map(|((isl, osl), g)| row(isl, osl, concurrency, &g))
        .collect())
}
