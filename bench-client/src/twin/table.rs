//! Twins from aggregate tables (`calibrate --table`): the mock's cost model fitted by
//! simulation. Each row's closed loop runs on the engine path ([`run_closed`]); Nelder-Mead
//! (argmin) moves the costs, in log space, to minimise the squared log ratios of predicted to
//! measured TTFT and TPOT over the rows, from the closed-form first guess
//! ([`crate::measure::table::guess`]). Where rows saturate ([`saturation`]), the capacity that
//! makes requests queue is fitted too: the KV pool or the running batch's cap, whichever fits.
//! Where every row has one input length, a weak prior holds the cost per token ([`prior_cost`]).

use std::cell::{Cell, RefCell};

use argmin::core::{CostFunction, Executor};
use argmin::solver::neldermead::NelderMead;
use mock_server::config::Discrepancy;
use mock_server::Config;

use crate::drive::engine::closed::{
    measured_requests, run_closed, search_requests, ClosedError, Shape,
};
use crate::measure::table::saturation::{saturation, Saturation};
use crate::measure::table::{
    guess, log_ratio_sq, prior_cost, Capacity, Point, TableModel, EXPONENT_INDEX, PAIR_INDEX,
    POOL_INDEX,
};
use crate::report::twin_table::RowView;
use crate::results::table::TableRow;
use crate::twin::discrepancy;

/// Where the model cannot reach a row's measurement, and what the simulation said instead.
pub const UNREACHED_COST: f64 = 25.0;

/// [`TableFitOptions::chunk`] for a server that prefills each prompt in one pass (`-1`).
pub const UNCHUNKED: usize = usize::MAX / 4;

/// How a table is fitted.
#[derive(Clone, Debug)]
pub struct TableFitOptions {
    /// Prefill tokens per pass (SGLang's `chunked_prefill_size`, vLLM's `max_num_batched_tokens`).
    pub chunk: usize,
    /// vLLM's scheduler: prefill and decode in one pass.
    pub mixed: bool,
    /// Objective evaluations Nelder-Mead may spend (each runs every row's closed loop).
    pub max_evals: u64,
    /// Prefill chunks to choose among where the server's is not known: each is fitted with a
    /// third of the evaluations, and the one whose rows fit best goes on with the rest. Empty:
    /// `chunk` alone.
    pub chunk_choices: Vec<usize>,
    /// Where the search starts instead of the closed-form guess (a round trip starts it off the
    /// known costs, so that the search, not the guess, must find them).
    pub start: Option<TableModel>,
    /// Counts each evaluation, where a caller shows the fit's progress.
    pub progress: Option<indicatif::ProgressBar>,
}

impl Default for TableFitOptions {
    fn default() -> Self {
        TableFitOptions {
            chunk: 8192,
            mixed: false,
            max_evals: 250,
            chunk_choices: Vec::new(),
            start: None,
            progress: None,
        }
    }
}

/// The KV pool of a base preset no table row fills: every row runs unqueued unless the fit
/// says otherwise.
pub const OPEN_POOL_TOKENS: f64 = 16_777_216.0;

/// The base of a table twin: `base` with what a table cannot show set plainly, each a mark in
/// the preset: no speculation (a table has no per-chunk counts), no output processing, no
/// activation memory (a table shows no OOM), the scheduler and chunk of `opts`.
pub fn table_base(base: &Config, opts: &TableFitOptions, context: usize) -> Config {
    let mut c = base.clone();
    c.speculative_algorithm = "none".into();
    c.spec_accept_rates.clear();
    c.spec_warmup_shares.clear();
    c.spec_warmup_steps = 0;
    c.spec_first_token_alone = false;
    c.stream_interval = 1;
    c.output_per_request_s = 0.0;
    c.results_after_next_pass = false;
    c.activation_bytes_per_extend_token = 0.0;
    c.activation_bytes_per_context_token = 0.0;
    c.fragmentation_bytes_per_context_token = 0.0;
    c.mixed_batches = opts.mixed;
    c.chunked_prefill_size = match i64::try_from(opts.chunk) {
        Ok(n) if opts.chunk < UNCHUNKED => n,
        _ => -1,
    };
    c.max_running_requests = c.max_running_requests.max(1024);
    c.context_length = context.max(2);
    c.time_scale = 1.0;
    set_pool(&mut c, OPEN_POOL_TOKENS);
    c
}

/// Sets the KV pool to `tokens` through `weights_bytes` (and `gpu_total_bytes` where the static
/// share is too small), as the server's reported pool is set in `calibrate`.
pub fn set_pool(c: &mut Config, tokens: f64) {
    let kv = (tokens.max(2.0).floor() + 0.5) * c.kv_bytes_per_token.max(1) as f64;
    if c.static_bytes() < kv + 1.0 {
        c.gpu_total_bytes = ((kv + 1.0) / c.mem_fraction_static).ceil() as u64;
    }
    c.weights_bytes = (c.static_bytes() - kv).floor().max(0.0) as u64;
}

/// `base` with the model's costs (and pool, where fitted).
pub fn apply(base: &Config, m: &TableModel) -> Config {
    let mut c = base.clone();
    c.stream_latency_s = m.way_s;
    c.prefill_base_s = m.prefill_base_s;
    c.prefill_per_token_s = m.prefill_per_token_s;
    c.prefill_per_token_pair_s = m.prefill_per_token_pair_s;
    c.decode_base_s = m.decode_base_s;
    c.decode_per_context_token_s = m.decode_per_context_token_s;
    c.decode_per_request_s = m.decode_per_request_s;
    c.decode_batch_exponent = m.decode_batch_exponent;
    if let Some(p) = m.kv_pool_tokens {
        set_pool(&mut c, p);
    }
    if let Some(r) = m.max_running_requests {
        c.max_running_requests = (r.round() as usize).max(1);
    }
    c
}

/// A point's closed loop on `cfg`: the mean TTFT and TPOT (s), or why the model gave none.
pub fn predict_point(cfg: &Config, p: &Point) -> Result<(f64, Option<f64>), ClosedError> {
    loop_means(cfg, p, measured_requests(p.concurrency))
}

fn loop_means(cfg: &Config, p: &Point, measured: u64) -> Result<(f64, Option<f64>), ClosedError> {
    let shape = Shape {
        isl: p.isl,
        osl: p.osl,
        concurrency: p.concurrency,
    };
    let m = run_closed(cfg, shape, measured)?;
    Ok((m.ttft_s, m.tpot_s))
}

/// The objective: every row's closed loop at a log vector of parameters.
struct Objective<'a> {
    base: &'a Config,
    points: &'a [Point],
    /// The search's vector fills these places of the model's log vector; the others keep
    /// `template`'s values (the costs the rows cannot show, held).
    free: &'a [usize],
    template: &'a [f64],
    /// The kind of the capacity the vector's last place holds, where it has one.
    capacity: Capacity,
    evals: &'a Cell<u64>,
    /// Run each loop at the full measured count (else the search's shorter one).
    full: bool,
    /// The search's best point and its cost so far, and the evaluations it may spend: once
    /// they are spent the search is stopped (Nelder-Mead's shrinks can spend n at once) and
    /// its best point kept.
    best: Option<&'a RefCell<(Vec<f64>, f64)>>,
    budget: u64,
    progress: Option<&'a indicatif::ProgressBar>,
}

impl Objective<'_> {
    fn cost_of(&self, m: &TableModel) -> f64 {
        self.evals.set(self.evals.get() + 1);
        if let Some(p) = self.progress {
            p.inc(1);
        }
        let cfg = apply(self.base, m);
        let mut sum = 0.0;
        for p in self.points {
            let n = if self.full {
                measured_requests(p.concurrency)
            } else {
                search_requests(self.base, p.concurrency)
            };
            match loop_means(&cfg, p, n) {
                Ok((ttft, tpot)) => {
                    if let Some(t) = p.ttft_s {
                        sum += log_ratio_sq(ttft, t);
                    }
                    if let (Some(t), Some(pred)) = (p.tpot_s, tpot) {
                        sum += log_ratio_sq(pred, t);
                    }
                }
                Err(_) => sum += UNREACHED_COST,
            }
        }
        // The cost per token pair is held where every row has one input length
        // ([`held_parameters`]): there the cost per token has the prior too.
        if !self.free.contains(&PAIR_INDEX) {
            sum += prior_cost(m);
        }
        sum / self.points.len().max(1) as f64
    }
}

impl CostFunction for Objective<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Self::Param) -> Result<f64, argmin::core::Error> {
        if self.evals.get() >= self.budget {
            return Err(anyhow::anyhow!("the evaluation budget is spent"));
        }
        let c = self.cost_of(&TableModel::from_log(
            &expand(self.template, self.free, x),
            self.capacity,
        ));
        if let Some(b) = self.best {
            let mut b = b.borrow_mut();
            if c < b.1 {
                *b = (x.clone(), c);
            }
        }
        Ok(c)
    }
}

/// `template` with the search's vector `x` in the places `free` names.
fn expand(template: &[f64], free: &[usize], x: &[f64]) -> Vec<f64> {
    let mut v = template.to_vec();
    for (&i, &xi) in free.iter().zip(x) {
        v[i] = xi;
    }
    v
}

/// The places of the log vector the fit holds, their costs at 0: the cost per token pair where
/// every row has one input length (its pairs are then a fixed cost per prompt, which the cost
/// per token carries; fitted, it takes any value the rows allow and extrapolates to longer
/// prompts as it pleases).
pub fn held_parameters(points: &[Point]) -> Vec<usize> {
    if one_input_length(points) {
        vec![PAIR_INDEX]
    } else {
        Vec::new()
    }
}

/// Whether every row has the same input length.
fn one_input_length(points: &[Point]) -> bool {
    points.windows(2).all(|w| w[0].isl == w[1].isl)
}

/// Whether a fit chooses its chunk among `opts.chunk_choices` (else it runs at `opts.chunk`):
/// where two or more are offered and the rows have more than one input length. Prompts of one
/// length take the same passes at any chunk but for the first wave, which the per-pass and
/// per-token costs absorb, so the rows cannot tell the chunks apart and the choice would follow
/// their noise.
pub fn chooses_chunk(points: &[Point], opts: &TableFitOptions) -> bool {
    opts.chunk_choices.len() >= 2 && !one_input_length(points)
}

/// Each cost the guess left at 0 starts where it adds 1% to the smallest measured time, so
/// that Nelder-Mead's first steps can tell whether the rows want it.
fn visible(mut m: TableModel, points: &[Point]) -> TableModel {
    let min = |f: &dyn Fn(&Point) -> Option<f64>| {
        points.iter().filter_map(f).fold(f64::INFINITY, f64::min)
    };
    let max = |f: &dyn Fn(&Point) -> f64| points.iter().map(f).fold(1.0, f64::max);
    let ttft = 0.01 * min(&|p| p.ttft_s);
    let tpot = 0.01 * min(&|p| p.tpot_s);
    let isl = max(&|p| f64::from(p.isl));
    let c = max(&|p| f64::from(p.concurrency));
    let ctx = max(&|p| f64::from(p.concurrency) * (f64::from(p.isl) + f64::from(p.osl) / 2.0));
    let fix = |x: &mut f64, v: f64| {
        if (x.is_nan() || *x <= 0.0) && v.is_finite() && v > 0.0 {
            *x = v;
        }
    };
    fix(&mut m.way_s, ttft);
    fix(&mut m.prefill_base_s, ttft);
    fix(&mut m.prefill_per_token_s, ttft / isl);
    fix(&mut m.prefill_per_token_pair_s, ttft / (isl * isl / 2.0));
    fix(&mut m.decode_base_s, tpot);
    fix(&mut m.decode_per_context_token_s, tpot / ctx);
    fix(&mut m.decode_per_request_s, tpot / c);
    m
}

/// A fitted table twin.
#[derive(Clone, Debug)]
pub struct TableFit {
    pub guess: TableModel,
    pub model: TableModel,
    pub config: Config,
    /// The objective at the guess and at the fit (mean squared log ratio per row).
    pub guess_cost: f64,
    pub cost: f64,
    /// Objective evaluations spent (each runs every row's closed loop).
    pub evals: u64,
    /// Where the rows saturate, the capacity fitted (the KV pool or the running cap).
    pub capacity: Option<Capacity>,
    /// Whether the cost per token pair was held at 0 ([`held_parameters`]) and the cost per
    /// token had the prior ([`prior_cost`]): every row has one input length.
    pub pair_held: bool,
    /// The prefill tokens a pass the fit ran with (chosen where `chunk_choices` offers several).
    pub chunk: usize,
}

/// The prefill chunks a table fit chooses among where the server's is not given: SGLang's
/// `chunked_prefill_size` and vLLM's `max_num_batched_tokens` as deployments set them on
/// H100 to B300 (8,192 by default on H100-class GPUs, 16,384 on larger ones, raised further
/// for long prompts).
pub const CHUNK_CHOICES: [usize; 3] = [8192, 16384, 32768];

/// Fits `points` (each with its measured TTFT and TPOT) on the table base made from `base`.
/// Where several chunks in `opts.chunk_choices` can be told apart ([`chooses_chunk`]), each is
/// fitted briefly with the KV pool. Where the rows queue ([`saturation`]), the running requests'
/// cap is fitted as briefly at the best chunk, beside the pool's brief fit, and goes on if it fits
/// better; else the pool's search runs as it would alone. The best goes on with the rest of the
/// evaluations.
pub fn fit_table(
    base: &Config,
    points: &[Point],
    opts: &TableFitOptions,
) -> anyhow::Result<TableFit> {
    let at = |chunk: usize, max_evals: u64, start: Option<TableModel>| TableFitOptions {
        chunk,
        max_evals,
        chunk_choices: Vec::new(),
        start,
        ..opts.clone()
    };
    let brief = (opts.max_evals / 3).max(1);
    let rest = opts.max_evals.saturating_sub(brief).max(1);
    let saturated = saturation(points);
    let mut spent = 0;
    // A brief fit goes on from where it ended, with its chunk and capacity and the rest of the
    // evaluations; the better of the two is the fit.
    let go_on = |first: TableFit, spent: u64| -> anyhow::Result<TableFit> {
        let capacity = first.capacity.unwrap_or(Capacity::PoolTokens);
        let fit = fit_one(
            base,
            points,
            &at(first.chunk, rest, Some(first.model)),
            capacity,
            saturated,
        )?;
        let evals = spent + fit.evals;
        let mut fit = if fit.cost > first.cost { first } else { fit };
        fit.evals = evals;
        Ok(fit)
    };
    let brief_fit = |chunk, capacity| {
        fit_one(
            base,
            points,
            &at(chunk, brief, opts.start),
            capacity,
            saturated,
        )
    };
    let mut best: Option<TableFit> = None;
    if chooses_chunk(points, opts) {
        for &chunk in &opts.chunk_choices {
            let fit = brief_fit(chunk, Capacity::PoolTokens)?;
            spent += fit.evals;
            if best.as_ref().is_none_or(|b| fit.cost < b.cost) {
                best = Some(fit);
            }
        }
    }
    let chunk = best.as_ref().map_or(opts.chunk, |b| b.chunk);
    if saturated.is_some() {
        let pool = match &best {
            Some(b) => b.cost,
            None => {
                let fit = brief_fit(chunk, Capacity::PoolTokens)?;
                spent += fit.evals;
                fit.cost
            }
        };
        let cap = brief_fit(chunk, Capacity::RunningRequests)?;
        spent += cap.evals;
        if cap.cost < pool {
            return go_on(cap, spent);
        }
    }
    match best {
        Some(first) => go_on(first, spent),
        None => {
            let mut fit = fit_one(
                base,
                points,
                &at(chunk, opts.max_evals, opts.start),
                Capacity::PoolTokens,
                saturated,
            )?;
            fit.evals += spent;
            Ok(fit)
        }
    }
}

/// Fits `points` at `opts.chunk`, with a capacity of kind `capacity` where they saturate
/// (`saturated`: [`saturation`] of `points`).
fn fit_one(
    base: &Config,
    points: &[Point],
    opts: &TableFitOptions,
    capacity: Capacity,
    saturated: Option<Saturation>,
) -> anyhow::Result<TableFit> {
    let context = points
        .iter()
        .map(|p| (p.isl + p.osl) as usize)
        .max()
        .unwrap_or(2);
    let base = table_base(
        base,
        opts,
        context.max(base.context_length.min(context * 2)),
    );
    let mut start = opts
        .start
        .unwrap_or_else(|| visible(guess::first_guess(points, opts.chunk, opts.mixed), points));
    let guess = saturated.map(|s| (capacity, s.guess(capacity)));
    // A start that holds a fitted capacity of this kind keeps it.
    let kept = start.capacity().filter(|(k, _)| *k == capacity);
    start = start.with_capacity(guess.and(kept.or(guess)));
    let held = held_parameters(points);
    let one_input = held.contains(&PAIR_INDEX);
    if one_input {
        start.prefill_per_token_pair_s = 0.0;
    }
    let template = start.to_log();
    let free: Vec<usize> = (0..template.len()).filter(|i| !held.contains(i)).collect();
    let evals = Cell::new(0);
    let obj = Objective {
        base: &base,
        points,
        free: &free,
        template: &template,
        capacity,
        evals: &evals,
        full: true,
        best: None,
        budget: u64::MAX,
        progress: opts.progress.as_ref(),
    };
    let guess_cost = obj.cost_of(&start);
    let x0: Vec<f64> = free.iter().map(|&i| template[i]).collect();
    let n = x0.len();
    // A simplex around `x`: `x`, and each parameter doubled (the exponent divided by 1.25, the
    // capacity 1.5 times), the steps in log space scaled by `scale`.
    let simplex = |x: &[f64], scale: f64| {
        let mut s = vec![x.to_vec()];
        for i in 0..n {
            let mut v = x.to_vec();
            v[i] += scale
                * match free[i] {
                    EXPONENT_INDEX => -(1.25f64.ln()),
                    POOL_INDEX => 1.5f64.ln(),
                    _ => 2f64.ln(),
                };
            s.push(v);
        }
        s
    };
    let tracked = RefCell::new((x0.clone(), f64::INFINITY));
    // The first simplex is evaluated whole before the search can be stopped.
    let budget = evals.get() + opts.max_evals.max(n as u64 + 2);
    // Nelder-Mead runs again from its best point, on a simplex a quarter the size, while the
    // budget allows a new simplex and the last run gained: a simplex that collapsed along one
    // direction stops short of the minimum (a new simplex scores its first vertex, the best
    // point, again). A spent budget ends a run with an error; the best point tracked is the
    // result.
    let (mut from, mut scale, mut last) = (x0, 1.0, f64::INFINITY);
    loop {
        let solver = NelderMead::new(simplex(&from, scale)).with_sd_tolerance(1e-7)?;
        let _ = Executor::new(
            Objective {
                base: &base,
                points,
                free: &free,
                template: &template,
                capacity,
                evals: &evals,
                // A queue settles over waves, not within two: the search's short loops would
                // put its TTFT 15% below the full count's (a cap of 16 at 32 in flight).
                full: saturated.is_some(),
                best: Some(&tracked),
                budget,
                progress: opts.progress.as_ref(),
            },
            solver,
        )
        .configure(|s| s.max_iters(opts.max_evals))
        .run();
        let (best, cost) = tracked.borrow().clone();
        if evals.get() + n as u64 + 1 > budget || cost >= last * (1.0 - 1e-9) {
            break;
        }
        (from, scale, last) = (best, 0.25, cost);
    }
    let best = tracked.into_inner().0;
    let mut model = TableModel::from_log(&expand(&template, &free, &best), capacity).floored();
    if saturated.is_none() {
        model = model.with_capacity(None);
    }
    let cost = obj.cost_of(&model);
    Ok(TableFit {
        guess: start,
        model,
        config: apply(&base, &model),
        guess_cost,
        cost,
        evals: evals.get(),
        capacity: saturated.map(|_| capacity),
        pair_held: one_input,
        chunk: opts.chunk,
    })
}

/// A point of a table row (times in seconds).
pub fn point_of(r: &TableRow) -> Point {
    Point {
        isl: r.isl,
        osl: r.osl,
        concurrency: r.concurrency,
        ttft_s: r.ttft_ms.map(|v| v / 1e3),
        tpot_s: r.tpot_ms.map(|v| v / 1e3),
    }
}

/// The smallest TPOT the model can give a row: its lone request's decode step (batch of one at
/// its prompt's context). A measured TPOT below it cannot be reached by any batch.
pub fn lone_step_s(cfg: &Config, p: &Point) -> f64 {
    cfg.decode_base_s
        + cfg.decode_per_context_token_s * f64::from(p.isl)
        + cfg.decode_batch_cost_s(1)
}

/// Every row's closed loop on `cfg` at the full measured count, times the `discrepancy` of its
/// shape where one is given ([`discrepancy::ratios`]), beside its measurement; a row the model
/// cannot run or reach, or one past the fitted rows' ([`discrepancy::extrapolated`]), says
/// so in its note.
pub fn predict_rows(cfg: &Config, rows: &[TableRow], discrepancy: &[Discrepancy]) -> Vec<RowView> {
    rows.iter()
        .map(|r| {
            let p = point_of(r);
            let (pred, mut notes) = match predict_point(cfg, &p) {
                Ok(v) => (Some(v), Vec::new()),
                Err(e) => (None, vec![format!("the model cannot run it: {e}")]),
            };
            let (rt, rd) = discrepancy::ratios(discrepancy, r.isl, r.osl, r.concurrency);
            let model = pred.filter(|_| rt.is_some() || rd.is_some());
            let pred = pred.map(|(t, d)| (t * rt.unwrap_or(1.0), d.map(|d| d * rd.unwrap_or(1.0))));
            let lone = lone_step_s(cfg, &p);
            if pred.is_some() {
                if p.tpot_s.is_some_and(|t| t < lone) {
                    // Where the discrepancy carries TPOT, the prediction may meet the row: the
                    // note speaks of the model alone.
                    let by = if rd.is_some() {
                        " by the model alone"
                    } else {
                        ""
                    };
                    notes.push(format!(
                        "unreachable{by}: TPOT below the model's lone decode step {:.2} ms",
                        lone * 1e3
                    ));
                }
                notes.extend(discrepancy::extrapolated(
                    &cfg.discrepancy,
                    (r.isl, r.osl, r.concurrency),
                ));
            }
            let note = (!notes.is_empty()).then(|| notes.join("; "));
            // Line 0: a row from a results file.
            let mut v = RowView::new(
                Some(r.line).filter(|&l| l > 0),
                (r.isl, r.osl, r.concurrency),
                pred,
                (r.ttft_ms, r.tpot_ms),
                note,
            );
            if let Some((t, d)) = model {
                v.model_ttft_ms = rt.map(|_| t * 1e3);
                v.model_tpot_ms = rd.and(d).map(|d| d * 1e3);
            }
            v
        })
        .collect()
}
