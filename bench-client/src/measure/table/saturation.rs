//! Whether a table's rows queue, and the first guesses of the capacity that queues them (the KV
//! pool or the running requests' cap) where they do.

use super::{Capacity, Point};

/// Where rows saturate, the first guesses of the capacity that makes them queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saturation {
    /// The KV pool (tokens): the requests' full contexts at the load where the queue begins.
    pub pool_tokens: f64,
    /// The running batch's cap (requests): that pool over the queued requests' contexts.
    pub running_requests: f64,
}

impl Saturation {
    /// The guess of a capacity of kind `k`.
    pub fn guess(&self, k: Capacity) -> f64 {
        match k {
            Capacity::PoolTokens => self.pool_tokens,
            Capacity::RunningRequests => self.running_requests,
        }
    }
}

/// Whether rows saturate, and where. Two signs of requests that wait for others to finish:
/// - in a series (one input and output length), TTFT grows more than twice as fast as the
///   concurrency between two rows: the queue begins between them, at the geometric mean of
///   their loads (in requests, and in their full contexts for the pool);
/// - at one input length and concurrency, TTFT grows faster than the square root of the output
///   length: a prompt's prefill does not depend on its output length (exponent 0), but a queue's
///   wait grows with the time the requests ahead of it run (exponent 1). The queue begins below
///   the concurrency: the pool holds the shorter requests' contexts, the cap the longer requests
///   that fit in it.
///
/// A series brackets where the queue begins between two loads, the output length only bounds it:
/// the smallest pool of the series, else of the output lengths, with its cap; `None` where no
/// row saturates.
pub fn saturation(points: &[Point]) -> Option<Saturation> {
    let ctx = |p: &Point| f64::from(p.isl) + f64::from(p.osl);
    let c = |p: &Point| f64::from(p.concurrency);
    let mut sorted: Vec<&Point> = points.iter().filter(|p| p.ttft_s.is_some()).collect();
    sorted.sort_by_key(|p| (p.isl, p.osl, p.concurrency));
    let series = sorted
        .windows(2)
        .filter(|w| (w[0].isl, w[0].osl) == (w[1].isl, w[1].osl))
        .filter_map(|w| {
            let (a, b) = (w[0], w[1]);
            let growth = b.ttft_s? / a.ttft_s?;
            let running = (c(a) * c(b)).sqrt();
            (growth > 2.0 * c(b) / c(a)).then(|| Saturation {
                pool_tokens: running * ctx(a),
                running_requests: running,
            })
        })
        .collect::<Vec<_>>();
    sorted.sort_by_key(|p| (p.isl, p.concurrency, p.osl));
    let outputs = sorted
        .windows(2)
        .filter(|w| (w[0].isl, w[0].concurrency) == (w[1].isl, w[1].concurrency))
        .filter_map(|w| {
            let (a, b) = (w[0], w[1]);
            let pool = c(a) * ctx(a);
            let longer = f64::from(b.osl) / f64::from(a.osl.max(1));
            (b.ttft_s? / a.ttft_s? > longer.sqrt()).then(|| Saturation {
                pool_tokens: pool,
                running_requests: pool / ctx(b),
            })
        });
    let smallest = |s: Saturation, t: Saturation| {
        if t.pool_tokens < s.pool_tokens {
            t
        } else {
            s
        }
    };
    series
        .into_iter()
        .reduce(smallest)
        .or_else(|| outputs.reduce(smallest))
}
