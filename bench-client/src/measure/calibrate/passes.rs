//! Prefill under load: a load run's chunks, every request's together, fall into the server's
//! passes (the chunks of one pass arrive within a fraction of a step of each other, the gap
//! between two passes is the later one's duration). A stretch of consecutive passes that
//! prefilled costs, in the mock's terms, passes x `prefill_base_s` + the prompts' uncached
//! tokens x `prefill_per_token_s` + their token pairs x `prefill_per_token_pair_s` (the pairs of
//! a prompt do not depend on how its tokens were cut into passes) + each mixed pass's running
//! batch (`decode_per_context_token_s`, `decode_per_request_s`). Unlike a sweep's TTFT, a stretch
//! holds no way in and out, which is what tells the two apart.
//!
//! - A pass prefilled when a request's first chunk came out of it, or when it outlasted half
//!   again the decode step of the batch that came out of it (a prompt cut by the token budget).
//!   A prefill pass that sent nothing (no batch decoding beside it, no prompt finished) shows no
//!   gap of its own, so a stretch counts at least the passes its prompts' tokens fill.
//! - A stretch's prompts are those whose first chunk came out of it.
//! - A stretch counts only when it follows a pass that did not prefill, so that no prompt of it
//!   was begun before it (a run's first wave, whose first pass prefilled from an idle server, is
//!   left out), and when the server was busy through it: at the start of each of its passes some
//!   request was running (its first chunk at or before the pass's start, a later chunk at or
//!   after its end). So a gap never holds the server's idle time or a request's way in.

use super::decode::{DecodeFit, Placed};
use super::{prefill_terms, Observed};

/// One stretch of prefill passes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    pub passes: f64,
    pub tokens: f64,
    pub pairs: f64,
    /// The running batches' share of the mixed passes, by the decode fit.
    pub batch_s: f64,
    pub time_s: f64,
}

/// A pass: the instant its chunks came out, the requests whose first chunk came out of it, and
/// the batch that decoded in it (requests and summed context).
struct Pass<'a> {
    at: f64,
    firsts: Vec<&'a Observed>,
    batch: usize,
    context: f64,
}

/// The run's passes, from its requests' chunks: those within `tol` of the one before are one
/// pass's. A chunk's context is its request's before the chunk's step, counted as the decode fit
/// counts it.
fn passes<'a>(placed: &[Placed<'a>], tol: f64) -> Vec<Pass<'a>> {
    let mut events: Vec<(f64, &Placed<'a>, usize)> = placed
        .iter()
        .flat_map(|p| p.at.iter().enumerate().map(move |(j, &at)| (at, p, j)))
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Pass> = Vec::new();
    let mut last_at = f64::NEG_INFINITY;
    for (at, p, j) in events {
        if out.is_empty() || at - last_at > tol {
            out.push(Pass {
                at,
                firsts: Vec::new(),
                batch: 0,
                context: 0.0,
            });
        }
        last_at = at;
        if let Some(pass) = out.last_mut() {
            if j == 0 {
                pass.firsts.push(p.r);
            } else {
                pass.batch += 1;
                pass.context += f64::from(p.r.prompt_tokens) + p.after_first[j - 1] as f64;
            }
        }
    }
    out
}

/// The stretches of prefill passes of one load run (all its requests sent on one clock), costed
/// with `decode` for the steps and batches; `chunk` is the prefill tokens per pass.
pub fn stretches(run: &[Observed], decode: &DecodeFit, chunk: usize) -> Vec<Stretch> {
    let placed: Vec<Placed> = run
        .iter()
        .filter(|r| !r.chunks.is_empty())
        .map(Placed::new)
        .collect();
    let shortest = placed
        .iter()
        .map(|p| decode.step_s(1, f64::from(p.r.prompt_tokens)))
        .fold(f64::INFINITY, f64::min);
    if !(shortest.is_finite() && shortest > 0.0) {
        return Vec::new();
    }
    let tol = shortest / 3.0;
    let ps = passes(&placed, tol);
    // Whether the server was busy from `from` to `to`: some request ran through.
    let busy = |from: f64, to: f64| {
        placed
            .iter()
            .any(|p| p.first() <= from + tol && p.last() >= to - tol && p.last() > p.first())
    };
    let mut out = Vec::new();
    let mut cur: Option<(Stretch, bool)> = None;
    // The run's first pass prefilled (its first chunk is a first token).
    let mut prev_prefilled = true;
    for w in ps.windows(2) {
        let (prev, p) = (&w[0], &w[1]);
        let dt = p.at - prev.at;
        let prefilled = !p.firsts.is_empty() || dt > 1.5 * decode.step_s(p.batch.max(1), p.context);
        let after_decode = !prev_prefilled;
        prev_prefilled = prefilled;
        if !prefilled {
            if let Some((s, true)) = cur.take() {
                out.push(s);
            }
            continue;
        }
        let (s, ok) = cur.get_or_insert((
            Stretch {
                passes: 0.0,
                tokens: 0.0,
                pairs: 0.0,
                batch_s: 0.0,
                time_s: 0.0,
            },
            after_decode,
        ));
        *ok &= busy(prev.at, p.at);
        s.passes += 1.0;
        s.time_s += dt;
        s.batch_s += decode.batch_s(p.batch, p.context);
        for r in &p.firsts {
            let (_, n, q) = prefill_terms(r.prompt_tokens, r.cached_tokens, chunk);
            s.tokens += n;
            s.pairs += q;
        }
    }
    // A stretch still open at the run's end had no pass after it to show that it ended.
    // A pass that sent no chunk (a prefill pass of a scheduler that stalls decoding, before the
    // prompt's last one) shows no gap of its own: a stretch is at least the passes its tokens
    // fill at the chunk size.
    for s in &mut out {
        s.passes = s.passes.max((s.tokens / chunk as f64).ceil());
    }
    out
}
