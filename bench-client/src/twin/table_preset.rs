//! The preset of a table twin, each value marked MEASURED (fitted by simulation to the table's
//! rows, with the source and the fit's MAPE), DERIVED or ASSUMED, and checked as `--preset-file`
//! checks it.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::Context;
use mock_server::Config;

use crate::measure::table::{Capacity, PREFILL_TOKEN_PER_DECODE_STEP};
use crate::report::twin_table::mape_text;
use crate::twin::preset::mark_lines;

/// Why a table fit leaves the cost per token pair at 0 (the preset's mark, calibrate's note).
pub const PAIR_HELD: &str = "ASSUMED: 0, every row has one input length";

/// What the fit of rows of one input length leans on for the cost per token (the preset's mark,
/// calibrate's note).
pub fn per_token_prior() -> String {
    format!(
        "held near {PREFILL_TOKEN_PER_DECODE_STEP} x one request's decode step by a weak prior \
         (a prefill's FLOPs over a decode step's weight reads), as every row has one input length"
    )
}

/// What the marks say about a table fit.
#[derive(Clone, Debug)]
pub struct TableSource<'a> {
    /// The table file (or its source, for shipped presets).
    pub source: &'a str,
    pub deployment: Option<&'a str>,
    pub rows: usize,
    /// MAPE of TTFT and TPOT over the fitted rows (percent).
    pub mape: (Option<f64>, Option<f64>),
    /// Where the rows saturate, the capacity fitted (the KV pool or the running cap).
    pub capacity: Option<Capacity>,
    /// The cost per token pair held at 0 and the cost per token under the prior: every row has
    /// one input length.
    pub pair_held: bool,
    /// Where the scheduler came from (the table's backend column, a flag).
    pub scheduler_from: &'a str,
    /// Where the chunk size came from, with its mark (`ASSUMED: ...`, `MEASURED: ...`).
    pub chunk_from: &'a str,
    pub base_name: &'a str,
}

/// The preset's TOML text with each value's mark; `cfg` must be what the fit made.
pub fn table_preset(cfg: &Config, s: &TableSource) -> anyhow::Result<String> {
    let mut cfg = cfg.clone();
    if let Some(d) = s.deployment {
        cfg.model_path = d.to_string();
        cfg.served_model_name = d.to_string();
    }
    // A table gives no context length: the preset's is the longest request its KV pool holds,
    // so that predict's what-ifs run past the rows (each noted as extrapolated).
    let most = crate::plan::MAX_TOKENS as usize;
    cfg.context_length = cfg.kv_pool_tokens().min(most).max(cfg.context_length);
    cfg.validate_preset()
        .context("the fitted preset is not a valid mock configuration")?;
    let fitted = format!(
        "MEASURED: fitted by simulation to {} rows of {}{} (MAPE TTFT {}, TPOT {})",
        s.rows,
        s.source,
        s.deployment
            .map_or(String::new(), |d| format!(", deployment {d}")),
        mape_text(s.mape.0),
        mape_text(s.mape.1)
    );
    let mut marks: BTreeMap<&str, String> = BTreeMap::new();
    for k in [
        "stream_latency_s",
        "prefill_base_s",
        "prefill_per_token_s",
        "prefill_per_token_pair_s",
        "decode_base_s",
        "decode_per_context_token_s",
        "decode_per_request_s",
        "decode_batch_exponent",
    ] {
        marks.insert(k, fitted.clone());
    }
    if s.pair_held {
        marks.insert(
            "prefill_per_token_s",
            format!("{fitted}; {}", per_token_prior()),
        );
        marks.insert(
            "prefill_per_token_pair_s",
            format!(
                "{PAIR_HELD}; a prompt's pairs are then a cost per prompt, in prefill_per_token_s"
            ),
        );
    }
    let pool = if s.capacity == Some(Capacity::PoolTokens) {
        format!("{fitted}: the KV pool where the rows saturate")
    } else {
        "DERIVED: a KV pool no row of the table fills".into()
    };
    marks.insert("weights_bytes", pool.clone());
    marks.insert("gpu_total_bytes", pool);
    marks.insert(
        "mixed_batches",
        format!("DERIVED: the scheduler of {}", s.scheduler_from),
    );
    marks.insert("chunked_prefill_size", s.chunk_from.to_string());
    let no_chunks = "ASSUMED: a table has no per-chunk counts".to_string();
    for k in [
        "speculative_algorithm",
        "speculative_num_draft_tokens",
        "spec_accept_rates",
        "spec_warmup_steps",
        "spec_warmup_shares",
        "spec_first_token_alone",
        "stream_interval",
        "output_per_request_s",
        "results_after_next_pass",
    ] {
        marks.insert(k, no_chunks.clone());
    }
    let no_oom = "ASSUMED: a table shows no out-of-memory death".to_string();
    for k in [
        "activation_bytes_per_extend_token",
        "activation_bytes_per_context_token",
        "fragmentation_bytes_per_context_token",
    ] {
        marks.insert(k, no_oom.clone());
    }
    marks.insert(
        "context_length",
        "ASSUMED: a table gives none; the longest request the KV pool holds (at most 2^24 tokens)"
            .into(),
    );
    marks.insert(
        "max_running_requests",
        if s.capacity == Some(Capacity::RunningRequests) {
            format!("{fitted}: the running requests' cap where the rows saturate")
        } else {
            "ASSUMED: at least 1024 (vLLM's max_num_seqs on large GPUs)".into()
        },
    );
    if s.deployment.is_some() {
        marks.insert("model_path", "MEASURED: the table's deployment".into());
        marks.insert(
            "served_model_name",
            "MEASURED: the table's deployment".into(),
        );
    }
    let body = toml::to_string(&cfg).context("rendering the preset")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# A twin fitted by `bench-client calibrate --table` to {} rows of {}.",
        s.rows, s.source
    );
    let _ = writeln!(
        out,
        "# Each value is MEASURED (fitted by simulation), DERIVED or ASSUMED (kept from the base preset {}).",
        s.base_name
    );
    let _ = writeln!(
        out,
        "# Its figures are closed-loop means: predict them with `bench-client predict --preset-file`.\n"
    );
    mark_lines(
        &mut out,
        &body,
        &marks,
        &format!("ASSUMED: from the base preset {}", s.base_name),
        "MEASURED: this row's measured mean over the model's (predict)",
    );
    let back: Config = toml::from_str(&out).context("reading the rendered preset back")?;
    anyhow::ensure!(
        back == cfg,
        "the rendered preset does not read back as itself"
    );
    Ok(out)
}
