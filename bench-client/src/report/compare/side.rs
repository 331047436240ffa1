//! One side of a comparison, read a record at a time: a sweep's records (a few a point), a load
//! run's values per run ([`LoadValues`]), and what the HTML page's truth section needs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use super::truth::TruthValues;
use super::{Kind, LoadValues};
use crate::report::load::Slo;
use crate::results::{each_record, Method, Record};

/// One side's results, as the comparison needs them; no load record is held.
#[derive(Default)]
pub struct Side {
    /// Records read.
    pub total: usize,
    /// Load records among them.
    pub load: usize,
    /// Successful streaming requests among them.
    pub ok: usize,
    /// Failed records among them.
    pub failed: usize,
    /// The goodput objective the load values were judged against.
    pub slo: Slo,
    /// Each file's sweep records (records without load fields).
    pub sweep_files: Vec<Vec<Record>>,
    /// Each load run's values, in the order of the runs' starts: the shards of one run (which share
    /// its start) are one run, and a resumed piece counts with the run it continues.
    pub(super) load_runs: Vec<LoadValues>,
    /// The successful streaming requests' TTFTs and the mock's truth of them.
    pub truth: TruthValues,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side")
            .field("total", &self.total)
            .field("load_runs", &self.load_runs.len())
            .finish()
    }
}

/// Read one side's files a record at a time, judging load requests against `slo`; the manifests
/// say which pieces continue which run: a `resume` line continues the earlier line of its file
/// with its run id.
pub fn read_side(side: &str, files: &[PathBuf], slo: Slo) -> anyhow::Result<Side> {
    let mut out = Side {
        slo,
        ..Side::default()
    };
    // A resumed piece's start (unix ms) -> the start of its run's first piece.
    let mut continues: BTreeMap<u64, u64> = BTreeMap::new();
    for f in files {
        let context = || format!("{side}: reading {}", f.display());
        let mut first: BTreeMap<String, u64> = BTreeMap::new();
        for m in crate::results::read_manifests(f).with_context(context)? {
            let (Some(id), Some(start)) = (m.run_id, m.start_unix_ms) else {
                continue;
            };
            match first.get(&id) {
                Some(&run) if m.resume == Some(true) && start != run => {
                    continues.insert(start, run);
                }
                Some(_) => {}
                None => {
                    first.insert(id, start);
                }
            }
        }
    }
    let mut runs: BTreeMap<u64, LoadValues> = BTreeMap::new();
    for f in files {
        let mut sweep = Vec::new();
        each_record(f, |r| {
            out.total += 1;
            if r.error.is_some() {
                out.failed += 1;
            }
            if r.error.is_none() && r.method == Method::Streaming {
                out.ok += 1;
                out.truth.add(&r);
            }
            match &r.load {
                Some(info) => {
                    out.load += 1;
                    let start = info.start_unix_ms;
                    let run = continues.get(&start).copied().unwrap_or(start);
                    runs.entry(run).or_default().add(&r, slo);
                }
                None => sweep.push(r),
            }
            Ok(())
        })
        .with_context(|| format!("{side}: reading {}", f.display()))?;
        out.sweep_files.push(sweep);
    }
    out.load_runs = runs
        .into_values()
        .map(|mut v| {
            v.finish();
            v
        })
        .collect();
    Ok(out)
}

/// A sweep side's runs: its files (those with records).
pub(super) fn sweep_runs(side: &Side) -> Vec<Vec<&Record>> {
    side.sweep_files
        .iter()
        .map(|f| f.iter().collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect()
}

/// The kind of a side's records (over all its files); an empty, failed-only or mixed side is
/// refused.
pub fn kind_of(side: &str, s: &Side) -> anyhow::Result<Kind> {
    if s.total == 0 {
        anyhow::bail!("{side} has no records");
    }
    let kind = match s.load {
        0 => Kind::Sweep,
        n if n == s.total => Kind::Load,
        n => anyhow::bail!(
            "{side} mixes sweep and load records ({n} of {} are load records); compare one kind at a time",
            s.total
        ),
    };
    if s.ok == 0 {
        anyhow::bail!(
            "{side} has no successful streaming requests ({} records, all failed or two-point)",
            s.total
        );
    }
    Ok(kind)
}
