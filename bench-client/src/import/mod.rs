//! `import`: other benchmark tools' result files (SGLang's bench_serving, vLLM's `bench serve`,
//! guidellm, AIPerf) turned into this project's load records and manifests, so that every view,
//! comparison and fit reads them unchanged. Nothing is invented: what a file does not say (per-chunk
//! token counts, start times) is marked as not known, or as rebuilt and how.

mod aiperf;
mod bench_serving;
mod build;
pub mod check;
mod guidellm;
mod json;
pub mod summary;

use std::path::Path;

use serde::Serialize;

use crate::results::Record;
use crate::trace::{Dialect, TokenAttribution};

pub use build::records;

/// The requests in flight of an imported run that was a closed loop (a fixed number in flight,
/// no arrival rate), read from the tool's own settings as its manifest keeps them; `None` for a
/// run at a rate, or settings that do not say.
pub fn closed_concurrency(imported: &crate::results::manifest::Imported) -> Option<u32> {
    use serde_json::Value;
    // A rate of "inf" (bench_serving, vLLM) sends every request at once: the limit is the loop.
    let no_rate = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "inf" | "infinity"),
        Some(Value::Number(n)) => n.as_f64().is_some_and(f64::is_infinite),
        Some(_) => false,
    };
    let s = &imported.settings;
    match imported.tool.as_str() {
        "bench_serving" | "vllm" if no_rate(s.get("request_rate")) => {
            count(s.get("max_concurrency"))
        }
        "guidellm" => {
            let strategy = s.get("strategy")?;
            match strategy.get("type_").and_then(Value::as_str)? {
                "synchronous" => Some(1),
                "concurrent" => count(strategy.get("streams")),
                _ => None,
            }
        }
        "aiperf" => {
            let phases = s.get("phases")?.as_array()?;
            let profiling = phases
                .iter()
                .find(|p| p.get("kind").and_then(Value::as_str) == Some("profiling"))?;
            (profiling.get("type").and_then(Value::as_str) == Some("concurrency")
                && no_rate(profiling.get("request_rate")))
            .then(|| count(profiling.get("concurrency")))
            .flatten()
        }
        _ => None,
    }
}

/// The fixed input and output lengths an imported run asked for, where the tool's settings say
/// (bench_serving's `random_input_len` and `random_output_len` at a range ratio of 1).
pub fn fixed_lengths(imported: &crate::results::manifest::Imported) -> Option<(u32, u32)> {
    let s = &imported.settings;
    let fixed = s
        .get("random_range_ratio")
        .and_then(serde_json::Value::as_f64)
        .is_none_or(|r| r == 1.0);
    fixed
        .then(|| {
            Some((
                count(s.get("random_input_len"))?,
                count(s.get("random_output_len"))?,
            ))
        })
        .flatten()
}

/// A setting that counts something: a whole number of at least 1.
fn count(v: Option<&serde_json::Value>) -> Option<u32> {
    v.and_then(serde_json::Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v >= 1)
}

/// The tool whose results a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// SGLang's `bench_serving` (`--output-details`): one JSON line per run.
    #[value(name = "bench_serving")]
    BenchServing,
    /// vLLM's `bench serve --save-detailed`: one JSON document.
    Vllm,
    /// guidellm's benchmarks JSON.
    Guidellm,
    /// AIPerf's `profile_export.jsonl`: one record per request.
    Aiperf,
}

impl Source {
    /// The name used on the command line and in manifests.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::BenchServing => "bench_serving",
            Self::Vllm => "vllm",
            Self::Guidellm => "guidellm",
            Self::Aiperf => "aiperf",
        }
    }
}

/// An input file that cannot be imported: the file, and where in it (line, field), in the message.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ImportError {
    /// The file.
    pub file: String,
    /// What is wrong, and where.
    pub message: String,
}

impl ImportError {
    /// An error about `file`.
    pub fn new(file: &str, message: impl Into<String>) -> Self {
        Self {
            file: file.to_string(),
            message: message.into(),
        }
    }
}

/// How a source defines the time per output token, which the imported records keep: the records
/// cannot say more than the file, and the check compares like with like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TpotDef {
    /// (end of the request - first token) / (output tokens - 1): bench_serving, vLLM, AIPerf.
    EndMinusFirst,
    /// (last token - first token) / (output tokens - 1): guidellm's inter-token latency.
    LastMinusFirst,
}

impl TpotDef {
    /// In words, for the check's printout.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::EndMinusFirst => "(e2e - ttft) / (output - 1)",
            Self::LastMinusFirst => "(last token - first token) / (output - 1)",
        }
    }
}

/// One request as a source file gives it, in seconds after the run's origin.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// When the tool meant to send it (its schedule), when the file says.
    pub scheduled_s: Option<f64>,
    /// When it was sent, when the file says.
    pub sent_s: Option<f64>,
    /// First output after the send.
    pub ttft_s: f64,
    /// Gaps between successive output chunks after the first.
    pub gaps_s: Vec<f64>,
    /// Tokens in each output chunk, when the file says (its length is `gaps_s.len() + 1`).
    pub chunk_tokens: Option<Vec<u32>>,
    /// End of the request after the send, when the file says.
    pub e2e_s: Option<f64>,
    /// Prompt tokens.
    pub input_len: Option<u32>,
    /// Output tokens.
    pub output_len: u32,
    /// The tool's error, for a failed request.
    pub error: Option<String>,
}

/// One run of a tool: its requests, what the file says about it, and its own summary.
#[derive(Clone, Debug)]
pub struct Run {
    /// The tool.
    pub source: Source,
    /// The tool's version, when the file says.
    pub version: Option<String>,
    /// The wire dialect the tool spoke.
    pub dialect: Dialect,
    /// The run's origin (its first scheduled start), unix ms, and where that came from.
    pub start_unix_ms: u64,
    /// Where `start_unix_ms` came from.
    pub start_from: &'static str,
    /// The tool's own settings (flags and workload) as the file has them.
    pub settings: serde_json::Value,
    /// The server's URL, model and reported info, when the file has them (keys removed).
    pub url: Option<String>,
    /// The model name.
    pub model: Option<String>,
    /// The server's own description (`/server_info`), when the tool saved it.
    pub server_info: Option<serde_json::Value>,
    /// The requests, in the file's order.
    pub requests: Vec<Request>,
    /// How per-chunk token counts are known.
    pub attribution: TokenAttribution,
    /// The source's definition of the time per output token.
    pub tpot: TpotDef,
    /// When the file has no start times: the closed loop they are rebuilt as (its concurrency).
    pub rebuilt_schedule: Option<Rebuilt>,
    /// The tool's own summary, when the file has one.
    pub summary: Option<check::ToolSummary>,
    /// Why the tool's summary and the rebuilt records may differ, by figure.
    pub notes: check::Notes,
    /// A summary-only run's figures (it has no requests then).
    pub figures: Option<summary::Figures>,
}

/// The schedule of a file without start times, rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Rebuilt {
    /// Requests in flight at once (the tool's `--max-concurrency`; all of them when it had none).
    pub concurrency: usize,
}

/// One imported file: its runs.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The file as given.
    pub file: String,
    /// Its runs (bench_serving appends a line per run; the others hold one).
    pub runs: Vec<Run>,
}

/// Which tool wrote `text`, from its content: guidellm's document has `benchmarks`, vLLM's has
/// `date` and `start_times`, bench_serving's lines have `ttfts` or its summary fields, AIPerf's
/// lines have `metadata` and `metrics`.
pub fn detect(file: &str, text: &str) -> Result<Source, ImportError> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| ImportError::new(file, "the file is empty"))?;
    // A JSONL file's first line, else the whole (pretty-printed) document.
    let doc = match json::parse(file, Some(1), first) {
        Ok(v) => v,
        Err(_) => json::parse(file, None, text)?,
    };
    let has = |k: &str| doc.get(k).is_some();
    if has("benchmarks") {
        Ok(Source::Guidellm)
    } else if has("metadata") && (has("metrics") || has("responses")) {
        Ok(Source::Aiperf)
    } else if has("date") && (has("start_times") || has("endpoint_type")) {
        Ok(Source::Vllm)
    } else if has("ttfts") || (has("backend") && has("mean_ttft_ms")) {
        Ok(Source::BenchServing)
    } else if has("aiperf_version") || has("benchmark_duration") {
        Ok(Source::Aiperf)
    } else {
        Err(ImportError::new(
            file,
            "unknown format: not bench_serving, vLLM bench serve, guidellm or AIPerf results (give --from to name it)",
        ))
    }
}

/// Read one file of `from` (detected when `None`).
pub fn read(path: &Path, from: Option<Source>) -> Result<Imported, ImportError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| ImportError::new(&file, format!("cannot read: {e}")))?;
    let source = match from {
        Some(s) => s,
        None => detect(&file, &text)?,
    };
    let modified_ms = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let runs = match source {
        Source::BenchServing | Source::Vllm => {
            bench_serving::runs(&file, &text, source, modified_ms)?
        }
        Source::Guidellm => guidellm::runs(&file, &text)?,
        Source::Aiperf => aiperf::runs(path, &file, &text)?,
    };
    if runs
        .iter()
        .all(|r| r.requests.is_empty() && r.figures.is_none())
    {
        return Err(ImportError::new(&file, "no requests in the file"));
    }
    Ok(Imported { file, runs })
}

/// The manifest line of an imported run: where it came from, and what the file says of the tool's
/// settings and the server.
pub fn manifest(
    imported: &Imported,
    run: &Run,
    index: usize,
    command: &str,
) -> crate::results::Manifest {
    use crate::results::manifest::{self, Manifest, StampSource};
    Manifest {
        command: command.to_string(),
        client_version: env!("CARGO_PKG_VERSION").to_string(),
        kind: Some(manifest::KIND_LOAD.to_string()),
        imported: Some(manifest::Imported {
            tool: run.source.as_str().to_string(),
            version: run.version.clone(),
            file: imported.file.clone(),
            run: index,
            start_from: run.start_from.to_string(),
            token_attribution: run.attribution.as_str().to_string(),
            tpot_definition: run.tpot.describe().to_string(),
            rebuilt_schedule: run
                .rebuilt_schedule
                .and_then(|r| serde_json::to_value(r).ok()),
            settings: scrub(run.settings.clone()),
            summary: run
                .figures
                .as_ref()
                .and_then(summary::Figures::to_value)
                .map(scrub),
        }),
        url: run.url.as_deref().map(crate::net::redact::redact_text),
        dialect: Some(run.dialect),
        model: run.model.as_deref().map(crate::net::redact::redact_text),
        server_info: run.server_info.clone().map(scrub),
        start_unix_ms: Some(run.start_unix_ms),
        stamping: Some(StampSource::Other("imported".to_string())),
        ..Manifest::default()
    }
}

/// `v` with its secrets redacted by the rules of the client's own manifests
/// ([`crate::net::redact`]): SGLang's `/server_info` carries its `api_key`, guidellm's backend
/// settings carry one, a tokenizer or server URL may carry `user:password@`.
fn scrub(mut v: serde_json::Value) -> serde_json::Value {
    crate::net::redact::redact_json(&mut v, None);
    v
}

/// The records of every run of every file, in order.
pub fn all_records(files: &[Imported]) -> Vec<Record> {
    files
        .iter()
        .flat_map(|f| f.runs.iter().enumerate().flat_map(|(i, r)| records(r, i)))
        .collect()
}

#[cfg(test)]
mod tests;
