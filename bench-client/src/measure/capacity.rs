//! The capacity search, as a pure function of the steps run so far: which rate to try next, and
//! when the search is done, the answer. Replaying the same steps gives the same decisions, so a
//! resumed search takes up where it stopped.
//!
//! The search steps up through the coarse rates until a step fails (its goodput share is below the
//! target), then bisects between the last passing and the first failing rate `refine` times (from
//! 0 when the first step already fails). A step whose failed-request share is above `max_failed`
//! ends the search at once: the server is failing requests, and a higher rate would not say more.
//!
//! A step passes when it meets the SLO target, keeps up with its offered rate (its achieved
//! throughput is within `throughput_tolerance` of the rate its requests arrived at) and ran in
//! steady state ([`StepTiming::steady`]). A step whose requests met the target but that was too
//! short is not a verdict (nor is its throughput: the drain weighs on a short step): the search
//! runs the same level again, longer (at most [`MAX_RERUNS`] times; a step
//! still too short after them fails, so an answer always rests on a steady step).
//!
//! The levels are request rates, or, for a search by concurrency (`integer`), whole numbers of
//! requests in flight: bisection then picks whole numbers and ends when none is left between the
//! last passing and the first failing level.

/// A step is in steady state when its arrivals span at least this many times its requests' mean
/// time (send to end): the ramp-up and the drain (the requests in flight at the start and at the
/// end) then add at most 1/20 = 5% to its length, and a queue that grows by the step's end shows
/// in its TTFT and throughput instead of hiding in a burst the server absorbs.
pub const STEADY_SPANS: f64 = 20.0;

/// A step's queue is growing (it is not in steady state, however long it ran) when the requests
/// scheduled in the last quarter of its arrivals spend more than this many times as long from their
/// scheduled start to their end (median) as those of the second quarter (the first is the ramp-up).
/// A server a little above its knee queues slowly: its step's requests may still meet the SLO while
/// the time in the system climbs from quarter to quarter.
pub const GROWTH_LIMIT: f64 = 1.5;

/// Requests a quarter needs before its median time in the system says anything.
const GROWTH_MIN_QUARTER: usize = 8;

/// How often a level whose step would pass but was too short for [`STEADY_SPANS`] is run again.
pub const MAX_RERUNS: usize = 2;

/// The default share by which a step's achieved throughput may fall short of its arrival rate:
/// the drain's 5% (see [`STEADY_SPANS`]) and the noise of a few hundred arrivals.
pub const DEFAULT_THROUGHPUT_TOLERANCE: f64 = 0.10;

/// One request of a step, as the timing of the step sees it: instants in ns on one clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestSpan {
    /// Scheduled start (open loop) or send (closed loop).
    pub scheduled_ns: u64,
    /// Send.
    pub sent_ns: u64,
    /// End of the stream.
    pub end_ns: u64,
    /// Whether the request succeeded.
    pub ok: bool,
}

/// A step's timing: how long its arrivals lasted, how long its requests took, what it achieved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTiming {
    /// Requests.
    pub requests: u64,
    /// First to last scheduled start, seconds.
    pub arrival_span_s: f64,
    /// First scheduled start to last end, seconds.
    pub duration_s: f64,
    /// Mean send-to-end time, seconds.
    pub mean_request_s: f64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// The last quarter's median time in the system over the second quarter's ([`GROWTH_LIMIT`]);
    /// `None` with too few requests a quarter.
    pub queue_growth: Option<f64>,
}

/// The median of `v` (sorted in place); `None` when empty.
fn median(v: &mut [u64]) -> Option<f64> {
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2] as f64),
        _ => Some((v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0),
    }
}

/// The last quarter's median time in the system over the second quarter's, by scheduled start.
fn queue_growth(requests: &[RequestSpan]) -> Option<f64> {
    let mut by_start: Vec<&RequestSpan> = requests.iter().collect();
    by_start.sort_by_key(|r| r.scheduled_ns);
    let q = by_start.len() / 4;
    if q < GROWTH_MIN_QUARTER {
        return None;
    }
    let in_system = |rs: &[&RequestSpan]| {
        let mut v: Vec<u64> = rs
            .iter()
            .map(|r| r.end_ns.saturating_sub(r.scheduled_ns))
            .collect();
        median(&mut v)
    };
    let second = in_system(&by_start[q..2 * q])?;
    let last = in_system(&by_start[by_start.len() - q..])?;
    (second > 0.0).then(|| last / second)
}

impl StepTiming {
    /// The timing of a step's requests; `None` when there are none.
    pub fn of(requests: &[RequestSpan]) -> Option<Self> {
        let first = requests.iter().map(|r| r.scheduled_ns).min()?;
        let last = requests.iter().map(|r| r.scheduled_ns).max()?;
        let end = requests.iter().map(|r| r.end_ns).max()?;
        let busy: u128 = requests
            .iter()
            .map(|r| u128::from(r.end_ns.saturating_sub(r.sent_ns)))
            .sum();
        let n = requests.len() as u64;
        Some(StepTiming {
            requests: n,
            arrival_span_s: (last - first) as f64 / 1e9,
            duration_s: end.saturating_sub(first) as f64 / 1e9,
            mean_request_s: busy as f64 / 1e9 / n as f64,
            succeeded: requests.iter().filter(|r| r.ok).count() as u64,
            queue_growth: queue_growth(requests),
        })
    }

    /// The rate the requests arrived at, (n - 1) / arrival span; `None` below 2 requests or a
    /// zero span.
    pub fn offered(&self) -> Option<f64> {
        (self.requests >= 2 && self.arrival_span_s > 0.0)
            .then(|| (self.requests - 1) as f64 / self.arrival_span_s)
    }

    /// Successful requests per second, first scheduled start to last end (as `load` reports
    /// request throughput).
    pub fn achieved(&self) -> Option<f64> {
        (self.duration_s > 0.0).then(|| self.succeeded as f64 / self.duration_s)
    }

    /// The arrival span steady state needs: [`STEADY_SPANS`] mean request times.
    pub fn span_needed_s(&self) -> f64 {
        STEADY_SPANS * self.mean_request_s
    }

    /// Whether the step was in steady state: its arrivals lasted long enough, and its queue did
    /// not grow from the second quarter of its arrivals to the last ([`GROWTH_LIMIT`]).
    pub fn steady(&self) -> bool {
        self.arrival_span_s >= self.span_needed_s() && !self.queue_grows()
    }

    /// Whether the time in the system grew past [`GROWTH_LIMIT`] over the step.
    pub fn queue_grows(&self) -> bool {
        self.queue_growth.is_some_and(|g| g > GROWTH_LIMIT)
    }
}

/// How to search.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityPlan {
    /// The coarse rates, requests per second, increasing.
    pub coarse: Vec<f64>,
    /// Bisections between the last passing and the first failing rate.
    pub refine: u32,
    /// A step passes when its goodput share is at least this (0 < target <= 1).
    pub target: f64,
    /// A step whose failed share is above this stops the search.
    pub max_failed: f64,
    /// The levels are whole numbers (concurrencies): bisection rounds down.
    pub integer: bool,
    /// A step whose achieved throughput is below `(1 - this) x` its arrival rate fails.
    pub throughput_tolerance: f64,
}

/// What one step measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepResult {
    /// Offered rate, requests per second.
    pub rate: f64,
    /// Requests sent.
    pub requests: u64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// Requests that met the SLO.
    pub good: u64,
    /// The rate the requests arrived at (open loop); `None` for a closed loop.
    pub offered: Option<f64>,
    /// Successful requests per second.
    pub achieved: Option<f64>,
    /// The step ran long enough for steady state ([`StepTiming::steady`]).
    pub steady: bool,
}

impl StepResult {
    /// Requests meeting the SLO over requests sent (0 when none were sent).
    pub fn goodput_share(&self) -> f64 {
        share(self.good, self.requests)
    }

    /// Failed requests over requests sent (1 when none were sent: a step that sent nothing failed).
    pub fn failed_share(&self) -> f64 {
        if self.requests == 0 {
            1.0
        } else {
            share(self.requests.saturating_sub(self.succeeded), self.requests)
        }
    }
}

fn share(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        n as f64 / of as f64
    }
}

/// How the search ended.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityAnswer {
    /// The highest passing rate, `None` when no step passed.
    pub rate: Option<f64>,
    /// The throughput achieved at that rate, for an open loop: the answer is never above it.
    pub achieved: Option<f64>,
    /// The lowest failing rate above it, `None` when every step passed (the capacity is at least `rate`).
    pub first_fail: Option<f64>,
    /// The index of the step whose failed share stopped the search.
    pub server_failing: Option<usize>,
}

/// The search's next move.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Run a step at this rate.
    Run(f64),
    /// Done.
    Done(CapacityAnswer),
}

impl CapacityPlan {
    /// Whether a step kept up with its offered rate: achieved throughput within the tolerance
    /// of the arrival rate (a closed loop offers no rate and always keeps up).
    pub fn keeps_up(&self, s: &StepResult) -> bool {
        match (s.offered, s.achieved) {
            (Some(o), Some(a)) => a >= (1.0 - self.throughput_tolerance) * o,
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    /// Whether a step's own figures pass: the SLO target met and the offered rate kept up with
    /// (steady state aside).
    pub fn meets(&self, s: &StepResult) -> bool {
        s.requests > 0 && s.goodput_share() >= self.target && self.keeps_up(s)
    }

    /// Whether a step passes: it meets the target, keeps up, and ran in steady state.
    pub fn passes(&self, s: &StepResult) -> bool {
        self.meets(s) && s.steady
    }

    /// Whether a step was too short to judge: its requests met the target, but its arrivals were
    /// too short for steady state. Its throughput is no verdict either: in a short step the drain
    /// (the requests still running after the last arrival) is a large part of its length.
    pub fn too_short(&self, s: &StepResult) -> bool {
        s.requests > 0 && s.goodput_share() >= self.target && !s.steady
    }

    /// Whether a step is no verdict: too short, and its level may be run again (fewer than
    /// [`MAX_RERUNS`] earlier too-short steps at the same level).
    fn rerun(&self, steps: &[StepResult], i: usize) -> bool {
        let s = &steps[i];
        let earlier = steps[..i]
            .iter()
            .filter(|e| e.rate == s.rate && self.too_short(e))
            .count();
        self.too_short(s) && earlier < MAX_RERUNS
    }

    /// The next move after `steps` (in the order they ran).
    pub fn next(&self, steps: &[StepResult]) -> Next {
        let mut lo: Option<f64> = None;
        let mut achieved: Option<f64> = None;
        let mut hi: Option<f64> = None;
        let mut coarse_done = 0usize;
        let mut in_coarse = !self.coarse.is_empty();
        let mut refined = 0u32;
        for (i, s) in steps.iter().enumerate() {
            if s.failed_share() <= self.max_failed && self.rerun(steps, i) {
                // No verdict: the same level runs again, longer.
                continue;
            }
            let pass = self.passes(s);
            if pass {
                if lo.is_none_or(|l| s.rate > l) {
                    lo = Some(s.rate);
                    // A closed loop's level is a concurrency: its throughput is no bound on it.
                    achieved = s.offered.and(s.achieved);
                }
            } else {
                hi = Some(hi.map_or(s.rate, |h| h.min(s.rate)));
            }
            if s.failed_share() > self.max_failed {
                return Next::Done(CapacityAnswer {
                    rate: lo,
                    achieved,
                    first_fail: hi,
                    server_failing: Some(i),
                });
            }
            if in_coarse {
                coarse_done += 1;
                // The coarse phase ends at its first failing step, or with its last rate.
                in_coarse = pass && coarse_done < self.coarse.len();
            } else {
                refined += 1;
            }
        }
        let done = CapacityAnswer {
            rate: lo,
            achieved,
            first_fail: hi,
            server_failing: None,
        };
        match hi {
            None if in_coarse => Next::Run(self.coarse[coarse_done]),
            None => Next::Done(done),
            Some(h) if refined < self.refine => {
                let mid = (lo.unwrap_or(0.0) + h) / 2.0;
                let mid = if self.integer { mid.floor() } else { mid };
                let none_left = self.integer && (mid <= lo.unwrap_or(0.0) || mid >= h);
                if none_left || mid <= 0.0 || lo.is_some_and(|l| h - l <= l * 1e-3) {
                    Next::Done(done)
                } else {
                    Next::Run(mid)
                }
            }
            Some(_) => Next::Done(done),
        }
    }
}

/// `start`, `start * factor`, ... : `steps` rates.
pub fn geometric(start: f64, factor: f64, steps: u32) -> Vec<f64> {
    (0..steps).map(|k| start * factor.powi(k as i32)).collect()
}

#[cfg(test)]
mod tests;
