//! The prefill fit: TTFT of a request alone = way + passes x `prefill_base_s` + uncached tokens x
//! `prefill_per_token_s` + sum over passes of n x (context before + n / 2) x
//! `prefill_per_token_pair_s`, the prompt cut into passes of the chunked prefill size, on the
//! sweep's median TTFT per context. The way in and out is the server's own where it times TTFT
//! (SGLang's `first_token_latency`: [`Observed::way_s`]); else the load runs' stretches of
//! prefill passes ([`super::passes`]) join the fit where the sweep cannot tell the way in and out
//! from a pass's base cost.

use super::{
    by_context, decode, fit_points, lsq, median, passes, FitPoint, Observed, ServerFacts, Unfit,
};
use serde::Serialize;

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
    if let Some((way, n)) = reported_way(sweep) {
        // The server timed the rest: the three costs are fitted to TTFT less the way, on
        // relative errors (contexts' TTFTs span 10x and more, and every check reads percent).
        let terms: Vec<Vec<f64>> = rows
            .iter()
            .zip(&y)
            .map(|(r, v)| r[1..].iter().map(|x| x / v).collect())
            .collect();
        let less: Vec<f64> = y.iter().map(|v| (v - way) / v).collect();
        if let Some(c) = lsq::solve_non_negative(&terms, &less) {
            let b = [way, c[0], c[1], c[2]];
            notes.push(format!(
                "the way in and out is the server's own: the client's TTFT less its first_token_latency, the median of {n} sweep requests ({:.3} ms)",
                way * 1e3
            ));
            negative_notes(&b, false, &mut notes);
            let (points, r_squared) = fit_points(&rows, &y, labels, &b);
            return Ok(PrefillFit::new(&b, points, r_squared, notes));
        }
    }
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

/// The way in and out the server's own timing gives ([`Observed::way_s`]): the median over the
/// sweep's requests, at least 0, and how many reported it; `None` unless at least half of them
/// and three or more did.
fn reported_way(sweep: &[Observed]) -> Option<(f64, usize)> {
    let mut ways: Vec<f64> = sweep.iter().filter_map(|r| r.way_s).collect();
    let n = ways.len();
    (n >= 3 && 2 * n >= sweep.len()).then(|| (median(&mut ways).max(0.0), n))
}

/// Among the prefill fits with no cost negative, the closest to the sweep's medians, and of those
/// the one with the least way in and out. `merged` (the way in and out counted in
/// `prefill_base_s`, the negative costs refitted at 0) competes with each fit that leaves one of
/// the other three costs out and fits the way in and out instead (its negative costs refitted at
/// 0 too): with three contexts, where `merged` had to set a cost to 0 and so misses them, one of
/// those fits all three exactly or nearly.
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
        if let Some(b) = lsq::solve_non_negative(&sub, y) {
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
