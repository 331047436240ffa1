//! One side of a comparison: its files' records, which of them are one run, and their kind.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use super::Kind;
use crate::results::{read_records, Method, Record};

/// One side's results: each file's records, and the start of the run each resumed piece
/// continues, so that a resumed run is one run.
#[derive(Debug, Default)]
pub struct Side {
    /// Each file's records.
    pub files: Vec<Vec<Record>>,
    /// A resumed piece's start (unix ms) -> the start of the run's first piece, from the
    /// manifests: a `resume` line continues the earlier line of its file with its run id.
    pub continues: BTreeMap<u64, u64>,
}

impl Side {
    /// Files of records without manifests: each start is a run of its own.
    pub fn of(files: Vec<Vec<Record>>) -> Self {
        Side {
            files,
            continues: BTreeMap::new(),
        }
    }

    /// The start of the run that a piece starting at `start` belongs to.
    fn run_start(&self, start: u64) -> u64 {
        self.continues.get(&start).copied().unwrap_or(start)
    }
}

/// Read one side's records from its files, a list per file, and from their manifests which
/// pieces continue which run.
pub fn read_side(side: &str, files: &[PathBuf]) -> anyhow::Result<Side> {
    let mut out = Side::default();
    for f in files {
        let context = || format!("{side}: reading {}", f.display());
        out.files.push(read_records(f).with_context(context)?);
        let mut first: BTreeMap<String, u64> = BTreeMap::new();
        for m in crate::results::read_manifests(f).with_context(context)? {
            let (Some(id), Some(start)) = (m.run_id, m.start_unix_ms) else {
                continue;
            };
            match first.get(&id) {
                Some(&run) if m.resume == Some(true) && start != run => {
                    out.continues.insert(start, run);
                }
                Some(_) => {}
                None => {
                    first.insert(id, start);
                }
            }
        }
    }
    Ok(out)
}

/// A side's records split into runs: a sweep's files are its runs; load records are grouped by
/// their run's start, across files (shards of one run share it; a resumed piece counts from the
/// run it continues).
pub(super) fn runs_of(side: &Side, kind: Kind) -> Vec<Vec<&Record>> {
    match kind {
        Kind::Sweep => side
            .files
            .iter()
            .map(|f| f.iter().collect::<Vec<_>>())
            .filter(|r| !r.is_empty())
            .collect(),
        Kind::Load => {
            let mut runs: BTreeMap<u64, Vec<&Record>> = BTreeMap::new();
            for r in side.files.iter().flatten() {
                if let Some(info) = &r.load {
                    runs.entry(side.run_start(info.start_unix_ms))
                        .or_default()
                        .push(r);
                }
            }
            runs.into_values().collect()
        }
    }
}

/// The kind of a side's records (over all its files); an empty, failed-only or mixed side is
/// refused.
pub fn kind_of(side: &str, files: &Side) -> anyhow::Result<Kind> {
    let records = || files.files.iter().flatten();
    let total = records().count();
    if total == 0 {
        anyhow::bail!("{side} has no records");
    }
    let load = records().filter(|r| r.load.is_some()).count();
    let kind = match load {
        0 => Kind::Sweep,
        n if n == total => Kind::Load,
        _ => anyhow::bail!(
            "{side} mixes sweep and load records ({load} of {total} are load records); compare one kind at a time"
        ),
    };
    let ok = records()
        .filter(|r| r.error.is_none() && r.method == Method::Streaming)
        .count();
    if ok == 0 {
        anyhow::bail!(
            "{side} has no successful streaming requests ({total} records, all failed or two-point)"
        );
    }
    Ok(kind)
}
