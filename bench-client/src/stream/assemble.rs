//! Bytes with their arrival instants in, a [`RequestTrace`] out: SSE framing, the dialect's event
//! decoding and per-chunk token attribution, shared by live requests and replays.

use crate::api::{Decoded, StreamDecoder};
use crate::plan::RequestSpec;
use crate::trace::{Chunk, Dialect, RequestTrace, Stamps, StreamEnd, TokenAttribution};

use crate::api::output_ids::OutputIdsKeeper;
use crate::api::sse::SseDecoder;

/// Bytes-with-instants in, chunks out: the decoding shared by live requests and replays.
#[derive(Debug)]
pub struct StreamAssembler {
    sse: SseDecoder,
    decoder: StreamDecoder,
    /// Decoded events so far.
    pub chunks: Vec<Chunk>,
    /// Instant `[DONE]` arrived.
    pub done_ns: Option<u64>,
    /// Number of reads pushed.
    pub reads: u32,
    /// The output ids, when kept.
    output_ids: Option<OutputIdsKeeper>,
}

impl StreamAssembler {
    /// A fresh assembler for one stream of `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Self {
            sse: SseDecoder::new(),
            decoder: dialect.decoder(),
            chunks: Vec::new(),
            done_ns: None,
            reads: 0,
            output_ids: None,
        }
    }

    /// Also keep the stream's output token ids (for the trace's `output_ids`).
    pub fn keeping_output_ids(mut self, dialect: Dialect) -> Self {
        self.output_ids = Some(OutputIdsKeeper::new(dialect));
        self
    }

    /// Push one read that arrived at `at_ns`; returns true once `[DONE]` has been seen.
    pub fn push(&mut self, bytes: &[u8], at_ns: u64) -> bool {
        if self.done_ns.is_some() {
            return true;
        }
        self.reads += 1;
        let (decoder, chunks, done_ns) = (&mut self.decoder, &mut self.chunks, &mut self.done_ns);
        let ids = &mut self.output_ids;
        // Each event is decoded once, straight from the SSE decoder's buffer.
        self.sse.push_each(bytes, |_, data| {
            if done_ns.is_some() {
                return;
            }
            if let Some(k) = ids.as_mut() {
                k.push(data);
            }
            match decoder.decode(data, at_ns) {
                Decoded::Done => *done_ns = Some(at_ns),
                Decoded::Chunk(c) => chunks.push(c),
            }
        });
        done_ns.is_some()
    }

    /// Whether an event with output tokens has arrived.
    pub fn first_output_seen(&self) -> bool {
        self.chunks.iter().any(Chunk::carries_output)
    }

    /// Attribution over the stream so far.
    pub fn attribution(&self) -> TokenAttribution {
        self.decoder.attribution()
    }
}

/// The parts of a trace known before the response.
#[derive(Clone, Debug)]
pub struct TraceHead {
    /// Request id.
    pub rid: String,
    /// Dialect.
    pub dialect: Dialect,
    /// Prompt tokens sent (token-id prompts).
    pub prompt_tokens_sent: Option<u32>,
    /// Output tokens asked.
    pub max_tokens: u32,
}

impl TraceHead {
    /// The head of a trace for `spec`.
    pub fn of(spec: &RequestSpec, dialect: Dialect) -> Self {
        Self {
            rid: spec.rid.clone(),
            dialect,
            prompt_tokens_sent: spec.prompt.token_len(),
            max_tokens: spec.max_tokens,
        }
    }

    /// Complete the trace.
    pub fn finish(
        self,
        status: Option<u16>,
        headers_ns: Option<u64>,
        asm: Option<StreamAssembler>,
        end: StreamEnd,
        end_ns: u64,
    ) -> RequestTrace {
        let (mut chunks, done_ns, reads, mut attribution, output_ids) = match asm {
            Some(a) => {
                let attr = a.attribution();
                let ids = a.output_ids.and_then(OutputIdsKeeper::finish);
                (a.chunks, a.done_ns, a.reads, attr, ids)
            }
            None => (Vec::new(), None, 0, TokenAttribution::Unknown, None),
        };
        if attribution == TokenAttribution::Unknown && attribute_by_event_count(&mut chunks) {
            attribution = TokenAttribution::EventCount;
        }
        RequestTrace {
            rid: self.rid,
            dialect: self.dialect,
            prompt_tokens_sent: self.prompt_tokens_sent,
            max_tokens: self.max_tokens,
            status,
            headers_ns,
            reads,
            chunks,
            done_ns,
            end,
            end_ns,
            attribution,
            stamps: Stamps::Task,
            send_delay_ns: None,
            output_ids,
        }
    }
}

/// Per-chunk counts when the server reports only a final total: each event that carried text
/// carried at least one token, so when there are exactly as many such events as the reported
/// `completion_tokens`, each carried exactly one and every other event none. This is a proof from
/// the stream, not a guess; any other case stays `unknown`. Returns whether it applied.
pub fn attribute_by_event_count(chunks: &mut [Chunk]) -> bool {
    let total = chunks
        .iter()
        .rev()
        .find_map(|c| c.usage.as_ref().and_then(|u| u.completion_tokens));
    let is_text = |c: &Chunk| c.text_len > 0 && !c.role_only && !c.usage_only && c.error.is_none();
    let events = chunks.iter().filter(|c| is_text(c)).count();
    match total {
        Some(t) if t > 0 && u64::from(t) == events as u64 => {
            for c in chunks.iter_mut() {
                c.tokens = Some(u32::from(is_text(c)));
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_chunk(at_ns: u64, text_len: u32) -> Chunk {
        Chunk {
            at_ns,
            text_len,
            content_event: true,
            ..Chunk::default()
        }
    }

    #[test]
    fn one_token_per_event_is_proved_only_when_counts_match() {
        let usage = |n| crate::trace::Usage {
            completion_tokens: Some(n),
            ..Default::default()
        };
        // llama.cpp: one text event per token, then a final empty chunk with the total.
        let mut chunks = vec![text_chunk(1, 3), text_chunk(2, 4), text_chunk(3, 2)];
        chunks.push(Chunk {
            at_ns: 4,
            tokens: Some(3),
            usage: Some(usage(3)),
            finish_reason: Some("length".into()),
            content_event: true,
            ..Chunk::default()
        });
        assert!(attribute_by_event_count(&mut chunks));
        let counts: Vec<_> = chunks.iter().map(|c| c.tokens).collect();
        assert_eq!(counts, vec![Some(1), Some(1), Some(1), Some(0)]);

        // One event carried two tokens (a split UTF-8 character): counts stay unknown.
        let mut chunks = vec![text_chunk(1, 3), text_chunk(2, 4)];
        chunks.push(Chunk {
            at_ns: 4,
            usage: Some(usage(3)),
            ..Chunk::default()
        });
        assert!(!attribute_by_event_count(&mut chunks));
        assert!(chunks[0].tokens.is_none());
    }
}
