//! Request traces for `load --trace`: Mooncake JSONL (prompts as 512-token blocks named by
//! `hash_ids`), the Azure LLM inference trace CSV and the project's own JSONL, told apart by their
//! content. A trace is read once and checked line by line before anything is sent; the planner then
//! builds each request's prompt from it without I/O ([`Trace::request`]).

mod azure;
mod blocks;
mod line;
mod mooncake;
pub mod native;

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::plan::prompt::PromptGen;
use crate::plan::workload::PlannedRequest;

pub use line::TraceError;
pub use native::TraceEntry;

/// Tokens per Mooncake hash id, before `--trace-scale` (the release's block size).
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// A trace file's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// JSONL of `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// CSV with the columns `TIMESTAMP` (date and time), `ContextTokens`, `GeneratedTokens`.
    Azure,
    /// JSONL of `offset_ms`, `input_len`, `output_len` and an optional `prefix_group`.
    Native,
}

/// How a trace is read and replayed: the `--trace-*` flags.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOptions {
    /// The format; `None`: told from the content.
    pub format: Option<TraceFormat>,
    /// Mooncake: tokens per hash id, before `scale`.
    pub block_size: u32,
    /// Arrivals this many times faster.
    pub speedup: f64,
    /// Only the first N requests (the lines after them are not read).
    pub limit: Option<u64>,
    /// Every length, the block size and the native `--prefix-len` times this, rounded, at least 1.
    pub scale: f64,
    /// Native: the prefix length of a `prefix_group`, before `scale`.
    pub prefix_len: u32,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            format: None,
            block_size: DEFAULT_BLOCK_SIZE,
            speedup: 1.0,
            limit: None,
            scale: 1.0,
            prefix_len: 0,
        }
    }
}

impl TraceOptions {
    /// Checks the flags' values (each error names its flag).
    pub fn validate(&self) -> Result<(), String> {
        if !self.speedup.is_finite() || self.speedup <= 0.0 {
            return Err(format!(
                "--trace-speedup must be a positive number, got {}",
                crate::plan::compact(self.speedup)
            ));
        }
        if !self.scale.is_finite() || self.scale <= 0.0 {
            return Err(format!(
                "--trace-scale must be a positive number, got {}",
                crate::plan::compact(self.scale)
            ));
        }
        if self.block_size == 0 {
            return Err("--trace-block-size must be at least 1".into());
        }
        let most = crate::plan::MAX_TOKENS;
        if u64::from(self.block_size) > u64::from(most) || self.prefix_len > most {
            return Err(format!(
                "--trace-block-size and --prefix-len: at most {most} tokens"
            ));
        }
        if self.limit == Some(0) {
            return Err("--trace-limit must be at least 1".into());
        }
        Ok(())
    }

    /// `n` tokens times the scale, rounded, at least 1; `None` past [`crate::plan::MAX_TOKENS`].
    fn scaled(&self, n: u64) -> Option<u32> {
        let x = (n as f64 * self.scale).round().max(1.0);
        (x <= f64::from(crate::plan::MAX_TOKENS)).then_some(x as u32)
    }
}

/// Where a request's prompt starts; the rest is the request's own tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prefix {
    /// Nothing shared.
    Own,
    /// Native: the `prefix_len` tokens of a prefix group.
    Group(u32),
    /// Mooncake: `len` blocks from `start` in [`Trace::blocks`]; `fill`: the first-token rank of the
    /// request's own tokens after them, when the blocks do not cover the input.
    Blocks {
        start: usize,
        len: usize,
        fill: Option<u32>,
    },
}

/// One request of a trace, its lengths scaled.
#[derive(Clone, Debug, PartialEq)]
struct TraceRequest {
    /// Arrival, ns from the first request's (native: from the start of the run), before the speedup.
    offset_ns: u64,
    input_len: u32,
    output_len: u32,
    prefix: Prefix,
}

/// A trace read and checked: its requests, their arrivals and how their prompts are built.
#[derive(Clone, PartialEq)]
pub struct Trace {
    source: String,
    format: TraceFormat,
    block_size: u32,
    prefix_len: u32,
    speedup: f64,
    limit: Option<u64>,
    scale: f64,
    requests: Vec<TraceRequest>,
    blocks: Vec<blocks::Block>,
}

/// The settings first, so that the manifest's `workload` (cut at 400 characters) shows them; the
/// requests are counted, not listed.
impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("format", &self.format)
            .field("requests", &self.requests.len())
            .field("block_size", &self.block_size)
            .field("prefix_len", &self.prefix_len)
            .field("speedup", &self.speedup)
            .field("limit", &self.limit)
            .field("scale", &self.scale)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// A trace's settings and size, as a run's manifest records them ([`Trace::settings`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceSettings {
    /// The file, as given.
    pub source: String,
    /// Its format.
    pub format: TraceFormat,
    /// Requests read (after `--trace-limit`).
    pub requests: u64,
    /// Tokens per block after the scale.
    pub block_size: u32,
    /// Shared prefix tokens after the scale (0: none).
    pub prefix_len: u32,
    /// `--trace-speedup`.
    pub speedup: f64,
    /// `--trace-limit`.
    pub limit: Option<u64>,
    /// `--trace-scale`.
    pub scale: f64,
}

/// One request as a format's reader gives it: lengths as written, ids of its blocks (Mooncake).
#[derive(Clone, Debug, PartialEq)]
struct RawRequest {
    line: u64,
    /// ns from the first request (native: from the start of the run).
    offset_ns: u64,
    input_len: u64,
    output_len: u64,
    prefix_group: Option<u32>,
    hash_ids: Vec<u64>,
}

impl Trace {
    /// Reads `path` once and parses it ([`Trace::parse`]); an unreadable file is an error too.
    pub fn read(path: &Path, opts: &TraceOptions) -> Result<Self, TraceError> {
        let source = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| TraceError::file(&source, format!("cannot be read: {e}")))?;
        Self::parse(&text, &source, opts)
    }

    /// Parses a trace's text; `source` names it in errors. Every error names the line and the field.
    pub fn parse(text: &str, source: &str, opts: &TraceOptions) -> Result<Self, TraceError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let format = match opts.format {
            Some(f) => f,
            None => detect(text, source)?,
        };
        let limit = opts.limit.unwrap_or(u64::MAX);
        let raw = match format {
            TraceFormat::Mooncake => mooncake::parse(text, source, limit)?,
            TraceFormat::Azure => azure::parse(text, source, limit)?,
            TraceFormat::Native => native::parse(text, source, limit)?,
        };
        if raw.is_empty() {
            return Err(TraceError::file(source, "holds no requests"));
        }
        let block_size = opts.scaled(u64::from(opts.block_size)).ok_or_else(|| {
            TraceError::file(source, "--trace-scale makes the block size too large")
        })?;
        let prefix_len = if opts.prefix_len == 0 {
            0
        } else {
            opts.scaled(u64::from(opts.prefix_len))
                .unwrap_or(crate::plan::MAX_TOKENS)
        };
        let mut tree = blocks::BlockTree::default();
        let mut blocks = Vec::new();
        let mut requests = Vec::with_capacity(raw.len());
        for r in raw {
            let too_long = |field: &'static str, n: u64| {
                TraceError::field(
                    source,
                    r.line,
                    field,
                    format!(
                        "{n} tokens x --trace-scale {} is more than {} (a prompt is built whole)",
                        crate::plan::compact(opts.scale),
                        crate::plan::MAX_TOKENS
                    ),
                )
            };
            let (at_field, in_field, out_field, from) = match format {
                TraceFormat::Mooncake => (
                    "timestamp",
                    "input_length",
                    "output_length",
                    "the first request",
                ),
                TraceFormat::Azure => (
                    "TIMESTAMP",
                    "ContextTokens",
                    "GeneratedTokens",
                    "the first request",
                ),
                TraceFormat::Native => (
                    "offset_ms",
                    "input_len",
                    "output_len",
                    "the start of the run",
                ),
            };
            // A replay is a run: it lasts at most as long as a flag may say (an offset read past
            // the ns clock is held at its end, and is past this too).
            let replay_s = r.offset_ns as f64 / 1e9 / opts.speedup;
            if replay_s > crate::plan::MAX_FLAG_SECS {
                let sped = if opts.speedup == 1.0 {
                    String::new()
                } else {
                    format!(" at --trace-speedup {}", crate::plan::compact(opts.speedup))
                };
                return Err(TraceError::field(
                    source,
                    r.line,
                    at_field,
                    format!(
                        "arrives more than 30 days ({} s, the longest a run may last) after {from}{sped}: is it in ms? (--trace-limit or --trace-speedup shortens a long trace)",
                        crate::plan::MAX_FLAG_SECS
                    ),
                ));
            }
            let input_len = opts
                .scaled(r.input_len)
                .ok_or_else(|| too_long(in_field, r.input_len))?;
            let output_len = opts
                .scaled(r.output_len)
                .ok_or_else(|| too_long(out_field, r.output_len))?;
            let prefix = match (format, r.prefix_group) {
                (TraceFormat::Mooncake, _) => {
                    let start = blocks.len();
                    let fill = tree.place(&r.hash_ids, input_len, block_size, &mut blocks);
                    Prefix::Blocks {
                        start,
                        len: blocks.len() - start,
                        fill,
                    }
                }
                (_, Some(g)) => {
                    if input_len < prefix_len {
                        return Err(TraceError::field(
                            source,
                            r.line,
                            in_field,
                            format!("{input_len} tokens, fewer than the --prefix-len {prefix_len} of its prefix group"),
                        ));
                    }
                    Prefix::Group(g)
                }
                (_, None) => Prefix::Own,
            };
            requests.push(TraceRequest {
                offset_ns: r.offset_ns,
                input_len,
                output_len,
                prefix,
            });
        }
        Ok(Self {
            source: source.to_string(),
            format,
            block_size,
            prefix_len,
            speedup: opts.speedup,
            limit: opts.limit,
            scale: opts.scale,
            requests,
            blocks,
        })
    }

    /// What the trace was read and replayed with, and how many requests it holds.
    pub fn settings(&self) -> TraceSettings {
        TraceSettings {
            source: self.source.clone(),
            format: self.format,
            requests: self.requests.len() as u64,
            block_size: self.block_size,
            prefix_len: self.prefix_len,
            speedup: self.speedup,
            limit: self.limit,
            scale: self.scale,
        }
    }

    /// The format read.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    /// Requests.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether there are none (never, for a trace that was read).
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Tokens per block after the scale.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Each request's arrival, ns from the start of the run, sped up.
    pub fn offsets_ns(&self) -> Vec<u64> {
        self.requests
            .iter()
            .map(|r| (r.offset_ns as f64 / self.speedup).round() as u64)
            .collect()
    }

    /// The prefix-cache hits the trace's own block ids predict when its requests are served in
    /// order by a radix cache that evicts nothing: each request's longest prefix shared with an
    /// earlier prompt (its common leading blocks, cut to the shorter prompt), at most its input
    /// less one token (the last is always computed, as SGLang matches), rounded down to whole
    /// pages of `page_size` tokens. Returns (cached, prompt) tokens summed; `None` for a trace
    /// without block ids.
    pub fn predicted_hits(&self, page_size: u32) -> Option<(u64, u64)> {
        if self.format != TraceFormat::Mooncake {
            return None;
        }
        let page = u64::from(page_size.max(1));
        let bs = u64::from(self.block_size);
        // Per block id (numbered by `slots`): the most tokens an earlier prompt holds through the
        // end of that block.
        let mut slots = blocks::IdSlots::default();
        let mut through: Vec<u64> = Vec::new();
        let (mut cached, mut prompt) = (0u64, 0u64);
        for r in &self.requests {
            let len = u64::from(r.input_len);
            prompt += len;
            let Prefix::Blocks { start, len: n, .. } = r.prefix else {
                continue;
            };
            let ids = self.blocks.get(start..start + n).unwrap_or_default();
            let mut shared = 0u64;
            for (k, b) in ids.iter().enumerate() {
                let Some(held) = slots.get(b.id()).map(|i| through[i]) else {
                    break;
                };
                let end = (k as u64 + 1) * bs;
                shared = held.min(end).min(len);
                if held < end {
                    break;
                }
            }
            let hit = shared.min(len.saturating_sub(1));
            cached += hit / page * page;
            for (k, b) in ids.iter().enumerate() {
                let held = ((k as u64 + 1) * bs).min(len);
                let (i, new) = slots.number(b.id());
                if new {
                    through.push(0);
                }
                through[i] = through[i].max(held);
            }
        }
        Some((cached, prompt))
    }

    /// Each request's (input, output) tokens, scaled.
    pub fn lengths(&self) -> Vec<(u32, u32)> {
        self.requests
            .iter()
            .map(|r| (r.input_len, r.output_len))
            .collect()
    }

    /// Request `index`: Mooncake blocks from `shared` (the same tokens for an id in every request),
    /// a native group's prefix from `shared`, the request's own tokens from `own`; `None` past the end.
    pub fn request(
        &self,
        index: u64,
        own: &PromptGen,
        shared: &PromptGen,
    ) -> Option<PlannedRequest> {
        let r = self.requests.get(usize::try_from(index).ok()?)?;
        let (prompt, group) = match r.prefix {
            Prefix::Own => (own.token_ids(r.input_len, index), None),
            Prefix::Group(g) => {
                let mut p = shared.token_ids(self.prefix_len, u64::from(g));
                p.extend(own.token_ids(r.input_len - self.prefix_len, index));
                (p, Some(g))
            }
            Prefix::Blocks { start, len, fill } => {
                let used = self.blocks.get(start..start + len).unwrap_or_default();
                let p = blocks::build(
                    used,
                    fill,
                    r.input_len,
                    self.block_size,
                    shared,
                    own.seed,
                    index,
                );
                (p, None)
            }
        };
        Some(PlannedRequest {
            index,
            prompt,
            output_len: r.output_len,
            prefix_group: group,
        })
    }
}

/// The format of a trace's text: JSON lines with Mooncake's or the native keys, or a CSV header with
/// Azure's columns.
fn detect(text: &str, source: &str) -> Result<TraceFormat, TraceError> {
    let Some((i, first)) = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) else {
        return Err(TraceError::file(source, "holds no requests"));
    };
    let line = i as u64 + 1;
    let unknown = || {
        TraceError::line(
            source,
            line,
            "not a known trace format (Mooncake JSONL with hash_ids, Azure CSV with TIMESTAMP, ContextTokens, GeneratedTokens, or native JSONL with offset_ms); --trace-format names one",
        )
    };
    if first.trim_start().starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(first)
            .map_err(|e| TraceError::line(source, line, line::json_message(&e)))?;
        let has = |k: &str| v.get(k).is_some();
        if has("hash_ids") || has("input_length") {
            Ok(TraceFormat::Mooncake)
        } else if has("offset_ms") || has("input_len") {
            Ok(TraceFormat::Native)
        } else {
            Err(unknown())
        }
    } else {
        let cols: Vec<&str> = first.split(',').map(str::trim).collect();
        if ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
            .iter()
            .all(|c| cols.contains(c))
        {
            Ok(TraceFormat::Azure)
        } else {
            Err(unknown())
        }
    }
}

#[cfg(test)]
mod tests;
