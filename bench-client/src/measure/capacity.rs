//! The capacity search, as a pure function of the steps run so far: which rate to try next, and
//! when the search is done, the answer. Replaying the same steps gives the same decisions, so a
//! resumed search takes up where it stopped.
//!
//! The search steps up through the coarse rates until a step fails (its goodput share is below the
//! target), then bisects between the last passing and the first failing rate `refine` times (from
//! 0 when the first step already fails). A step whose failed-request share is above `max_failed`
//! ends the search at once: the server is failing requests, and a higher rate would not say more.
//!
//! The levels are request rates, or, for a search by concurrency (`integer`), whole numbers of
//! requests in flight: bisection then picks whole numbers and ends when none is left between the
//! last passing and the first failing level.

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
    /// Whether a step passes.
    pub fn passes(&self, s: &StepResult) -> bool {
        s.requests > 0 && s.goodput_share() >= self.target
    }

    /// The next move after `steps` (in the order they ran).
    pub fn next(&self, steps: &[StepResult]) -> Next {
        let mut lo: Option<f64> = None;
        let mut hi: Option<f64> = None;
        let mut coarse_done = 0usize;
        let mut in_coarse = !self.coarse.is_empty();
        let mut refined = 0u32;
        for (i, s) in steps.iter().enumerate() {
            let pass = self.passes(s);
            if pass {
                lo = Some(lo.map_or(s.rate, |l| l.max(s.rate)));
            } else {
                hi = Some(hi.map_or(s.rate, |h| h.min(s.rate)));
            }
            if s.failed_share() > self.max_failed {
                return Next::Done(CapacityAnswer {
                    rate: lo,
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
mod tests {
    use super::*;

    fn plan(refine: u32) -> CapacityPlan {
        CapacityPlan {
            coarse: geometric(1.0, 2.0, 6),
            refine,
            target: 0.95,
            max_failed: 0.05,
            integer: false,
        }
    }

    #[test]
    fn a_search_by_concurrency_bisects_on_whole_numbers_and_ends_between_neighbours() {
        let p = CapacityPlan {
            coarse: vec![1.0, 2.0, 4.0, 8.0, 16.0],
            refine: 8,
            integer: true,
            ..plan(8)
        };
        for cap in [1.0, 3.0, 5.0, 6.0, 11.0] {
            let (levels, a) = search(&p, cap);
            assert!(levels.iter().all(|l| l.fract() == 0.0), "{levels:?}");
            assert_eq!(a.rate, Some(cap), "{levels:?}");
            assert_eq!(a.first_fail, Some(cap + 1.0), "{levels:?}");
        }
    }

    /// A server whose goodput share is 1 up to `cap` requests per second and 0 above it.
    fn step(rate: f64, cap: f64) -> StepResult {
        StepResult {
            rate,
            requests: 100,
            succeeded: 100,
            good: if rate <= cap { 100 } else { 0 },
        }
    }

    fn search(p: &CapacityPlan, cap: f64) -> (Vec<f64>, CapacityAnswer) {
        let mut steps = Vec::new();
        loop {
            match p.next(&steps) {
                Next::Run(r) => steps.push(step(r, cap)),
                Next::Done(a) => return (steps.iter().map(|s| s.rate).collect(), a),
            }
            assert!(steps.len() < 100, "the search does not end");
        }
    }

    #[test]
    fn steps_up_then_bisects_between_last_pass_and_first_fail() {
        let (rates, a) = search(&plan(3), 5.0);
        assert_eq!(rates, vec![1.0, 2.0, 4.0, 8.0, 6.0, 5.0, 5.5]);
        assert_eq!(a.rate, Some(5.0));
        assert_eq!(a.first_fail, Some(5.5));
        assert_eq!(a.server_failing, None);
    }

    #[test]
    fn refinement_converges_on_the_capacity() {
        for cap in [1.3, 3.7, 9.9, 20.0] {
            let (_, a) = search(&plan(8), cap);
            let r = a.rate.unwrap();
            assert!(r <= cap && r > cap * 0.97, "cap {cap}: found {r}");
        }
    }

    #[test]
    fn every_step_passing_says_at_least_the_last_rate() {
        let (rates, a) = search(&plan(3), 1000.0);
        assert_eq!(rates.len(), 6);
        assert_eq!(a.rate, Some(32.0));
        assert_eq!(a.first_fail, None);
    }

    #[test]
    fn no_passing_step_bisects_down_from_zero_and_says_none() {
        let (rates, a) = search(&plan(2), 0.1);
        assert_eq!(rates, vec![1.0, 0.5, 0.25]);
        assert_eq!(a.rate, None);
        assert_eq!(a.first_fail, Some(0.25));
    }

    #[test]
    fn a_failing_server_stops_the_search_at_once() {
        let p = plan(3);
        let ok = step(1.0, 10.0);
        let failing = StepResult {
            rate: 2.0,
            requests: 100,
            succeeded: 90,
            good: 90,
        };
        let a = p.next(&[ok, failing]);
        assert_eq!(
            a,
            Next::Done(CapacityAnswer {
                rate: Some(1.0),
                first_fail: Some(2.0),
                server_failing: Some(1),
            })
        );
    }

    #[test]
    fn replaying_the_steps_gives_the_same_next_rate() {
        let p = plan(3);
        let steps: Vec<_> = [1.0, 2.0, 4.0, 8.0].iter().map(|&r| step(r, 5.0)).collect();
        assert_eq!(p.next(&steps), Next::Run(6.0));
        assert_eq!(p.next(&steps[..2]), Next::Run(4.0));
    }

    #[test]
    fn shares() {
        let s = StepResult {
            rate: 1.0,
            requests: 20,
            succeeded: 19,
            good: 18,
        };
        assert!((s.goodput_share() - 0.9).abs() < 1e-12);
        assert!((s.failed_share() - 0.05).abs() < 1e-12);
        assert!(!plan(0).passes(&s));
        let none = StepResult {
            rate: 1.0,
            requests: 0,
            succeeded: 0,
            good: 0,
        };
        assert_eq!(none.failed_share(), 1.0);
    }
}
