//! What the wire gives the client: the dialect a server speaks, each decoded event as a
//! [`Chunk`] with the usage it reported, and how per-chunk token counts were known. Decoding
//! produces these; traces hold them.

use serde::{Deserialize, Serialize};

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
}

/// Token counts a server reported in an event (cumulative for the request so far).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens the server counted.
    pub prompt_tokens: Option<u32>,
    /// Output tokens produced so far (cumulative).
    pub completion_tokens: Option<u32>,
    /// Prompt tokens served from the server's prefix cache.
    pub cached_tokens: Option<u32>,
}

/// One decoded streaming event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Arrival instant of the read that completed this event, ns after the request was sent.
    pub at_ns: u64,
    /// Output tokens this event added, when the server says so (`None`: unknown).
    pub tokens: Option<u32>,
    /// Bytes of generated text this event added.
    pub text_len: u32,
    /// Usage the event carried, if any.
    pub usage: Option<Usage>,
    /// Finish reason, if the event carried one.
    pub finish_reason: Option<Box<str>>,
    /// In-band error message, if the event was an error.
    pub error: Option<Box<str>>,
    /// A chat event that only announced the assistant role.
    pub role_only: bool,
    /// An event without any choice (for example the final usage-only chunk).
    pub usage_only: bool,
    /// A content event: its choice has a `text` (completions) or `delta.content` (chat) field, even an
    /// empty one. vLLM with `--skip-tokenizer-init` streams tokens as events with empty text; such an
    /// event still marks output arriving, although its token count is unknown without usage data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_event: bool,
    /// What the server reported of its own timing in this event (SGLang `--enable-metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<std::sync::Arc<ServerTiming>>,
}

/// A server's own timing of a request, as an event reported it, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTiming {
    /// Time in the scheduler's queue (SGLang `meta_info.queue_time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_s: Option<f64>,
    /// From the request's arrival to its first token (SGLang `meta_info.first_token_latency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_s: Option<f64>,
    /// The prompt's prefill alone (llama.cpp `timings.prompt_ms`), for servers that report no
    /// queue or first-token time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_s: Option<f64>,
}

impl ServerTiming {
    /// `None` when the event reported neither.
    pub fn reported(queue_s: Option<f64>, first_token_s: Option<f64>) -> Option<Self> {
        (queue_s.is_some() || first_token_s.is_some()).then_some(Self {
            queue_s,
            first_token_s,
            prefill_s: None,
        })
    }

    /// llama.cpp's report: the prefill time alone, in ms (`None` when not reported).
    pub fn prefill_ms(prompt_ms: Option<f64>) -> Option<Self> {
        prompt_ms.map(|ms| Self {
            prefill_s: Some(ms / 1e3),
            ..Self::default()
        })
    }
}

impl Chunk {
    /// Whether this event carried output: a known positive token count, or, when the count is
    /// unknown, some generated text.
    pub fn carries_output(&self) -> bool {
        if self.role_only || self.usage_only || self.error.is_some() {
            return false;
        }
        match self.tokens {
            Some(t) => t > 0,
            None => self.text_len > 0 || self.content_event,
        }
    }
}

/// How the client learned the number of tokens in each chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenAttribution {
    /// SGLang native `meta_info.completion_tokens` (cumulative).
    ServerCumulative,
    /// SGLang native `output_ids` (cumulative or incremental, detected from the data).
    OutputIds,
    /// OpenAI `stream_options.continuous_usage_stats` (usage on every chunk).
    ContinuousUsage,
    /// vLLM `return_token_ids` (`choices[0].token_ids` per chunk).
    TokenIds,
    /// Only a final total was reported, but the number of events that carried text equals it, so
    /// each of those events carried exactly one token (llama.cpp streams one event per token).
    EventCount,
    /// Only final totals were known; per-chunk counts are not guessed.
    Unknown,
    /// Imported from another tool's results that keep one latency per chunk and no per-chunk
    /// counts (vLLM `bench serve`, bench_serving's OpenAI backends, guidellm, AIPerf): as
    /// `unknown`, and the decode rate is the source's own, (output - 1) / (end - first token).
    ImportedUnknown,
    /// Imported from SGLang bench_serving's native backend, which splits each chunk's gap evenly
    /// over the chunk's new tokens: a run of equal latencies is one chunk, so the tokens after
    /// the first chunk and their span are exact; two adjacent chunks of equal per-token gap read
    /// as one chunk, which leaves the decode rate unchanged.
    ImportedItlRuns,
}

impl TokenAttribution {
    /// The wire name used in records and reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::ServerCumulative => "server-cumulative",
            Self::OutputIds => "output-ids",
            Self::ContinuousUsage => "continuous-usage",
            Self::TokenIds => "token-ids",
            Self::EventCount => "event-count",
            Self::Unknown => "unknown",
            Self::ImportedUnknown => "imported-unknown",
            Self::ImportedItlRuns => "imported-itl-runs",
        }
    }

    /// Whether the record was imported from another tool's results.
    pub fn is_imported(&self) -> bool {
        matches!(self, Self::ImportedUnknown | Self::ImportedItlRuns)
    }

    /// Whether per-chunk token counts are known, so that the decode rate after the first chunk
    /// can be measured.
    pub fn counts_known(&self) -> bool {
        !matches!(self, Self::Unknown | Self::ImportedUnknown)
    }
}
