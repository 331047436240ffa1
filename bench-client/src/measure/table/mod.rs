//! Arithmetic for twins fitted from aggregate tables (`calibrate --table`, `predict`): the
//! fitted model's parameters and their log-space vector, relative errors and MAPE, the
//! closed-form first guess ([`guess`]), and the baselines and hold-out protocols that a fit must
//! beat ([`baseline`]). Pure functions: the closed loops themselves run in `drive`.

pub mod baseline;
pub mod guess;
pub mod saturation;

use serde::Serialize;

/// One point of a table as the fit sees it: its shape and, where measured, its means (s).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point {
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
    pub ttft_s: Option<f64>,
    pub tpot_s: Option<f64>,
}

/// The parameters a table fit moves, in the mock's units (seconds, tokens).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TableModel {
    /// The constant way in and out of TTFT (`stream_latency_s`).
    pub way_s: f64,
    pub prefill_base_s: f64,
    pub prefill_per_token_s: f64,
    pub prefill_per_token_pair_s: f64,
    pub decode_base_s: f64,
    pub decode_per_context_token_s: f64,
    pub decode_per_request_s: f64,
    /// The batch's decode cost grows as batch^exponent (`decode_batch_exponent`).
    pub decode_batch_exponent: f64,
    /// The KV pool in tokens, fitted only where rows saturate and the pool is what fits them
    /// (else `None`: the base's).
    pub kv_pool_tokens: Option<f64>,
    /// The running batch's cap in requests, fitted only where rows saturate and the cap is
    /// what fits them (else `None`: the base's). At most one of the two is fitted.
    pub max_running_requests: Option<f64>,
}

/// What makes a saturated deployment's requests queue: a full KV pool (its requests' contexts
/// fill it, so the longer the outputs, the fewer run) or a cap on the running batch (SGLang's
/// `max_running_requests`, vLLM's `max_num_seqs`: the same number run whatever their lengths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Capacity {
    PoolTokens,
    RunningRequests,
}

/// The range the batch's decode exponent is fitted in.
pub const EXPONENT: (f64, f64) = (0.05, 2.0);

/// Where the cost per token pair, the exponent and the capacity (the KV pool or the running cap)
/// sit in the fit's log vector (the last two after the seven costs).
pub const PAIR_INDEX: usize = 3;
pub const EXPONENT_INDEX: usize = 7;
pub const POOL_INDEX: usize = 8;

/// The smallest value each cost takes in the fit's log space (a cost the rows do not show
/// sinks there and changes nothing): way, prefill base, per token, per pair, decode base, per
/// context token, per request.
const FLOORS: [f64; 7] = [1e-6, 1e-6, 1e-10, 1e-15, 1e-6, 1e-13, 1e-8];

impl TableModel {
    /// Parameters a fit moves: the seven costs, the batch's exponent, and the capacity where
    /// the rows saturate (`saturated`).
    pub fn parameters(saturated: bool) -> usize {
        POOL_INDEX + usize::from(saturated)
    }

    /// Parameters this model's fit moves ([`TableModel::parameters`]).
    pub fn dimension(&self) -> usize {
        Self::parameters(self.capacity().is_some())
    }

    /// The fitted capacity: which, and its value (tokens or requests).
    pub fn capacity(&self) -> Option<(Capacity, f64)> {
        match (self.kv_pool_tokens, self.max_running_requests) {
            (Some(p), _) => Some((Capacity::PoolTokens, p)),
            (None, Some(r)) => Some((Capacity::RunningRequests, r)),
            (None, None) => None,
        }
    }

    /// The model with `capacity` as its only fitted capacity (`None`: neither).
    pub fn with_capacity(mut self, capacity: Option<(Capacity, f64)>) -> TableModel {
        self.kv_pool_tokens = None;
        self.max_running_requests = None;
        match capacity {
            Some((Capacity::PoolTokens, p)) => self.kv_pool_tokens = Some(p),
            Some((Capacity::RunningRequests, r)) => self.max_running_requests = Some(r),
            None => {}
        }
        self
    }

    /// The natural logarithms of the parameters (each cost at least its floor).
    pub fn to_log(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .costs()
            .iter()
            .zip(FLOORS)
            .map(|(c, f)| c.max(f).ln())
            .collect();
        v.push(
            self.decode_batch_exponent
                .clamp(EXPONENT.0, EXPONENT.1)
                .ln(),
        );
        if let Some((_, x)) = self.capacity() {
            v.push(x.max(1.0).ln());
        }
        v
    }

    /// The parameters of a log vector as [`TableModel::to_log`] makes it, its capacity (where
    /// it has one) of the kind `capacity`.
    pub fn from_log(v: &[f64], capacity: Capacity) -> TableModel {
        let e = |i: usize| v.get(i).map_or(0.0, |x| x.exp());
        TableModel {
            way_s: e(0),
            prefill_base_s: e(1),
            prefill_per_token_s: e(2),
            prefill_per_token_pair_s: e(3),
            decode_base_s: e(4),
            decode_per_context_token_s: e(5),
            decode_per_request_s: e(6),
            decode_batch_exponent: v
                .get(EXPONENT_INDEX)
                .map_or(1.0, |x| x.exp().clamp(EXPONENT.0, EXPONENT.1)),
            kv_pool_tokens: None,
            max_running_requests: None,
        }
        .with_capacity(v.get(POOL_INDEX).map(|x| (capacity, x.exp())))
    }

    fn costs(&self) -> [f64; 7] {
        [
            self.way_s,
            self.prefill_base_s,
            self.prefill_per_token_s,
            self.prefill_per_token_pair_s,
            self.decode_base_s,
            self.decode_per_context_token_s,
            self.decode_per_request_s,
        ]
    }

    /// Each cost at a floor is 0: the rows did not show it.
    pub fn floored(mut self) -> TableModel {
        let f = |x: &mut f64, floor: f64| {
            if *x <= floor * 1.000_001 {
                *x = 0.0;
            }
        };
        f(&mut self.way_s, FLOORS[0]);
        f(&mut self.prefill_base_s, FLOORS[1]);
        f(&mut self.prefill_per_token_s, FLOORS[2]);
        f(&mut self.prefill_per_token_pair_s, FLOORS[3]);
        f(&mut self.decode_base_s, FLOORS[4]);
        f(&mut self.decode_per_context_token_s, FLOORS[5]);
        f(&mut self.decode_per_request_s, FLOORS[6]);
        self
    }
}

/// The measured requests of a table row's closed loop: at least max(10 x concurrency, 200),
/// rounded up to whole waves of `concurrency` so that no wave is cut short.
pub fn measured_requests(concurrency: u32) -> u64 {
    let c = u64::from(concurrency.max(1));
    (10 * c).max(200).div_ceil(c) * c
}

/// A prediction beside the measurement: relative error in percent (`None` where not measured).
pub fn error_pct(predicted: f64, measured: Option<f64>) -> Option<f64> {
    measured
        .filter(|m| *m > 0.0)
        .map(|m| 100.0 * (predicted / m - 1.0))
}

/// Mean absolute percentage error of the errors given (`None` for none).
pub fn mape(errors_pct: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for e in errors_pct {
        sum += e.abs();
        n += 1;
    }
    (n > 0).then(|| sum / n as f64)
}

/// The median of `v` (mean of the middle two), `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// The fit's cost of one prediction against its measurement: the squared log ratio, so that
/// 10% high and 10% low weigh alike and a row's scale does not.
pub fn log_ratio_sq(predicted: f64, measured: f64) -> f64 {
    if !(predicted > 0.0 && measured > 0.0) {
        return 1e3;
    }
    (predicted / measured).ln().powi(2)
}

/// A prefill's cost per token over one request's decode step where the rows cannot tell it
/// (every row has one input length, so a cost per token cannot be told from a cost per prompt).
/// Per token a prefill does two FLOPs for each weight, where a decode step reads each weight
/// once, so the ratio is 2 x memory bandwidth / (FLOP/s x bytes per weight): one GPU's figure
/// for any model, quantisation and parallelism. The value lies within the GPUs' peak figures and
/// near the median of the fits that see two input lengths (BENCHMARKS.md, section 12).
pub const PREFILL_TOKEN_PER_DECODE_STEP: f64 = 0.0037;

/// The prior's weight beside one row's squared log ratios: (a row's noise / the ratio's spread
/// across deployments)^2, so that the rows rule wherever they tell the cost per token, and the
/// prior where they do not (BENCHMARKS.md, section 12).
pub const PRIOR_WEIGHT: f64 = 0.02;

/// The prior's cost of `m`: [`PRIOR_WEIGHT`] x the squared log ratio of its cost per token to
/// [`PREFILL_TOKEN_PER_DECODE_STEP`] x the decode step of one request (0 where either is 0).
pub fn prior_cost(m: &TableModel) -> f64 {
    let step = m.decode_base_s + m.decode_per_request_s;
    if !(step > 0.0 && m.prefill_per_token_s > 0.0) {
        return 0.0;
    }
    PRIOR_WEIGHT * log_ratio_sq(m.prefill_per_token_s, PREFILL_TOKEN_PER_DECODE_STEP * step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_vector_round_trips_and_floors_read_as_zero() {
        let m = TableModel {
            way_s: 0.01,
            prefill_base_s: 0.002,
            prefill_per_token_s: 3e-5,
            prefill_per_token_pair_s: 0.0,
            decode_base_s: 0.008,
            decode_per_context_token_s: 2e-9,
            decode_per_request_s: 1e-4,
            decode_batch_exponent: 1.0,
            kv_pool_tokens: Some(500_000.0),
            max_running_requests: None,
        };
        let back = TableModel::from_log(&m.to_log(), Capacity::PoolTokens).floored();
        assert_eq!(back.prefill_per_token_pair_s, 0.0);
        assert!((back.prefill_per_token_s / 3e-5 - 1.0).abs() < 1e-12);
        assert!((back.kv_pool_tokens.unwrap() / 5e5 - 1.0).abs() < 1e-12);
        assert_eq!(m.dimension(), 9);
        // The same place of the vector holds a running cap where that is the capacity.
        let capped = m.with_capacity(Some((Capacity::RunningRequests, 300.0)));
        let back = TableModel::from_log(&capped.to_log(), Capacity::RunningRequests);
        assert_eq!(back.kv_pool_tokens, None);
        assert!((back.max_running_requests.unwrap() / 300.0 - 1.0).abs() < 1e-12);
        assert_eq!(capped.dimension(), 9);
        assert_eq!(m.with_capacity(None).dimension(), 8);
    }

    #[test]
    fn errors_and_medians() {
        assert_eq!(error_pct(110.0, Some(100.0)).map(|e| e.round()), Some(10.0));
        assert_eq!(error_pct(1.0, None), None);
        assert_eq!(mape([10.0, -20.0]), Some(15.0));
        assert_eq!(mape([]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert!(log_ratio_sq(1.1, 1.0) > 0.0 && log_ratio_sq(1.0, 1.0) == 0.0);
    }
}
