//! A side that is another tool's summary (imported from a file without per-request data) against a
//! side of records: each figure both have is a row. The summary has no requests to resample, so its
//! figure is held fixed (a side of one unit whose statistic is the figure) and the row's interval
//! comes from the other side's resamples alone; the verdict is the usual rule on that interval, and
//! a throughput is `unclear` (one run a side is one throughput). Figures only one side has are named.

use std::collections::HashMap;
use std::path::PathBuf;

use super::LoadValues;
use super::{at_percentile, compare_rows, kind_of, row, sample, CompareReport, Kind, Spec};
use crate::measure::compare::{Bootstrap, Direction, Run, Sample, Statistic};
use crate::results::read_manifests;
use crate::results::Figures;

/// An imported summary: the tool, the file it came from and its figures.
#[derive(Clone, Debug, PartialEq)]
pub struct SummarySide {
    /// The tool (`bench_serving`, `vllm`, `aiperf`).
    pub tool: String,
    /// The results file given to `compare`.
    pub file: String,
    /// The tool's figures and definitions.
    pub figures: Figures,
}

/// The summary a side's files hold: `None` when none holds one; refused when a summary is mixed
/// with other files or a file holds several summaries.
pub fn summary_of(side: &str, files: &[PathBuf]) -> anyhow::Result<Option<SummarySide>> {
    let mut found = Vec::new();
    for f in files {
        for m in read_manifests(f)? {
            let Some(imp) = m.imported else { continue };
            if let Some(figures) = imp.summary.as_ref().and_then(Figures::from_value) {
                found.push(SummarySide {
                    tool: imp.tool.clone(),
                    file: f.display().to_string(),
                    figures,
                });
            }
        }
    }
    match found.len() {
        0 => Ok(None),
        1 if files.len() == 1 => Ok(found.pop()),
        1 => anyhow::bail!(
            "{side}: {} is another tool's summary and cannot be pooled with other files: give it alone",
            found[0].file
        ),
        n => anyhow::bail!(
            "{side}: {n} summaries (one per run of the tool's file): a summary side is one run; import each run's line into its own file"
        ),
    }
}

/// A row of the summary comparison: its name, family, statistic (`mean` or `pNN`) and direction.
const LATENCIES: [(&str, &str, &str); 16] = [
    ("ttft_mean_ms", "ttft", "mean"),
    ("ttft_p50_ms", "ttft", "p50"),
    ("ttft_p90_ms", "ttft", "p90"),
    ("ttft_p99_ms", "ttft", "p99"),
    ("tpot_mean_ms", "tpot", "mean"),
    ("tpot_p50_ms", "tpot", "p50"),
    ("tpot_p90_ms", "tpot", "p90"),
    ("tpot_p99_ms", "tpot", "p99"),
    ("inter_chunk_mean_ms", "inter_chunk", "mean"),
    ("inter_chunk_p50_ms", "inter_chunk", "p50"),
    ("inter_chunk_p90_ms", "inter_chunk", "p90"),
    ("inter_chunk_p99_ms", "inter_chunk", "p99"),
    ("e2e_mean_ms", "e2e", "mean"),
    ("e2e_p50_ms", "e2e", "p50"),
    ("e2e_p90_ms", "e2e", "p90"),
    ("e2e_p99_ms", "e2e", "p99"),
];

/// A run's units of one family: each request's value, or (inter-chunk) its gaps.
fn units(v: &LoadValues, family: &str) -> Vec<Vec<f64>> {
    let one = |x: &Vec<f64>| x.iter().map(|&y| vec![y]).collect();
    match family {
        "ttft" => one(&v.ttft_ms),
        "tpot" => one(&v.tpot_ms),
        "e2e" => one(&v.e2e_ms),
        _ => v.inter_chunk_ms.clone(),
    }
}

/// The records' side of one row. A mean is a ratio of sums over requests, each request
/// `[sum of its values, their count]`: the pooled mean (over gaps for inter-chunk, as the tools
/// pool theirs), resampled by request. A percentile is taken of the family's one percentile
/// sample in `pooled` (built at the first percentile asked), whose values its rows share.
fn own_sample(
    side: &'static str,
    runs: &[LoadValues],
    (family, stat): (&'static str, &str),
    pooled: &mut HashMap<&'static str, Result<Sample, String>>,
) -> Result<Sample, String> {
    match stat.strip_prefix('p').and_then(|p| p.parse::<f64>().ok()) {
        Some(p) => {
            let family_sample = pooled.entry(family).or_insert_with(|| {
                sample(
                    side,
                    runs.iter()
                        .map(|v| Run::clustered(units(v, family)))
                        .collect(),
                    Statistic::Percentile(p),
                )
            });
            at_percentile(family_sample, p)
        }
        None => sample(
            side,
            runs.iter()
                .map(|v| {
                    Run::clustered(
                        units(v, family)
                            .into_iter()
                            .map(|u| vec![u.iter().sum(), u.len() as f64])
                            .collect(),
                    )
                })
                .collect(),
            Statistic::RatioOfSums,
        ),
    }
}

/// The summary's side of one row: one unit whose statistic is the figure.
fn fixed(side: &'static str, value: f64, st: Statistic) -> Result<Sample, String> {
    let unit = match st {
        Statistic::RatioOfSums => vec![value, 1.0],
        _ => vec![value],
    };
    let run = Run::clustered(vec![unit]);
    let run = if st == Statistic::Rate {
        run.lasting(1.0)
    } else {
        run
    };
    sample(side, vec![run], st)
}

/// Compare `summary` (BASE when `summary_is_base`) with the records of the other side.
pub fn compare_summary(
    summary: &SummarySide,
    summary_is_base: bool,
    own: &super::Side,
    b: &Bootstrap,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> anyhow::Result<CompareReport> {
    let (sum_side, own_side): (&'static str, &'static str) = if summary_is_base {
        ("BASE", "NEW")
    } else {
        ("NEW", "BASE")
    };
    if kind_of(own_side, own)? != Kind::Load {
        anyhow::bail!(
            "{sum_side} is {}'s summary of a load run, {own_side} holds sweep records: nothing to compare",
            summary.tool
        );
    }
    let values = &own.load_runs;
    let figures = &summary.figures.figures;
    let mut specs: Vec<Spec> = Vec::new();
    let mut missing = Vec::new();
    let mut pooled = HashMap::new();
    let mut push = |name: &'static str, dir: Direction, fixed_side, own_side| {
        let (base, new) = if summary_is_base {
            (fixed_side, own_side)
        } else {
            (own_side, fixed_side)
        };
        specs.push(row(None, name, dir, base, new));
    };
    for (name, family, stat) in LATENCIES {
        let Some(&value) = figures.get(name) else {
            missing.push(name);
            continue;
        };
        let own_s = own_sample(own_side, values, (family, stat), &mut pooled);
        let st = own_s
            .as_ref()
            .map_or(Statistic::RatioOfSums, |s| s.statistic());
        push(
            name,
            Direction::LowerIsBetter,
            fixed(sum_side, value, st),
            own_s,
        );
    }
    type Pick = fn(&LoadValues) -> &Vec<f64>;
    let rates: [(&'static str, Pick); 2] = [
        ("output_throughput_tok_s", |v| &v.output_tokens),
        ("request_throughput_req_s", |v| &v.succeeded),
    ];
    for (name, pick) in rates {
        let Some(&value) = figures.get(name) else {
            missing.push(name);
            continue;
        };
        let own_runs = values
            .iter()
            .map(|v| {
                let d = v
                    .duration_s
                    .ok_or_else(|| format!("{own_side}: a run's duration is undefined"))?;
                Ok(Run::scalar(pick(v)).lasting(d))
            })
            .collect::<Result<Vec<Run>, String>>();
        push(
            name,
            Direction::HigherIsBetter,
            fixed(sum_side, value, Statistic::Rate),
            own_runs.and_then(|r| sample(own_side, r, Statistic::Rate)),
        );
    }
    let mut rows = compare_rows(specs, b, progress);
    // The summary's side counts the requests the tool completed, not its one fixed unit.
    let completed = summary.figures.completed.map_or(0, |n| n.max(0.0) as usize);
    for r in &mut rows {
        if summary_is_base {
            r.n_base = completed;
        } else {
            r.n_new = completed;
        }
    }
    let mut notes = vec![format!(
        "{sum_side} is {}'s own summary ({}), with no per-request data: it has no resamples, so each row's interval comes from {own_side}'s resamples alone with {sum_side}'s figure held fixed; the verdict is the usual rule on that interval (same within the threshold, better or worse wholly beyond it, else unclear), and the throughputs are unclear (one run a side is one throughput)",
        summary.tool, summary.file
    )];
    if !missing.is_empty() {
        notes.push(format!(
            "not compared, the summary does not have them: {}",
            missing.join(", ")
        ));
    }
    notes.push(format!("not compared, the summary cannot give them: goodput, the prefix cache rows, and any interval of {sum_side}'s own noise"));
    for (family, def) in &summary.figures.definitions {
        notes.push(format!("{}'s {family}: {def}", summary.tool));
    }
    notes.push(format!(
        "{own_side}'s figures are this client's: TTFT from each request's scheduled start (its send in a closed loop), TPOT per request after the first chunk, inter-chunk gaps pooled by request, end-to-end from the scheduled start; means pooled as the tool's are"
    ));
    let failed = own.failed;
    if failed > 0 {
        notes.push(format!(
            "{own_side}: {failed} records failed and are left out of the latencies"
        ));
    }
    if let Some(n) = summary.figures.completed {
        notes.push(format!(
            "{sum_side}: {n} requests completed, as the tool counted them"
        ));
    }
    Ok(CompareReport {
        kind: Kind::Load,
        bootstrap: *b,
        workload: Vec::new(),
        differences: Vec::new(),
        rows,
        notes,
        truth: None,
    })
}
