//! Wire dialects: request bodies and per-event decoding into [`Chunk`]s. Dialect differences live here only.

pub mod openai;
pub mod openai_chat;
pub mod sglang;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::RequestSpec;
use crate::trace::{Chunk, TokenAttribution};

/// The API a server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
pub enum Dialect {
    /// SGLang native `POST /generate` with `input_ids`.
    #[serde(rename = "sglang")]
    #[value(name = "sglang")]
    Sglang,
    /// OpenAI `POST /v1/completions` with a token-id prompt.
    #[serde(rename = "openai")]
    #[value(name = "openai")]
    OpenAi,
    /// OpenAI `POST /v1/chat/completions` (text prompts only).
    #[serde(rename = "openai-chat")]
    #[value(name = "openai-chat")]
    OpenAiChat,
}

impl Dialect {
    /// Wire name, as on the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Sglang => "sglang",
            Self::OpenAi => "openai",
            Self::OpenAiChat => "openai-chat",
        }
    }

    /// Request path.
    pub fn path(&self) -> &'static str {
        match self {
            Self::Sglang => "/generate",
            Self::OpenAi => "/v1/completions",
            Self::OpenAiChat => "/v1/chat/completions",
        }
    }

    /// Build the JSON body for one streaming request.
    pub fn build_body(&self, spec: &RequestSpec, model: Option<&str>) -> Result<Value, String> {
        match self {
            Self::Sglang => Ok(sglang::build_body(spec)),
            Self::OpenAi => Ok(openai::build_body(spec, model)),
            Self::OpenAiChat => openai_chat::build_body(spec, model),
        }
    }

    /// A fresh per-stream event decoder.
    pub fn decoder(&self) -> StreamDecoder {
        StreamDecoder {
            dialect: *self,
            state: DecoderState::default(),
        }
    }
}

/// Result of decoding one event's data.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// A content, usage, role or error event.
    Chunk(Chunk),
    /// `[DONE]`.
    Done,
}

/// Per-stream decoding state shared by the dialects (cumulative counters).
#[derive(Clone, Debug, Default)]
pub(crate) struct DecoderState {
    pub prev_completion_tokens: u32,
    pub prev_output_ids: Option<Vec<Value>>,
    /// `Some(true)`: `output_ids` are cumulative; `Some(false)`: incremental; `None`: not yet known.
    pub output_ids_cumulative: Option<bool>,
    pub prev_text_len: usize,
    pub prev_text: String,
    /// Attribution of each content event (`None`: count unknown).
    pub methods: Vec<Option<TokenAttribution>>,
}

/// Decodes the `data:` payloads of one stream, in order.
#[derive(Clone, Debug)]
pub struct StreamDecoder {
    dialect: Dialect,
    state: DecoderState,
}

impl StreamDecoder {
    /// Decode one event's data arriving at `at_ns`.
    pub fn decode(&mut self, data: &str, at_ns: u64) -> Decoded {
        let data = data.trim();
        if data == "[DONE]" {
            return Decoded::Done;
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                return Decoded::Chunk(Chunk {
                    at_ns,
                    error: Some(format!("undecodable event ({e}): {}", truncate(data, 200))),
                    ..Chunk::default()
                })
            }
        };
        if let Some(msg) = error_message(&value) {
            return Decoded::Chunk(Chunk {
                at_ns,
                error: Some(msg),
                ..Chunk::default()
            });
        }
        let chunk = match self.dialect {
            Dialect::Sglang => sglang::decode(&value, at_ns, &mut self.state),
            Dialect::OpenAi => openai::decode(&value, at_ns, &mut self.state, false),
            Dialect::OpenAiChat => openai::decode(&value, at_ns, &mut self.state, true),
        };
        Decoded::Chunk(chunk)
    }

    /// How per-chunk counts were known over the whole stream so far: one method if every content event
    /// had a count from it, otherwise `Unknown`.
    pub fn attribution(&self) -> TokenAttribution {
        let mut method = None;
        for m in &self.state.methods {
            match (m, method) {
                (None, _) => return TokenAttribution::Unknown,
                (Some(m), None) => method = Some(*m),
                (Some(m), Some(prev)) if *m != prev => {
                    // Mixed sources (for example token_ids on some chunks only): counts still known.
                    method = Some(prev.min(*m));
                }
                _ => {}
            }
        }
        method.unwrap_or(TokenAttribution::Unknown)
    }
}

/// In-band error message of an event: `{"error": {"message": ..}}`, `{"error": ".."}` or
/// `{"object": "error", "message": ..}`.
pub(crate) fn error_message(v: &Value) -> Option<String> {
    if let Some(e) = v.get("error") {
        if e.is_null() {
            return None;
        }
        return Some(match e {
            Value::String(s) => s.clone(),
            Value::Object(o) => o
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string()),
            other => other.to_string(),
        });
    }
    if v.get("object").and_then(Value::as_str) == Some("error") {
        return Some(
            v.get("message")
                .and_then(Value::as_str)
                .unwrap_or("unspecified error")
                .to_string(),
        );
    }
    None
}

pub(crate) fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Usage object of the OpenAI shape (`prompt_tokens_details.cached_tokens`).
pub(crate) fn openai_usage(v: &Value) -> Option<crate::trace::Usage> {
    let u = v.get("usage")?;
    if u.is_null() {
        return None;
    }
    Some(crate::trace::Usage {
        prompt_tokens: as_u32(u.get("prompt_tokens")),
        completion_tokens: as_u32(u.get("completion_tokens")),
        cached_tokens: as_u32(u.pointer("/prompt_tokens_details/cached_tokens"))
            .or_else(|| as_u32(u.get("cached_tokens"))),
    })
}
