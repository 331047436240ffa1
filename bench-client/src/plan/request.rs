//! One request to send and its deadlines: what the plan hands to the network stage.

use std::time::Duration;

use super::Prompt;
use serde::{Deserialize, Serialize};

/// One request to send.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    /// Request id, sent as `rid` in every dialect.
    pub rid: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Output tokens asked for.
    pub max_tokens: u32,
    /// Ask the server to ignore end-of-sequence so the output has the requested length.
    pub ignore_eos: bool,
    /// Ask for per-chunk `token_ids` (vLLM `return_token_ids`); off by default.
    pub return_token_ids: bool,
    /// Keep the output token ids in the trace (multi-turn sessions send them back); off by default.
    pub keep_output_ids: bool,
}

impl RequestSpec {
    /// A spec with `ignore_eos` on, no `return_token_ids` and no output ids kept.
    pub fn new(rid: impl Into<String>, prompt: Prompt, max_tokens: u32) -> Self {
        Self {
            rid: rid.into(),
            prompt,
            max_tokens,
            ignore_eos: true,
            return_token_ids: false,
            keep_output_ids: false,
        }
    }
}

/// The most one response may make the client hold: one SSE line, and the whole body. A stream
/// that passes either fails as `stream-too-large` at that byte; nothing beyond it is buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamCaps {
    /// Bytes of one line (from one line end to the next).
    pub line: u64,
    /// Bytes of one response body.
    pub body: u64,
}

impl StreamCaps {
    /// One SSE line: 4 MiB (an event of a 185k-token prompt's ids is about 1.3 MB).
    pub const DEFAULT_LINE: u64 = 4 << 20;
    /// One body: 64 MiB.
    pub const DEFAULT_BODY: u64 = 64 << 20;

    /// A body cap of `body` bytes, with the line cap at most the default.
    pub fn body(body: u64) -> Self {
        Self {
            line: body.min(Self::DEFAULT_LINE),
            body,
        }
    }
}

impl Default for StreamCaps {
    fn default() -> Self {
        Self::body(Self::DEFAULT_BODY)
    }
}

/// Deadlines and size caps for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeouts {
    /// Establishing the TCP connection.
    pub connect: Duration,
    /// Time to first token, fixed part.
    pub first_token_base: Duration,
    /// Time to first token, added per 1,000 prompt tokens.
    pub first_token_per_1k: Duration,
    /// Longest gap between reads after the first token.
    pub idle: Duration,
    /// The whole request.
    pub total: Duration,
    /// How large a response may grow.
    pub caps: StreamCaps,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            first_token_base: Duration::from_secs(600),
            first_token_per_1k: Duration::from_secs(2),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(3600),
            caps: StreamCaps::default(),
        }
    }
}

/// Which deadline expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeoutPhase {
    /// Establishing the connection.
    Connect,
    /// Waiting for the first output token (scaled with context length).
    FirstToken,
    /// Gap between two reads after the first token.
    Idle,
    /// The whole request.
    Total,
}

impl Timeouts {
    /// Time-to-first-token deadline for a prompt of `prompt_tokens`.
    pub fn first_token(&self, prompt_tokens: u32) -> Duration {
        self.first_token_base
            + self
                .first_token_per_1k
                .mul_f64(f64::from(prompt_tokens) / 1000.0)
    }

    /// When a request is given up, as time after its send, and why. Until its first output
    /// arrives: at [`Timeouts::first_token`] or at `total`, whichever is earlier; after it
    /// (`last_read`: the latest read, after the send): `idle` past that read, or at `total`.
    /// Every path times a stream by this rule: HTTP, and the engine's virtual clock.
    pub fn deadline(
        &self,
        prompt_tokens: u32,
        last_read: Option<Duration>,
    ) -> (Duration, TimeoutPhase) {
        let (due, phase) = match last_read {
            None => (self.first_token(prompt_tokens), TimeoutPhase::FirstToken),
            Some(read) => (read.saturating_add(self.idle), TimeoutPhase::Idle),
        };
        if due <= self.total {
            (due, phase)
        } else {
            (self.total, TimeoutPhase::Total)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_token_timeout_scales_with_context() {
        let t = Timeouts::default();
        assert!(t.first_token(185_000) > t.first_token(1_000));
        assert_eq!(t.first_token(0), t.first_token_base);
    }
}
