//! The JSONL results file: one [`Record`] per request (or per two-point pair), appended and flushed at
//! once, readable after a killed process (a torn last line is skipped), and resumable.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::measure::{measure, MeasureError, TwoPoint, TwoPointError};
use crate::trace::{FailureKind, RequestTrace, TokenAttribution};

/// Which method produced a record.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// One streaming request per measurement.
    Streaming,
    /// The old two-request method (run beside the streaming method).
    TwoPoint,
}

impl Method {
    /// Wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Streaming => "streaming",
            Self::TwoPoint => "two-point",
        }
    }
}

/// A failure in a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordError {
    /// Kind name (`connect-refused`, `stream-cut`, `cache-hit`, ...).
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// Details of a two-point pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoPointDetail {
    /// Output tokens asked of a and b.
    pub a_tokens: u32,
    /// Output tokens asked of b.
    pub b_tokens: u32,
    /// Wall time of a.
    pub t_a_ms: Option<f64>,
    /// Wall time of b.
    pub t_b_ms: Option<f64>,
    /// Cached tokens b reported.
    pub cached_tokens_b: Option<u32>,
    /// Whether the cache was flushed between a and b.
    pub flushed: bool,
    /// Trace of a.
    pub trace_a: Option<RequestTrace>,
    /// Trace of b.
    pub trace_b: Option<RequestTrace>,
}

/// One line of the results file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Method.
    pub method: Method,
    /// Context length asked (prompt tokens).
    pub context_tokens: u32,
    /// Run number at this point (0-based).
    pub run: u32,
    /// The `rid` sent (for two-point, request b's).
    pub rid: String,
    /// Output tokens asked.
    pub output_tokens: u32,
    /// Prompt tokens the server reported (else sent).
    pub prompt_tokens: Option<u32>,
    /// Cached prompt tokens the server reported.
    pub cached_tokens: Option<u32>,
    /// Output tokens produced.
    pub completion_tokens: Option<u32>,
    /// Time to response headers.
    pub ttfb_ms: Option<f64>,
    /// Time to first output chunk.
    pub ttft_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_ms: Option<f64>,
    /// Uncached prompt tokens / TTFT (two-point: solved).
    pub prefill_tok_s: Option<f64>,
    /// Tokens after the first chunk / time after the first chunk (two-point: solved).
    pub decode_tok_s: Option<f64>,
    /// Why `decode_tok_s` is absent on a successful streaming request.
    pub decode_unavailable: Option<String>,
    /// (completion_tokens - 1) / (t_last - t_first), the common formula, for comparison.
    pub naive_decode_tok_s: Option<f64>,
    /// Time per output token after the first chunk.
    pub tpot_ms: Option<f64>,
    /// Tokens per output-carrying chunk (empty when unknown).
    pub tokens_per_chunk: Vec<u32>,
    /// How per-chunk token counts were known.
    pub token_attribution: TokenAttribution,
    /// Prompt length mismatch or cache hit: the point did not measure a cold prefill of N tokens.
    pub contaminated: bool,
    /// Why the point is contaminated.
    pub contamination: Vec<String>,
    /// Failure, or null.
    pub error: Option<RecordError>,
    /// Two-point details.
    pub two_point: Option<TwoPointDetail>,
    /// The raw trace (streaming records).
    pub trace: Option<RequestTrace>,
    /// Load-run fields (`bench-client load` records only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::load::LoadInfo>,
}

/// Contamination reasons for a trace that asked for `context_tokens` from a cold cache.
pub fn contamination(trace: &RequestTrace, context_tokens: u32) -> Vec<String> {
    let mut out = Vec::new();
    if trace.prompt_tokens_sent.is_some() {
        if let Some(p) = trace.reported_prompt_tokens() {
            if p != context_tokens {
                out.push(format!(
                    "server reported {p} prompt tokens, {context_tokens} were sent"
                ));
            }
        }
    }
    if let Some(c) = trace.cached_tokens().filter(|&c| c > 0) {
        out.push(format!(
            "server served {c} prompt tokens from its prefix cache"
        ));
    }
    out
}

impl Record {
    /// A streaming record from a trace.
    pub fn streaming(trace: RequestTrace, context_tokens: u32, run: u32) -> Self {
        let contamination = contamination(&trace, context_tokens);
        let base = Self {
            method: Method::Streaming,
            context_tokens,
            run,
            rid: trace.rid.clone(),
            output_tokens: trace.max_tokens,
            prompt_tokens: trace.reported_prompt_tokens().or(trace.prompt_tokens_sent),
            cached_tokens: trace.cached_tokens(),
            completion_tokens: trace.completion_tokens(),
            ttfb_ms: trace.headers_ns.map(|n| n as f64 / 1e6),
            ttft_ms: None,
            e2e_ms: Some(trace.end_ns as f64 / 1e6),
            prefill_tok_s: None,
            decode_tok_s: None,
            decode_unavailable: None,
            naive_decode_tok_s: None,
            tpot_ms: None,
            tokens_per_chunk: Vec::new(),
            token_attribution: trace.attribution,
            contaminated: !contamination.is_empty(),
            contamination,
            error: None,
            two_point: None,
            trace: None,
            load: None,
        };
        let rec = match measure(&trace) {
            Ok(m) => Self {
                ttft_ms: Some(m.ttft_ms),
                e2e_ms: Some(m.e2e_ms),
                prefill_tok_s: m.prefill_tok_s,
                decode_tok_s: m.decode_tok_s,
                decode_unavailable: m.decode_unavailable.map(|d| d.to_string()),
                naive_decode_tok_s: m.naive_decode_tok_s,
                tpot_ms: m.tpot_ms,
                tokens_per_chunk: m.tokens_per_chunk,
                ..base
            },
            Err(MeasureError::Failed(f)) => Self {
                error: Some(RecordError {
                    kind: f.kind.as_str().to_string(),
                    message: f.message,
                }),
                ..base
            },
            Err(e @ MeasureError::NoOutput) => Self {
                error: Some(RecordError {
                    kind: "no-output".into(),
                    message: e.to_string(),
                }),
                ..base
            },
        };
        Self {
            trace: Some(trace),
            ..rec
        }
    }

    /// A two-point record from its result.
    pub fn two_point(
        result: Result<TwoPoint, TwoPointError>,
        detail: TwoPointDetail,
        context_tokens: u32,
        run: u32,
    ) -> Self {
        let b = detail.trace_b.as_ref();
        let mut contamination = Vec::new();
        if let Some(c) = detail.cached_tokens_b.filter(|&c| c > 0) {
            contamination.push(format!("request b had {c} prompt tokens cached"));
        }
        let (prefill, decode, error) = match &result {
            Ok(r) => (Some(r.prefill_tok_s), Some(r.decode_tok_s), None),
            Err(e) => (
                None,
                None,
                Some(RecordError {
                    kind: e.kind().to_string(),
                    message: e.to_string(),
                }),
            ),
        };
        Self {
            method: Method::TwoPoint,
            context_tokens,
            run,
            rid: b.map(|t| t.rid.clone()).unwrap_or_default(),
            output_tokens: detail.b_tokens,
            prompt_tokens: b.and_then(|t| t.reported_prompt_tokens().or(t.prompt_tokens_sent)),
            cached_tokens: detail.cached_tokens_b,
            completion_tokens: b.and_then(RequestTrace::completion_tokens),
            ttfb_ms: None,
            ttft_ms: None,
            e2e_ms: detail.t_b_ms,
            prefill_tok_s: prefill,
            decode_tok_s: decode,
            decode_unavailable: None,
            naive_decode_tok_s: None,
            tpot_ms: None,
            tokens_per_chunk: Vec::new(),
            token_attribution: b.map_or(TokenAttribution::Unknown, |t| t.attribution),
            contaminated: !contamination.is_empty(),
            contamination,
            error,
            two_point: Some(detail),
            trace: None,
            load: None,
        }
    }

    /// Whether the request failed.
    pub fn failed(&self) -> bool {
        self.error.is_some()
    }

    /// Key of the point this record measured, for `--resume`.
    pub fn point_key(&self) -> (Method, u32, u32) {
        (self.method, self.context_tokens, self.run)
    }
}

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

/// Failure kind of a record as a typed kind, when it is one of the request failure kinds.
pub fn failure_kind(name: &str) -> Option<FailureKind> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).ok()
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

/// The run manifest beside a results file: `RESULTS.jsonl.manifest.jsonl`.
pub fn manifest_path(out: &Path) -> PathBuf {
    PathBuf::from(format!("{}.manifest.jsonl", out.display()))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Dialect;
    use crate::trace::{Chunk, StreamEnd, Usage};

    pub(crate) fn sample_trace(rid: &str) -> RequestTrace {
        let c = |at: u64, cum: u32, t: u32| Chunk {
            at_ns: at,
            tokens: Some(t),
            text_len: t,
            usage: Some(Usage {
                prompt_tokens: Some(16),
                completion_tokens: Some(cum),
                cached_tokens: Some(0),
            }),
            ..Chunk::default()
        };
        RequestTrace {
            rid: rid.into(),
            dialect: Dialect::Sglang,
            prompt_tokens_sent: Some(16),
            max_tokens: 4,
            status: Some(200),
            headers_ns: Some(1_000_000),
            reads: 3,
            chunks: vec![
                c(10_000_000, 2, 2),
                c(20_000_000, 3, 1),
                c(30_000_000, 4, 1),
            ],
            done_ns: Some(31_000_000),
            end: StreamEnd::Done,
            end_ns: 31_000_000,
            attribution: TokenAttribution::ServerCumulative,
            stamps: Default::default(),
            send_delay_ns: None,
        }
    }

    #[test]
    fn torn_last_line_is_tolerated_and_cut_before_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut w = RecordWriter::open(&path).unwrap();
        w.append(&Record::streaming(sample_trace("a"), 16, 0))
            .unwrap();
        w.append(&Record::streaming(sample_trace("b"), 16, 1))
            .unwrap();
        drop(w);
        // Simulate a process killed mid-write.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"method\":\"streaming\",\"context_tok")
            .unwrap();
        drop(f);
        let recs = read_records(&path).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].rid, "b");
        let mut w = RecordWriter::open(&path).unwrap();
        w.append(&Record::streaming(sample_trace("c"), 16, 2))
            .unwrap();
        let recs = read_records(&path).unwrap();
        assert_eq!(
            recs.iter().map(|r| r.rid.as_str()).collect::<Vec<_>>(),
            vec!["a", "b", "c"]
        );
    }

    #[test]
    fn a_group_commit_appends_every_record_in_order_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut w = RecordWriter::open(&path).unwrap();
        w.append(&Record::streaming(sample_trace("a"), 16, 0))
            .unwrap();
        let batch: Vec<Record> = ["b", "c", "d"]
            .iter()
            .enumerate()
            .map(|(i, rid)| Record::streaming(sample_trace(rid), 16, i as u32 + 1))
            .collect();
        w.append_all(&batch).unwrap();
        w.append_all(&[]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(text.ends_with('\n'));
        let recs = read_records(&path).unwrap();
        assert_eq!(
            recs.iter().map(|r| r.rid.as_str()).collect::<Vec<_>>(),
            vec!["a", "b", "c", "d"]
        );
    }

    #[test]
    fn corrupt_middle_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let good = serde_json::to_string(&Record::streaming(sample_trace("a"), 16, 0)).unwrap();
        std::fs::write(&path, format!("garbage\n{good}\n")).unwrap();
        let e = read_records(&path).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn streaming_record_fields() {
        let r = Record::streaming(sample_trace("a"), 16, 0);
        assert_eq!(r.ttft_ms, Some(10.0));
        assert_eq!(r.tokens_per_chunk, vec![2, 1, 1]);
        assert!(!r.contaminated && r.error.is_none());
        let r = Record::streaming(sample_trace("a"), 32, 0);
        assert!(r.contaminated);
    }
}
