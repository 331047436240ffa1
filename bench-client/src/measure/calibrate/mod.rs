//! Fitting the mock's own cost model to measured requests, so that a preset made from the fit
//! reproduces them (`bench-client calibrate`). Pure arithmetic on the mock's cost functions
//! (`mock-server/src/engine/{prefill,decode}.rs`), by least squares:
//!
//! - TTFT of a request alone = way + its prefill passes ([`prefill`]); `way` is the constant way
//!   in and out (HTTP, network, the client), kept apart from prefill by the server's own timing
//!   where it reports one, else with the load runs' stretches of prefill passes ([`passes`])
//!   where the sweep cannot tell them apart.
//! - A decode step = `decode_base_s` + sum of the batch's contexts x `decode_per_context_token_s`
//!   + batch size x `decode_per_request_s` ([`decode`]).
//! - The stream's shape: speculative acceptance or token coalescing ([`shape`]).

pub mod decode;
pub mod lsq;
pub mod passes;
pub mod prefill;
pub mod shape;

pub use prefill::{fit_prefill, prefill_terms, PrefillFit};
pub use shape::{fit_shape, speculative, Shape};
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
    /// The way in and out by the server's own timing: the client's TTFT less the server's
    /// first-token latency, where the server reports one (SGLang with `--enable-metrics`).
    pub way_s: Option<f64>,
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
    if lag {
        // A pass's results leave when the next pass ends, and a prefill pass that finishes no
        // prompt sends nothing, so its end shows nowhere: the load runs' passes are not read.
        prefill = fit_prefill(sweep, facts, Some(&decode), &[])?;
        prefill.notes.push(
            "a pass's results leave after the next pass (SGLang's overlap scheduler on CPU): TTFT is fitted less the request's first decode step".into(),
        );
    } else if !loads.is_empty()
        && !matches!(shape, Shape::Plain { stream_interval } if stream_interval > 1)
    {
        // A pass's chunks come out at its end, so the gaps between passes are their durations
        // (not with tokens coalesced over steps: a step may send nothing).
        let under_load: Vec<Vec<passes::Stretch>> = loads
            .iter()
            .map(|run| passes::stretches(run, &decode, facts.chunk()))
            .collect();
        prefill = fit_prefill(sweep, facts, None, &under_load)?;
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
