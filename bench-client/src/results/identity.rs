//! What makes a load record one request, and the checks that keep a request counted once. A
//! request is `(run id, index)`, the run id from the manifest beside the file, and also
//! `(seed, start, index)` from the record alone (so a copied file without its manifest, and files
//! written before the run id was recorded, are still caught). `merge` joins the files of one run
//! only, each request once; `--resume` continues a file of its own run only.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::LoadInfo;

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

/// A request's key held by [`OneRun`]: its run's number, its index and a multi-turn request's
/// session and turn.
type SeenKey = (u32, u64, Option<(u64, u32)>);

/// Checks that files are the pieces of one run with each request once, a record at a time:
/// [`OneRun::new`] refuses a file given twice and files of two runs before any record is read,
/// [`OneRun::request`] a request seen before. It holds one key per request (a run's name once,
/// however many requests name it), never the records.
pub struct OneRun<'a> {
    /// Each file with its manifest's run id.
    files: Vec<(&'a Path, Option<&'a str>)>,
    /// Each run's name, numbered.
    runs: HashMap<String, u32>,
    /// Every request so far, with the file it was in.
    seen: HashMap<SeenKey, usize>,
}

impl<'a> OneRun<'a> {
    /// The files to merge, each with the run id of its manifest.
    pub fn new(files: Vec<(&'a Path, Option<&'a str>)>) -> Result<Self, NotOneRun> {
        let mut seen_files: Vec<(PathBuf, &Path)> = Vec::new();
        for &(file, _) in &files {
            let canon = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
            if let Some((_, first)) = seen_files.iter().find(|(c, _)| *c == canon) {
                return Err(NotOneRun::SameFile {
                    first: first.to_path_buf(),
                    second: file.to_path_buf(),
                });
            }
            seen_files.push((canon, file));
        }
        let mut first_run: Option<(&Path, &str)> = None;
        for &(file, run_id) in &files {
            let Some(id) = run_id else { continue };
            match first_run {
                Some((a, a_run)) if a_run != id => {
                    return Err(NotOneRun::DifferentRuns {
                        a: a.to_path_buf(),
                        a_run: a_run.to_string(),
                        b: file.to_path_buf(),
                        b_run: id.to_string(),
                    })
                }
                Some(_) => {}
                None => first_run = Some((file, id)),
            }
        }
        Ok(Self {
            files,
            runs: HashMap::new(),
            seen: HashMap::new(),
        })
    }

    /// A load record of the `file`th file given to [`OneRun::new`].
    pub fn request(&mut self, file: usize, load: &LoadInfo) -> Result<(), NotOneRun> {
        let (path, run_id) = self.files[file];
        for key in RequestKey::of(run_id, load) {
            let run = match self.runs.get(&key.run) {
                Some(&n) => n,
                None => {
                    let n = u32::try_from(self.runs.len()).unwrap_or(u32::MAX);
                    self.runs.insert(key.run.clone(), n);
                    n
                }
            };
            if let Some(first) = self.seen.insert((run, key.index, key.turn), file) {
                if first == file {
                    return Err(NotOneRun::Twice {
                        file: path.to_path_buf(),
                        index: key.index,
                    });
                }
                return Err(NotOneRun::Repeated {
                    run: key.run,
                    index: key.index,
                    first: self.files[first].0.to_path_buf(),
                    second: path.to_path_buf(),
                });
            }
        }
        Ok(())
    }
}
