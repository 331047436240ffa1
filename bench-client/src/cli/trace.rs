//! `load --trace` and its `--trace-*` flags: which file, how it is read and replayed.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::exit::CliError;
use crate::plan::trace::{Trace, TraceFormat, TraceOptions, DEFAULT_BLOCK_SIZE};

#[derive(Args, Debug)]
pub(super) struct TraceArgs {
    /// Replay a trace: Mooncake JSONL (hash_ids), Azure LLM inference CSV, or native JSONL of
    /// {"offset_ms", "input_len", "output_len"[, "prefix_group"]}; the format is told from the content.
    #[arg(long)]
    pub(super) trace: Option<PathBuf>,
    /// The trace's format, instead of telling it from the content.
    #[arg(long, value_enum, requires = "trace")]
    trace_format: Option<TraceFormat>,
    /// Mooncake: tokens per hash id, before --trace-scale [default: 512].
    #[arg(long, requires = "trace")]
    trace_block_size: Option<u32>,
    /// Replay the arrivals X times faster (2: twice the rate).
    #[arg(long, requires = "trace")]
    trace_speedup: Option<f64>,
    /// Replay only the first N requests (the lines after them are not read).
    #[arg(long, requires = "trace")]
    trace_limit: Option<u64>,
    /// Every length and the block size times F, rounded, at least 1 (0.03125: a 128k-context trace
    /// for a 4k-context server).
    #[arg(long, requires = "trace")]
    trace_scale: Option<f64>,
}

impl TraceArgs {
    /// The trace, read and checked, when `--trace` is given. Bad flags are usage errors; a file that
    /// cannot be read or holds a bad line is a data error naming the file, line and field.
    pub(super) fn read(&self, prefix_len: u32) -> Result<Option<Arc<Trace>>, CliError> {
        let Some(path) = &self.trace else {
            // clap's `requires` lets a flag through when --trace would conflict with another flag
            // given (--concurrency), so the rule is kept here too.
            let given = [
                ("--trace-format", self.trace_format.is_some()),
                ("--trace-block-size", self.trace_block_size.is_some()),
                ("--trace-speedup", self.trace_speedup.is_some()),
                ("--trace-limit", self.trace_limit.is_some()),
                ("--trace-scale", self.trace_scale.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                return Err(CliError::Usage(anyhow::anyhow!(
                    "{flag} applies to --trace FILE, which is not given"
                )));
            }
            return Ok(None);
        };
        let opts = TraceOptions {
            format: self.trace_format,
            block_size: self.trace_block_size.unwrap_or(DEFAULT_BLOCK_SIZE),
            speedup: self.trace_speedup.unwrap_or(1.0),
            limit: self.trace_limit,
            scale: self.trace_scale.unwrap_or(1.0),
            prefix_len,
        };
        opts.validate()
            .map_err(|e| CliError::Usage(anyhow::Error::msg(e)))?;
        let trace = Trace::read(path, &opts).map_err(|e| CliError::Data(e.into()))?;
        let usage = |m: &str| Err(CliError::Usage(anyhow::Error::msg(m.to_string())));
        match trace.format() {
            TraceFormat::Mooncake if prefix_len > 0 => {
                usage("--prefix-len: a Mooncake trace's hash_ids say which prefixes are shared")
            }
            TraceFormat::Azure if prefix_len > 0 => {
                usage("--prefix-len: an Azure trace has no prefix groups")
            }
            TraceFormat::Azure | TraceFormat::Native if self.trace_block_size.is_some() => {
                usage("--trace-block-size applies to Mooncake traces (hash_ids) only")
            }
            _ => Ok(Some(Arc::new(trace))),
        }
    }
}
