//! The stream's shape: speculative acceptance from the per-chunk token counts (position i's rate
//! is the share of verify steps that accepted i drafts among those that accepted at least i - 1,
//! the maximum-likelihood estimate), or token coalescing without speculation.

use super::{median, Observed, ServerFacts};
use serde::Serialize;

/// The stream's shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Shape {
    /// Speculative decoding: draft tokens per verify step and each position's acceptance rate.
    Speculative {
        draft_tokens: usize,
        accept_rates: Vec<f64>,
        /// Mean tokens per verify step.
        mean_accept_length: f64,
        steps: usize,
        /// Verify steps after the first token that accept no draft (the median request's run of
        /// one-token chunks there: prompt-lookup drafts); the rates are fitted from the steps after.
        warmup_steps: usize,
        /// With a warm-up (`warmup_steps` above 0), the share of requests whose run was i steps,
        /// i = 0, 1, ...; the rates are then fitted from each request's steps after its own run.
        warmup_shares: Vec<f64>,
        /// The first chunk is the prefill's one token, not a verify step (vLLM's); the rates
        /// then leave it out.
        first_token_alone: bool,
    },
    /// One token per step, `stream_interval` tokens per stream event.
    Plain { stream_interval: usize },
}

/// Whether the requests' chunks are verify steps of several tokens (speculation): the server
/// says so, or the known chunk sizes vary before the last chunk.
pub fn speculative(reqs: &[Observed], facts: &ServerFacts) -> bool {
    facts.speculative.unwrap_or_else(|| {
        let mut sizes = reqs
            .iter()
            .filter(|r| r.counts_known && r.chunks.len() > 2)
            .flat_map(|r| r.chunks[1..r.chunks.len() - 1].iter().map(|c| c.1));
        sizes.next().is_some_and(|s| sizes.any(|t| t != s))
    })
}

/// Whether the first chunk is the prefill's one token rather than a verify step: every request's
/// first chunk carries one token, and were it a verify step at the first position's acceptance
/// rate of the later steps, that would happen less than once in a hundred such runs.
/// `later` holds each request's verify steps after its warm-up.
fn first_token_alone(known: &[&Observed], later: &[Vec<usize>]) -> bool {
    let firsts: Vec<u32> = known
        .iter()
        .filter(|r| r.chunks.len() > 1)
        .map(|r| r.chunks[0].1)
        .collect();
    if firsts.is_empty() || firsts.iter().any(|&t| t != 1) {
        return false;
    }
    let steps: Vec<usize> = later.iter().flatten().copied().filter(|&l| l > 0).collect();
    let accepted = steps.iter().filter(|&&l| l >= 2).count() as f64;
    let p = accepted / steps.len().max(1) as f64;
    (1.0 - p).powi(firsts.len() as i32) < 0.01
}

/// The stream's shape from the per-chunk token counts: acceptance rates when speculative (every
/// chunk but each request's clipped last one is one verify step), else the tokens per event
/// (token coalescing), from the counts or from completion tokens over chunks when they are unknown.
pub fn fit_shape(reqs: &[Observed], facts: &ServerFacts) -> Shape {
    if speculative(reqs, facts) {
        let known: Vec<&Observed> = reqs.iter().filter(|r| r.counts_known).collect();
        // A run of one-token steps right after the first chunk, in the median request, is a
        // warm-up (with acceptance rates above one half, a run is otherwise usually empty).
        let run = |r: &Observed| {
            let end = r.chunks.len().saturating_sub(1);
            r.chunks[1.min(end)..end]
                .iter()
                .take_while(|c| c.1 == 1)
                .count()
        };
        let runs: Vec<usize> = known
            .iter()
            .filter(|r| r.chunks.len() > 2)
            .map(|r| run(r))
            .collect();
        let mut sorted: Vec<f64> = runs.iter().map(|&n| n as f64).collect();
        let warmup_steps = median(&mut sorted).floor() as usize;
        // The warm-up differs from request to request (prompt lookup's first match): each
        // request's own run is its warm-up, and the runs' shares are the twin's.
        let warmup_shares: Vec<f64> = if warmup_steps > 0 {
            let longest = runs.iter().copied().max().unwrap_or(0);
            (0..=longest)
                .map(|i| runs.iter().filter(|&&n| n == i).count() as f64 / runs.len() as f64)
                .collect()
        } else {
            Vec::new()
        };
        // Each request's verify steps after its warm-up, its clipped last chunk left out.
        let later: Vec<Vec<usize>> = known
            .iter()
            .map(|r| {
                let steps = &r.chunks[..r.chunks.len().saturating_sub(1)];
                let own = if warmup_shares.is_empty() {
                    warmup_steps
                } else {
                    run(r)
                };
                let after = (1 + own).min(steps.len());
                steps[after..].iter().map(|c| c.1 as usize).collect()
            })
            .collect();
        let first_token_alone = first_token_alone(&known, &later);
        let lens: Vec<usize> = known
            .iter()
            .zip(&later)
            .flat_map(|(r, steps)| {
                let first = r
                    .chunks
                    .first()
                    .filter(|_| !first_token_alone && r.chunks.len() > 1);
                first
                    .map(|c| c.1 as usize)
                    .into_iter()
                    .chain(steps.iter().copied())
            })
            .filter(|&l| l > 0)
            .collect();
        let draft = facts
            .draft_tokens
            .unwrap_or_else(|| lens.iter().max().copied().unwrap_or(1).saturating_sub(1))
            .max(1);
        let at_least = |l: usize| lens.iter().filter(|&&x| x >= l).count() as f64;
        let accept_rates = (1..=draft)
            .map(|i| {
                let base = at_least(i);
                if base > 0.0 {
                    at_least(i + 1) / base
                } else {
                    0.0
                }
            })
            .collect();
        let mean = lens.iter().sum::<usize>() as f64 / lens.len().max(1) as f64;
        return Shape::Speculative {
            draft_tokens: draft,
            accept_rates,
            mean_accept_length: mean,
            steps: lens.len(),
            warmup_steps,
            warmup_shares,
            first_token_alone,
        };
    }
    let known: Vec<f64> = reqs
        .iter()
        .filter(|r| r.chunks.len() > 2)
        .map(|r| {
            let mid = &r.chunks[1..r.chunks.len() - 1];
            mid.iter().map(|c| f64::from(c.1)).sum::<f64>() / mid.len() as f64
        })
        .collect();
    let interval = facts.stream_interval.unwrap_or_else(|| {
        let mut k = known;
        median(&mut k).round().max(1.0) as usize
    });
    Shape::Plain {
        stream_interval: interval.max(1),
    }
}
