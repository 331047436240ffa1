//! `calibrate`'s inputs and its printout: results records as the fit's observations, and the
//! fitted model in plain units with every measured point beside its prediction.

use std::fmt::Write;

use crate::measure::calibrate::{Calibration, FitPoint, Observed, Shape};
use crate::measure::{basics, timeline};
use crate::report::grid::{Col, Grid};
use crate::results::{Method, Record};

/// The observation of a successful streaming record with its trace; `None` for anything else.
/// With unknown per-chunk counts, the tokens after the first chunk are spread evenly over the
/// chunks after it (the first carries one).
pub fn observed(rec: &Record) -> Option<Observed> {
    if rec.failed() || rec.method != Method::Streaming {
        return None;
    }
    let trace = rec.trace.as_ref()?;
    let line = timeline(trace);
    if line.is_empty() {
        return None;
    }
    let b = basics(trace);
    let known = rec.token_attribution.counts_known();
    let mut chunks: Vec<(f64, u32)> = Vec::with_capacity(line.len());
    let mut prev = 0u64;
    for (at_ms, total) in &line {
        chunks.push((at_ms / 1e3, u32::try_from(total - prev).unwrap_or(u32::MAX)));
        prev = *total;
    }
    if !known {
        let completion = b.completion_tokens.unwrap_or(line.len() as u32).max(1);
        let rest = chunks.len().saturating_sub(1) as u32;
        chunks[0].1 = 1;
        if let (Some(each), Some(extra)) = (
            (completion - 1).checked_div(rest),
            (completion - 1).checked_rem(rest),
        ) {
            let last = chunks.len() - 1;
            for (i, c) in chunks.iter_mut().enumerate().skip(1) {
                c.1 = each + u32::from(i == last) * extra;
            }
        }
    }
    Some(Observed {
        context: rec.context_tokens,
        prompt_tokens: rec
            .prompt_tokens
            .or(b.prompt_tokens)
            .unwrap_or(rec.context_tokens),
        cached_tokens: rec.cached_tokens.unwrap_or(0),
        sent_s: rec.load.as_ref().map_or(0.0, |l| l.sent_ns as f64 / 1e9),
        chunks,
        counts_known: known,
        // Only a first-token latency (SGLang's, beside its queue time) leaves the way alone:
        // llama.cpp's split reports its prompt's compute, and its rest holds the queue too.
        way_s: rec
            .ttft_split
            .as_ref()
            .filter(|s| s.server_queue_ms.is_some())
            .and_then(|s| s.rest_ms)
            .filter(|v| v.is_finite())
            .map(|v| v / 1e3),
    })
}

/// Seconds in the unit that reads best (ns, us, ms, s).
pub fn secs(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 1e-6 {
        format!("{:.3} ns", v * 1e9)
    } else if a < 1e-3 {
        format!("{:.3} us", v * 1e6)
    } else if a < 1.0 {
        format!("{:.3} ms", v * 1e3)
    } else {
        format!("{v:.3} s")
    }
}

fn points(out: &mut String, title: &str, r2: f64, pts: &[FitPoint]) {
    let _ = writeln!(out, "{title} (R-squared {r2:.5}):");
    // Each point: its label, count, the measured and the model's figure and the error, each
    // figure after its word.
    let mut g = Grid::new(&[
        Col::left().min(40).gap(2),
        Col::left().min(7),
        Col::left(),
        Col::right().min(12),
        Col::left().gap(2),
        Col::right().min(12),
        Col::left().gap(2),
        Col::left(),
    ]);
    for p in pts {
        g.row([
            p.label.clone(),
            format!("n={}", p.n),
            "measured".into(),
            secs(p.measured),
            "model".into(),
            secs(p.predicted),
            "error".into(),
            format!("{:+.2}%", 100.0 * p.rel_error()),
        ]);
    }
    out.push_str(&g.render());
}

/// The fitted model in plain units, each measured point beside the prediction, and the notes.
pub fn render(c: &Calibration) -> String {
    let (p, d) = (&c.prefill, &c.decode);
    let mut out = String::from("fitted model:\n");
    let _ = writeln!(
        out,
        "  TTFT of a request alone = {} way in and out + its prefill passes",
        secs(p.way_s)
    );
    let _ = writeln!(
        out,
        "  prefill pass {} + {}/token + {} per token pair (token x context before it)",
        secs(p.base_s),
        secs(p.per_token_s),
        secs(p.per_token_pair_s)
    );
    let _ = writeln!(
        out,
        "  decode step {} + {} per context token + {} per request in the batch{}",
        secs(d.base_s),
        secs(d.per_context_token_s),
        secs(d.per_request_s),
        if d.per_request_fitted {
            ""
        } else {
            " (base preset's)"
        }
    );
    match &c.shape {
        Shape::Speculative {
            draft_tokens,
            accept_rates,
            mean_accept_length,
            steps,
            warmup_steps,
            warmup_shares,
            first_token_alone,
        } => {
            let rates: Vec<String> = accept_rates.iter().map(|r| format!("{r:.3}")).collect();
            let _ = writeln!(
                out,
                "  speculative: {draft_tokens} draft tokens, acceptance by position [{}], {mean_accept_length:.3} tokens per verify step over {steps} steps",
                rates.join(", ")
            );
            if *warmup_steps > 0 {
                let _ = writeln!(
                    out,
                    "  the first {warmup_steps} verify steps after the first token accept no draft (the median request's)"
                );
            }
            if !warmup_shares.is_empty() {
                let shares: Vec<String> = warmup_shares
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| **w > 0.0)
                    .map(|(i, w)| format!("{i}: {:.0}%", 100.0 * w))
                    .collect();
                let _ = writeln!(
                    out,
                    "  each request's warm-up, steps: share of requests [{}]",
                    shares.join(", ")
                );
            }
            if *first_token_alone {
                let _ = writeln!(
                    out,
                    "  the first chunk is the prefill's one token, not a verify step (every request's)"
                );
            }
        }
        Shape::Plain { stream_interval } => {
            let _ = writeln!(
                out,
                "  one token per step, {stream_interval} tokens per stream event"
            );
        }
    }
    let title = if p.points.len()
        > p.points
            .iter()
            .filter(|x| x.label.starts_with("context"))
            .count()
    {
        "TTFT, median per context, and the load runs' prefill passes"
    } else {
        "TTFT, median per context"
    };
    points(&mut out, title, p.r_squared, &p.points);
    points(&mut out, "decode step time", d.r_squared, &d.points);
    for n in p.notes.iter().chain(&d.notes) {
        let _ = writeln!(out, "note: {n}");
    }
    out
}
