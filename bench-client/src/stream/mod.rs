//! Streams: reads with their arrival instants in, a [`crate::trace::RequestTrace`] out. The
//! assembler runs the dialect's SSE framing and event decoding over each read; replays feed
//! recorded transcripts through the same assembler as a live run.

pub mod assemble;
pub mod replay;

pub use assemble::{attribute_by_event_count, StreamAssembler, TraceHead};
