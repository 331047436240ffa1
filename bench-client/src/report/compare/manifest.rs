//! What differs between the manifests beside two sides' results files (server, model,
//! `/server_info`, client settings, command), and the SLO they recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use super::Difference;
use crate::report::load::Slo;
use crate::results::{manifest_path, Manifest};

/// Manifest keys that differ between every two runs and say nothing about the setup.
const VOLATILE: [&str; 5] = [
    "started_unix_s",
    "invocation",
    "start_unix_ms",
    "resume",
    "settings.resume",
];

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, BTreeSet<String>>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            if !VOLATILE.contains(&prefix) {
                out.entry(prefix.to_string())
                    .or_default()
                    .insert(other.to_string());
            }
        }
    }
}

/// The run lines (those with a `command`) of the manifests beside `files`, flattened to dotted
/// keys; a note for each file without a manifest.
fn manifest_settings(
    files: &[PathBuf],
    notes: &mut Vec<String>,
) -> anyhow::Result<BTreeMap<String, BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for f in files {
        let path = manifest_path(f);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                notes.push(format!("no manifest beside {}", f.display()));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            // A torn or foreign line is no setting; the results themselves are what counts. A
            // run's line has a command (a `/metrics` scrape's has none).
            let Ok(m) = serde_json::from_str::<Manifest>(line) else {
                continue;
            };
            if !m.command.is_empty() {
                flatten("", &m.to_value(), &mut out);
            }
        }
    }
    Ok(out)
}

fn shown(v: Option<&BTreeSet<String>>) -> String {
    let s = v.map_or_else(
        || "-".to_string(),
        |s| s.iter().cloned().collect::<Vec<_>>().join(" | "),
    );
    if s.chars().count() > 160 {
        format!("{}...", s.chars().take(157).collect::<String>())
    } else {
        s
    }
}

/// What differs between the two sides' manifests (server url, model, `/server_info`, client
/// settings, command), and notes for missing manifests.
pub fn manifest_differences(
    base: &[PathBuf],
    new: &[PathBuf],
) -> anyhow::Result<(Vec<Difference>, Vec<String>)> {
    let mut notes = Vec::new();
    let b = manifest_settings(base, &mut notes)?;
    let n = manifest_settings(new, &mut notes)?;
    let keys: BTreeSet<&String> = b.keys().chain(n.keys()).collect();
    let diffs = keys
        .into_iter()
        .filter(|k| b.get(*k) != n.get(*k))
        .map(|k| Difference {
            key: k.clone(),
            base: shown(b.get(k)),
            new: shown(n.get(k)),
        })
        .collect();
    Ok((diffs, notes))
}

/// The SLO recorded in the manifests of load runs, when every run that recorded one agrees.
pub fn manifest_slo(files: &[PathBuf]) -> Option<Slo> {
    let mut seen: Option<Slo> = None;
    for f in files {
        // A missing manifest file gives no SLO; a torn or foreign line is skipped.
        std::fs::metadata(manifest_path(Path::new(f))).ok()?;
        let manifests = crate::results::read_manifests(Path::new(f)).ok()?;
        for m in manifests {
            let Some(s) = m.slo else {
                continue;
            };
            if !s.is_set() {
                continue;
            }
            match seen {
                Some(prev) if prev != s => return None,
                _ => seen = Some(s),
            }
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_show_only_what_differs() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.jsonl");
        let b = dir.path().join("b.jsonl");
        std::fs::write(
            manifest_path(&a),
            "{\"command\":\"x\",\"url\":\"u\",\"invocation\":1,\"server_info\":{\"decode_base_s\":0.002}}\n",
        )
        .unwrap();
        std::fs::write(
            manifest_path(&b),
            "{\"command\":\"x\",\"url\":\"u\",\"invocation\":2,\"server_info\":{\"decode_base_s\":0.003}}\n{\"torn\n",
        )
        .unwrap();
        let (d, notes) = manifest_differences(&[a], &[b.clone(), dir.path().join("c")]).unwrap();
        assert_eq!(
            d,
            vec![Difference {
                key: "server_info.decode_base_s".into(),
                base: "0.002".into(),
                new: "0.003".into()
            }]
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
    }
}
