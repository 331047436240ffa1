//! What to check and how: the server, the request sizes and the prompt seed.

use std::time::Duration;

use bench_client::api::Dialect;
use bench_client::plan::Timeouts;

/// What to check and how.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Server base URL.
    pub url: String,
    /// Wire dialect; probed from the server when `None`.
    pub dialect: Option<Dialect>,
    /// Model name; the server's first model when `None`.
    pub model: Option<String>,
    /// Bearer token.
    pub api_key: Option<String>,
    /// Prompt length of the token-id prompts, in tokens.
    pub prompt_tokens: u32,
    /// Output tokens per request.
    pub max_tokens: u32,
    /// Output tokens of the long request that keeps the server busy during the flush check.
    pub busy_tokens: u32,
    /// Prompt seed.
    pub seed: u64,
    /// Deadlines per request.
    pub timeouts: Timeouts,
}

impl CheckOptions {
    /// Defaults sized for tiny CPU models (context ≥ 1,024).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            dialect: None,
            model: None,
            api_key: None,
            prompt_tokens: 256,
            max_tokens: 16,
            busy_tokens: 256,
            seed: fresh_seed(),
            timeouts: Timeouts {
                total: Duration::from_secs(600),
                ..Timeouts::default()
            },
        }
    }
}

/// A seed that differs between invocations, so the prompts of one run are never in the prefix cache
/// of a server that an earlier run (of the checks or of a sweep) left warm.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (nanos as u64) ^ 0x6c6c_6d62_656e_6368
}
