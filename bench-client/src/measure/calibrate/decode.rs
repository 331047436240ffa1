//! The decode fit: each request's gaps between chunks after its first are its decode steps, those
//! during which no other request waited or prefilled (a prefill pass stalls every decoding
//! request, or shares its forward in mixed batches). A step costs `decode_base_s` + the batch's summed context x
//! `decode_per_context_token_s` + the batch size x `decode_per_request_s`.
//!
//! A request's steps are its chunks after the first (a verify step each under speculation; one
//! step per token otherwise); its own context before a step is its prompt plus the tokens of its
//! earlier chunks after the first (the mock counts the first chunk's tokens in no context). In a
//! load run, the batch of a step that ended at instant `e` is every request whose first chunk came
//! before `e` and whose last came at or after it, and their contexts are counted the same way.
//! Alone (a sweep), the batch is one request, so `decode_base_s` and `decode_per_request_s` are
//! told apart only by a load run at concurrency above 1.

use super::{by_context, fit_points, lsq, FitPoint, Observed, Unfit};
use serde::Serialize;

/// The decode fit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecodeFit {
    pub base_s: f64,
    pub per_context_token_s: f64,
    pub per_request_s: f64,
    /// Mean step time: the sweep's median per context, each load run's mean.
    pub points: Vec<FitPoint>,
    pub r_squared: f64,
    pub notes: Vec<String>,
    /// Whether `per_request_s` was fitted (else it is the base's).
    pub per_request_fitted: bool,
    /// The largest batch seen.
    pub max_batch: usize,
}

impl DecodeFit {
    /// The running batch's share of a pass: `batch` requests of `context` tokens in all (the
    /// mock's batch cost, the whole of a mixed pass's decode).
    pub fn batch_s(&self, batch: usize, context: f64) -> f64 {
        self.per_request_s * batch as f64 + self.per_context_token_s * context
    }

    /// A decode step of `batch` requests of `context` tokens in all.
    pub fn step_s(&self, batch: usize, context: f64) -> f64 {
        self.base_s + self.batch_s(batch, context)
    }
}

/// One request's decode, as the model's terms: steps, steps x batch size, summed context over
/// the steps, and the time less prefill stalls. `None` without a decode phase.
#[derive(Clone, Copy, Debug)]
struct Terms {
    steps: f64,
    batch_steps: f64,
    context: f64,
    time_s: f64,
}

impl Terms {
    fn row(&self) -> (Vec<f64>, f64) {
        let s = self.steps;
        (
            vec![1.0, self.batch_steps / s, self.context / s],
            self.time_s / s,
        )
    }
}

/// A request placed on its run's clock: absolute chunk instants and tokens after the first chunk.
pub(super) struct Placed<'a> {
    pub(super) r: &'a Observed,
    pub(super) at: Vec<f64>,
    /// Tokens of chunks 1..=i (0 at i = 0).
    pub(super) after_first: Vec<u64>,
}

impl<'a> Placed<'a> {
    pub(super) fn new(r: &'a Observed) -> Self {
        let at = r.chunks.iter().map(|c| r.sent_s + c.0).collect();
        let mut acc = 0u64;
        let after_first = r
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i > 0 {
                    acc += u64::from(c.1);
                }
                acc
            })
            .collect();
        Self { r, at, after_first }
    }
    pub(super) fn first(&self) -> f64 {
        self.at[0]
    }
    pub(super) fn last(&self) -> f64 {
        self.at[self.at.len() - 1]
    }
    /// Its context before a step that ends at `x`: prompt + tokens of chunks after the first
    /// that came before `x`.
    fn context_before(&self, x: f64) -> f64 {
        let n = self.at.partition_point(|&t| t < x);
        f64::from(self.r.prompt_tokens) + self.after_first[n.saturating_sub(1)] as f64
    }
}

/// Decode terms of each request of one run (all sent on one clock): `spec` says whether a chunk
/// is one step. Only a request's clean gaps count: a gap during which another request of the run
/// was waiting or prefilling (sent before the gap ended, first chunk after it began) is left out,
/// because a prefill stalls it (SGLang's passes) or shares its forward (mixed batches), at a cost
/// no decode term carries. With `lag` (results processed after the next pass) a request's last
/// gap is no step: its last chunk leaves at once when no pass follows.
fn run_terms(reqs: &[Observed], spec: bool, lag: bool) -> (Vec<Terms>, usize) {
    let mut placed: Vec<Placed> = reqs
        .iter()
        .filter(|r| r.chunks.len() >= 2)
        .map(Placed::new)
        .collect();
    placed.sort_by(|a, b| a.first().total_cmp(&b.first()));
    let longest = placed
        .iter()
        .map(|p| p.last() - p.first())
        .fold(0.0, f64::max);
    let firsts: Vec<f64> = placed.iter().map(Placed::first).collect();
    // Every request's wait and prefill, [sent, first chunk), the failed ones' included.
    let mut prefills: Vec<(f64, f64)> = reqs
        .iter()
        .filter_map(|r| Some((r.sent_s, r.sent_s + r.ttft_s()?)))
        .collect();
    prefills.sort_by(|a, b| a.0.total_cmp(&b.0));
    let longest_wait = prefills.iter().map(|p| p.1 - p.0).fold(0.0, f64::max);
    // Whether a wait or prefill overlaps (from, to): only those sent less than the longest wait
    // before `from` can, so a gap looks at its neighbours, not at the whole run.
    let busy = |from: f64, to: f64| {
        let lo = prefills.partition_point(|p| p.0 < from - longest_wait - 1e-9);
        let hi = prefills.partition_point(|p| p.0 < to);
        prefills[lo..hi].iter().any(|&(_, f)| f > from)
    };
    let mut out = Vec::new();
    let mut max_batch = 1;
    for (ri, r) in placed.iter().enumerate() {
        let lo = firsts.partition_point(|&f| f < r.first() - longest - 1e-9);
        let hi = firsts.partition_point(|&f| f <= r.last());
        let others: Vec<&Placed> = (lo..hi)
            .filter(|&q| q != ri && placed[q].last() >= r.first())
            .map(|q| &placed[q])
            .collect();
        let mut t = Terms {
            steps: 0.0,
            batch_steps: 0.0,
            context: 0.0,
            time_s: 0.0,
        };
        let gaps = if lag { r.at.len() - 1 } else { r.at.len() };
        // Chunks of one pass arrive within a fraction of a step of each other: a third of the
        // request's shortest gap (a step without a stall) tells them from the next pass's.
        let tol = r.at[..gaps]
            .windows(2)
            .map(|w| w[1] - w[0])
            .fold(f64::INFINITY, f64::min)
            / 3.0;
        for j in 1..gaps {
            let (s, e) = (r.at[j - 1], r.at[j]);
            let cut = e - tol;
            // (The request's own wait ended at its first chunk, before any of its gaps.)
            if busy(s + tol, cut) {
                continue;
            }
            // The gap is the pass that drew chunk j, or with `lag` the pass after it: then the
            // batch holds those released later, and chunk j's tokens are in its context.
            let at = if lag { e + tol } else { cut };
            let batch: Vec<&Placed> = others
                .iter()
                .copied()
                .filter(|q| q.first() < cut && if lag { q.last() > at } else { q.last() >= cut })
                .collect();
            let b = batch.len() + 1;
            max_batch = max_batch.max(b);
            let ctx0 =
                r.context_before(at) + batch.iter().map(|q| q.context_before(at)).sum::<f64>();
            let tokens = f64::from(r.r.chunks[j].1.max(1));
            let steps = if spec { 1.0 } else { tokens };
            t.steps += steps;
            t.batch_steps += steps * b as f64;
            t.context += steps * ctx0 + b as f64 * steps * (steps - 1.0) / 2.0;
            t.time_s += e - s;
        }
        if t.steps > 0.0 && t.time_s > 0.0 {
            out.push(t);
        }
    }
    (out, max_batch)
}

fn mean_row(ts: &[Terms]) -> (Vec<f64>, f64) {
    let n = ts.len().max(1) as f64;
    let mut row = vec![0.0; 3];
    let mut y = 0.0;
    for t in ts {
        let (r, v) = t.row();
        for (a, b) in row.iter_mut().zip(r) {
            *a += b / n;
        }
        y += v / n;
    }
    (row, y)
}

/// Fits decode to the sweep's requests (three contexts or more) and the load runs' (one vector
/// of requests per run). `base_per_request_s` stands in for `decode_per_request_s` when no run had
/// a batch above one.
pub fn fit_decode(
    sweep: &[Observed],
    loads: &[Vec<Observed>],
    spec: bool,
    lag: bool,
    base_per_request_s: f64,
) -> Result<DecodeFit, Unfit> {
    let mut rows = Vec::new();
    let mut y = Vec::new();
    let mut labels = Vec::new();
    for (ctx, reqs) in by_context(sweep) {
        let own: Vec<Observed> = reqs.into_iter().cloned().collect();
        let (terms, _) = run_terms_alone(&own, spec, lag);
        if terms.is_empty() {
            continue;
        }
        // The median request of the context by mean step time.
        let mut by_time: Vec<(Vec<f64>, f64)> = terms.iter().map(Terms::row).collect();
        by_time.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (row, v) = by_time.swap_remove(by_time.len() / 2);
        rows.push(row);
        y.push(v);
        labels.push((format!("step at context {ctx}"), terms.len()));
    }
    let contexts = rows.len();
    if contexts < 3 {
        return Err(Unfit {
            param: "decode_base_s, decode_per_context_token_s",
            missing: format!(
                "sweep requests with two or more output chunks at three or more context lengths (have {contexts})"
            ),
        });
    }
    let mut max_batch = 1;
    for (i, run) in loads.iter().enumerate() {
        let (terms, b) = run_terms(run, spec, lag);
        max_batch = max_batch.max(b);
        if terms.is_empty() || b < 2 {
            continue;
        }
        let (row, v) = mean_row(&terms);
        labels.push((
            format!("load run {} step (mean batch {:.1})", i + 1, row[1]),
            terms.len(),
        ));
        rows.push(row);
        y.push(v);
    }
    let mut notes = Vec::new();
    let fitted = max_batch >= 2 && rows.len() > contexts;
    let b = if fitted {
        lsq::solve_non_negative(&rows, &y)
    } else {
        None
    };
    let (b, per_request_fitted) = match b {
        Some(b) => (b, true),
        None => {
            notes.push(format!(
                "decode_per_request_s needs a load run at concurrency above 1 (largest batch seen: {max_batch}); kept from the base preset"
            ));
            let y1: Vec<f64> = rows
                .iter()
                .zip(&y)
                .map(|(r, v)| v - r[1] * base_per_request_s)
                .collect();
            let two: Vec<Vec<f64>> = rows.iter().map(|r| vec![r[0], r[2]]).collect();
            let b = lsq::solve_non_negative(&two, &y1).ok_or_else(|| Unfit {
                param: "decode_base_s, decode_per_context_token_s",
                missing: "sweep contexts of different lengths".into(),
            })?;
            (vec![b[0], base_per_request_s, b[1]], false)
        }
    };
    for (i, name) in [
        "decode_base_s",
        "decode_per_request_s",
        "decode_per_context_token_s",
    ]
    .iter()
    .enumerate()
    {
        if b[i] == 0.0 && (i != 1 || per_request_fitted) {
            notes.push(format!("{name} fitted negative and was set to 0"));
        }
    }
    let (points, r_squared) = fit_points(&rows, &y, labels, &b);
    Ok(DecodeFit {
        base_s: b[0],
        per_request_s: b[1],
        per_context_token_s: b[2],
        r_squared,
        points,
        notes,
        per_request_fitted,
        max_batch,
    })
}

/// Terms of requests that ran alone (batch one).
fn run_terms_alone(reqs: &[Observed], spec: bool, lag: bool) -> (Vec<Terms>, usize) {
    let mut out = Vec::new();
    for r in reqs {
        let (t, _) = run_terms(std::slice::from_ref(r), spec, lag);
        out.extend(t);
    }
    (out, 1)
}
