//! `bench-client calibrate`: fit the mock's cost model to a server's sweep (and load) results
//! and write the twin preset that reproduces them.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::exit::CliError;
use crate::measure::calibrate::bandwidth_share;
use crate::report::calibrate::{render, secs};
use crate::twin::{calibrate_files, CalibrateError, CalibrateOptions, Source};

#[derive(Args, Debug)]
pub(super) struct CalibrateArgs {
    /// Results files: sweeps (three or more context lengths) and, for the batch cost, load runs
    /// at concurrency above 1, each with its manifest beside it. With --table, each sweep point
    /// and closed-loop load run of fixed lengths is one more row.
    #[arg(required_unless_present = "table")]
    files: Vec<PathBuf>,
    /// Fit to an aggregate table instead: CSV rows of isl, osl, concurrency, ttft_ms, tpot_ms
    /// (closed-loop means; other columns ignored but deployment and backend).
    #[arg(long)]
    table: Option<PathBuf>,
    /// The table's deployment (its `deployment` column), where it holds several.
    #[arg(long, requires = "table")]
    deployment: Option<String>,
    /// The table's scheduler, when its `backend` column does not say.
    #[arg(long, value_enum, requires = "table")]
    backend: Option<super::twin_table::Backend>,
    /// The twin preset to write (TOML, for --preset-file).
    #[arg(long)]
    out: PathBuf,
    /// Preset (name or TOML file) whose values stand for what the results cannot determine.
    #[arg(long, default_value = "small-cpu-demo")]
    base: String,
    /// Fit only the sweep requests at these context lengths (comma separated, k = 1,000 tokens),
    /// holding the others out; default: every context.
    #[arg(long, conflicts_with = "table")]
    contexts: Option<String>,
    /// The server's chunked prefill size, when its /server_info does not say (-1: none).
    #[arg(long, allow_hyphen_values = true)]
    chunked_prefill_size: Option<i64>,
    /// KV cache bytes per token of context, for the bandwidth diagnosis (with --mem-bandwidth-gbs).
    #[arg(long, requires = "mem_bandwidth_gbs", conflicts_with = "table")]
    kv_bytes_per_token: Option<f64>,
    /// The GPU's memory bandwidth in GB/s (10^9 bytes/s), for the bandwidth diagnosis.
    #[arg(long, requires = "kv_bytes_per_token", conflicts_with = "table")]
    mem_bandwidth_gbs: Option<f64>,
}

pub(super) fn run_calibrate(a: CalibrateArgs) -> Result<ExitCode, CliError> {
    let usage = |m: String| CliError::Usage(anyhow::anyhow!(m));
    let mut kept = super::paths::results_and_manifests("the results file", &a.files);
    kept.extend(a.table.iter().map(|t| ("the table", t.clone())));
    super::paths::refuse_overwrites(&kept, &super::paths::written(&[("--out", Some(&a.out))]))
        .map_err(CliError::Usage)?;
    super::paths::check_writable("--out", &a.out).map_err(CliError::Usage)?;
    crate::twin::check_chunked_prefill_size(a.chunked_prefill_size).map_err(CliError::Usage)?;
    if let Some(table) = &a.table {
        return super::twin_table::run_calibrate_table(super::twin_table::TableCalibration {
            table,
            files: &a.files,
            deployment: a.deployment.as_deref(),
            backend: a.backend,
            chunked_prefill_size: a.chunked_prefill_size,
            base: &a.base,
            out: &a.out,
        });
    }
    if let (Some(b), Some(g)) = (a.kv_bytes_per_token, a.mem_bandwidth_gbs) {
        if !(b.is_finite() && b > 0.0 && g.is_finite() && g > 0.0) {
            return Err(usage(
                "--kv-bytes-per-token and --mem-bandwidth-gbs must be positive".into(),
            ));
        }
    }
    let contexts = match &a.contexts {
        Some(c) => {
            Some(crate::plan::parse_contexts(c).map_err(|e| usage(format!("--contexts: {e:#}")))?)
        }
        None => None,
    };
    let twin = calibrate_files(&CalibrateOptions {
        files: a.files.clone(),
        base: a.base.clone(),
        chunked_prefill_size: a.chunked_prefill_size,
        contexts,
    })
    .map_err(|e| match e {
        CalibrateError::Usage(e) => CliError::Usage(e),
        CalibrateError::Data(e) => CliError::Data(e),
    })?;
    let (facts, cal, chunk_source) = (&twin.facts, &twin.calibration, twin.chunk_source);
    if chunk_source.is_none() {
        eprintln!("note: no chunked prefill size in the manifests' /server_info and no --chunked-prefill-size: prefill is fitted as one pass per request");
    }
    eprintln!(
        "calibrating from {} sweep requests and {} load run(s); chunked prefill {}; KV pool {}; scheduler {}",
        twin.sweep_requests,
        twin.load_runs,
        match (facts.chunked_prefill_size, chunk_source) {
            (Some(c), Some(Source::Server)) if c > 0 => format!("{c} (server)"),
            (Some(c), Some(Source::Flag)) if c > 0 => format!("{c} (flag)"),
            _ => "none".into(),
        },
        facts
            .kv_pool_tokens
            .map_or("from the base preset".into(), |p| format!(
                "{p} tokens (server)"
            )),
        match facts.mixed_batches {
            Some(true) => "mixed prefill and decode passes (server)",
            Some(false) => "prefill or decode passes (server)",
            None => "the base preset's",
        },
    );
    if !twin.held_out_contexts.is_empty() {
        let held: Vec<String> = twin.held_out_contexts.iter().map(u32::to_string).collect();
        eprintln!(
            "note: sweep requests at {} tokens held out (--contexts)",
            held.join(", ")
        );
    }
    if twin.held_whole > 0 {
        eprintln!(
            "note: left out {} requests whose whole stream arrived at one instant (the server held it: it times none of its passes){}",
            twin.held_whole,
            if twin.held_files.is_empty() {
                String::new()
            } else {
                format!(
                    "; left out whole (a load run with one, or nothing else): {}",
                    twin.held_files.join(", ")
                )
            }
        );
    }
    if facts.results_after_next_pass == Some(true) {
        eprintln!("note: the server processes a pass's results after the next pass (SGLang's overlap scheduler on CPU): the twin does too");
    }
    print!("{}", render(cal));
    if let (Some(b), Some(g)) = (a.kv_bytes_per_token, a.mem_bandwidth_gbs) {
        let d = cal.decode.per_context_token_s;
        match bandwidth_share(d, b, g) {
            Some(s) => println!(
                "bandwidth: {} per context token reading {b} bytes of KV is {:.2} GB/s, {:.3}% of {g} GB/s: {}",
                secs(d),
                b / d / 1e9,
                100.0 * s,
                if s < 0.5 { "far from the bandwidth limit" } else { "near the bandwidth limit" }
            ),
            None => println!("bandwidth: the fitted per-context decode cost is 0: nothing to compare"),
        }
    }
    let text = &twin.text;
    println!(
        "kept from the base preset {}: memory (unless the server reported its KV pool), activation and fragmentation, output_per_request_s and every value not named above (marked ASSUMED in the preset)",
        a.base
    );
    super::paths::write_whole(&a.out, text)?;
    eprintln!(
        "wrote {}: run the twin with --preset-file {}",
        a.out.display(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
