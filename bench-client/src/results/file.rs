//! The results file on disk: write each record at once (synced at once, or in groups at most
//! [`SYNC_INTERVAL`] apart), read back after a killed process (a torn last line is skipped), refuse
//! to mix a new run into an old file, and the manifest beside it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::{Manifest, Record};

/// What `path` is where it exists and is not a regular file (or a link to one): a folder, or a
/// device, socket or pipe, none of which is a file to write results to.
pub fn not_a_file(path: &Path) -> Option<&'static str> {
    let m = std::fs::metadata(path).ok()?;
    if m.is_file() {
        None
    } else if m.is_dir() {
        Some("a folder")
    } else {
        Some("a device, socket or pipe")
    }
}

/// Why no file can be made at `path` where a path above it is not a folder (a file, a device):
/// e.g. `afile is a file, not a folder`. The nearest of its ancestors that exists decides.
pub fn not_in_a_folder(path: &Path) -> Option<String> {
    let above = path
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .find(|a| std::fs::metadata(a).is_ok())?;
    let what = match std::fs::metadata(above).ok()? {
        m if m.is_dir() => return None,
        m if m.is_file() => "a file",
        _ => "a device, socket or pipe",
    };
    Some(format!("{} is {what}, not a folder", above.display()))
}

/// Whether `path` already holds results. With records there and no `resume`, an error that says how to
/// go on (`hint` names what must match, e.g. the seed): a new run never mixes into an old file. A
/// folder or a device is refused: results are a file of their own (and are synced to disk).
pub fn existing_results(path: &Path, resume: bool, hint: &str) -> anyhow::Result<bool> {
    if let Some(what) = not_a_file(path) {
        let example = match path.is_dir() {
            true => format!(" (e.g. {})", path.join("run.jsonl").display()),
            false => String::new(),
        };
        anyhow::bail!(
            "--out {}: {what}, not a results file; name a file{example}",
            path.display()
        );
    }
    if let Some(why) = not_in_a_folder(path) {
        anyhow::bail!("--out {}: {why}", path.display());
    }
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

/// Read every record; a torn last line from a killed process (unparseable, without its newline)
/// is skipped; any other line that is not a record is an error naming it.
pub fn read_records(path: impl AsRef<Path>) -> anyhow::Result<Vec<Record>> {
    let mut out = Vec::new();
    each_record(path, |r| {
        out.push(r);
        Ok(())
    })?;
    Ok(out)
}

/// Hand `f` each record of the file in order, one line in memory at a time (a file of millions
/// of records is never held whole); lines as [`read_records`] reads them. An error of `f` stops
/// the reading and is returned.
pub fn each_record(
    path: impl AsRef<Path>,
    mut f: impl FnMut(Record) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let path = path.as_ref();
    // A line that is not a record, held until a later line shows that it is not the last.
    let mut torn: Option<(usize, serde_json::Error)> = None;
    each_line(path, |number, line| {
        if let Some((i, e)) = torn.take() {
            anyhow::bail!("{}: line {i} is not a record: {e}", path.display());
        }
        match serde_json::from_slice::<Record>(line) {
            Ok(r) if r.schema > super::SCHEMA => anyhow::bail!(
                "{}: line {number} is in results schema {}, written by a newer bench-client (this one reads schemas 1 to {})",
                path.display(),
                r.schema,
                super::SCHEMA
            ),
            Ok(r) => f(r),
            // A killed writer leaves its last line without its newline: a whole line that is
            // not a record is no torn write, wherever it is.
            Err(e) if line.ends_with(b"\n") => {
                anyhow::bail!("{}: line {number} is not a record: {e}", path.display())
            }
            Err(e) => {
                torn = Some((number, e));
                Ok(())
            }
        }
    })?;
    if let Some((i, _)) = torn {
        tracing::warn!(
            "{}: skipping a torn last line (line {i}); the process writing it was probably killed",
            path.display()
        );
    }
    Ok(())
}

/// Hand `f` each line of a results file that is not blank, with its number (from 1), one line in
/// memory at a time.
fn each_line(
    path: &Path,
    mut f: impl FnMut(usize, &[u8]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file =
        File::open(path).with_context(|| format!("opening results file {}", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if read == 0 {
            return Ok(());
        }
        number += 1;
        if !line.trim_ascii().is_empty() {
            f(number, &line)?;
        }
    }
}

/// Read every record of a file whose every line must be one: a torn or foreign line anywhere
/// is an error naming it (for `calibrate`, which must not fit what it could not read).
pub fn read_records_strict(path: impl AsRef<Path>) -> anyhow::Result<Vec<Record>> {
    let mut out = Vec::new();
    each_record_strict(path, |r| {
        out.push(r);
        Ok(())
    })?;
    Ok(out)
}

/// [`read_records_strict`] a record at a time, one line in memory: `f` is handed each record in
/// order; a bad line, or an error of `f`, stops the reading.
pub fn each_record_strict(
    path: impl AsRef<Path>,
    mut f: impl FnMut(Record) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let path = path.as_ref();
    each_line(path, |number, line| {
        let r = serde_json::from_slice::<Record>(line).map_err(|e| {
            anyhow::anyhow!(
                "{}: line {number} is not a whole record ({e}); a torn line means the run was killed: rerun it or remove the line",
                path.display()
            )
        })?;
        f(r)
    })
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

/// The length of `file` (`len` bytes) up to and including its last newline, 0 where it has none:
/// what stays of a file whose last line is torn. Read backwards a block at a time, so a results
/// file of gigabytes costs one block, not its size in memory.
fn whole_lines_len(file: &mut File, len: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let mut buf = vec![0u8; BLOCK as usize];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let block = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(block)?;
        if let Some(p) = block.iter().rposition(|&b| b == b'\n') {
            return Ok(start + p as u64 + 1);
        }
        end = start;
    }
    Ok(0)
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
        // Only a regular file has a last line to mend (a device such as /dev/zero reads forever).
        let meta = file
            .metadata()
            .with_context(|| format!("reading {}", path.display()))?;
        if meta.is_file() && meta.len() > 0 {
            let keep = whole_lines_len(&mut file, meta.len())
                .with_context(|| format!("reading {}", path.display()))?;
            if keep < meta.len() {
                file.set_len(keep)
                    .with_context(|| format!("cutting the torn last line of {}", path.display()))?;
                tracing::warn!("{}: removed a torn last line", path.display());
            }
            file.seek(SeekFrom::End(0))?;
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
