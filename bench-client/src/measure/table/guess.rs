//! The closed-form first guess of a table fit: each row's closed loop read as waves of
//! `concurrency` requests sent together, prefilled in order in passes of the chunk size (the
//! first alone, as an idle engine admits it) and then decoded together. Non-negative least
//! squares on relative errors then give the costs: prefill from TTFT, decode from TPOT less the
//! prefill passes that stall a request after its first token.

use super::{Point, TableModel};
use crate::measure::calibrate::lsq;

/// A wave's prefill as the guess reads it, each term a coefficient of one prefill cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WaveFeatures {
    /// Mean over the wave's requests of the passes, tokens and token pairs up to the end of
    /// the pass that finishes its prompt.
    pub mean: [f64; 3],
    /// The whole wave's passes, tokens and token pairs.
    pub total: [f64; 3],
}

/// The prefill features of a wave of `c` prompts of `isl` tokens in passes of `chunk` tokens.
pub fn wave_features(isl: u32, c: u32, chunk: usize) -> WaveFeatures {
    let isl = isl as usize;
    let chunk = chunk.max(1);
    let mut acc = [0.0f64; 3];
    let mut sum = [0.0f64; 3];
    // The pass in progress: its tokens and pairs so far.
    let (mut pass_tokens, mut pass_pairs) = (0usize, 0.0f64);
    let mut finished_in_pass = 0usize;
    // An idle engine admits the first request alone; the others join from the second pass on.
    let mut first_pass = true;
    let close = |acc: &mut [f64; 3], sum: &mut [f64; 3], tokens: usize, pairs: f64, done: usize| {
        acc[0] += 1.0;
        acc[1] += tokens as f64;
        acc[2] += pairs;
        for k in 0..3 {
            sum[k] += acc[k] * done as f64;
        }
    };
    for _ in 0..c {
        let mut ctx = 0usize;
        while ctx < isl {
            let room = if first_pass {
                chunk.min(isl)
            } else {
                chunk - pass_tokens
            };
            let n = room.min(isl - ctx);
            pass_pairs += n as f64 * (ctx as f64 + n as f64 / 2.0);
            pass_tokens += n;
            ctx += n;
            let full = first_pass || pass_tokens >= chunk;
            if ctx >= isl {
                finished_in_pass += 1;
            }
            if full {
                close(
                    &mut acc,
                    &mut sum,
                    pass_tokens,
                    pass_pairs,
                    finished_in_pass,
                );
                pass_tokens = 0;
                pass_pairs = 0.0;
                finished_in_pass = 0;
                first_pass = false;
            }
        }
    }
    if pass_tokens > 0 {
        close(
            &mut acc,
            &mut sum,
            pass_tokens,
            pass_pairs,
            finished_in_pass,
        );
    }
    let n = f64::from(c.max(1));
    WaveFeatures {
        mean: [sum[0] / n, sum[1] / n, sum[2] / n],
        total: acc,
    }
}

/// Non-negative least squares of `y ~ x` in relative terms (each row divided by its `y`); where
/// the rows cannot tell every column apart, the last columns are dropped (their costs 0).
fn relative_fit(x: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let k = x.first().map_or(0, Vec::len);
    let xs: Vec<Vec<f64>> = x
        .iter()
        .zip(y)
        .map(|(r, yi)| r.iter().map(|v| v / yi).collect())
        .collect();
    let ones = vec![1.0; y.len()];
    for keep in (1..=k).rev() {
        let sub: Vec<Vec<f64>> = xs.iter().map(|r| r[..keep].to_vec()).collect();
        if let Some(mut b) = lsq::solve_non_negative(&sub, &ones) {
            b.resize(k, 0.0);
            return b;
        }
    }
    vec![0.0; k]
}

/// The first guess from the measured points (TTFT and TPOT in seconds), with prefill passes of
/// `chunk` tokens. With `mixed` passes (vLLM's scheduler) only a loop's first wave arrives at
/// once: the waves after it come apart (`drive::engine::closed`), each prompt prefilled as it
/// arrives, and a request's decode meets every other prompt's prefill once. Without them every
/// wave arrives at once.
pub fn first_guess(points: &[Point], chunk: usize, mixed: bool) -> TableModel {
    let feats: Vec<WaveFeatures> = points
        .iter()
        .map(|p| {
            let wave = wave_features(p.isl, p.concurrency, chunk);
            if !mixed {
                return wave;
            }
            let lone = wave_features(p.isl, 1, chunk).mean;
            let c = f64::from(p.concurrency.max(1));
            let waves = super::measured_requests(p.concurrency) as f64 / c;
            let mean: [f64; 3] =
                std::array::from_fn(|k| (wave.mean[k] + (waves - 1.0) * lone[k]) / waves);
            let total: [f64; 3] = std::array::from_fn(|k| {
                (wave.total[k] + (waves - 1.0) * (mean[k] + (c - 1.0) * lone[k])) / waves
            });
            WaveFeatures { mean, total }
        })
        .collect();
    // TTFT = way + passes x base + tokens x per_token + pairs x per_pair.
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for (p, f) in points.iter().zip(&feats) {
        if let Some(t) = p.ttft_s {
            x.push(vec![1.0, f.mean[0], f.mean[1], f.mean[2]]);
            y.push(t);
        }
    }
    let pre = relative_fit(&x, &y);
    let pass = |v: &[f64; 3]| v[0] * pre[1] + v[1] * pre[2] + v[2] * pre[3];
    // TPOT = step(batch, context) + the wave's prefill after a request's first token, per token;
    // the batch's exponent is the one of a grid whose fit leaves the least relative error.
    let mut rows = Vec::new();
    for (p, f) in points.iter().zip(&feats) {
        let Some(t) = p.tpot_s else { continue };
        let gaps = f64::from(p.osl.max(2) - 1);
        let stall = (pass(&f.total) - pass(&f.mean)).max(0.0) / gaps;
        let c = f64::from(p.concurrency);
        let ctx = c * (f64::from(p.isl) + f64::from(p.osl) / 2.0);
        rows.push((ctx, c, (t - stall).max(0.1 * t)));
    }
    let y: Vec<f64> = rows.iter().map(|r| r.2).collect();
    // From 1 down, so that rows that cannot tell exponents apart (one concurrency) keep 1.
    let (dec, exponent) = (4..=20)
        .rev()
        .map(|k| {
            let a = f64::from(k) * 0.05;
            let x: Vec<Vec<f64>> = rows.iter().map(|r| vec![1.0, r.0, r.1.powf(a)]).collect();
            let b = relative_fit(&x, &y);
            let err: f64 = x
                .iter()
                .zip(&y)
                .map(|(xi, yi)| {
                    (xi.iter().zip(&b).map(|(u, v)| u * v).sum::<f64>() / yi - 1.0).powi(2)
                })
                .sum();
            (b, a, err)
        })
        .min_by(|p, q| p.2.total_cmp(&q.2))
        .map_or((vec![0.0; 3], 1.0), |(b, a, _)| (b, a));
    TableModel {
        way_s: pre[0],
        prefill_base_s: pre[1],
        prefill_per_token_s: pre[2],
        prefill_per_token_pair_s: pre[3],
        decode_base_s: dec[0],
        decode_per_context_token_s: dec[1],
        decode_per_request_s: dec[2],
        decode_batch_exponent: exponent,
        kv_pool_tokens: None,
        max_running_requests: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_is_the_first_prompt_alone_then_full_chunks() {
        // 1 + 3 prompts of 1000 tokens in passes of 2000: [1000], [1000 + 1000], [1000]
        let f = wave_features(1000, 4, 2000);
        assert_eq!(f.total[0], 3.0);
        assert_eq!(f.total[1], 4000.0);
        // request 0 after pass 1, requests 1 and 2 after pass 2, request 3 after pass 3
        assert!((f.mean[0] - (1.0 + 2.0 + 2.0 + 3.0) / 4.0).abs() < 1e-12);
        assert!((f.mean[1] - (1000.0 + 3000.0 * 2.0 + 4000.0) / 4.0).abs() < 1e-9);
        // each prompt's pairs: 1000 x 500 whatever its passes
        assert!((f.total[2] - 4.0 * 1000.0 * 500.0).abs() < 1e-6);
    }

    #[test]
    fn a_split_prompt_counts_its_pairs_across_passes() {
        // 2 prompts of 3000 tokens in passes of 2000: [2000 of the first], [1000 + 1000], [2000]
        let f = wave_features(3000, 2, 2000);
        assert_eq!(f.total[0], 3.0);
        let pairs = 3000.0 * 1500.0;
        assert!((f.total[2] - 2.0 * pairs).abs() < 1e-6, "{:?}", f);
    }

    #[test]
    fn the_guess_recovers_costs_of_rows_made_by_its_own_reading() {
        let truth = TableModel {
            way_s: 0.02,
            prefill_base_s: 0.01,
            prefill_per_token_s: 5e-5,
            prefill_per_token_pair_s: 0.0,
            decode_base_s: 0.01,
            decode_per_context_token_s: 1e-8,
            decode_per_request_s: 2e-4,
            decode_batch_exponent: 1.0,
            kv_pool_tokens: None,
            max_running_requests: None,
        };
        let mut pts = Vec::new();
        for (isl, osl) in [(1000, 100), (4000, 500), (2000, 1000)] {
            for c in [1, 4, 16, 64] {
                let f = wave_features(isl, c, 8192);
                let pass = |v: &[f64; 3]| v[0] * 0.01 + v[1] * 5e-5;
                let cf = f64::from(c);
                let step = 0.01 + 1e-8 * cf * (f64::from(isl) + f64::from(osl) / 2.0) + 2e-4 * cf;
                pts.push(Point {
                    isl,
                    osl,
                    concurrency: c,
                    ttft_s: Some(0.02 + pass(&f.mean)),
                    tpot_s: Some(step + (pass(&f.total) - pass(&f.mean)) / f64::from(osl - 1)),
                });
            }
        }
        let g = first_guess(&pts, 8192, false);
        for (a, b) in [
            (g.way_s, truth.way_s),
            (g.prefill_per_token_s, truth.prefill_per_token_s),
            (g.decode_base_s, truth.decode_base_s),
            (g.decode_per_request_s, truth.decode_per_request_s),
        ] {
            assert!((a / b - 1.0).abs() < 1e-3, "{g:?}");
        }
    }
}
