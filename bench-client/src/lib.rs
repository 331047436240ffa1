//! Streaming LLM-serving benchmark client: one streaming request per measurement, TTFT and prefill
//! rate from the first output chunk, decode rate from the chunks after it, per context length.
//!
//! Pipeline: `prompt` -> `client` (the only network stage) -> `trace` -> `measure` (pure) ->
//! `record` (JSONL) -> `report`. `replay` feeds recorded or constructed byte streams through the
//! same decoding as a live run.

pub mod api;
pub mod client;
#[cfg(feature = "embedded-mock")]
pub mod embedded;
pub mod load;
pub mod measure;
pub mod prompt;
pub mod record;
pub mod replay;
pub mod report;
pub mod sse;
pub mod sweep;
#[cfg(feature = "tokenizer")]
pub mod tokenizer;
pub mod trace;
pub mod wire;

pub use api::Dialect;
pub use client::{RequestSpec, Target, Timeouts};
pub use prompt::Prompt;
pub use trace::{Chunk, RequestTrace, StreamEnd};
