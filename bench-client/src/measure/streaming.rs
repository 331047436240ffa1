//! The streaming measurement of one request: TTFT and prefill rate from the first output chunk,
//! decode rate from the tokens after it over the time after it.

use serde::{Deserialize, Serialize};

use super::ms;
use crate::trace::{Failure, RequestTrace, TokenAttribution};

/// Why a decode rate cannot be measured from a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeUnavailable {
    /// Only one token was produced.
    #[error("only one output token: no decode phase to time")]
    SingleToken,
    /// Every token arrived in the first chunk.
    #[error("all output tokens arrived in one chunk: no time after the first chunk")]
    SingleChunk,
    /// The server did not say how many tokens each chunk carried.
    #[error("per-chunk token counts unknown (only final usage reported)")]
    CountsUnknown,
    /// The first and last chunk arrived at the same instant.
    #[error("first and last chunk arrived at the same instant")]
    ZeroDuration,
}

/// Metrics of one successful streaming request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Response headers after send.
    pub ttfb_ms: Option<f64>,
    /// First output-carrying chunk after send.
    pub ttft_ms: f64,
    /// Stream end after send.
    pub e2e_ms: f64,
    /// Prompt tokens (server-reported, else sent).
    pub prompt_tokens: Option<u32>,
    /// Cached prompt tokens the server reported.
    pub cached_tokens: Option<u32>,
    /// Output tokens (server-reported total, else sum of chunk counts).
    pub completion_tokens: Option<u32>,
    /// Uncached prompt tokens / TTFT.
    pub prefill_tok_s: Option<f64>,
    /// Tokens after the first chunk / (t_last - t_first).
    pub decode_tok_s: Option<f64>,
    /// Why `decode_tok_s` is absent.
    pub decode_unavailable: Option<DecodeUnavailable>,
    /// `(completion_tokens - 1) / (t_last - t_first)`, the common formula; overstates the rate when
    /// the first chunk carries several tokens. Labelled, for comparison with other tools.
    pub naive_decode_tok_s: Option<f64>,
    /// Time per output token after the first chunk: (t_last - t_first) / tokens after the first chunk.
    pub tpot_ms: Option<f64>,
    /// Gaps between successive output-carrying chunks.
    pub inter_chunk_ms: Vec<f64>,
    /// Each chunk's gap divided over its tokens, one entry per token after the first chunk.
    pub per_token_ms: Vec<f64>,
    /// Tokens in each output-carrying chunk (empty when unknown).
    pub tokens_per_chunk: Vec<u32>,
    /// How per-chunk counts were known.
    pub token_attribution: TokenAttribution,
    /// TTFT split by the server's own timing, when the server reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_split: Option<TtftSplit>,
}

/// TTFT split by the server's own report of it (SGLang `--enable-metrics`): its queue, its work
/// from the end of the queue to the first token, and the rest, which is the way there and back
/// (network, HTTP, the client). Each part is `None` where the server did not report what it needs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TtftSplit {
    /// The server's queue time.
    pub server_queue_ms: Option<f64>,
    /// The server's first-token latency less its queue time: prefill and the first decode step.
    pub server_prefill_ms: Option<f64>,
    /// The client's TTFT less the server's first-token latency.
    pub rest_ms: Option<f64>,
}

/// The [`TtftSplit`] of a request whose client-side TTFT was `ttft_ms`.
pub fn ttft_split(trace: &RequestTrace, ttft_ms: f64) -> Option<TtftSplit> {
    let t = trace.server_timing()?;
    let queue_ms = t.queue_s.map(|q| q * 1e3).filter(|v| v.is_finite());
    let first_ms = t.first_token_s.map(|f| f * 1e3).filter(|v| v.is_finite());
    let prefill_ms = t.prefill_s.map(|p| p * 1e3).filter(|v| v.is_finite());
    if first_ms.is_none() {
        // llama.cpp reports its prefill time alone: the rest is queue, network and client.
        let p = prefill_ms?;
        return Some(TtftSplit {
            server_queue_ms: None,
            server_prefill_ms: Some(p),
            rest_ms: Some(ttft_ms - p),
        });
    }
    Some(TtftSplit {
        server_queue_ms: queue_ms,
        server_prefill_ms: first_ms.zip(queue_ms).map(|(f, q)| f - q),
        rest_ms: first_ms.map(|f| ttft_ms - f),
    })
}

/// Why a trace has no measurement.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MeasureError {
    /// The request failed.
    #[error("{}: {}", .0.kind.as_str(), .0.message)]
    Failed(Failure),
    /// The stream finished without any output-carrying chunk.
    #[error("the stream carried no output tokens (no first chunk to time)")]
    NoOutput,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// What every trace gives, failed or not: when the headers and the end came, and the token
/// counts the server reported (the prompt's, else the length sent).
#[derive(Clone, Debug, PartialEq)]
pub struct Basics {
    /// Response headers after send.
    pub ttfb_ms: Option<f64>,
    /// Stream end after send.
    pub e2e_ms: f64,
    /// Prompt tokens (server-reported, else sent).
    pub prompt_tokens: Option<u32>,
    /// Cached prompt tokens the server reported.
    pub cached_tokens: Option<u32>,
    /// Output tokens (server-reported total, else sum of chunk counts).
    pub completion_tokens: Option<u32>,
}

/// The [`Basics`] of a trace.
pub fn basics(trace: &RequestTrace) -> Basics {
    Basics {
        ttfb_ms: trace.headers_ns.map(ms),
        e2e_ms: ms(trace.end_ns),
        prompt_tokens: trace.reported_prompt_tokens().or(trace.prompt_tokens_sent),
        cached_tokens: trace.cached_tokens(),
        completion_tokens: trace.completion_tokens(),
    }
}

/// Measure one streaming request.
pub fn measure(trace: &RequestTrace) -> Result<Measurement, MeasureError> {
    if let Some(f) = trace.failure() {
        return Err(MeasureError::Failed(f));
    }
    // Sized once: a long stream's list would otherwise be copied at each doubling.
    let mut out = Vec::with_capacity(trace.chunks.len());
    out.extend(trace.chunks.iter().filter(|c| c.carries_output()));
    let (Some(first), Some(last)) = (out.first(), out.last()) else {
        return Err(MeasureError::NoOutput);
    };
    let attribution = trace.attribution;
    let known = attribution.counts_known();
    let ttft_ms = ms(first.at_ns);
    let span_ns = last.at_ns.saturating_sub(first.at_ns);
    let span_s = span_ns as f64 / 1e9;
    let Basics {
        ttfb_ms,
        e2e_ms,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
    } = basics(trace);
    let uncached = prompt_tokens.map(|p| p.saturating_sub(cached_tokens.unwrap_or(0)));
    let prefill_tok_s = match uncached {
        Some(u) if u > 0 && first.at_ns > 0 => finite(f64::from(u) / (first.at_ns as f64 / 1e9)),
        _ => None,
    };

    let tokens_per_chunk: Vec<u32> = if known {
        out.iter().map(|c| c.tokens.unwrap_or(0)).collect()
    } else {
        Vec::new()
    };
    let inter_chunk_ms: Vec<f64> = out
        .windows(2)
        .map(|w| ms(w[1].at_ns.saturating_sub(w[0].at_ns)))
        .collect();
    let after_first: u32 = tokens_per_chunk.iter().skip(1).sum();
    let mut per_token_ms = Vec::with_capacity(after_first as usize);
    if known {
        for w in out.windows(2) {
            let t = w[1].tokens.unwrap_or(0);
            if t > 0 {
                let gap = ms(w[1].at_ns.saturating_sub(w[0].at_ns)) / f64::from(t);
                per_token_ms.extend(std::iter::repeat_n(gap, t as usize));
            }
        }
    }
    let (decode_tok_s, decode_unavailable, tpot_ms) = if !known {
        (None, Some(DecodeUnavailable::CountsUnknown), None)
    } else if completion_tokens.unwrap_or(0) <= 1 {
        (None, Some(DecodeUnavailable::SingleToken), None)
    } else if out.len() < 2 || after_first == 0 {
        (None, Some(DecodeUnavailable::SingleChunk), None)
    } else if span_ns == 0 {
        (None, Some(DecodeUnavailable::ZeroDuration), None)
    } else {
        (
            finite(f64::from(after_first) / span_s),
            None,
            finite(ms(span_ns) / f64::from(after_first)),
        )
    };
    let naive_decode_tok_s = match completion_tokens {
        Some(n) if n >= 2 && span_ns > 0 && out.len() >= 2 => finite(f64::from(n - 1) / span_s),
        _ => None,
    };
    Ok(Measurement {
        ttfb_ms,
        ttft_ms,
        e2e_ms,
        prompt_tokens,
        cached_tokens,
        completion_tokens,
        prefill_tok_s,
        decode_tok_s,
        decode_unavailable,
        naive_decode_tok_s,
        tpot_ms,
        inter_chunk_ms,
        per_token_ms,
        tokens_per_chunk,
        token_attribution: attribution,
        ttft_split: ttft_split(trace, ttft_ms),
    })
}

/// A request's output over time: for each output-carrying chunk, its arrival (ms after the send)
/// and the output tokens so far (counted by chunk when per-chunk counts are unknown).
pub fn timeline(trace: &RequestTrace) -> Vec<(f64, u64)> {
    let known = trace.attribution.counts_known();
    let mut total = 0u64;
    trace
        .chunks
        .iter()
        .filter(|c| c.carries_output())
        .map(|c| {
            total += if known {
                u64::from(c.tokens.unwrap_or(0))
            } else {
                1
            };
            (ms(c.at_ns), total)
        })
        .collect()
}
