//! A tool's own aggregates of one run, as an imported summary-only file gives them
//! (`import::summary` reads them; the manifest keeps them; `compare` holds them against records).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool's own aggregates of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// Requests the tool counted as completed.
    pub completed: Option<f64>,
    /// Requests the tool counted as failed, when it says.
    pub failed: Option<f64>,
    /// The tool's benchmark duration, s.
    pub duration_s: Option<f64>,
    /// The figures by this project's row name: `{ttft,tpot,inter_chunk,e2e}_{mean,p50,p90,p99}_ms`,
    /// `output_throughput_tok_s`, `request_throughput_req_s`.
    pub figures: BTreeMap<String, f64>,
    /// The tool's definition of each family (`ttft`, `tpot`, `inter_chunk`, `e2e`, `throughput`).
    pub definitions: BTreeMap<String, String>,
}

impl Figures {
    /// Whether the file gave any figure at all.
    pub fn is_empty(&self) -> bool {
        self.figures.is_empty()
    }

    /// The manifest's form of the figures.
    pub fn to_value(&self) -> Option<Value> {
        serde_json::to_value(self).ok()
    }

    /// The figures a manifest holds (`imported.summary`), when it holds any.
    pub fn from_value(v: &Value) -> Option<Self> {
        serde_json::from_value::<Self>(v.clone())
            .ok()
            .filter(|f| !f.is_empty())
    }
}
