//! The server's Prometheus `/metrics` around a load run: scraped before and after, the changes
//! reported, and stored (with the scrape instants) in the results file's manifest so that `merge`
//! can combine the shards of a run without counting a server-wide counter once per shard.
//!
//! The merge rule: a server counter scraped by several shards counts every shard's traffic in each
//! shard's window, so per-shard deltas must not be summed. For each server (by URL), scrape windows
//! `[before, after]` that overlap in time are joined, and the delta of a joined window is the latest
//! `after` minus the earliest `before`; windows that do not overlap (a `--resume`d run, a later run)
//! add up. Different servers add up. Every request of every shard lies inside its own shard's window,
//! so the result counts the run's traffic exactly once, plus any other traffic the server saw in
//! those windows (as for a single run).
//!
//! Counters and gauges: only counters are differenced and summed. A sample is a counter when its
//! metric's name ends in `_total` (Prometheus' rule for counters, which SGLang and vLLM follow), or
//! in `_sum` / `_count` (a histogram's or summary's running totals); every other sample is a gauge
//! (`sglang:spec_accept_length`, `sglang:num_running_reqs`, `sglang:cache_hit_rate`): reported as read
//! after the run, per server, never differenced or added across servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::cache::{is_rate_gauge, rate_gauges, ServerCache};

/// Whether the sample `key` (`name` or `name{labels}`) is a counter (see the module doc).
pub fn is_counter(key: &str) -> bool {
    let name = key.split('{').next().unwrap_or(key);
    ["_total", "_sum", "_count"]
        .iter()
        .any(|suffix| name.ends_with(suffix))
}

/// The gauges among `samples` other than the cache hit-rate ones (those are shown beside the
/// server's prefix cache).
pub fn gauges(samples: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    samples
        .iter()
        .filter(|(k, _)| !is_counter(k) && !is_rate_gauge(k) && !k.contains("_bucket"))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}
pub use crate::results::manifest_path;

/// Manifest line kind of a stored scrape pair.
pub const MANIFEST_KIND: &str = crate::results::manifest::KIND_LOAD_METRICS;

/// Counter and gauge samples of the server's Prometheus metrics before and after a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsDelta {
    /// Samples before the run (histogram buckets left out).
    pub before: BTreeMap<String, f64>,
    /// Samples after the run (histogram buckets left out).
    pub after: BTreeMap<String, f64>,
    /// When the `before` scrape answered, unix ms (the scraping machine's clock).
    #[serde(default)]
    pub before_unix_ms: u64,
    /// When the `after` scrape answered, unix ms.
    #[serde(default)]
    pub after_unix_ms: u64,
}

/// Name of the derived cache hit rate among the deltas.
pub const CACHE_HIT_RATE: &str = "run_cache_hit_rate (cached/prompt delta)";

impl MetricsDelta {
    /// after - before for the counters present in both (gauges and histogram buckets left out: a
    /// gauge's difference means nothing).
    pub fn raw_deltas(&self) -> BTreeMap<String, f64> {
        self.after
            .iter()
            .filter(|(k, _)| !k.contains("_bucket") && is_counter(k))
            .filter_map(|(k, a)| self.before.get(k).map(|b| (k.clone(), a - b)))
            .filter(|(_, v)| v.is_finite())
            .collect()
    }

    /// The raw deltas plus the derived cache hit rate over the run when the counters are there.
    pub fn deltas(&self) -> BTreeMap<String, f64> {
        with_derived(self.raw_deltas())
    }

    /// The server's prefix cache over the run, from its counters.
    pub fn cache(&self) -> Option<ServerCache> {
        ServerCache::from_deltas(&self.raw_deltas())
    }

    /// The counters' deltas as text lines, the cache, speculative and retraction ones first, the
    /// server's prefix cache and its hit-rate gauges, then the other gauges as read after the run.
    pub fn render(&self) -> String {
        let mut o = render_deltas("server /metrics counters, after - before:", &self.deltas());
        o.push_str(&render_cache(
            self.cache().as_ref(),
            &rate_gauges(&self.after),
        ));
        o.push_str(&render_gauges(&gauges(&self.after)));
        o
    }

    /// The counters' deltas, the server's prefix cache, its hit-rate gauges and the other gauges
    /// as read after the run, as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "deltas": self.deltas(),
            "prefix_cache": self.cache().map(|c| c.to_json()),
            "rate_gauges_after": rate_gauges(&self.after),
            "gauges_after": gauges(&self.after),
        })
    }
}

/// The server cache line and the hit-rate gauges (empty when there is neither).
fn render_cache(cache: Option<&ServerCache>, gauges: &BTreeMap<String, f64>) -> String {
    let mut o = String::new();
    if let Some(c) = cache {
        o.push_str(&format!("  {}\n", c.line()));
    }
    for (k, v) in gauges {
        o.push_str(&format!(
            "  {k} {v:.6} (a gauge, as read after the run; not the run's ratio)\n"
        ));
    }
    o
}

/// The gauges as read after the run (empty when there are none).
fn render_gauges(gauges: &BTreeMap<String, f64>) -> String {
    if gauges.is_empty() {
        return String::new();
    }
    let mut o = String::from("server /metrics gauges, as read after the run (not differenced):\n");
    for (k, v) in gauges {
        o.push_str(&format!("  {k:<60} {v:.6}\n"));
    }
    o
}

/// The sum over all label sets of the samples of metric `name` (`name` or `name{labels}`), `None`
/// when there is none.
pub fn by_name(d: &BTreeMap<String, f64>, name: &str) -> Option<f64> {
    let vals: Vec<f64> = d
        .iter()
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(_, v)| *v)
        .collect();
    (!vals.is_empty()).then(|| vals.iter().sum())
}

/// Add the cache hit rate (hit / queried token counter deltas, [`ServerCache`]) when the server
/// exports a pair of prefix-cache counters.
pub fn with_derived(mut d: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    if let Some(r) = ServerCache::from_deltas(&d).and_then(|c| c.ratio()) {
        d.insert(CACHE_HIT_RATE.into(), r);
    }
    d
}

/// Delta lines under a title, the cache, speculative and retraction ones first.
pub fn render_deltas(title: &str, d: &BTreeMap<String, f64>) -> String {
    let mut lines = vec![title.to_string()];
    let later = |k: &str| !(k.contains("cache") || k.contains("spec") || k.contains("retract"));
    let mut keys: Vec<&String> = d.keys().collect();
    keys.sort_by_key(|k| (later(k), (*k).clone()));
    for k in keys {
        lines.push(format!("  {k:<60} {:+.6}", d[k]));
    }
    lines.join("\n") + "\n"
}

/// Parse Prometheus text exposition: `name{labels} value` per sample line.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, rest) = match l.find('}') {
                Some(i) if l.contains('{') => (&l[..=i], &l[i + 1..]),
                _ => l.split_once(char::is_whitespace)?,
            };
            let v: f64 = rest.split_whitespace().next()?.parse().ok()?;
            v.is_finite().then(|| (name.trim().to_string(), v))
        })
        .collect()
}

/// The samples of a scrape, histogram buckets left out; `None` when there are none.
pub fn samples(text: &str) -> Option<BTreeMap<String, f64>> {
    let mut m = parse_prometheus(text);
    m.retain(|k, _| !k.contains("_bucket"));
    (!m.is_empty()).then_some(m)
}

/// One shard invocation's scrape pair, as stored in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardMetrics {
    /// Always [`MANIFEST_KIND`].
    pub kind: String,
    /// Server base URL (the key servers are told apart by).
    pub url: String,
    /// Shard, `I/N`.
    pub shard: String,
    /// Run seed.
    pub seed: u64,
    /// Run start, unix ms.
    pub start_unix_ms: u64,
    /// The samples.
    #[serde(flatten)]
    pub delta: MetricsDelta,
}

/// Append a scrape pair to the manifest of `out`.
pub fn store(out: &Path, m: &ShardMetrics) -> anyhow::Result<()> {
    crate::results::append_manifest(out, m)
}

/// The scrape pairs stored in the manifest of `out` (none when there is no manifest).
pub fn read_stored(out: &Path) -> anyhow::Result<Vec<ShardMetrics>> {
    let path = manifest_path(out);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue; // a torn last line of a killed run
        };
        if v.get("kind").and_then(Value::as_str) != Some(MANIFEST_KIND) {
            continue;
        }
        let m: ShardMetrics = serde_json::from_value(v).with_context(|| {
            format!(
                "{} line {}: bad {MANIFEST_KIND} entry",
                path.display(),
                n + 1
            )
        })?;
        out.push(m);
    }
    Ok(out)
}

/// One server's joined scrape windows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerWindows {
    /// Server base URL.
    pub url: String,
    /// Joined windows (earliest before, latest after of overlapping scrape pairs), in time order.
    pub windows: Vec<JoinedWindow>,
}

/// Overlapping scrape windows of one server, joined.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JoinedWindow {
    /// Shards whose scrape windows were joined here.
    pub shards: Vec<String>,
    /// Earliest before, latest after.
    pub delta: MetricsDelta,
}

/// The `/metrics` of several results files, merged by the rule in the module doc.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MergedMetrics {
    /// Per server.
    pub servers: Vec<ServerWindows>,
    /// Each stored scrape pair's own deltas (file, shard, deltas), for reference: summing them
    /// would count a shared server's traffic once per shard.
    pub per_shard: Vec<(String, String, BTreeMap<String, f64>)>,
    /// Files whose manifest held no scrape pair.
    pub missing: Vec<PathBuf>,
}

/// Merge the scrape pairs of several results files (see the module doc for the rule).
pub fn merge(files: &[(PathBuf, Vec<ShardMetrics>)]) -> MergedMetrics {
    let mut merged = MergedMetrics::default();
    let mut by_url: BTreeMap<&str, Vec<&ShardMetrics>> = BTreeMap::new();
    for (file, ms) in files {
        if ms.is_empty() {
            merged.missing.push(file.clone());
        }
        for m in ms {
            by_url.entry(m.url.as_str()).or_default().push(m);
            merged.per_shard.push((
                file.display().to_string(),
                m.shard.clone(),
                m.delta.deltas(),
            ));
        }
    }
    for (url, mut ms) in by_url {
        ms.sort_by_key(|m| (m.delta.before_unix_ms, m.delta.after_unix_ms));
        let mut windows: Vec<(Vec<String>, &MetricsDelta, &MetricsDelta)> = Vec::new();
        for m in ms {
            match windows.last_mut() {
                Some((shards, _, last)) if m.delta.before_unix_ms <= last.after_unix_ms => {
                    if !shards.contains(&m.shard) {
                        shards.push(m.shard.clone());
                    }
                    if m.delta.after_unix_ms > last.after_unix_ms {
                        *last = &m.delta;
                    }
                }
                _ => windows.push((vec![m.shard.clone()], &m.delta, &m.delta)),
            }
        }
        merged.servers.push(ServerWindows {
            url: url.to_string(),
            windows: windows
                .into_iter()
                .map(|(shards, first, last)| JoinedWindow {
                    shards,
                    delta: MetricsDelta {
                        before: first.before.clone(),
                        after: last.after.clone(),
                        before_unix_ms: first.before_unix_ms,
                        after_unix_ms: last.after_unix_ms,
                    },
                })
                .collect(),
        });
    }
    merged
}

impl MergedMetrics {
    /// Whether any scrape pair was found.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Sum over servers and joined windows of after - before, plus the derived cache hit rate.
    pub fn deltas(&self) -> BTreeMap<String, f64> {
        let mut sum: BTreeMap<String, f64> = BTreeMap::new();
        for w in self.servers.iter().flat_map(|s| &s.windows) {
            for (k, v) in w.delta.raw_deltas() {
                *sum.entry(k).or_default() += v;
            }
        }
        with_derived(sum)
    }

    /// The servers' prefix cache over the merged windows, from their counters.
    pub fn cache(&self) -> Option<ServerCache> {
        let d = self.deltas();
        ServerCache::from_deltas(&d)
    }

    /// The hit-rate gauges of each server as read at the end of its last window.
    pub fn rate_gauges(&self) -> BTreeMap<String, f64> {
        self.gauges_by(rate_gauges)
    }

    /// The other gauges of each server as read at the end of its last window; with several
    /// servers each key names its server (gauges are never added across servers).
    pub fn gauges(&self) -> BTreeMap<String, f64> {
        self.gauges_by(gauges)
    }

    fn gauges_by(
        &self,
        pick: fn(&BTreeMap<String, f64>) -> BTreeMap<String, f64>,
    ) -> BTreeMap<String, f64> {
        let mut g = BTreeMap::new();
        for s in &self.servers {
            if let Some(w) = s.windows.last() {
                for (k, v) in pick(&w.delta.after) {
                    let key = if self.servers.len() > 1 {
                        format!("{k} at {}", s.url)
                    } else {
                        k
                    };
                    g.insert(key, v);
                }
            }
        }
        g
    }

    /// Counters (`*_total`) that went down: the server restarted inside a window.
    pub fn reset_counters(&self) -> Vec<String> {
        self.deltas()
            .into_iter()
            .filter(|(k, v)| *v < 0.0 && k.split('{').next().is_some_and(|n| n.ends_with("_total")))
            .map(|(k, _)| k)
            .collect()
    }

    /// Text for the merge summary.
    pub fn render(&self) -> String {
        let windows: usize = self.servers.iter().map(|s| s.windows.len()).sum();
        let pairs = self.per_shard.len();
        let mut o = render_deltas(
            &format!(
                "server /metrics counters over {} server(s), {windows} window(s) joined from {pairs} shard scrape pair(s):\n  (overlapping scrape windows of one server are joined: latest after - earliest before, so\n   traffic is counted once, not once per shard; servers and disjoint windows add up)",
                self.servers.len()
            ),
            &self.deltas(),
        );
        o.push_str(&render_cache(self.cache().as_ref(), &self.rate_gauges()));
        o.push_str(&render_gauges(&self.gauges()));
        let resets = self.reset_counters();
        if !resets.is_empty() {
            o.push_str(&format!(
                "  note: {} counter(s) went down (a server restart inside a window?): {}\n",
                resets.len(),
                resets.join(", ")
            ));
        }
        if !self.missing.is_empty() {
            let names: Vec<String> = self
                .missing
                .iter()
                .map(|p| manifest_path(p).display().to_string())
                .collect();
            o.push_str(&format!(
                "  note: no /metrics scrapes in {} (run with --no-metrics, interrupted, or the manifest was not copied)\n",
                names.join(", ")
            ));
        }
        o
    }

    /// JSON for the merge summary.
    pub fn to_json(&self) -> Value {
        json!({
            "rule": "per server, overlapping scrape windows joined (latest after - earliest before); servers and disjoint windows summed",
            "deltas": self.deltas(),
            "prefix_cache": self.cache().map(|c| c.to_json()),
            "rate_gauges_after": self.rate_gauges(),
            "gauges_after": self.gauges(),
            "servers": self.servers.iter().map(|s| json!({
                "url": s.url,
                "windows": s.windows.iter().map(|w| json!({
                    "shards": w.shards,
                    "before_unix_ms": w.delta.before_unix_ms,
                    "after_unix_ms": w.delta.after_unix_ms,
                    "deltas": w.delta.deltas(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "per_shard": self.per_shard.iter().map(|(f, s, d)| json!({
                "file": f, "shard": s, "deltas": d,
            })).collect::<Vec<_>>(),
            "counters_went_down": self.reset_counters(),
            "files_without_scrapes": self.missing,
        })
    }
}

/// Read and merge the stored scrapes of several results files.
pub fn merge_files(files: &[PathBuf]) -> anyhow::Result<MergedMetrics> {
    let mut all = Vec::new();
    for f in files {
        all.push((f.clone(), read_stored(f)?));
    }
    Ok(merge(&all))
}

#[cfg(test)]
mod tests;
