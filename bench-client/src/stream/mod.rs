//! Streams: bytes with their arrival instants in, a [`crate::trace::RequestTrace`] out. SSE
//! framing, assembling decoded events into a trace, and replaying recorded transcripts through
//! the same decoding as a live run.

pub mod assemble;
pub mod replay;

pub use assemble::{attribute_by_event_count, StreamAssembler, TraceHead};
