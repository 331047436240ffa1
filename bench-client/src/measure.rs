//! Pure metrics from traces (no clock, no I/O): the streaming measurement, the two-point method with
//! named failures, and the one percentile definition used everywhere.

use serde::{Deserialize, Serialize};

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

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Measure one streaming request.
pub fn measure(trace: &RequestTrace) -> Result<Measurement, MeasureError> {
    if let Some(f) = trace.failure() {
        return Err(MeasureError::Failed(f));
    }
    let out: Vec<_> = trace.chunks.iter().filter(|c| c.carries_output()).collect();
    let (Some(first), Some(last)) = (out.first(), out.last()) else {
        return Err(MeasureError::NoOutput);
    };
    let attribution = trace.attribution;
    let known = attribution != TokenAttribution::Unknown;
    let ttft_ms = ms(first.at_ns);
    let span_ns = last.at_ns.saturating_sub(first.at_ns);
    let span_s = span_ns as f64 / 1e9;
    let prompt_tokens = trace.reported_prompt_tokens().or(trace.prompt_tokens_sent);
    let cached_tokens = trace.cached_tokens();
    let completion_tokens = trace.completion_tokens();
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
    let mut per_token_ms = Vec::new();
    if known {
        for w in out.windows(2) {
            let t = w[1].tokens.unwrap_or(0);
            if t > 0 {
                let gap = ms(w[1].at_ns.saturating_sub(w[0].at_ns)) / f64::from(t);
                per_token_ms.extend(std::iter::repeat_n(gap, t as usize));
            }
        }
    }
    let after_first: u32 = tokens_per_chunk.iter().skip(1).sum();
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
        ttfb_ms: trace.headers_ns.map(ms),
        ttft_ms,
        e2e_ms: ms(trace.end_ns),
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
    })
}

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

/// Percentile by linear interpolation between closest ranks (Hyndman & Fan type 7, numpy's default):
/// sort the n values, h = (n - 1) * p / 100, result = x[floor h] + (h - floor h) * (x[ceil h] - x[floor h]).
/// `p` is in [0, 100]. `None` for an empty input, a `p` outside [0, 100], or any non-finite value.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() || !(0.0..=100.0).contains(&p) || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let h = (v.len() - 1) as f64 * p / 100.0;
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let x = v[lo] + (h - lo as f64) * (v[hi] - v[lo]);
    // Guard against rounding pushing the result outside [v[lo], v[hi]].
    Some(x.clamp(v[lo], v[hi]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Dialect;
    use crate::trace::{Chunk, StreamEnd, Usage};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn chunk(at_ms: u64, tokens: u32, cum: u32) -> Chunk {
        Chunk {
            at_ns: at_ms * MS,
            tokens: Some(tokens),
            text_len: tokens,
            usage: Some(Usage {
                prompt_tokens: Some(1000),
                completion_tokens: Some(cum),
                cached_tokens: Some(0),
            }),
            ..Chunk::default()
        }
    }

    fn trace(chunks: Vec<Chunk>, max_tokens: u32) -> RequestTrace {
        let end_ns = chunks.last().map_or(0, |c| c.at_ns) + MS;
        RequestTrace {
            rid: "r".into(),
            dialect: Dialect::Sglang,
            prompt_tokens_sent: Some(1000),
            max_tokens,
            status: Some(200),
            headers_ns: Some(MS),
            reads: chunks.len() as u32,
            chunks,
            done_ns: Some(end_ns),
            end: StreamEnd::Done,
            end_ns,
            attribution: TokenAttribution::ServerCumulative,
            stamps: Default::default(),
            send_delay_ns: None,
        }
    }

    #[test]
    fn multi_token_first_chunk_is_excluded_from_decode() {
        // First chunk (speculative) carries 4 tokens at 100 ms, then 4 more at 110, 120 ms.
        let t = trace(
            vec![chunk(100, 4, 4), chunk(110, 2, 6), chunk(120, 2, 8)],
            8,
        );
        let m = measure(&t).unwrap();
        assert_eq!(m.ttft_ms, 100.0);
        assert!((m.decode_tok_s.unwrap() - 4.0 / 0.020).abs() < 1e-9);
        // The common formula counts the first chunk's extra tokens: (8 - 1) / 0.020.
        assert!((m.naive_decode_tok_s.unwrap() - 7.0 / 0.020).abs() < 1e-9);
        assert!((m.prefill_tok_s.unwrap() - 1000.0 / 0.1).abs() < 1e-9);
        assert_eq!(m.tokens_per_chunk, vec![4, 2, 2]);
        assert_eq!(m.per_token_ms, vec![5.0; 4]);
        assert!((m.tpot_ms.unwrap() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn single_chunk_stream_has_named_reason() {
        let m = measure(&trace(vec![chunk(50, 5, 5)], 5)).unwrap();
        assert_eq!(m.decode_tok_s, None);
        assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::SingleChunk));
        assert_eq!(m.naive_decode_tok_s, None);
    }

    #[test]
    fn single_token_has_named_reason() {
        let m = measure(&trace(vec![chunk(50, 1, 1)], 1)).unwrap();
        assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::SingleToken));
    }

    #[test]
    fn usage_only_chunk_is_not_the_last_chunk() {
        let mut chunks = vec![chunk(10, 1, 1), chunk(20, 1, 2)];
        chunks.push(Chunk {
            at_ns: 500 * MS,
            tokens: Some(0),
            usage_only: true,
            usage: Some(Usage {
                prompt_tokens: Some(1000),
                completion_tokens: Some(2),
                cached_tokens: Some(0),
            }),
            ..Chunk::default()
        });
        let m = measure(&trace(chunks, 2)).unwrap();
        assert!((m.decode_tok_s.unwrap() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn in_band_error_is_a_failure() {
        let mut t = trace(vec![chunk(10, 1, 1)], 2);
        t.chunks.push(Chunk {
            at_ns: 20 * MS,
            error: Some("boom".into()),
            ..Chunk::default()
        });
        match measure(&t) {
            Err(MeasureError::Failed(f)) => {
                assert_eq!(f.kind, crate::trace::FailureKind::InBandError)
            }
            other => panic!("expected failure, got {other:?}"),
        }
    }

    #[test]
    fn short_output_is_a_failure() {
        let t = trace(vec![chunk(10, 1, 1), chunk(20, 1, 2)], 17);
        assert!(
            matches!(measure(&t), Err(MeasureError::Failed(f)) if f.kind == crate::trace::FailureKind::ShortOutput)
        );
    }

    #[test]
    fn unknown_attribution_does_not_guess() {
        let mut t = trace(vec![chunk(10, 1, 1), chunk(20, 1, 2), chunk(30, 1, 3)], 3);
        for c in &mut t.chunks {
            c.tokens = None;
            c.usage = None;
        }
        t.chunks.push(Chunk {
            at_ns: 31 * MS,
            tokens: Some(0),
            usage_only: true,
            usage: Some(Usage {
                prompt_tokens: Some(1000),
                completion_tokens: Some(3),
                cached_tokens: None,
            }),
            ..Chunk::default()
        });
        t.attribution = TokenAttribution::Unknown;
        let m = measure(&t).unwrap();
        assert_eq!(m.decode_unavailable, Some(DecodeUnavailable::CountsUnknown));
        assert!(m.tokens_per_chunk.is_empty());
        assert!((m.naive_decode_tok_s.unwrap() - 100.0).abs() < 1e-9);
    }

    fn tp(end_ms: u64, n: u32, cached: u32) -> RequestTrace {
        let mut t = trace(vec![chunk(end_ms - 1, n, n)], n);
        if let Some(u) = t.chunks[0].usage.as_mut() {
            u.cached_tokens = Some(cached);
        }
        t.end_ns = end_ms * MS;
        t
    }

    #[test]
    fn two_point_cache_hit_named() {
        let e = two_point(&tp(500, 1, 0), &tp(200, 17, 992)).unwrap_err();
        assert_eq!(e.kind(), "cache-hit");
        assert!(e.to_string().contains("992"));
    }

    #[test]
    fn two_point_time_not_increasing_named() {
        let e = two_point(&tp(500, 1, 0), &tp(400, 17, 0)).unwrap_err();
        assert_eq!(e.kind(), "time-not-increasing");
    }

    #[test]
    fn two_point_solves_when_assumptions_hold() {
        let r = two_point(&tp(100, 1, 0), &tp(260, 17, 0)).unwrap();
        assert!((r.decode_tok_s - 100.0).abs() < 1e-9);
        assert!((r.prefill_tok_s - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn two_point_negative_prefill_named() {
        // Decode solves to 7 / 0.1 s = 70 tok/s, so a's 9 decode tokens alone need 129 ms > t_a = 100 ms:
        // the solved prefill time is negative.
        let e = two_point(&tp(100, 10, 0), &tp(200, 17, 0)).unwrap_err();
        assert_eq!(e.kind(), "invalid-rate");
    }

    #[test]
    fn percentile_definition() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&v, 101.0), None);
        assert_eq!(percentile(&[1.0, f64::NAN], 50.0), None);
    }

    fn arb_trace() -> impl Strategy<Value = RequestTrace> {
        (
            proptest::collection::vec((0u64..50, 1u32..6), 1..40),
            1u64..1000,
        )
            .prop_map(|(steps, first)| {
                let mut at = first;
                let mut cum = 0;
                let mut chunks = Vec::new();
                for (i, (gap, n)) in steps.into_iter().enumerate() {
                    if i > 0 {
                        at += gap;
                    }
                    cum += n;
                    chunks.push(chunk(at, n, cum));
                }
                trace(chunks, cum)
            })
    }

    proptest! {
        #[test]
        fn percentile_monotone_bounded_order_free(mut v in proptest::collection::vec(-1e6f64..1e6, 1..50), p in 0.0f64..100.0, q in 0.0f64..100.0) {
            let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
            let a = percentile(&v, lo).unwrap();
            let b = percentile(&v, hi).unwrap();
            prop_assert!(a <= b);
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(a >= min && b <= max);
            v.reverse();
            prop_assert_eq!(percentile(&v, lo), Some(a));
        }

        #[test]
        fn measurement_is_finite_and_consistent(t in arb_trace()) {
            let m = measure(&t).unwrap();
            for x in [Some(m.ttft_ms), Some(m.e2e_ms), m.prefill_tok_s, m.decode_tok_s, m.naive_decode_tok_s, m.tpot_ms].into_iter().flatten() {
                prop_assert!(x.is_finite() && x >= 0.0);
            }
            prop_assert_eq!(m.decode_tok_s.is_some(), m.decode_unavailable.is_none());
            prop_assert_eq!(m.tokens_per_chunk.iter().sum::<u32>(), m.completion_tokens.unwrap());
            if let (Some(d), Some(n)) = (m.decode_tok_s, m.naive_decode_tok_s) {
                // The naive rate never undercounts: the first chunk carries at least one token.
                prop_assert!(n + 1e-9 >= d);
            }
            let after: usize = m.tokens_per_chunk.iter().skip(1).map(|&t| t as usize).sum();
            prop_assert_eq!(m.per_token_ms.len(), after);
        }
    }
}
