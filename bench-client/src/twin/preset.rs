//! The twin preset made from a calibration, every value marked MEASURED (fitted, with its fit
//! error, or reported by the server), DERIVED or ASSUMED (kept from the base preset), and checked
//! as `--preset-file` checks it.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use anyhow::Context;
use mock_server::Config;

use crate::measure::calibrate::{Calibration, FitPoint, ServerFacts, Shape};

/// The base preset of a fit: a named preset, or a file when `name_or_file` names one, without
/// the discrepancy a table twin keeps (measured against the model the fit replaces: carried
/// over, `predict` would scale the new model by ratios it never had).
pub fn base_preset(name_or_file: &str) -> anyhow::Result<Config> {
    let p = Path::new(name_or_file);
    let mut base = if p.is_file() || name_or_file.ends_with(".toml") {
        Config::preset_file(p)?
    } else {
        Config::preset(name_or_file).map_err(|e| anyhow::anyhow!("--base: {e}"))?
    };
    base.discrepancy.clear();
    Ok(base)
}

/// Where a server fact came from, for its mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The server's `/server_info`.
    Server,
    /// A flag of `calibrate`.
    Flag,
}

/// What the twin is made of besides the fit.
#[derive(Debug)]
pub struct TwinInputs<'a> {
    pub base: Config,
    pub base_name: &'a str,
    pub facts: &'a ServerFacts,
    pub chunk_source: Option<Source>,
    /// `max_running_requests` and `context_length` as the server reported them.
    pub max_running_requests: Option<usize>,
    pub context_length: Option<usize>,
    pub model: Option<String>,
    pub files: usize,
}

fn rms(points: &[FitPoint]) -> f64 {
    let n = points.len().max(1) as f64;
    (points.iter().map(|p| p.rel_error().powi(2)).sum::<f64>() / n).sqrt()
}

/// The twin preset and its TOML text with each value's mark.
pub fn twin_preset(c: &Calibration, t: TwinInputs) -> anyhow::Result<(Config, String)> {
    let mut cfg = t.base.clone();
    let mut marks: BTreeMap<&str, String> = BTreeMap::new();
    let fit = |what: &str, pts: &[FitPoint], r2: f64| {
        format!(
            "MEASURED: least squares on {what} ({} points, rms error {:.2}%, R-squared {r2:.5})",
            pts.len(),
            100.0 * rms(pts)
        )
    };
    let (p, d) = (&c.prefill, &c.decode);
    cfg.prefill_base_s = p.base_s;
    cfg.prefill_per_token_s = p.per_token_s;
    cfg.prefill_per_token_pair_s = p.per_token_pair_s;
    cfg.stream_latency_s = p.way_s;
    let pm = fit("TTFT", &p.points, p.r_squared);
    for k in [
        "prefill_base_s",
        "prefill_per_token_s",
        "prefill_per_token_pair_s",
        "stream_latency_s",
    ] {
        marks.insert(k, pm.clone());
    }
    cfg.decode_base_s = d.base_s;
    cfg.decode_per_context_token_s = d.per_context_token_s;
    let dm = fit("decode step times", &d.points, d.r_squared);
    marks.insert("decode_base_s", dm.clone());
    marks.insert("decode_per_context_token_s", dm.clone());
    if d.per_request_fitted {
        cfg.decode_per_request_s = d.per_request_s;
        cfg.decode_batch_exponent = 1.0;
        marks.insert("decode_per_request_s", dm);
        marks.insert(
            "decode_batch_exponent",
            "DERIVED: the runs' fit is linear in the batch".into(),
        );
    }
    if let (Some(c), Some(src)) = (t.facts.chunked_prefill_size, t.chunk_source) {
        cfg.chunked_prefill_size = if c > 0 { c } else { -1 };
        marks.insert(
            "chunked_prefill_size",
            match src {
                Source::Server => "MEASURED: the server's /server_info".into(),
                Source::Flag => "ASSUMED: --chunked-prefill-size".into(),
            },
        );
    }
    if let Some(m) = t.facts.mixed_batches {
        cfg.mixed_batches = m;
        marks.insert(
            "mixed_batches",
            "DERIVED: the server's scheduler (vLLM's and llama.cpp's mix prefill and decode in a pass; SGLang's with enable_mixed_chunk)".into(),
        );
    }
    if let Some(l) = t.facts.results_after_next_pass {
        cfg.results_after_next_pass = l;
        marks.insert(
            "results_after_next_pass",
            "DERIVED: the server's /server_info (SGLang's overlap scheduler on the CPU backend)"
                .into(),
        );
    }
    match &c.shape {
        Shape::Speculative {
            draft_tokens,
            accept_rates,
            steps,
            warmup_steps,
            warmup_shares,
            first_token_alone,
            ..
        } => {
            if !cfg.speculative() {
                cfg.speculative_algorithm = "EAGLE".into();
                marks.insert(
                    "speculative_algorithm",
                    "DERIVED: the chunks carry verify steps of several tokens".into(),
                );
            }
            cfg.speculative_num_draft_tokens = *draft_tokens;
            cfg.spec_accept_rates = accept_rates.clone();
            cfg.stream_interval = 1;
            let m = format!("MEASURED: per-chunk token counts of {steps} verify steps");
            marks.insert("speculative_num_draft_tokens", m.clone());
            marks.insert("spec_accept_rates", m);
            cfg.spec_warmup_steps = *warmup_steps;
            marks.insert(
                "spec_warmup_steps",
                "MEASURED: the median request's one-token verify steps after its first chunk"
                    .into(),
            );
            if !warmup_shares.is_empty() {
                cfg.spec_warmup_shares = warmup_shares.clone();
                marks.insert(
                    "spec_warmup_shares",
                    "MEASURED: the shares of requests by their one-token verify steps after the first chunk (each draws its own)"
                        .into(),
                );
            }
            cfg.spec_first_token_alone = *first_token_alone;
            let why = if *first_token_alone {
                "MEASURED: every request's first chunk carries one token, unlikely for a verify step at the measured acceptance"
            } else {
                "MEASURED: first chunks of several tokens, or too few to tell (a verify step)"
            };
            marks.insert("spec_first_token_alone", why.into());
        }
        Shape::Plain { stream_interval } => {
            cfg.speculative_algorithm = "none".into();
            cfg.stream_interval = *stream_interval;
            let m = "MEASURED: tokens per stream event".to_string();
            marks.insert("speculative_algorithm", m.clone());
            marks.insert("stream_interval", m);
        }
    }
    if let Some(pool) = t.facts.kv_pool_tokens {
        // weights_bytes is what leaves exactly `pool` tokens of KV in the static share.
        let kv = (pool as f64 + 0.5) * cfg.kv_bytes_per_token as f64;
        let static_bytes = cfg.static_bytes();
        if static_bytes < kv {
            cfg.gpu_total_bytes = ((kv + 1.0) / cfg.mem_fraction_static).ceil() as u64;
            marks.insert(
                "gpu_total_bytes",
                "DERIVED: large enough for the reported KV pool".into(),
            );
        }
        cfg.weights_bytes = (cfg.static_bytes() - kv).floor().max(0.0) as u64;
        marks.insert(
            "weights_bytes",
            format!(
                "DERIVED: leaves the KV pool the server reported (max_total_num_tokens {pool})"
            ),
        );
    }
    if let Some(m) = t.max_running_requests {
        cfg.max_running_requests = m.max(1);
        marks.insert(
            "max_running_requests",
            "MEASURED: the server's /server_info".into(),
        );
    }
    let pool = cfg.kv_pool_tokens();
    let ctx = t
        .context_length
        .unwrap_or(cfg.context_length)
        .min(pool)
        .max(2);
    if ctx != cfg.context_length || t.context_length.is_some() {
        cfg.context_length = ctx;
        marks.insert(
            "context_length",
            "MEASURED: the server's context length, at most the KV pool".into(),
        );
    }
    if let Some(m) = &t.model {
        cfg.model_path = m.clone();
        cfg.served_model_name = m.clone();
        marks.insert("model_path", "MEASURED: the server's model".into());
        marks.insert("served_model_name", "MEASURED: the server's model".into());
    }
    cfg.time_scale = 1.0;
    cfg.validate_preset()
        .context("the calibrated preset is not a valid mock configuration")?;
    let body = toml::to_string(&cfg).context("rendering the preset")?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# A measured twin written by `bench-client calibrate` from {} results file(s).",
        t.files
    );
    let _ = writeln!(
        out,
        "# Each value is MEASURED (fitted, with its fit error, or reported by the server), DERIVED"
    );
    let _ = writeln!(
        out,
        "# (computed from measured facts) or ASSUMED (kept from the base preset {}).",
        t.base_name
    );
    let _ = writeln!(
        out,
        "# stream_latency_s is the constant way in and out of TTFT; a twin over HTTP adds its own to it.\n"
    );
    let kept = format!("ASSUMED: from the base preset {}", t.base_name);
    mark_lines(&mut out, &body, &marks, &kept, &kept);
    // What is written is what `--preset-file` reads back.
    let back: Config = toml::from_str(&out).context("reading the rendered preset back")?;
    anyhow::ensure!(
        back == cfg,
        "the rendered preset does not read back as itself"
    );
    Ok((cfg, out))
}

/// Writes `body` (a rendered [`Config`]) to `out`, each value marked (`marks` by key, else
/// `kept`) and each discrepancy row's header marked `rows` (the rows come last, as tables, their
/// values unmarked); blank lines stay blank.
pub fn mark_lines(
    out: &mut String,
    body: &str,
    marks: &BTreeMap<&str, String>,
    kept: &str,
    rows: &str,
) {
    let (values, tables) = body.split_at(body.find("[[discrepancy]]").unwrap_or(body.len()));
    for line in values.lines() {
        if line.trim().is_empty() {
            let _ = writeln!(out);
            continue;
        }
        let key = line.split('=').next().unwrap_or("").trim();
        let mark = marks.get(key).map_or(kept, String::as_str);
        let _ = writeln!(out, "{line:<48} # {mark}");
    }
    for line in tables.lines() {
        if line == "[[discrepancy]]" {
            let _ = writeln!(out, "{line:<48} # {rows}");
        } else {
            let _ = writeln!(out, "{line}");
        }
    }
}
