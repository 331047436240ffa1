//! The results file on disk: append and sync each record at once, read back after a killed
//! process (a torn last line is skipped), refuse to mix a new run into an old file, and the
//! manifest beside it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use super::Record;

/// Whether `path` already holds results. With records there and no `resume`, an error that says how to
/// go on (`hint` names what must match, e.g. the seed): a new run never mixes into an old file.
pub fn existing_results(path: &Path, resume: bool, hint: &str) -> anyhow::Result<bool> {
    let exists = std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false);
    if exists && !resume {
        anyhow::bail!(
            "{} already has results; pass --resume{hint} to continue it or choose another --out",
            path.display()
        );
    }
    Ok(exists)
}

/// Read every record; a torn (unparseable) last line from a killed process is skipped; an
/// unparseable line elsewhere is an error naming the line.
pub fn read_records(path: impl AsRef<Path>) -> anyhow::Result<Vec<Record>> {
    let path = path.as_ref();
    let file =
        File::open(path).with_context(|| format!("opening results file {}", path.display()))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {}", path.display()))?;
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => out.push(r),
            Err(_) if Some(i) == last => {
                tracing::warn!(
                    "{}: skipping a torn last line (line {}); the process writing it was probably killed",
                    path.display(),
                    i + 1
                );
            }
            Err(e) => anyhow::bail!("{}: line {} is not a record: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

/// Read every record of a file whose every line must be one: a torn or foreign line anywhere
/// is an error naming it (for `calibrate`, which must not fit what it could not read).
pub fn read_records_strict(path: impl AsRef<Path>) -> anyhow::Result<Vec<Record>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading results file {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => out.push(r),
            Err(e) => anyhow::bail!(
                "{}: line {} is not a whole record ({e}); a torn line means the run was killed: rerun it or remove the line",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(out)
}

/// The run manifest beside a results file: `RESULTS.jsonl.manifest.jsonl`.
pub fn manifest_path(out: &Path) -> PathBuf {
    PathBuf::from(format!("{}.manifest.jsonl", out.display()))
}

/// The run's own description: the first line of the manifest beside `out` that is not a
/// `/metrics` scrape; `None` when there is no manifest (torn lines are skipped).
pub fn read_manifest(out: &Path) -> anyhow::Result<Option<serde_json::Value>> {
    let path = manifest_path(out);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v.get("kind").and_then(serde_json::Value::as_str) != Some("load-metrics")))
}

/// Appends one JSON line to the manifest of the results file `out`, synced to disk.
pub fn append_manifest(out: &Path, line: &impl Serialize) -> anyhow::Result<()> {
    let path = manifest_path(out);
    let line = serde_json::to_string(line).context("serialising a manifest line")?;
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "{line}").with_context(|| format!("writing {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("syncing {}", path.display()))
}

/// Appends records, one JSON line each, flushed and synced per record.
#[derive(Debug)]
pub struct RecordWriter {
    file: File,
    path: PathBuf,
}

impl RecordWriter {
    /// Open for appending (creating the file). A torn last line (no final newline) is cut off first so
    /// that the next record starts on a line of its own.
    pub fn open(path: impl AsRef<Path>) -> anyhow::Result<Self> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {} for appending", path.display()))?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        if !bytes.is_empty() && bytes.last() != Some(&b'\n') {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            file.set_len(keep as u64)
                .with_context(|| format!("cutting the torn last line of {}", path.display()))?;
            file.seek(SeekFrom::End(0))?;
            tracing::warn!("{}: removed a torn last line", path.display());
        }
        Ok(Self { file, path })
    }

    /// Append one record and flush it to disk.
    pub fn append(&mut self, rec: &Record) -> anyhow::Result<()> {
        self.append_all(std::slice::from_ref(rec))
    }

    /// Append records in order and flush them to disk with one sync (a group commit: a writer
    /// that falls behind syncs once per batch of waiting records instead of once per record).
    pub fn append_all(&mut self, recs: &[Record]) -> anyhow::Result<()> {
        let mut lines = Vec::new();
        for rec in recs {
            serde_json::to_writer(&mut lines, rec).context("serialising record")?;
            lines.push(b'\n');
        }
        self.file
            .write_all(&lines)
            .and_then(|()| self.file.flush())
            .and_then(|()| self.file.sync_data())
            .with_context(|| format!("appending to {}", self.path.display()))
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
