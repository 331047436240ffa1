//! The two-point method, kept to show why it was replaced: each assumption it makes is named as
//! the error when it fails.

use serde::{Deserialize, Serialize};

use super::ms;
use crate::trace::RequestTrace;

/// Result of the two-point method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TwoPoint {
    /// Wall time of request a.
    pub t_a_ms: f64,
    /// Wall time of request b.
    pub t_b_ms: f64,
    /// Output tokens of a.
    pub n_a: u32,
    /// Output tokens of b.
    pub n_b: u32,
    /// (n_b - n_a) / (t_b - t_a).
    pub decode_tok_s: f64,
    /// Prompt tokens / (t_a - (n_a - 1) / decode rate): the first token is taken as prefill's.
    pub prefill_tok_s: f64,
}

/// Why the two-point method gave no answer: each assumption it makes, named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TwoPointError {
    /// One of the two requests failed.
    #[error("request {which} failed: {message}")]
    RequestFailed { which: char, message: String },
    /// The prefix cache served b's prompt, so b skipped the prefill a paid for.
    #[error("the radix/prefix cache served the second prefill: request b had {cached_b} of {prompt_b} prompt tokens cached (t_a = {t_a_ms:.1} ms, t_b = {t_b_ms:.1} ms); flush the cache between the requests or use the streaming method")]
    CacheHit {
        cached_b: u32,
        prompt_b: u32,
        t_a_ms: f64,
        t_b_ms: f64,
    },
    /// b took no longer than a although it produced more tokens.
    #[error("t_b = {t_b_ms:.1} ms <= t_a = {t_a_ms:.1} ms although b produced more tokens (b reported {cached_b:?} cached tokens): the subtraction has no meaning")]
    TimeNotIncreasing {
        t_a_ms: f64,
        t_b_ms: f64,
        cached_b: Option<u32>,
    },
    /// b did not produce more tokens than a.
    #[error("b produced {n_b} tokens, a produced {n_a}: b must produce more")]
    TokensNotIncreasing { n_a: u32, n_b: u32 },
    /// A solved rate was negative, zero or not finite.
    #[error("solved {what} rate is {value} (not a positive finite number): t_a = {t_a_ms:.1} ms, t_b = {t_b_ms:.1} ms")]
    InvalidRate {
        what: String,
        value: String,
        t_a_ms: f64,
        t_b_ms: f64,
    },
    /// The server refused the cache flush between the two requests.
    #[error("cache flush refused: {message}")]
    FlushRefused { message: String },
}

impl TwoPointError {
    /// Kind name used in records and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RequestFailed { .. } => "request-failed",
            Self::CacheHit { .. } => "cache-hit",
            Self::TimeNotIncreasing { .. } => "time-not-increasing",
            Self::TokensNotIncreasing { .. } => "tokens-not-increasing",
            Self::InvalidRate { .. } => "invalid-rate",
            Self::FlushRefused { .. } => "flush-refused",
        }
    }
}

/// The two-point method: two requests with the same prompt and output lengths n_a < n_b; wall times
/// t_a, t_b. Assumes both paid the same prefill, so decode = (n_b - n_a) / (t_b - t_a).
pub fn two_point(a: &RequestTrace, b: &RequestTrace) -> Result<TwoPoint, TwoPointError> {
    for (which, t) in [('a', a), ('b', b)] {
        if let Some(f) = t.failure() {
            return Err(TwoPointError::RequestFailed {
                which,
                message: f.message,
            });
        }
    }
    let t_a_ms = ms(a.end_ns);
    let t_b_ms = ms(b.end_ns);
    let n_a = a.completion_tokens().unwrap_or(a.max_tokens);
    let n_b = b.completion_tokens().unwrap_or(b.max_tokens);
    let prompt_b = b
        .reported_prompt_tokens()
        .or(b.prompt_tokens_sent)
        .unwrap_or(0);
    let cached_b = b.cached_tokens();
    if let Some(c) = cached_b.filter(|&c| c > 0) {
        return Err(TwoPointError::CacheHit {
            cached_b: c,
            prompt_b,
            t_a_ms,
            t_b_ms,
        });
    }
    if n_b <= n_a {
        return Err(TwoPointError::TokensNotIncreasing { n_a, n_b });
    }
    if t_b_ms <= t_a_ms {
        return Err(TwoPointError::TimeNotIncreasing {
            t_a_ms,
            t_b_ms,
            cached_b,
        });
    }
    let invalid = |what: &str, value: f64| TwoPointError::InvalidRate {
        what: what.to_string(),
        value: format!("{value}"),
        t_a_ms,
        t_b_ms,
    };
    let decode = f64::from(n_b - n_a) / ((t_b_ms - t_a_ms) / 1e3);
    if !decode.is_finite() || decode <= 0.0 {
        return Err(invalid("decode", decode));
    }
    let prefill_s = t_a_ms / 1e3 - f64::from(n_a.saturating_sub(1)) / decode;
    let prompt_a = a
        .reported_prompt_tokens()
        .or(a.prompt_tokens_sent)
        .unwrap_or(0);
    let uncached_a = prompt_a.saturating_sub(a.cached_tokens().unwrap_or(0));
    let prefill = f64::from(uncached_a) / prefill_s;
    if !prefill.is_finite() || prefill <= 0.0 {
        return Err(invalid("prefill", prefill));
    }
    Ok(TwoPoint {
        t_a_ms,
        t_b_ms,
        n_a,
        n_b,
        decode_tok_s: decode,
        prefill_tok_s: prefill,
    })
}
