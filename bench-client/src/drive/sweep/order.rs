//! The order of a sweep's requests: context by context or round-robin (`--interleave`), each
//! context's warm-up before its first measured point, and what `--resume` leaves out.

use std::collections::HashSet;

use super::SweepConfig;
use crate::results::Method;

/// One request of a sweep at a context: a warm-up (its number) or a measured point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Warmup(u32),
    Measure(Method, u32),
}

/// The sweep's requests in order, those already in `done` left out (with a context's warm-up only
/// if it has a point left), and how many points were left out.
pub(super) fn plan(
    cfg: &SweepConfig,
    done: &HashSet<(Method, u32, u32)>,
) -> (Vec<(u32, Step)>, usize) {
    let methods: &[Method] = if cfg.method == Method::TwoPoint {
        &[Method::Streaming, Method::TwoPoint]
    } else {
        &[Method::Streaming]
    };
    let todo = |context: u32, runs: std::ops::Range<u32>| -> Vec<(u32, Step)> {
        runs.flat_map(|run| methods.iter().map(move |&m| (m, run)))
            .filter(|&(m, run)| !done.contains(&(m, context, run)))
            .map(|(m, run)| (context, Step::Measure(m, run)))
            .collect()
    };
    let warmups = |context: u32| (0..cfg.warmup).map(move |w| (context, Step::Warmup(w)));
    let mut steps = Vec::new();
    let mut warmed = HashSet::new();
    let rounds: Vec<std::ops::Range<u32>> = if cfg.interleave {
        (0..cfg.runs).map(|r| r..r + 1).collect()
    } else {
        std::iter::once(0..cfg.runs).collect()
    };
    let mut measured = 0;
    for runs in rounds {
        for &context in &cfg.contexts {
            let points = todo(context, runs.clone());
            if points.is_empty() {
                continue;
            }
            if warmed.insert(context) {
                steps.extend(warmups(context));
            }
            measured += points.len();
            steps.extend(points);
        }
    }
    let all = cfg.contexts.len() * cfg.runs as usize * methods.len();
    (steps, all - measured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn cfg(interleave: bool) -> SweepConfig {
        SweepConfig {
            contexts: vec![100, 200],
            runs: 2,
            warmup: 1,
            interleave,
            ..SweepConfig::new(PathBuf::from("unused.jsonl"))
        }
    }

    fn m(run: u32) -> Step {
        Step::Measure(Method::Streaming, run)
    }

    #[test]
    fn a_sweep_runs_context_by_context_or_round_robin() {
        let none = HashSet::new();
        let (steps, skipped) = plan(&cfg(false), &none);
        assert_eq!(skipped, 0);
        let w = Step::Warmup(0);
        assert_eq!(
            steps,
            vec![
                (100, w),
                (100, m(0)),
                (100, m(1)),
                (200, w),
                (200, m(0)),
                (200, m(1))
            ]
        );
        let (steps, _) = plan(&cfg(true), &none);
        assert_eq!(
            steps,
            vec![
                (100, w),
                (100, m(0)),
                (200, w),
                (200, m(0)),
                (100, m(1)),
                (200, m(1))
            ]
        );
    }

    #[test]
    fn a_resumed_sweep_skips_what_is_done_and_warms_up_only_before_what_is_left() {
        let done: HashSet<(Method, u32, u32)> = [
            (Method::Streaming, 100, 0),
            (Method::Streaming, 100, 1),
            (Method::Streaming, 200, 0),
        ]
        .into();
        for interleave in [false, true] {
            let (steps, skipped) = plan(&cfg(interleave), &done);
            assert_eq!(skipped, 3);
            assert_eq!(steps, vec![(200, Step::Warmup(0)), (200, m(1))]);
        }
    }
}
