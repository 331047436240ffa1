//! One writer per results file: an advisory lock (`flock`) on the file, held for the whole run
//! and released by the kernel when the process ends, killed or not.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nix::fcntl::{Flock, FlockArg};

/// Another process is writing the results file.
#[derive(Debug, thiserror::Error)]
#[error("{} is being written by another bench-client (it holds the file's lock): wait for it to end, or choose another --out", .path.display())]
pub struct ResultsBusy {
    /// The results file.
    pub path: PathBuf,
}

/// The held lock; dropping it releases the file.
#[derive(Debug)]
pub struct ResultsLock {
    _lock: Flock<File>,
}

/// Take the results file `path` (creating it and its folder) for this process alone, before
/// reading what it holds and before sending anything; [`ResultsBusy`] when another process holds
/// it.
pub fn lock_results(path: &Path) -> anyhow::Result<ResultsLock> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(ResultsLock { _lock: lock }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(ResultsBusy {
            path: path.to_path_buf(),
        }
        .into()),
        Err((_, e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_file_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        let first = lock_results(&p).unwrap();
        let err = lock_results(&p).unwrap_err();
        assert!(err.downcast_ref::<ResultsBusy>().is_some(), "{err:#}");
        drop(first);
        lock_results(&p).unwrap();
    }
}
