//! The results file on disk: write each record at once (synced at once, or in groups at most
//! [`SYNC_INTERVAL`] apart), read back after a killed process (a torn last line is skipped), refuse
//! to mix a new run into an old file, and the manifest beside it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::{Manifest, Record};

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
            Ok(r) if r.schema > super::SCHEMA => anyhow::bail!(
                "{}: line {} is in results schema {}, written by a newer bench-client (this one reads schemas 1 to {})",
                path.display(),
                i + 1,
                r.schema,
                super::SCHEMA
            ),
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

/// The run's own description: the first line of the manifest beside `out` that is a run's (not a
/// `/metrics` scrape); `None` when there is no manifest (torn or foreign lines are skipped).
pub fn read_manifest(out: &Path) -> anyhow::Result<Option<Manifest>> {
    Ok(read_manifests(out)?.into_iter().next())
}

/// Every run line of the manifest beside `out`, in order (one per run piece, or per imported
/// run); empty when there is no manifest. Torn or foreign lines are skipped.
pub fn read_manifests(out: &Path) -> anyhow::Result<Vec<Manifest>> {
    let path = manifest_path(out);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Manifest>(l).ok())
        .filter(Manifest::is_run)
        .collect())
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

/// The longest a record written by [`write_records`] waits for its sync to disk. A killed process
/// loses no written record (the kernel holds it); the sync is for a crash of the machine.
pub const SYNC_INTERVAL: Duration = Duration::from_millis(100);

/// Appends records, one JSON line each: [`RecordWriter::append_all`] writes and syncs,
/// [`RecordWriter::write_all`] writes only.
#[derive(Debug)]
pub struct RecordWriter {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
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
        Ok(Self {
            file,
            path,
            buf: Vec::new(),
        })
    }

    /// Append one record and flush it to disk.
    pub fn append(&mut self, rec: &Record) -> anyhow::Result<()> {
        self.append_all(std::slice::from_ref(rec))
    }

    /// Append records in order and flush them to disk with one sync (a group commit: a writer
    /// that falls behind syncs once per batch of waiting records instead of once per record).
    pub fn append_all(&mut self, recs: &[Record]) -> anyhow::Result<()> {
        self.write_all(recs)?;
        self.sync()
    }

    /// Append records in order with one `write`, without syncing: once it returns they survive the
    /// process being killed, not yet a crash of the machine.
    pub fn write_all(&mut self, recs: &[Record]) -> anyhow::Result<()> {
        self.buf.clear();
        for rec in recs {
            serde_json::to_writer(&mut self.buf, rec).context("serialising record")?;
            self.buf.push(b'\n');
        }
        self.file
            .write_all(&self.buf)
            .with_context(|| format!("appending to {}", self.path.display()))
    }

    /// Sync what was written to disk.
    pub fn sync(&mut self) -> anyhow::Result<()> {
        self.file
            .sync_data()
            .with_context(|| format!("syncing {}", self.path.display()))
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes the records that arrive on `rx` until it closes: each as soon as it arrives (with the
/// others already waiting, in one `write`), synced at most [`SYNC_INTERVAL`] after the first
/// unsynced write, and synced once more at the end.
pub fn write_records(mut writer: RecordWriter, rx: &Receiver<Record>) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    let mut unsynced_since: Option<Instant> = None;
    loop {
        let first = match unsynced_since {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => {
                rx.recv_timeout((t + SYNC_INTERVAL).saturating_duration_since(Instant::now()))
            }
        };
        match first {
            Ok(rec) => {
                batch.push(rec);
                batch.extend(rx.try_iter());
                writer.write_all(&batch)?;
                batch.clear();
                let since = *unsynced_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= SYNC_INTERVAL {
                    writer.sync()?;
                    unsynced_since = None;
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                writer.sync()?;
                unsynced_since = None;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if unsynced_since.is_some() {
        writer.sync()?;
    }
    Ok(())
}
