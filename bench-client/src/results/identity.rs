//! What makes a load record one request, and the checks that keep a request counted once. A
//! request is `(run id, index)`, the run id from the manifest beside the file, and also
//! `(seed, start, index)` from the record alone (so a copied file without its manifest, and files
//! written before the run id was recorded, are still caught). `merge` joins the files of one run
//! only, each request once; `--resume` continues a file of its own run only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{LoadInfo, Record};

/// A results file of another run than the one resuming it.
#[derive(Debug, thiserror::Error)]
#[error("{} {why}", .file.display())]
pub struct ForeignRun {
    /// The results file.
    pub file: PathBuf,
    /// What it holds, and what `--resume` needs.
    pub why: String,
}

impl ForeignRun {
    /// The file holds run `theirs`, this run is `mine`.
    pub fn other_plan(file: &Path, theirs: &str, mine: &str) -> Self {
        Self {
            file: file.to_path_buf(),
            why: format!("holds run {theirs}, this run is {mine} (another seed, schedule or workload): --resume continues a run with the flags that started it; choose another --out for a new run"),
        }
    }
}

/// Files that are not the pieces of one run, each request once.
#[derive(Debug, thiserror::Error)]
pub enum NotOneRun {
    /// One file given twice.
    #[error("{} is given twice (as {} and {}): each file is merged once", .first.display(), .first.display(), .second.display())]
    SameFile {
        /// As first given.
        first: PathBuf,
        /// As given again.
        second: PathBuf,
    },
    /// Files of two runs.
    #[error("{} is run {a_run} and {} is run {b_run}: merge joins the shards of one run (the same seed, schedule and workload); compare runs with `bench-client compare`", .a.display(), .b.display())]
    DifferentRuns {
        /// A file.
        a: PathBuf,
        /// Its run.
        a_run: String,
        /// A file of another run.
        b: PathBuf,
        /// Its run.
        b_run: String,
    },
    /// A results file that holds one request twice (two processes wrote it at once).
    #[error("{} holds request {index} twice (two processes wrote to it at once?): its records are not one run's, each request once; rerun into a new --out", .file.display())]
    Twice {
        /// The results file.
        file: PathBuf,
        /// The request's index.
        index: u64,
    },
    /// A request recorded twice.
    #[error("request {index} of {run} is in {} and again in {}: a file given twice, a copy of a shard, or two runs with the same flags; each request is counted once, so nothing was merged", .first.display(), .second.display())]
    Repeated {
        /// The run.
        run: String,
        /// The request's index.
        index: u64,
        /// Where it was first.
        first: PathBuf,
        /// Where it is again.
        second: PathBuf,
    },
}

/// A load request's identity: its run and its place in the run's schedule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestKey {
    /// `run <id>` from the manifest, or `seed <seed> started <unix ms>` from the record itself.
    pub run: String,
    /// The request's index in the whole (unsharded) schedule.
    pub index: u64,
    /// A multi-turn request's session and turn.
    pub turn: Option<(u64, u32)>,
}

impl RequestKey {
    /// The keys of `load` in a file of run `run_id`: by the record alone (a copied line is the
    /// same request, manifest or not), and by the run id where the manifest gives one (two runs
    /// with the same flags are one run id).
    pub fn of(run_id: Option<&str>, load: &LoadInfo) -> impl Iterator<Item = Self> {
        let key = |run: String| Self {
            run,
            index: load.index,
            turn: load.session.map(|s| (s.id, s.turn)),
        };
        std::iter::once(key(format!(
            "seed {} started {}",
            load.seed, load.start_unix_ms
        )))
        .chain(run_id.map(|id| key(format!("run {id}"))))
    }
}

/// The files to merge, each with the run id of its manifest and its records.
pub struct Piece<'a> {
    /// The results file.
    pub file: &'a Path,
    /// Its manifest's run id.
    pub run_id: Option<&'a str>,
    /// Its records.
    pub records: &'a [Record],
}

/// Whether `pieces` are pieces of one run with each request once: refused when a file is given
/// twice, when two manifests name different runs, or when a request is in the files twice.
pub fn check_one_run(pieces: &[Piece<'_>]) -> Result<(), NotOneRun> {
    let mut seen_files: Vec<(PathBuf, &Path)> = Vec::new();
    for p in pieces {
        let canon = std::fs::canonicalize(p.file).unwrap_or_else(|_| p.file.to_path_buf());
        if let Some((_, first)) = seen_files.iter().find(|(c, _)| *c == canon) {
            return Err(NotOneRun::SameFile {
                first: first.to_path_buf(),
                second: p.file.to_path_buf(),
            });
        }
        seen_files.push((canon, p.file));
    }
    let mut first_run: Option<(&Path, &str)> = None;
    for p in pieces {
        let Some(id) = p.run_id else { continue };
        match first_run {
            Some((a, a_run)) if a_run != id => {
                return Err(NotOneRun::DifferentRuns {
                    a: a.to_path_buf(),
                    a_run: a_run.to_string(),
                    b: p.file.to_path_buf(),
                    b_run: id.to_string(),
                })
            }
            Some(_) => {}
            None => first_run = Some((p.file, id)),
        }
    }
    let mut seen: HashMap<RequestKey, &Path> = HashMap::new();
    for p in pieces {
        for load in p.records.iter().filter_map(|r| r.load.as_ref()) {
            for key in RequestKey::of(p.run_id, load) {
                if let Some(first) = seen.insert(key.clone(), p.file) {
                    if first == p.file {
                        return Err(NotOneRun::Twice {
                            file: p.file.to_path_buf(),
                            index: key.index,
                        });
                    }
                    return Err(NotOneRun::Repeated {
                        run: key.run,
                        index: key.index,
                        first: first.to_path_buf(),
                        second: p.file.to_path_buf(),
                    });
                }
            }
        }
    }
    Ok(())
}
