//! The measured twin: read results files (sweeps, load runs) and their manifests, fit the mock's
//! cost model to them ([`crate::measure::calibrate`]) and make the preset that reproduces them.

pub mod discrepancy;
#[cfg(feature = "embedded-mock")]
pub mod headroom;
mod preset;
pub mod scheduler;
pub mod table;
pub mod table_preset;
pub mod table_results;

pub use preset::{base_preset, twin_preset, Source, TwinInputs};

use std::path::PathBuf;

use serde_json::Value;

use crate::measure::calibrate::{calibrate, Calibration, Observed, ServerFacts};
use crate::report::calibrate::observed;
use crate::results::{each_record_strict, read_manifest, Manifest};

/// What `calibrate` is asked.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// Results files.
    pub files: Vec<PathBuf>,
    /// The base preset, a name or a TOML file.
    pub base: String,
    /// The chunked prefill size, when the manifests' `/server_info` does not say.
    pub chunked_prefill_size: Option<i64>,
    /// Fit only the sweep requests at these context lengths (the rest held out); `None`: all.
    pub contexts: Option<Vec<u32>>,
}

/// Why calibration stopped: the options (usage) or the data.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("{0:#}")]
    Usage(anyhow::Error),
    #[error("{0:#}")]
    Data(anyhow::Error),
}

/// A calibration and the twin preset made from it.
#[derive(Debug)]
pub struct Twin {
    pub calibration: Calibration,
    pub facts: ServerFacts,
    pub chunk_source: Option<Source>,
    pub sweep_requests: usize,
    pub load_runs: usize,
    /// Requests left out because the server sent their whole stream at one instant.
    pub held_whole: usize,
    /// Files left out whole: load runs with a request held whole, sweeps of nothing else.
    pub held_files: Vec<String>,
    /// Sweep context lengths left out by [`CalibrateOptions::contexts`].
    pub held_out_contexts: Vec<u32>,
    pub config: mock_server::Config,
    /// The preset's TOML text, each value marked.
    pub text: String,
}

/// The server's identity in a manifest, to refuse mixing servers: `/server_info`'s model path,
/// else the manifest's model, with the dialect.
fn identity(m: &Manifest) -> Option<String> {
    let model = m
        .server_info
        .as_ref()
        .and_then(|i| i.get("model_path"))
        .map(Value::to_string)
        .or_else(|| m.model.as_deref().map(|s| Value::from(s).to_string()))?;
    let dialect = m
        .dialect
        .and_then(|d| serde_json::to_value(d).ok())
        .map(|d| d.to_string())
        .unwrap_or_else(|| "null".to_string());
    Some(format!("{model} ({dialect})"))
}

/// An integer of `/server_info`: at its top level, else in SGLang's `internal_states` (where
/// recent versions report the scheduler's figures).
fn int(infos: &[Value], key: &str) -> Option<i64> {
    infos.iter().find_map(|i| {
        i.get(key).and_then(Value::as_i64).or_else(|| {
            i.get("internal_states")?
                .as_array()?
                .iter()
                .find_map(|s| s.get(key)?.as_i64())
        })
    })
}

/// The facts the server reported in any manifest's `/server_info`.
fn facts_of(infos: &[Value]) -> ServerFacts {
    let spec = infos.iter().find_map(|i| {
        let v = i.get("speculative_algorithm")?;
        Some(
            v.as_str()
                .is_some_and(|s| !s.is_empty() && !s.eq_ignore_ascii_case("none")),
        )
    });
    let us = |k: &str| int(infos, k).and_then(|v| usize::try_from(v).ok());
    // SGLang says in `/server_info`; vLLM's and llama.cpp's schedulers always mix, and their
    // `/v1/models` names them as the owner.
    let mixed = infos.iter().find_map(|i| {
        i.get("enable_mixed_chunk")
            .and_then(Value::as_bool)
            .or_else(|| {
                let owner = i
                    .get("data")?
                    .as_array()?
                    .first()?
                    .get("owned_by")?
                    .as_str()?;
                matches!(owner, "vllm" | "llamacpp").then_some(true)
            })
    });
    // The mock says; SGLang's overlap scheduler (on unless `disable_overlap_schedule`) makes
    // a pass wait for the next one's results only where its forward blocks, on the CPU.
    let lag = infos.iter().find_map(|i| {
        i.get("results_after_next_pass")
            .and_then(Value::as_bool)
            .or_else(|| {
                let off = i.get("disable_overlap_schedule")?.as_bool()?;
                let cpu = i.get("device").and_then(Value::as_str) == Some("cpu");
                Some(!off && cpu)
            })
    });
    ServerFacts {
        chunked_prefill_size: int(infos, "chunked_prefill_size"),
        kv_pool_tokens: int(infos, "max_total_num_tokens").and_then(|v| u64::try_from(v).ok()),
        speculative: spec,
        draft_tokens: us("speculative_num_draft_tokens").filter(|_| spec == Some(true)),
        stream_interval: us("stream_interval"),
        mixed_batches: mixed,
        results_after_next_pass: lag,
    }
}

/// `--chunked-prefill-size` as `calibrate` takes it: positive, or -1 (each prompt in one pass).
pub fn check_chunked_prefill_size(c: Option<i64>) -> anyhow::Result<()> {
    if c.is_some_and(|c| c == 0 || c < -1) {
        anyhow::bail!("--chunked-prefill-size must be positive or -1 (each prompt in one pass)");
    }
    Ok(())
}

/// Reads the files, fits, and makes the twin preset. Nothing is written.
pub fn calibrate_files(o: &CalibrateOptions) -> Result<Twin, CalibrateError> {
    let data = |e: anyhow::Error| CalibrateError::Data(e);
    check_chunked_prefill_size(o.chunked_prefill_size).map_err(CalibrateError::Usage)?;
    let base = base_preset(&o.base).map_err(CalibrateError::Usage)?;
    let (mut sweep, mut loads) = (Vec::<Observed>::new(), Vec::<Vec<Observed>>::new());
    let (mut infos, mut servers) = (Vec::new(), Vec::<(String, String)>::new());
    let (mut held_whole, mut held_files) = (0, Vec::new());
    for f in &o.files {
        // Each record is read into what the fit needs of it, one at a time.
        let (mut held, mut obs, mut records, mut load) = (Vec::new(), Vec::new(), 0, false);
        each_record_strict(f, |r| {
            records += 1;
            load |= r.load.is_some();
            match observed(&r) {
                Some(o) if o.held_whole() => held.push(o),
                Some(o) => obs.push(o),
                None => {}
            }
            Ok(())
        })
        .map_err(data)?;
        if obs.is_empty() && held.is_empty() {
            return Err(data(anyhow::anyhow!(
                "{}: no successful streaming request with its trace ({records} records)",
                f.display(),
            )));
        }
        if let Some(m) = read_manifest(f).map_err(data)? {
            if let Some(id) = identity(&m) {
                if let Some((other, file)) = servers.iter().find(|(s, _)| *s != id) {
                    return Err(data(anyhow::anyhow!(
                        "mixed servers: {} ran against {id}, {file} against {other}; calibrate one server at a time",
                        f.display()
                    )));
                }
                servers.push((id, f.display().to_string()));
            }
            if let Some(i) = m.server_info.filter(Value::is_object) {
                infos.push(i);
            }
        }
        held_whole += held.len();
        // A load run's passes and batches are read from every request together: one held whole
        // hides its request from them, so the run is left out.
        if !held.is_empty() && (load || obs.is_empty()) {
            held_files.push(f.display().to_string());
            continue;
        }
        if load {
            loads.push(obs);
        } else {
            sweep.extend(obs);
        }
    }
    let mut held_out_contexts = Vec::new();
    if let Some(keep) = &o.contexts {
        for r in &sweep {
            if !keep.contains(&r.context) && !held_out_contexts.contains(&r.context) {
                held_out_contexts.push(r.context);
            }
        }
        held_out_contexts.sort_unstable();
        sweep.retain(|r| keep.contains(&r.context));
    }
    let mut facts = facts_of(&infos);
    let chunk_source = match (facts.chunked_prefill_size, o.chunked_prefill_size) {
        (_, Some(c)) => {
            facts.chunked_prefill_size = Some(c);
            Some(Source::Flag)
        }
        (Some(_), None) => Some(Source::Server),
        (None, None) => None,
    };
    let calibration =
        calibrate(&sweep, &loads, &facts, base.decode_per_request_s).map_err(|u| {
            data(anyhow::anyhow!(
                "cannot fit {}: need {}; no preset written",
                u.param,
                u.missing
            ))
        })?;
    let model = infos
        .iter()
        .find_map(|i| i.get("model_path").and_then(Value::as_str))
        .map(str::to_string);
    let us = |k: &str| int(&infos, k).and_then(|v| usize::try_from(v).ok());
    let (config, text) = twin_preset(
        &calibration,
        TwinInputs {
            base,
            base_name: &o.base,
            facts: &facts,
            chunk_source,
            max_running_requests: us("max_running_requests"),
            context_length: us("context_length"),
            model,
            files: o.files.len(),
        },
    )
    .map_err(data)?;
    Ok(Twin {
        calibration,
        facts,
        chunk_source,
        sweep_requests: sweep.len(),
        load_runs: loads.len(),
        held_whole,
        held_files,
        held_out_contexts,
        config,
        text,
    })
}
