//! The SLO gate for CI: whether at least a target share of a run's requests met the SLO, and the
//! one line that says so (`SLO gate: PASSED: ...` or `SLO gate: FAILED: ...`), the last line a
//! run prints. Failed requests count as not meeting the SLO.

use serde::Serialize;

use crate::measure::Slo;

/// A gate's verdict over a number of requests.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SloGate {
    /// The SLO, as `ttft<=200ms,tpot<=20ms`.
    pub slo: String,
    /// The share of requests that must meet it, (0, 1].
    pub target: f64,
    /// Requests that met it.
    pub good: u64,
    /// Requests judged (failed ones included).
    pub requests: u64,
    /// What the requests were, when not a whole run (capacity: "at 8.000 req/s").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Why the gate failed whatever the share (capacity: the step fell behind its rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_because: Option<String>,
}

/// The SLO in words: `ttft<=200ms,tpot<=20ms`.
pub fn describe(slo: &Slo) -> String {
    let mut parts = Vec::new();
    if let Some(t) = slo.ttft_ms {
        parts.push(format!("ttft<={t}ms"));
    }
    if let Some(t) = slo.tpot_ms {
        parts.push(format!("tpot<={t}ms"));
    }
    parts.join(",")
}

/// Checks a `--slo-target` value: a share in (0, 1].
pub fn check_target(t: f64) -> Result<f64, String> {
    if t > 0.0 && t <= 1.0 {
        Ok(t)
    } else {
        Err(format!(
            "--slo-target/--target must be a share in (0, 1], e.g. 0.95, got {}",
            crate::plan::compact(t)
        ))
    }
}

impl SloGate {
    /// The gate of `target` over `good` of `requests` meeting `slo`.
    pub fn new(slo: &Slo, target: f64, good: u64, requests: u64) -> Self {
        SloGate {
            slo: describe(slo),
            target,
            good,
            requests,
            scope: None,
            failed_because: None,
        }
    }

    /// The share of requests that met the SLO (0 when there were none).
    pub fn share(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.good as f64 / self.requests as f64
        }
    }

    /// Whether the gate passed: some requests, and at least the target share of them met the SLO.
    pub fn passed(&self) -> bool {
        self.failed_because.is_none() && self.requests > 0 && self.share() >= self.target
    }

    /// The gate's line.
    pub fn line(&self) -> String {
        let scope = self
            .scope
            .as_ref()
            .map_or(String::new(), |s| format!(" {s}"));
        let because = self
            .failed_because
            .as_ref()
            .map_or(String::new(), |b| format!("; {b}"));
        format!(
            "SLO gate: {}: {:.1}% of {} requests met {}{scope} (target {:.1}%){because}",
            if self.passed() { "PASSED" } else { "FAILED" },
            self.share() * 100.0,
            self.requests,
            self.slo,
            self.target * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_the_share_the_slo_and_the_target() {
        let slo = Slo::parse("ttft=200,tpot=20").unwrap();
        let g = SloGate::new(&slo, 0.95, 0, 50);
        assert!(!g.passed());
        assert_eq!(
            g.line(),
            "SLO gate: FAILED: 0.0% of 50 requests met ttft<=200ms,tpot<=20ms (target 95.0%)"
        );
        let g = SloGate::new(&slo, 0.95, 48, 50);
        assert!(g.passed());
        assert!(g.line().starts_with("SLO gate: PASSED: 96.0% of 50"));
        assert!(
            !SloGate::new(&slo, 0.5, 0, 0).passed(),
            "no requests, no pass"
        );
        assert!(check_target(0.0).is_err() && check_target(1.01).is_err());
        assert!(check_target(f64::NAN).is_err());
        assert_eq!(check_target(1.0), Ok(1.0));
        assert_eq!(describe(&Slo::parse("tpot=2.5").unwrap()), "tpot<=2.5ms");
    }
}
