//! The differential check's result and its text rendering.

use super::compare::Difference;
use super::known::Known;
use bench_client::report::grid::{Col, Grid};
use serde::Serialize;
use std::fmt::Write;

/// What one run of the check found.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// Cases compared.
    pub cases: usize,
    pub differences: Vec<Difference>,
    /// Known-difference entries that matched nothing this run.
    #[serde(skip)]
    pub stale: Vec<Known>,
    /// Key paths of the real server's per-request answers that the mock's carry: (shared, all).
    pub coverage: (usize, usize),
}

impl DiffReport {
    /// Differences the known list does not name.
    pub fn unknown(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| d.known.is_none())
    }

    /// Behaviour differences (known or not).
    pub fn behaviour(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| d.kind.is_behaviour())
    }

    /// Share of the real server's per-request key paths the mock carries, in percent.
    pub fn coverage_percent(&self) -> f64 {
        let (shared, all) = self.coverage;
        if all == 0 {
            100.0
        } else {
            100.0 * shared as f64 / all as f64
        }
    }

    /// The check passes when every difference is a known one.
    pub fn passed(&self) -> bool {
        self.unknown().next().is_none()
    }
}

/// The report as text: unknown differences first, then the known ones with their reasons, then
/// the summary.
pub fn render(r: &DiffReport, show_known: bool) -> String {
    let mut s = String::new();
    // One line a difference: case, kind, what, then both answers; each group of lines has the
    // same columns.
    let grid = || {
        Grid::new(&[
            Col::left().min(32).gap(2),
            Col::left().min(15),
            Col::left().min(44),
            Col::left(),
        ])
    };
    let line = |g: &mut Grid, d: &Difference| {
        let what = if d.what.is_empty() { "-" } else { &d.what };
        g.row([
            d.case.clone(),
            d.kind.name().to_string(),
            clip(what, 44),
            format!("real: {}  mock: {}", clip(&d.real, 60), clip(&d.mock, 60)),
        ]);
    };
    let unknown: Vec<&Difference> = r.unknown().collect();
    if !unknown.is_empty() {
        let _ = writeln!(s, "NEW differences ({}):", unknown.len());
        let mut g = grid();
        for d in &unknown {
            line(&mut g, d);
        }
        s.push_str(&g.render());
    }
    let known: Vec<&Difference> = r.differences.iter().filter(|d| d.known.is_some()).collect();
    if show_known && !known.is_empty() {
        let _ = writeln!(s, "known differences ({}):", known.len());
        let mut g = grid();
        let mut last_reason = None;
        for d in &known {
            if last_reason != d.known.as_deref() {
                s.push_str(&g.render());
                g = grid();
                let _ = writeln!(s, "  # {}", d.known.as_deref().unwrap_or_default());
                last_reason = d.known.as_deref();
            }
            line(&mut g, d);
        }
        s.push_str(&g.render());
    }
    if !r.stale.is_empty() {
        let _ = writeln!(s, "stale entries of the known list (matched nothing):");
        for k in &r.stale {
            let _ = writeln!(s, "  case {:?} kind {} what {:?}", k.case, k.kind, k.what);
        }
    }
    let behaviour = r.behaviour().count();
    let behaviour_new = r.behaviour().filter(|d| d.known.is_none()).count();
    let _ = writeln!(
        s,
        "{} cases: {} differences ({} new, {} known); behaviour differences: {} ({} new); key paths of the real server's per-request answers the mock carries: {}/{} ({:.1}%)",
        r.cases,
        r.differences.len(),
        unknown.len(),
        known.len(),
        behaviour,
        behaviour_new,
        r.coverage.0,
        r.coverage.1,
        r.coverage_percent()
    );
    s
}

/// At most `n` characters, one line.
fn clip(t: &str, n: usize) -> String {
    let one: String = t.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if one.chars().count() <= n {
        one
    } else {
        let mut c: String = one.chars().take(n.saturating_sub(1)).collect();
        c.push('…');
        c
    }
}
