//! The mock's ground truth beside an imported tool's figures and this client's: per TTFT
//! statistic, the truth, each tool's figure and each tool's error against the truth.
//!
//! The truth is what the server itself timed of each request of this client's run: its
//! first-token latency as it reported it (SGLang's `meta_info` timings, which the mock reports with
//! `enable_metrics` and which equal its ground truth; `conformance` holds the two equal), read from
//! the records' TTFT split (`ttft - rest`). The imported tool's requests carry no such report, so
//! both tools are held against the truth of this client's run: with the same mock and workload, the
//! server's own time per request is the part neither tool adds. Both tools' TTFT is from the
//! request's send to its first chunk here (the records' `ttft_ms`), as the tools define theirs.

use crate::measure::percentile;
use crate::results::Figures;
use crate::results::Record;

/// The statistics shown, as (row name, percentile; `None` for the mean).
pub const STATS: [(&str, Option<f64>); 4] = [
    ("ttft_mean_ms", None),
    ("ttft_p50_ms", Some(50.0)),
    ("ttft_p90_ms", Some(90.0)),
    ("ttft_p99_ms", Some(99.0)),
];

/// One statistic: the truth and the two tools' figures, ms.
#[derive(Clone, Debug, PartialEq)]
pub struct TruthRow {
    /// Row name, e.g. `ttft_p99_ms`.
    pub metric: &'static str,
    /// The mock's ground truth (of this client's run).
    pub truth: Option<f64>,
    /// The imported tool's figure.
    pub imported: Option<f64>,
    /// This client's figure.
    pub own: Option<f64>,
}

impl TruthRow {
    /// The imported tool's figure less the truth.
    pub fn imported_error(&self) -> Option<f64> {
        self.imported.zip(self.truth).map(|(x, t)| x - t)
    }

    /// This client's figure less the truth.
    pub fn own_error(&self) -> Option<f64> {
        self.own.zip(self.truth).map(|(x, t)| x - t)
    }
}

/// The section of the page.
#[derive(Clone, Debug, PartialEq)]
pub struct Truth {
    /// The imported tool.
    pub tool: String,
    /// Which side it is (`BASE` or `NEW`).
    pub imported_side: &'static str,
    /// Requests of this client's run whose truth the records carry.
    pub with_truth: usize,
    /// Successful requests of this client's run.
    pub own_requests: usize,
    /// The rows.
    pub rows: Vec<TruthRow>,
}

/// The mean and percentiles of `v`, in [`STATS`] order.
fn stats(v: &[f64]) -> Vec<Option<f64>> {
    STATS
        .iter()
        .map(|(_, p)| match p {
            Some(p) => percentile(v, *p),
            None => (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
        })
        .collect()
}

/// A side's successful streaming requests: each TTFT from its send, and the mock's truth of it
/// (the TTFT less the part the mock reported as not the model's), ms.
#[derive(Clone, Debug, Default)]
pub struct TruthValues {
    /// Finite TTFTs.
    pub ttfts: Vec<f64>,
    /// The model's TTFT, where the mock reported it.
    pub truths: Vec<f64>,
}

impl TruthValues {
    /// Add a successful streaming record.
    pub fn add(&mut self, r: &Record) {
        self.ttfts.extend(r.ttft_ms.filter(|v| v.is_finite()));
        let truth = r
            .ttft_split
            .as_ref()
            .and_then(|s| s.rest_ms)
            .zip(r.ttft_ms)
            .map(|(rest, ttft)| ttft - rest)
            .filter(|t| t.is_finite() && *t >= 0.0);
        self.truths.extend(truth);
    }
}

/// What an imported side gives: its requests' TTFTs, or its tool's summary.
pub enum ImportedSide<'a> {
    /// Records rebuilt from per-request data.
    Records(&'a TruthValues),
    /// The tool's own figures.
    Summary(&'a Figures),
}

/// The truth section for `tool` (on `imported_side`) against this client's `own` requests.
pub fn truth(
    tool: &str,
    imported_side: &'static str,
    imported: ImportedSide<'_>,
    own: &TruthValues,
) -> Truth {
    let truths = &own.truths;
    let own_ttft = &own.ttfts;
    let imported_stats = match imported {
        ImportedSide::Records(r) => stats(&r.ttfts),
        ImportedSide::Summary(f) => STATS
            .iter()
            .map(|(name, _)| f.figures.get(*name).copied())
            .collect(),
    };
    let rows = STATS
        .iter()
        .zip(stats(truths))
        .zip(imported_stats)
        .zip(stats(own_ttft))
        .map(|(((&(metric, _), truth), imported), own)| TruthRow {
            metric,
            truth,
            imported,
            own,
        })
        .collect();
    Truth {
        tool: tool.to_string(),
        imported_side,
        with_truth: truths.len(),
        own_requests: own_ttft.len(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_figure_less_truth_and_absent_without_truth() {
        let r = TruthRow {
            metric: "ttft_mean_ms",
            truth: Some(10.0),
            imported: Some(94.0),
            own: Some(10.5),
        };
        assert_eq!(r.imported_error(), Some(84.0));
        assert_eq!(r.own_error(), Some(0.5));
        let none = TruthRow { truth: None, ..r };
        assert_eq!((none.imported_error(), none.own_error()), (None, None));
    }

    #[test]
    fn stats_are_the_mean_then_type_7_percentiles() {
        let s = stats(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s[0], Some(2.5));
        assert_eq!(s[1], Some(2.5));
        assert!((s[3].unwrap() - 3.97).abs() < 1e-9);
        assert_eq!(stats(&[]), vec![None; 4]);
    }
}
