//! Streaming LLM-serving benchmark client: one streaming request per measurement, TTFT and prefill
//! rate from the first output chunk, decode rate from the chunks after it, per context length.
//!
//! The modules are the pipeline's stages; each imports only the stages before it:
//! - `plan`: what to send and when (request specs, prompts, contexts, schedules, workloads);
//! - `api`: the wire dialects (request bodies, SSE framing, decoding events into chunks);
//! - `trace`: what one request produced, as plain data;
//! - `stream`: reads with their instants in, a trace out (also replays recorded transcripts);
//! - `net`: the only network I/O (send and stamp a request, probes, `/metrics` scrapes);
//! - `measure`: the only arithmetic (every per-request number, percentiles), pure functions;
//! - `results`: the JSONL results file and its manifest;
//! - `report`: statistics over records, and one exporter per format;
//! - `drive`: sweep and load runs end to end;
//! - `capacity`: the capacity search end to end, its report and its formats;
//! - `twin`: results files in, the mock preset that reproduces them out (calibration, the table
//!   twin); it runs nothing;
//! - `import`: other tools' result files as records;
//! - `cli`: flags into validated configs.

pub mod api;
pub mod capacity;
pub mod cli;
pub mod drive;
pub mod import;
pub mod measure;
pub mod net;
pub mod plan;
pub mod report;
pub mod results;
pub mod stream;
pub mod trace;
#[cfg(feature = "embedded-mock")]
pub mod twin;

pub use net::Target;
pub use plan::{Prompt, RequestSpec, Timeouts};
pub use trace::{Chunk, Dialect, RequestTrace, StreamEnd};
