//! The per-request figures of a load run, in integer nanoseconds (the unit of its histograms): TTFT
//! from the scheduled start and from the send, end to end, the gaps between chunks, time per output
//! token after the first chunk, and the SGLang/vLLM formula of TPOT beside it.

use serde::{Deserialize, Serialize};

use super::Measurement;
use crate::trace::RequestTrace;

/// One successful request's load figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadNumbers {
    /// Client queue time plus the first output chunk's arrival: TTFT as the schedule sees it.
    pub ttft_from_schedule_ns: u64,
    /// The first output chunk's arrival after the send.
    pub ttft_ns: u64,
    /// Stream end after the send.
    pub e2e_ns: u64,
    /// Gaps between successive output-carrying chunks.
    pub inter_chunk_ns: Vec<u64>,
    /// Each chunk's gap divided over its tokens, one entry per token after the first chunk (known
    /// per-chunk counts only).
    pub per_token_ns: Vec<u64>,
    /// (last chunk - first chunk) / tokens after the first chunk, when the decode rate is defined.
    pub tpot_ns: Option<u64>,
    /// (end - first chunk) / (output tokens - 1), as SGLang's and vLLM's benchmarks define TPOT;
    /// `None` below 2 output tokens.
    pub naive_tpot_ns: Option<u64>,
}

fn ns_of_ms(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}

/// TTFT from the scheduled start: `client_queue_ns` plus the first output chunk's arrival; `None`
/// when no chunk carried output.
pub fn ttft_from_schedule_ns(trace: &RequestTrace, client_queue_ns: u64) -> Option<u64> {
    trace
        .chunks
        .iter()
        .find(|c| c.carries_output())
        .map(|c| client_queue_ns.saturating_add(c.at_ns))
}

/// The load figures of a request that `m` measured.
pub fn load_numbers(trace: &RequestTrace, m: &Measurement, client_queue_ns: u64) -> LoadNumbers {
    // Sized once: a long stream's list would otherwise be copied at each doubling.
    let mut out = Vec::with_capacity(trace.chunks.len());
    out.extend(trace.chunks.iter().filter(|c| c.carries_output()));
    let first_ns = out.first().map_or(0, |c| c.at_ns);
    let last_ns = out.last().map_or(0, |c| c.at_ns);
    let output = u64::from(m.completion_tokens.unwrap_or(0));
    let known = m.token_attribution.counts_known();
    let after: u64 = m
        .tokens_per_chunk
        .iter()
        .skip(1)
        .map(|&t| u64::from(t))
        .sum();
    let tpot_ns = (known && m.decode_tok_s.is_some() && after > 0)
        .then(|| (last_ns.saturating_sub(first_ns) as f64 / after as f64).round() as u64);
    let naive_tpot_ns = (output >= 2).then(|| {
        (trace.end_ns.saturating_sub(first_ns) as f64 / (output - 1) as f64).round() as u64
    });
    LoadNumbers {
        ttft_from_schedule_ns: client_queue_ns.saturating_add(first_ns),
        ttft_ns: first_ns,
        e2e_ns: trace.end_ns,
        inter_chunk_ns: out
            .windows(2)
            .map(|w| w[1].at_ns.saturating_sub(w[0].at_ns))
            .collect(),
        per_token_ns: if known {
            m.per_token_ms.iter().map(|&v| ns_of_ms(v)).collect()
        } else {
            Vec::new()
        },
        tpot_ns,
        naive_tpot_ns,
    }
}

/// Service-level objective for goodput.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// TTFT from the scheduled start, ms.
    pub ttft_ms: Option<f64>,
    /// TPOT (our definition), ms.
    pub tpot_ms: Option<f64>,
}

impl Slo {
    /// Parse `ttft=MS,tpot=MS` (either may be left out).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut slo = Slo::default();
        let parts = crate::plan::list::items(s).map_err(|e| format!("--slo: {e}"))?;
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("--slo expects ttft=MS,tpot=MS, got {part:?}"))?;
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| format!("--slo {k}: {v:?} is not a positive number of ms"))?;
            let objective = match k.trim() {
                "ttft" => &mut slo.ttft_ms,
                "tpot" => &mut slo.tpot_ms,
                other => return Err(format!("--slo: unknown objective {other:?} (ttft, tpot)")),
            };
            if objective.replace(v).is_some() {
                return Err(format!("--slo gives {} twice: give it once", k.trim()));
            }
        }
        if slo.ttft_ms.is_none() && slo.tpot_ms.is_none() {
            return Err("--slo needs ttft=MS and/or tpot=MS".into());
        }
        Ok(slo)
    }

    /// Whether any objective is set.
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some()
    }

    /// Whether one successful request of `output_tokens` met the objective: TTFT from its
    /// scheduled start, and TPOT after the first chunk. Where that TPOT is unmeasurable (every
    /// output token arrived with the first, or the tokens per chunk are unknown), the TPOT of
    /// SGLang's and vLLM's benchmarks stands in: (end - first token) / (tokens - 1), so a request
    /// whose output all came at once kept no one waiting after its first token and meets it. A
    /// single-token request has no TPOT and meets any TPOT objective.
    pub fn met(&self, n: &LoadNumbers, output_tokens: u64) -> bool {
        let ttft_ok = self
            .ttft_ms
            .is_none_or(|t| n.ttft_from_schedule_ns as f64 / 1e6 <= t);
        let tpot_ok = match (self.tpot_ms, n.tpot_ns.or(n.naive_tpot_ns)) {
            (None, _) => true,
            (Some(t), Some(v)) => v as f64 / 1e6 <= t,
            (Some(_), None) => output_tokens <= 1,
        };
        ttft_ok && tpot_ok
    }

    /// Whether a request's TPOT objective was judged on the stand-in of [`Slo::met`]: it has more
    /// than one output token and no TPOT of its own.
    pub fn tpot_unmeasured(&self, n: &LoadNumbers, output_tokens: u64) -> bool {
        self.tpot_ms.is_some() && n.tpot_ns.is_none() && output_tokens > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(tpot_ms: Option<u64>, naive_ms: Option<u64>) -> LoadNumbers {
        LoadNumbers {
            ttft_from_schedule_ns: 100_000_000,
            ttft_ns: 100_000_000,
            e2e_ns: 400_000_000,
            inter_chunk_ns: Vec::new(),
            per_token_ns: Vec::new(),
            tpot_ns: tpot_ms.map(|v| v * 1_000_000),
            naive_tpot_ns: naive_ms.map(|v| v * 1_000_000),
        }
    }

    #[test]
    fn an_objective_given_twice_is_refused() {
        let e = Slo::parse("ttft=5,ttft=600000").unwrap_err();
        assert!(e.contains("ttft twice"), "{e}");
        assert!(Slo::parse("ttft=5,tpot=60").is_ok());
    }

    #[test]
    fn a_tpot_objective_judges_the_request_s_own_tpot_then_the_benchmarks_stand_in() {
        let slo = Slo::parse("ttft=500,tpot=50").unwrap();
        // Its own TPOT decides when it has one, whatever the stand-in says.
        assert!(slo.met(&numbers(Some(10), Some(90)), 32));
        assert!(!slo.met(&numbers(Some(90), Some(10)), 32));
        // All the output came with the first token: nothing after it to wait for.
        assert!(slo.met(&numbers(None, Some(0)), 32));
        assert!(slo.tpot_unmeasured(&numbers(None, Some(0)), 32));
        // No TPOT of its own, and a slow tail by the stand-in.
        assert!(!slo.met(&numbers(None, Some(90)), 32));
        // One token: no TPOT at all, and nothing to miss.
        assert!(slo.met(&numbers(None, None), 1));
        assert!(!slo.tpot_unmeasured(&numbers(None, None), 1));
        // TTFT still counts.
        let late = LoadNumbers {
            ttft_from_schedule_ns: 600_000_000,
            ..numbers(Some(10), Some(10))
        };
        assert!(!slo.met(&late, 32));
    }
}
