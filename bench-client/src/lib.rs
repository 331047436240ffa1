//! Streaming LLM-serving benchmark client: one streaming request per measurement, TTFT and prefill
//! rate from the first output chunk, decode rate from the chunks after it, per context length.
//!
//! The modules are the pipeline's stages, in order:
//! `plan` (what to send, when) -> `api` (wire dialects) -> `net` (the only I/O) -> `stream`
//! (SSE, assembling a trace, replay) -> `trace` (plain data) -> `measure` (the only arithmetic)
//! -> `results` (the JSONL file) -> `report` (statistics and exporters) -> `drive` (sweep and
//! load runs) -> `cli` (flags into configs). A stage imports only the stages before it, and
//! `trace` imports none.

pub mod api;
pub mod cli;
pub mod drive;
pub mod measure;
pub mod net;
pub mod plan;
pub mod report;
pub mod results;
pub mod stream;
pub mod trace;

pub use net::Target;
pub use plan::{Prompt, RequestSpec, Timeouts};
pub use trace::{Chunk, Dialect, RequestTrace, StreamEnd};
