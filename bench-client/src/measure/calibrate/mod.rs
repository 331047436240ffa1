//! Fitting the mock's own cost model to measured requests, so that a preset made from the fit
//! reproduces them (`bench-client calibrate`). Pure arithmetic on the mock's cost functions
//! (`mock-server/src/engine/{prefill,decode}.rs`), by least squares:
//!
//! - TTFT of a request alone = way + passes x `prefill_base_s` + uncached tokens x
//!   `prefill_per_token_s` + sum over passes of n x (context before + n / 2) x
//!   `prefill_per_token_pair_s`, the prompt cut into passes of the chunked prefill size. `way` is the
//!   constant way in and out (HTTP, network, the client), kept apart from prefill.
//! - A decode step = `decode_base_s` + sum of the batch's contexts x `decode_per_context_token_s`
//!   + batch size x `decode_per_request_s` (see [`decode`]).
//! - Speculative acceptance: position i's rate is the share of verify steps that accepted i
//!   drafts, among those that accepted at least i - 1 (the maximum-likelihood estimate).

pub mod decode;
pub mod lsq;
pub mod passes;
#[cfg(test)]
mod tests;

use serde::Serialize;

/// One successful request as calibration reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The context length asked (the sweep's point), which groups requests.
    pub context: u32,
    /// Prompt tokens (server-reported, else sent).
    pub prompt_tokens: u32,
    /// Prompt tokens the server had cached.
    pub cached_tokens: u32,
    /// When it was sent, seconds after its run's start (0 for a sweep's requests, which run alone).
    pub sent_s: f64,
    /// Each output-carrying chunk: seconds after the send, and its tokens (1 each when unknown).
    pub chunks: Vec<(f64, u32)>,
    /// Whether the per-chunk token counts are known.
    pub counts_known: bool,
}

impl Observed {
    /// TTFT in seconds.
    pub fn ttft_s(&self) -> Option<f64> {
        self.chunks.first().map(|c| c.0)
    }

    /// Whether its chunks all arrived at one instant: the server held the stream and sent it
    /// whole (seen on vLLM on 2 cores), so it times none of the server's passes.
    pub fn held_whole(&self) -> bool {
        self.chunks.len() > 1 && self.chunks.iter().all(|c| c.0 == self.chunks[0].0)
    }
}

/// What the server said about itself (SGLang's `/server_info`), or flags in its place.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerFacts {
    /// Prefill tokens per pass; `None` or -1: no chunking.
    pub chunked_prefill_size: Option<i64>,
    /// KV pool tokens (`max_total_num_tokens`).
    pub kv_pool_tokens: Option<u64>,
    /// Whether speculative decoding is on, when the server says.
    pub speculative: Option<bool>,
    /// Draft tokens per verify step, when the server says.
    pub draft_tokens: Option<usize>,
    /// Tokens per stream event without speculation (1 unless the server says).
    pub stream_interval: Option<usize>,
    /// Whether a pass decodes the running batch beside its prefill (vLLM; SGLang's
    /// `enable_mixed_chunk`), when the server says.
    pub mixed_batches: Option<bool>,
    /// Whether a pass's results are processed only after the next pass (SGLang's overlap
    /// scheduler on the CPU backend), when the server says.
    pub results_after_next_pass: Option<bool>,
}

impl ServerFacts {
    /// Prefill tokens per pass (`usize::MAX` without chunking).
    pub fn chunk(&self) -> usize {
        match self.chunked_prefill_size {
            Some(c) if c > 0 => c as usize,
            _ => usize::MAX,
        }
    }
}

/// A measured figure beside the model's prediction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FitPoint {
    /// What the point is (e.g. `context 1000`).
    pub label: String,
    /// Requests behind it.
    pub n: usize,
    pub measured: f64,
    pub predicted: f64,
}

/// Each measured point beside the fit's prediction, and the fit's R-squared.
fn fit_points<L: Into<String>>(
    rows: &[Vec<f64>],
    y: &[f64],
    labels: Vec<(L, usize)>,
    b: &[f64],
) -> (Vec<FitPoint>, f64) {
    let points: Vec<FitPoint> = rows
        .iter()
        .zip(y)
        .zip(labels)
        .map(|((r, m), (label, n))| FitPoint {
            label: label.into(),
            n,
            measured: *m,
            predicted: lsq::predict(r, b),
        })
        .collect();
    let pred: Vec<f64> = points.iter().map(|p| p.predicted).collect();
    let r2 = lsq::r_squared(y, &pred);
    (points, r2)
}

impl FitPoint {
    /// (predicted - measured) / measured.
    pub fn rel_error(&self) -> f64 {
        if self.measured != 0.0 {
            (self.predicted - self.measured) / self.measured
        } else {
            0.0
        }
    }
}

/// Why a parameter was not fitted.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unfit {
    pub param: &'static str,
    pub missing: String,
}

/// The prefill fit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefillFit {
    pub way_s: f64,
    pub base_s: f64,
    pub per_token_s: f64,
    pub per_token_pair_s: f64,
    /// Median TTFT per context, seconds.
    pub points: Vec<FitPoint>,
    pub r_squared: f64,
    /// What the data could not separate, and how it was handled.
    pub notes: Vec<String>,
}

impl PrefillFit {
    /// The fit from its coefficients in the order of [`PREFILL_PARAMS`].
    fn new(b: &[f64], points: Vec<FitPoint>, r_squared: f64, notes: Vec<String>) -> Self {
        Self {
            way_s: b[0],
            base_s: b[1],
            per_token_s: b[2],
            per_token_pair_s: b[3],
            r_squared,
            points,
            notes,
        }
    }
}

/// How the prompt's uncached tokens fall into prefill passes: (passes, tokens, token pairs), the
/// three quantities prefill time is linear in.
pub fn prefill_terms(prompt: u32, cached: u32, chunk: usize) -> (f64, f64, f64) {
    let (mut ctx, end) = (cached.min(prompt) as usize, prompt as usize);
    let (mut passes, mut pairs) = (0.0f64, 0.0f64);
    let tokens = (end - ctx) as f64;
    while ctx < end {
        let n = (end - ctx).min(chunk);
        passes += 1.0;
        pairs += n as f64 * (ctx as f64 + n as f64 / 2.0);
        ctx += n;
    }
    (passes.max(1.0), tokens, pairs)
}

/// The median of `v` (the mean of the middle two for an even count); 0 for none.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Requests grouped by prompt length, in increasing order.
pub(crate) fn by_context(reqs: &[Observed]) -> Vec<(u32, Vec<&Observed>)> {
    let mut groups: std::collections::BTreeMap<u32, Vec<&Observed>> = Default::default();
    for r in reqs {
        groups.entry(r.context).or_default().push(r);
    }
    groups.into_iter().collect()
}

/// Fits prefill to the sweep's requests (each alone on the server), on the median TTFT at each
/// context. Needs three contexts; the way-in/out constant is kept apart from `prefill_base_s`
/// only when the number of prefill passes varies in a way the tokens do not explain.
/// With `lag` (results processed after the next pass), a request's first chunk also waited for
/// its first decode step, which `lag` predicts from the prompt length and is taken off TTFT.
///
/// `under_load` holds each load run's stretches of prefill passes ([`passes`]), which hold no
/// way in and out: where the sweep cannot tell it from `prefill_base_s` (three contexts, or as
/// many passes at each) and three or more are usable, they join the fit (each sweep median
/// weighted as the square root of its requests relative to its size, each stretch as in
/// `fit_with_load`) and tell the two apart.
pub fn fit_prefill(
    sweep: &[Observed],
    facts: &ServerFacts,
    lag: Option<&decode::DecodeFit>,
    under_load: &[Vec<passes::Stretch>],
) -> Result<PrefillFit, Unfit> {
    let chunk = facts.chunk();
    let groups = by_context(sweep);
    if groups.len() < 3 {
        return Err(Unfit {
            param: "prefill_base_s, prefill_per_token_s, prefill_per_token_pair_s",
            missing: format!(
                "successful sweep requests at three or more context lengths (have {})",
                groups.len()
            ),
        });
    }
    let mut rows = Vec::new();
    let mut y = Vec::new();
    let mut labels = Vec::new();
    for (ctx, reqs) in &groups {
        let mut ttft: Vec<f64> = reqs.iter().filter_map(|r| r.ttft_s()).collect();
        let mut cached: Vec<f64> = reqs.iter().map(|r| f64::from(r.cached_tokens)).collect();
        let mut prompt: Vec<f64> = reqs.iter().map(|r| f64::from(r.prompt_tokens)).collect();
        let prompt = median(&mut prompt).round() as u32;
        let (k, n, q) = prefill_terms(prompt, median(&mut cached).round() as u32, chunk);
        rows.push(vec![1.0, k, n, q]);
        let first_step = lag.map_or(0.0, |d| d.step_s(1, f64::from(prompt)));
        y.push(median(&mut ttft) - first_step);
        labels.push((format!("context {ctx}"), reqs.len()));
    }
    let mut notes = Vec::new();
    let (b, merged) = match lsq::solve_non_negative(&rows, &y) {
        Some(b) => (b, false),
        None => {
            // Three contexts for four parameters, or as many passes at every context (no
            // chunking, or every prompt under one chunk): the way in and out cannot be told from
            // the pass's base cost. Both are counted as prefill_base_s, which reproduces TTFT,
            // unless another cost then comes out negative: see `least_way`.
            let terms: Vec<Vec<f64>> = rows.iter().map(|r| vec![r[1], r[2], r[3]]).collect();
            let b = lsq::solve_non_negative(&terms, &y).ok_or_else(|| Unfit {
                param: "prefill_per_token_s, prefill_per_token_pair_s",
                missing:
                    "contexts whose prefill terms are not proportional (three distinct lengths)"
                        .into(),
            })?;
            let merged = vec![0.0, b[0], b[1], b[2]];
            let b = least_way(&rows, &y, merged);
            notes.push(if b[0] > 0.0 {
                format!(
                    "the sweep cannot tell the constant way in and out from a pass's base cost (three contexts): counted in prefill_base_s, a cost would come out negative; the way in and out is the least that fits the contexts with no cost negative ({:.3} ms)",
                    b[0] * 1e3
                )
            } else {
                "the sweep cannot tell the constant way in and out from a pass's base cost (three contexts, or as many passes at each): both are counted in prefill_base_s".into()
            });
            (b, true)
        }
    };
    // Only where the sweep cannot tell the way in and out apart itself: where it can (four or
    // more contexts of varying passes), its medians pin the costs more closely than the
    // stretches' few passes each, timed only as finely as the chunks' instants.
    if merged {
        if let Some(fit) = fit_with_load(&rows, &y, &labels, under_load, &b) {
            return Ok(fit);
        }
    }
    negative_notes(&b, merged, &mut notes);
    let (points, r_squared) = fit_points(&rows, &y, labels, &b);
    Ok(PrefillFit::new(&b, points, r_squared, notes))
}

/// Among the prefill fits with no cost negative, the closest to the sweep's medians, and of those
/// the one with the least way in and out. `merged` (the way in and out counted in
/// `prefill_base_s`, the negative costs refitted at 0) competes with each fit that leaves one of
/// the other three costs out and fits the way in and out instead: with three contexts, where
/// `merged` had to set a cost to 0 and so misses them, one of those fits all three exactly.
fn least_way(rows: &[Vec<f64>], y: &[f64], merged: Vec<f64>) -> Vec<f64> {
    let rss = |b: &[f64]| -> f64 {
        rows.iter()
            .zip(y)
            .map(|(r, v)| (lsq::predict(r, b) - v).powi(2))
            .sum()
    };
    let mut fits = vec![merged];
    for dropped in 1..4 {
        let cols: Vec<usize> = (0..4).filter(|&j| j != dropped).collect();
        let sub: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| cols.iter().map(|&j| r[j]).collect())
            .collect();
        if let Some(b) = lsq::solve(&sub, y).filter(|b| b.iter().all(|v| *v >= 0.0)) {
            let mut full = vec![0.0; 4];
            for (j, v) in cols.iter().zip(b) {
                full[*j] = v;
            }
            fits.push(full);
        }
    }
    let best = fits.iter().map(|b| rss(b)).fold(f64::INFINITY, f64::min);
    let scale: f64 = y.iter().map(|v| v * v).sum();
    fits.into_iter()
        .filter(|b| rss(b) <= best + 1e-12 * scale)
        .min_by(|a, b| a[0].total_cmp(&b[0]))
        .unwrap_or_else(|| vec![0.0; 4])
}

const PREFILL_PARAMS: [&str; 4] = [
    "way in and out",
    "prefill_base_s",
    "prefill_per_token_s",
    "prefill_per_token_pair_s",
];

/// A note for each parameter that fitted negative (0 now); merged into `prefill_base_s`, the way
/// in and out is 0 by construction.
fn negative_notes(b: &[f64], merged: bool, notes: &mut Vec<String>) {
    for (i, name) in PREFILL_PARAMS.iter().enumerate() {
        if b[i] == 0.0 && !(i == 0 && merged) {
            notes.push(format!("{name} fitted negative and was set to 0"));
        }
    }
}

/// The prefill fit on the sweep's medians (`rows`, `y`, `labels`) and the load runs' stretches
/// together, weighted as [`fit_prefill`] says; `None` with fewer than three stretches or when
/// the rows do not determine the four parameters. Its points are the sweep's and one per load
/// run (its stretches summed).
///
/// `sweep_fit` (the sweep's alone) sizes each stretch: its weight is relative to that prediction,
/// not to its own measure, and a stretch under half or over twice the prediction is a misread
/// pass boundary (a first chunk that left after its pass's other chunks, a stalled server) and is
/// left out. So is a stretch that prefilled no prompt (a slow decode step).
fn fit_with_load(
    rows: &[Vec<f64>],
    y: &[f64],
    labels: &[(String, usize)],
    under_load: &[Vec<passes::Stretch>],
    sweep_fit: &[f64],
) -> Option<PrefillFit> {
    let load_row = |s: &passes::Stretch| vec![0.0, s.passes, s.tokens, s.pairs];
    let sized = |s: &passes::Stretch| lsq::predict(&load_row(s), sweep_fit);
    let under_load: Vec<Vec<&passes::Stretch>> = under_load
        .iter()
        .map(|run| {
            run.iter()
                .filter(|s| {
                    let (v, p) = (s.time_s - s.batch_s, sized(s));
                    s.tokens > 0.0 && p > 0.0 && v > 0.5 * p && v < 2.0 * p
                })
                .collect()
        })
        .collect();
    let count: usize = under_load.iter().map(Vec::len).sum();
    if count < 3 {
        return None;
    }
    let mut wx = Vec::new();
    let mut wy = Vec::new();
    for ((r, v), (_, n)) in rows.iter().zip(y).zip(labels) {
        let w = (*n as f64).sqrt() / v.abs().max(1e-9);
        wx.push(r.iter().map(|x| x * w).collect::<Vec<f64>>());
        wy.push(v * w);
    }
    for &s in under_load.iter().flatten() {
        let w = 1.0 / sized(s);
        wx.push(load_row(s).iter().map(|x| x * w).collect());
        wy.push((s.time_s - s.batch_s) * w);
    }
    let b = lsq::solve_non_negative(&wx, &wy)?;
    let mut notes = vec![format!(
        "the way in and out is told from prefill by {count} stretches of prefill passes in the load runs (they hold none of it)"
    )];
    negative_notes(&b, false, &mut notes);
    let mut all_rows = rows.to_vec();
    let mut all_y = y.to_vec();
    let mut all_labels = labels.to_vec();
    for (i, run) in under_load.iter().enumerate() {
        if run.is_empty() {
            continue;
        }
        let mut sum = vec![0.0; 4];
        for &s in run {
            for (a, x) in sum.iter_mut().zip(load_row(s)) {
                *a += x;
            }
        }
        all_rows.push(sum);
        all_y.push(run.iter().map(|s| s.time_s - s.batch_s).sum());
        all_labels.push((format!("load run {} prefill passes", i + 1), run.len()));
    }
    let (points, r_squared) = fit_points(&all_rows, &all_y, all_labels, &b);
    Some(PrefillFit::new(&b, points, r_squared, notes))
}

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

/// Everything `calibrate` fits.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibration {
    pub prefill: PrefillFit,
    pub decode: decode::DecodeFit,
    pub shape: Shape,
}

/// Fits prefill, the stream's shape and decode. `base_per_request_s` stands in for
/// `decode_per_request_s` when no load run had a batch above one (a note says so).
pub fn calibrate(
    sweep: &[Observed],
    loads: &[Vec<Observed>],
    facts: &ServerFacts,
    base_per_request_s: f64,
) -> Result<Calibration, Unfit> {
    // Prefill first, so that what it cannot fit is what a refusal names.
    let mut prefill = fit_prefill(sweep, facts, None, &[])?;
    let all: Vec<Observed> = sweep
        .iter()
        .chain(loads.iter().flatten())
        .cloned()
        .collect();
    let spec = speculative(&all, facts);
    let shape = fit_shape(&all, facts);
    let lag = facts.results_after_next_pass == Some(true);
    let decode = decode::fit_decode(sweep, loads, spec, lag, base_per_request_s)?;
    // A pass's chunks come out at its end (with `lag`, the next pass's), so the gaps between
    // passes are their durations (not with tokens coalesced over steps: a step may send nothing).
    let coalesced = matches!(shape, Shape::Plain { stream_interval } if stream_interval > 1);
    let under_load: Vec<Vec<passes::Stretch>> = if coalesced {
        Vec::new()
    } else {
        loads
            .iter()
            .map(|run| passes::stretches(run, &decode, facts.chunk(), lag))
            .collect()
    };
    if lag || !under_load.is_empty() {
        prefill = fit_prefill(sweep, facts, lag.then_some(&decode), &under_load)?;
    }
    if lag {
        prefill.notes.push(
            "a pass's results leave after the next pass (SGLang's overlap scheduler on CPU): TTFT is fitted less the request's first decode step".into(),
        );
    }
    Ok(Calibration {
        prefill,
        decode,
        shape,
    })
}

/// The share of memory bandwidth a per-context decode cost implies: reading `kv_bytes_per_token`
/// of KV per context token in `per_context_token_s` seconds, over `bandwidth_gbs` (10^9 bytes/s).
pub fn bandwidth_share(
    per_context_token_s: f64,
    kv_bytes_per_token: f64,
    bandwidth_gbs: f64,
) -> Option<f64> {
    (per_context_token_s > 0.0 && bandwidth_gbs > 0.0)
        .then(|| kv_bytes_per_token / per_context_token_s / (bandwidth_gbs * 1e9))
}
