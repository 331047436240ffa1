//! CSV: one row per context length of a sweep; one row per request of a load run; one row per
//! statistic of a comparison (a capacity search's: in the capacity folder's `export.rs`).

use std::collections::BTreeMap;

use crate::measure::compare::Direction;
use crate::measure::Slo;
use crate::report::compare::CompareReport;
use crate::report::sweep::Report;

/// CSV: one row per context length; maps are written as `kind=count;...`.
pub fn sweep(report: &Report) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "context_tokens",
        "requests",
        "ok",
        "ttft_ms_p50",
        "ttft_ms_p90",
        "prefill_tok_s_p50",
        "decode_tok_s_p50",
        "decode_tok_s_p10",
        "naive_decode_tok_s_p50",
        "tokens_per_chunk_mean",
        "cached_tokens_max",
        "contaminated",
        "failures",
        "token_attribution",
        "two_point_pairs",
        "two_point_prefill_tok_s_p50",
        "two_point_decode_tok_s_p50",
        "two_point_errors",
    ])?;
    let o = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    let m = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(";")
    };
    for s in report.summary() {
        w.write_record([
            s.context_tokens.to_string(),
            s.requests.to_string(),
            s.ok.to_string(),
            o(s.ttft_ms_p50),
            o(s.ttft_ms_p90),
            o(s.prefill_tok_s_p50),
            o(s.decode_tok_s_p50),
            o(s.decode_tok_s_p10),
            o(s.naive_decode_tok_s_p50),
            o(s.tokens_per_chunk_mean),
            s.cached_tokens_max.map_or(String::new(), |c| c.to_string()),
            s.contaminated.to_string(),
            m(&s.failures),
            s.token_attribution.clone(),
            s.two_point_pairs.to_string(),
            o(s.two_point_prefill_tok_s_p50),
            o(s.two_point_decode_tok_s_p50),
            m(&s.two_point_errors),
        ])?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}

/// CSV of a comparison: one row per statistic; numbers are empty where a row could not be
/// compared (its `error` says why). The manifest differences are not part of it.
pub fn compare(r: &CompareReport) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "context_tokens",
        "metric",
        "better",
        "n_base",
        "n_new",
        "base",
        "new",
        "ratio",
        "ci_low",
        "ci_high",
        "verdict",
        "error",
        "runs_base",
        "runs_new",
    ])?;
    for row in &r.rows {
        let c = row.outcome.as_ref().ok();
        let f = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
        w.write_record([
            row.context_tokens.map_or(String::new(), |c| c.to_string()),
            row.metric.to_string(),
            match row.direction {
                Direction::LowerIsBetter => "lower".to_string(),
                Direction::HigherIsBetter => "higher".to_string(),
            },
            row.n_base.to_string(),
            row.n_new.to_string(),
            f(c.map(|c| c.base)),
            f(c.map(|c| c.new)),
            f(c.map(|c| c.ratio)),
            f(c.map(|c| c.lo)),
            f(c.map(|c| c.hi)),
            row.verdict().as_str().to_string(),
            row.outcome.as_ref().err().cloned().unwrap_or_default(),
            row.runs_base.to_string(),
            row.runs_new.to_string(),
        ])?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
    )?)
}

/// CSV of a load run: one row per request, in the order of the records; times in ms (TTFT from
/// the scheduled start, as the summary's `ttft`), `met_slo` empty without an SLO, `error` the
/// failure kind of a failed request. Rows are written as records come ([`LoadRequests::add`]), so
/// no record is held.
pub struct LoadRequests {
    w: csv::Writer<Vec<u8>>,
    slo: Slo,
}

impl LoadRequests {
    /// The header row.
    pub fn new(slo: Slo) -> anyhow::Result<Self> {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record([
            "index",
            "shard",
            "rid",
            "scheduled_ms",
            "sent_ms",
            "client_queue_ms",
            "ttft_ms",
            "ttft_server_ms",
            "tpot_ms",
            "e2e_ms",
            "prompt_tokens",
            "cached_tokens",
            "output_tokens",
            "error",
            "met_slo",
        ])?;
        Ok(Self { w, slo })
    }

    /// A record's row (none for a record of no load run).
    pub fn add(&mut self, r: &crate::results::Record) -> anyhow::Result<()> {
        use crate::measure::{load_numbers, measure};
        let ms = |ns: u64| (ns as f64 / 1e6).to_string();
        let o = |x: Option<u64>| x.map_or(String::new(), ms);
        let n = |x: Option<u32>| x.map_or(String::new(), |v| v.to_string());
        let (Some(load), Some(trace)) = (&r.load, &r.trace) else {
            return Ok(());
        };
        let slo = self.slo;
        let m = measure(trace).ok().filter(|_| r.error.is_none());
        let nums = m
            .as_ref()
            .map(|m| load_numbers(trace, m, load.client_queue_ns));
        let output = m
            .as_ref()
            .and_then(|m| m.completion_tokens)
            .map(u64::from)
            .unwrap_or(0);
        let met = match (&nums, slo.is_set()) {
            (_, false) => String::new(),
            (Some(x), true) => slo.met(x, output).to_string(),
            (None, true) => "false".into(),
        };
        let error = match (&r.error, &m) {
            (Some(e), _) => e.kind.to_string(),
            (None, None) => "no-output".to_string(),
            (None, Some(_)) => String::new(),
        };
        self.w.write_record([
            load.index.to_string(),
            load.shard.to_string(),
            r.rid.clone(),
            ms(load.scheduled_ns),
            ms(load.sent_ns),
            ms(load.client_queue_ns),
            o(nums.as_ref().map(|x| x.ttft_from_schedule_ns)),
            o(nums.as_ref().map(|x| x.ttft_ns)),
            o(nums.as_ref().and_then(|x| x.tpot_ns)),
            o(nums.as_ref().map(|x| x.e2e_ns)),
            n(m.as_ref().and_then(|m| m.prompt_tokens)),
            n(m.as_ref().and_then(|m| m.cached_tokens)),
            n(m.as_ref().and_then(|m| m.completion_tokens)),
            error,
            met,
        ])?;
        Ok(())
    }

    /// The CSV text.
    pub fn finish(self) -> anyhow::Result<String> {
        Ok(String::from_utf8(
            self.w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?,
        )?)
    }

    /// The rows of every record of `files`, read one at a time.
    pub fn of_files(files: &[std::path::PathBuf], slo: Slo) -> anyhow::Result<String> {
        let mut rows = Self::new(slo)?;
        for f in files {
            crate::results::each_record(f, |r| rows.add(&r))?;
        }
        rows.finish()
    }
}
