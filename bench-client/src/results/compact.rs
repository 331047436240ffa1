//! A trace as a results file holds it (schema 2): the chunks as columns, one array per per-chunk
//! field, and the fields that seldom change (usage, server timing, finish reasons, errors, flags)
//! only at the chunks where they change. Reading also takes schema 1's list of chunk objects; both
//! read back to the same [`RequestTrace`].
//!
//! Usage "changes" where it differs from its prediction: the previous chunk's usage with
//! `completion_tokens` advanced by this chunk's token count (a cumulative counter moves every
//! event, and is stored only when it moves otherwise).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use crate::trace::{Chunk, Dialect, RequestTrace, ServerTiming, Stamps, StreamEnd};
use crate::trace::{TokenAttribution, Usage};

/// The chunks of one trace, column by column.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Columns {
    /// The first chunk's `at_ns`, then each chunk's difference from the one before (wrapping, so
    /// any sequence of instants reads back exactly).
    at_ns: Vec<i64>,
    tokens: Column<Option<u32>>,
    text_len: Column<u32>,
    /// `[chunk, usage]` where the usage differs from its prediction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    usage: Vec<(u32, Option<Usage>)>,
    /// `[chunk, timing]` where the server timing differs from the chunk before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    server_timing: Vec<(u32, Option<ServerTiming>)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    finish_reason: Vec<(u32, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    error: Vec<(u32, String)>,
    /// Indices of the chunks with the flag set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    role_only: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    usage_only: Vec<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    content_event: Vec<u32>,
}

/// A per-chunk column: one value per chunk, or a single value that every chunk has (a server that
/// streams one token per event gives `"tokens": 1`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Column<T> {
    Each(Vec<T>),
    All(T),
}

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column::Each(Vec::new())
    }
}

impl<T: PartialEq + Clone> Column<T> {
    fn of(values: Vec<T>) -> Self {
        match values.first() {
            Some(v) if values.len() > 1 && values.iter().all(|x| x == v) => Column::All(v.clone()),
            _ => Column::Each(values),
        }
    }

    /// The column as `n` values; `None` when it holds another number.
    fn into_values(self, n: usize) -> Option<Vec<T>> {
        match self {
            Column::Each(v) => (v.len() == n).then_some(v),
            Column::All(v) => Some(vec![v; n]),
        }
    }

    fn len_or(&self, n: usize) -> usize {
        match self {
            Column::Each(v) => v.len(),
            Column::All(_) => n,
        }
    }
}

fn predict(prev: Option<&Usage>, tokens: Option<u32>) -> Option<Usage> {
    prev.map(|u| Usage {
        completion_tokens: u
            .completion_tokens
            .map(|c| c.wrapping_add(tokens.unwrap_or(0))),
        ..u.clone()
    })
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl Columns {
    fn of(chunks: &[Chunk]) -> Self {
        let n = chunks.len();
        let mut c = Columns {
            at_ns: Vec::with_capacity(n),
            ..Columns::default()
        };
        let mut tokens = Vec::with_capacity(n);
        let mut text_len = Vec::with_capacity(n);
        let mut prev_at = 0u64;
        let mut prev_usage: Option<&Usage> = None;
        let mut prev_timing: Option<&ServerTiming> = None;
        for (i, ch) in chunks.iter().enumerate() {
            let k = index(i);
            c.at_ns.push(ch.at_ns.wrapping_sub(prev_at) as i64);
            prev_at = ch.at_ns;
            tokens.push(ch.tokens);
            text_len.push(ch.text_len);
            if predict(prev_usage, ch.tokens).as_ref() != ch.usage.as_ref() {
                c.usage.push((k, ch.usage.clone()));
            }
            prev_usage = ch.usage.as_ref();
            if ch.server_timing.as_deref() != prev_timing {
                c.server_timing
                    .push((k, ch.server_timing.as_deref().copied()));
            }
            prev_timing = ch.server_timing.as_deref();
            if let Some(f) = &ch.finish_reason {
                c.finish_reason.push((k, f.to_string()));
            }
            if let Some(e) = &ch.error {
                c.error.push((k, e.to_string()));
            }
            for (set, list) in [
                (ch.role_only, &mut c.role_only),
                (ch.usage_only, &mut c.usage_only),
                (ch.content_event, &mut c.content_event),
            ] {
                if set {
                    list.push(k);
                }
            }
        }
        c.tokens = Column::of(tokens);
        c.text_len = Column::of(text_len);
        c
    }

    fn into_chunks<E: de::Error>(mut self) -> Result<Vec<Chunk>, E> {
        let n = self.at_ns.len();
        let (tokens_n, text_n) = (self.tokens.len_or(n), self.text_len.len_or(n));
        let unequal = || {
            E::custom(format!(
                "chunk columns of unequal length: at_ns {n}, tokens {tokens_n}, text_len {text_n}"
            ))
        };
        let (Some(tokens), Some(text_len)) = (
            std::mem::take(&mut self.tokens).into_values(n),
            std::mem::take(&mut self.text_len).into_values(n),
        ) else {
            return Err(unequal());
        };
        let mut chunks: Vec<Chunk> = Vec::with_capacity(n);
        let mut at = 0u64;
        for (d, (tokens, text_len)) in self.at_ns.iter().zip(tokens.into_iter().zip(text_len)) {
            at = at.wrapping_add(*d as u64);
            chunks.push(Chunk {
                at_ns: at,
                tokens,
                text_len,
                ..Chunk::default()
            });
        }
        let at_chunk = |k: u32| -> Result<usize, E> {
            usize::try_from(k)
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| E::custom(format!("chunk index {k} out of range ({n} chunks)")))
        };
        // Sparse columns list their chunks in order; a value holds until the next entry.
        let mut usage = self.usage.into_iter().peekable();
        let mut timing = self.server_timing.into_iter().peekable();
        for i in 0..n {
            let prev = i.checked_sub(1).and_then(|p| chunks[p].usage.clone());
            chunks[i].usage = match usage.next_if(|(k, _)| *k as usize == i) {
                Some((_, u)) => u,
                None => predict(prev.as_ref(), chunks[i].tokens),
            };
            // A timing carried from the chunk before is shared with it, not copied.
            let prev_t = i
                .checked_sub(1)
                .and_then(|p| chunks[p].server_timing.clone());
            chunks[i].server_timing = match timing.next_if(|(k, _)| *k as usize == i) {
                Some((_, t)) => t.map(std::sync::Arc::new),
                None => prev_t,
            };
        }
        if let Some((k, _)) = usage.next() {
            return Err(E::custom(format!("usage entry {k} out of order or range")));
        }
        if let Some((k, _)) = timing.next() {
            return Err(E::custom(format!(
                "server_timing entry {k} out of order or range"
            )));
        }
        for (k, f) in self.finish_reason {
            chunks[at_chunk(k)?].finish_reason = Some(f.into());
        }
        for (k, e) in self.error {
            chunks[at_chunk(k)?].error = Some(e.into());
        }
        for k in self.role_only {
            chunks[at_chunk(k)?].role_only = true;
        }
        for k in self.usage_only {
            chunks[at_chunk(k)?].usage_only = true;
        }
        for k in self.content_event {
            chunks[at_chunk(k)?].content_event = true;
        }
        Ok(chunks)
    }
}

/// The chunks as read: columns (schema 2) or a list of chunk objects (schema 1).
struct ChunksIn(Vec<Chunk>);

impl<'de> Deserialize<'de> for ChunksIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChunksIn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of chunks or an object of chunk columns")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ChunksIn, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(c) = seq.next_element::<Chunk>()? {
                    out.push(c);
                }
                Ok(ChunksIn(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ChunksIn, A::Error> {
                let cols = Columns::deserialize(de::value::MapAccessDeserializer::new(map))?;
                cols.into_chunks().map(ChunksIn)
            }
        }
        d.deserialize_any(V)
    }
}

/// A trace as written: its fields in [`RequestTrace`]'s order, the chunks as columns.
#[derive(Serialize)]
struct TraceOut<'a> {
    rid: &'a str,
    dialect: Dialect,
    prompt_tokens_sent: Option<u32>,
    max_tokens: u32,
    status: Option<u16>,
    headers_ns: Option<u64>,
    reads: u32,
    chunks: Columns,
    done_ns: Option<u64>,
    end: &'a StreamEnd,
    end_ns: u64,
    attribution: TokenAttribution,
    #[serde(skip_serializing_if = "Stamps::is_task")]
    stamps: Stamps,
    #[serde(skip_serializing_if = "Option::is_none")]
    send_delay_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_ids: Option<&'a [u32]>,
}

/// A trace as read, from either schema.
#[derive(Deserialize)]
struct TraceIn {
    rid: String,
    dialect: Dialect,
    prompt_tokens_sent: Option<u32>,
    max_tokens: u32,
    status: Option<u16>,
    headers_ns: Option<u64>,
    reads: u32,
    chunks: ChunksIn,
    done_ns: Option<u64>,
    end: StreamEnd,
    end_ns: u64,
    attribution: TokenAttribution,
    #[serde(default)]
    stamps: Stamps,
    #[serde(default)]
    send_delay_ns: Option<u64>,
    #[serde(default)]
    output_ids: Option<Vec<u32>>,
}

fn out(t: &RequestTrace) -> TraceOut<'_> {
    // Destructured so that a field added to `RequestTrace` does not compile until it is written here.
    let RequestTrace {
        rid,
        dialect,
        prompt_tokens_sent,
        max_tokens,
        status,
        headers_ns,
        reads,
        chunks,
        done_ns,
        end,
        end_ns,
        attribution,
        stamps,
        send_delay_ns,
        output_ids,
    } = t;
    TraceOut {
        rid,
        dialect: *dialect,
        prompt_tokens_sent: *prompt_tokens_sent,
        max_tokens: *max_tokens,
        status: *status,
        headers_ns: *headers_ns,
        reads: *reads,
        chunks: Columns::of(chunks),
        done_ns: *done_ns,
        end,
        end_ns: *end_ns,
        attribution: *attribution,
        stamps: *stamps,
        send_delay_ns: *send_delay_ns,
        output_ids: output_ids.as_deref(),
    }
}

impl From<TraceIn> for RequestTrace {
    fn from(t: TraceIn) -> Self {
        RequestTrace {
            rid: t.rid,
            dialect: t.dialect,
            prompt_tokens_sent: t.prompt_tokens_sent,
            max_tokens: t.max_tokens,
            status: t.status,
            headers_ns: t.headers_ns,
            reads: t.reads,
            chunks: t.chunks.0,
            done_ns: t.done_ns,
            end: t.end,
            end_ns: t.end_ns,
            attribution: t.attribution,
            stamps: t.stamps,
            send_delay_ns: t.send_delay_ns,
            output_ids: t.output_ids,
        }
    }
}

/// `#[serde(with)]` for an optional trace in a record.
pub(super) mod opt_trace {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<RequestTrace>, s: S) -> Result<S::Ok, S::Error> {
        t.as_ref().map(out).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RequestTrace>, D::Error> {
        Ok(Option::<TraceIn>::deserialize(d)?.map(RequestTrace::from))
    }
}
