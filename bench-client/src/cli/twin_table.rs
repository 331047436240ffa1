//! `calibrate --table` (a twin fitted to aggregate rows) and `predict` (a twin's closed-loop
//! means for a table's rows or a grid of what-ifs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::common::Format;
use super::exit::CliError;
use crate::measure::table::Point;
use crate::report::twin_table::{self, mapes, RowView};
use crate::results::table::{read_table, select_deployment, shape_error, Measured, TableRow};
use crate::twin::base_preset;
use crate::twin::discrepancy;
use crate::twin::scheduler::{mixed_passes, rows_chunk, rows_scheduler};
use crate::twin::table::{
    chooses_chunk, fit_table, point_of, predict_rows, TableFit, TableFitOptions, CHUNK_CHOICES,
    UNCHUNKED, UNREACHED_COST,
};
use crate::twin::table_preset::{per_token_prior, table_preset, TableSource, PAIR_HELD};
use crate::twin::table_results::rows_of_file;

/// Whose scheduler a table's server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum Backend {
    /// A prefill pass or a decode step, prefill first.
    Sglang,
    /// Prefill and decode in one pass under the token budget.
    Vllm,
    /// TensorRT-LLM's in-flight batching: prefill and decode in one pass, as vLLM's.
    Trtllm,
}

impl Backend {
    /// The server's name as the table's `backend` column gives it, read by the same rules
    /// (`twin::scheduler`) for its scheduler and its default prefill tokens a pass.
    fn name(self) -> &'static str {
        match self {
            Backend::Sglang => "sglang",
            Backend::Vllm => "vllm",
            Backend::Trtllm => "trtllm",
        }
    }
}

/// What `calibrate --table` is asked.
#[derive(Debug)]
pub(super) struct TableCalibration<'a> {
    pub table: &'a Path,
    /// Results files whose sweep points and closed-loop runs join the table's rows.
    pub files: &'a [PathBuf],
    pub deployment: Option<&'a str>,
    pub backend: Option<Backend>,
    pub chunked_prefill_size: Option<i64>,
    pub base: &'a str,
    pub out: &'a Path,
}

/// `calibrate --table`: fit, print every row beside the model, write the preset.
pub(super) fn run_calibrate_table(a: TableCalibration) -> Result<ExitCode, CliError> {
    let data = |e: anyhow::Error| CliError::Data(e);
    let file = a.table.display().to_string();
    let rows = read_table(a.table, Measured::Required).map_err(|e| data(e.into()))?;
    let mut rows = select_deployment(&file, rows, a.deployment).map_err(|e| data(e.into()))?;
    let table_rows = rows.len();
    for f in a.files {
        rows.extend(rows_of_file(f).map_err(data)?);
    }
    if rows.len() > table_rows {
        let n = rows.len() - table_rows;
        eprintln!(
            "{n} {} from the results files join the table's {table_rows}",
            if n == 1 { "row" } else { "rows" }
        );
    }
    let points: Vec<Point> = rows.iter().map(point_of).collect();
    // Each distinct (isl, osl, concurrency) and whether any of its rows measured a TTFT and a
    // TPOT.
    let mut distinct: BTreeMap<(u32, u32, u32), (bool, bool)> = BTreeMap::new();
    for p in &points {
        let seen = distinct.entry((p.isl, p.osl, p.concurrency)).or_default();
        seen.0 |= p.ttft_s.is_some();
        seen.1 |= p.tpot_s.is_some();
    }
    // Rows measured twice at one shape and concurrency both count: said, since far apart they
    // pull the fit between them (and slow it).
    let twice = rows.len() - distinct.len();
    if twice > 0 {
        eprintln!(
            "note: {twice} {} an (isl, osl, concurrency) measured before: each counts in the fit, and predict takes their geometric mean",
            if twice == 1 { "row repeats" } else { "rows repeat" }
        );
    }
    let backend = a.backend.map(Backend::name);
    let (mixed, scheduler_from) = rows_scheduler(&rows, backend.and_then(mixed_passes));
    // The prefill tokens a pass: the flag's, else the server's default on the table's
    // accelerator (its launch is taken not to set them), else the rows' best fit.
    let server_default =
        rows_chunk(&rows[..table_rows], backend).filter(|_| a.chunked_prefill_size.is_none());
    let (chunk, chunk_choices) = match (a.chunked_prefill_size, &server_default) {
        (Some(c), _) if c > 0 => (c as usize, Vec::new()),
        (Some(_), _) => (UNCHUNKED, Vec::new()),
        (None, Some((c, _))) => (*c, Vec::new()),
        (None, None) => (CHUNK_CHOICES[0], CHUNK_CHOICES.to_vec()),
    };
    let opts = TableFitOptions {
        chunk,
        mixed,
        chunk_choices,
        ..TableFitOptions::default()
    };
    // Each distinct point's TTFT and TPOT are a measured value each: rows repeating a point
    // measure the same values again and add none.
    let params = crate::measure::table::TableModel::parameters(
        crate::measure::table::saturation::saturation(&points).is_some(),
    );
    let values: usize = distinct
        .values()
        .map(|&(ttft, tpot)| usize::from(ttft) + usize::from(tpot))
        .sum();
    if values < params {
        return Err(data(anyhow::anyhow!(
            "{file}: {} distinct (isl, osl, concurrency) {} of {} rows ({values} measured TTFTs and TPOTs; rows repeating a point are one point) are fewer than the model's {params} parameters (prefill per pass, per token and per token pair; decode per step, per context token, per request and the batch's exponent; the way in and out{}): give at least {} distinct points",
            distinct.len(),
            if distinct.len() == 1 { "point" } else { "points" },
            rows.len(),
            if params > 8 { "; the KV pool or the running requests' cap, since the rows saturate" } else { "" },
            params.div_ceil(2)
        )));
    }
    let base = base_preset(a.base).map_err(CliError::Usage)?;
    let choices: Vec<String> = opts.chunk_choices.iter().map(|c| c.to_string()).collect();
    let choices = choices.join(", ");
    let chosen = chooses_chunk(&points, &opts);
    let chunks = if chosen {
        format!("the best fit of {choices} prefill tokens a pass")
    } else if chunk >= UNCHUNKED {
        "each prompt prefilled in one pass".to_string()
    } else if let Some((_, why)) = &server_default {
        format!("{chunk} prefill tokens a pass ({why}; --chunked-prefill-size sets another)")
    } else {
        format!("{chunk} prefill tokens a pass")
    };
    eprintln!(
        "fitting {} rows{} by simulation: scheduler {}, {chunks}",
        rows.len(),
        a.deployment.map_or(String::new(), |d| format!(" of {d}")),
        if mixed { "vLLM's" } else { "SGLang's" },
    );
    let t0 = std::time::Instant::now();
    let opts = TableFitOptions {
        progress: Some(crate::drive::fit_spinner(
            "evaluations of every row's closed loop",
        )),
        ..opts
    };
    let fit = fit_table(&base, &points, &opts);
    if let Some(p) = &opts.progress {
        p.finish_and_clear();
    }
    let fit = fit.map_err(CliError::Other)?;
    eprintln!(
        "fitted in {:.1} s ({} evaluations of every row's closed loop); the objective went from {:.4} (first guess) to {:.4}",
        t0.elapsed().as_secs_f64(),
        fit.evals,
        fit.guess_cost,
        fit.cost
    );
    let views = predict_rows(&fit.config, &rows, &[]);
    if fit.cost >= UNREACHED_COST {
        report(&fit, mixed, &views);
        let ran = views.iter().filter(|v| v.pred_ttft_ms.is_some()).count();
        let why = if ran == 0 {
            "the model runs none of the rows".to_string()
        } else {
            format!(
                "the fitted model is far off the rows (a mean squared log ratio of {:.1} a row, where 10x off is 5.3): are the times in ms?",
                fit.cost
            )
        };
        return Err(data(anyhow::anyhow!("{file}: {why}; no preset written")));
    }
    let mut cfg = fit.config.clone();
    cfg.discrepancy = discrepancy::of_rows(&views);
    let text = table_preset(
        &cfg,
        &TableSource {
            source: &if a.files.is_empty() {
                file.clone()
            } else {
                format!("{file} and {} results files", a.files.len())
            },
            deployment: a.deployment,
            rows: rows.len(),
            mape: mapes(&views),
            capacity: fit.capacity,
            pair_held: fit.pair_held,
            scheduler_from,
            chunk_from: &if let Some((_, why)) = &server_default {
                format!("ASSUMED: {why}, where the launch does not set it")
            } else if choices.is_empty() {
                "ASSUMED: --chunked-prefill-size".to_string()
            } else if !chosen {
                format!("ASSUMED: {chunk}, every row has one input length (the rows cannot tell {choices} apart)")
            } else {
                format!("MEASURED: chosen by the rows' fit among {choices} (SGLang's chunked_prefill_size, vLLM's max_num_batched_tokens)")
            },
            base_name: a.base,
        },
    )
    .map_err(CliError::Other)?;
    super::paths::write_whole(a.out, &text)?;
    // The report comes after the preset is on disk: a closed stdout (`| head`) loses nothing.
    report(&fit, mixed, &views);
    eprintln!(
        "the preset keeps each row's measured over the model's ({} rows): predict carries it to their shapes' other concurrencies, and half the nearest shape's to a shape not fitted",
        cfg.discrepancy.len()
    );
    eprintln!(
        "wrote {}: predict with `bench-client predict --preset-file {} --table ROWS.csv`",
        a.out.display(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The fitted model and every row beside it, with the rows it cannot reach.
fn report(fit: &TableFit, mixed: bool, views: &[RowView]) {
    print!("{}", twin_table::model(&fit.model, fit.chunk, mixed));
    if fit.pair_held {
        println!("  per token pair: {PAIR_HELD} (fitted, it would take any value the rows allow, and longer prompts would pay for it)");
        println!("  per token: {}", per_token_prior());
    }
    println!("every row, measured beside the twin (a closed loop of each row's concurrency):");
    print!("{}", twin_table::table(views));
    let unreached: Vec<&RowView> = views.iter().filter(|v| v.note.is_some()).collect();
    if !unreached.is_empty() {
        println!(
            "rows the model cannot reach ({}), kept in the fit and the MAPE:",
            unreached.len()
        );
        for v in unreached {
            println!(
                "  {}: isl {} osl {} concurrency {}: {}",
                v.line
                    .map_or("a results file's row".to_string(), |l| format!("line {l}")),
                v.isl,
                v.osl,
                v.concurrency,
                v.note.as_deref().unwrap_or("")
            );
        }
    }
}

#[derive(Args, Debug)]
pub(super) struct PredictArgs {
    /// The twin: a named preset.
    #[arg(long, default_value = "small-cpu-demo")]
    preset: String,
    /// The twin: a preset file (one `calibrate` wrote).
    #[arg(long, conflicts_with = "preset")]
    preset_file: Option<PathBuf>,
    /// Rows to predict: CSV with isl, osl, concurrency (and ttft_ms, tpot_ms where measured).
    #[arg(long, conflicts_with_all = ["isl", "osl", "concurrency"])]
    table: Option<PathBuf>,
    /// The table's deployment, where it holds several.
    #[arg(long, requires = "table")]
    deployment: Option<String>,
    /// A grid instead: input lengths (comma separated, k = 1,000 tokens).
    #[arg(long, requires_all = ["osl", "concurrency"])]
    isl: Option<String>,
    /// The grid's output lengths.
    #[arg(long, requires_all = ["isl", "concurrency"])]
    osl: Option<String>,
    /// The grid's concurrencies.
    #[arg(long, requires_all = ["isl", "osl"])]
    concurrency: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// The model alone: leave out the discrepancy a table preset measured at its rows' shapes.
    #[arg(long)]
    model_only: bool,
}

/// `predict`: every row's closed loop on the twin, the means beside any measurement.
pub(super) fn run_predict(a: PredictArgs) -> Result<ExitCode, CliError> {
    let usage = |m: String| CliError::Usage(anyhow::anyhow!(m));
    let cfg = match &a.preset_file {
        Some(f) => mock_server::Config::preset_file(f).map_err(|e| CliError::Usage(e.into()))?,
        None => {
            mock_server::Config::preset(&a.preset).map_err(|e| usage(format!("--preset: {e}")))?
        }
    };
    let rows: Vec<TableRow> = match (&a.table, &a.isl, &a.osl, &a.concurrency) {
        (Some(t), ..) => {
            let file = t.display().to_string();
            let rows = read_table(t, Measured::Optional).map_err(|e| CliError::Data(e.into()))?;
            select_deployment(&file, rows, a.deployment.as_deref())
                .map_err(|e| CliError::Data(e.into()))?
        }
        (None, Some(i), Some(o), Some(c)) => {
            let list = |flag: &str, s: &str| {
                crate::plan::parse_contexts(s).map_err(|e| usage(format!("--{flag}: {e:#}")))
            };
            let (isl, osl) = (list("isl", i)?, list("osl", o)?);
            let conc: Vec<u32> = super::common::list_items("concurrency", c)
                .map_err(CliError::Usage)?
                .into_iter()
                .map(|s| match s.parse::<u32>() {
                    Ok(v) if v >= 1 => Ok(v),
                    _ => Err(usage(format!(
                        "--concurrency: {s:?} is not a whole number of at least 1"
                    ))),
                })
                .collect::<Result<_, _>>()?;
            let mut rows = Vec::new();
            for &i in &isl {
                for &o in &osl {
                    for &c in &conc {
                        if let Some((column, why)) = shape_error(i, o, c) {
                            return Err(usage(format!("--{column}: {why}")));
                        }
                        rows.push(TableRow {
                            line: 0,
                            deployment: None,
                            backend: None,
                            gpu: None,
                            isl: i,
                            osl: o,
                            concurrency: c,
                            ttft_ms: None,
                            tpot_ms: None,
                        });
                    }
                }
            }
            rows
        }
        _ => {
            return Err(usage(
                "give --table ROWS.csv, or a grid: --isl, --osl and --concurrency".into(),
            ))
        }
    };
    let discrepancy = if a.model_only {
        &[][..]
    } else {
        &cfg.discrepancy[..]
    };
    // A row at tens of thousands in flight runs for minutes: a spinner counts the rows done.
    let bar = crate::drive::fit_spinner(&format!("of {} rows predicted", rows.len()));
    let mut views: Vec<RowView> = rows
        .iter()
        .flat_map(|r| {
            let v = predict_rows(&cfg, std::slice::from_ref(r), discrepancy);
            bar.inc(1);
            v
        })
        .collect();
    bar.finish_and_clear();
    if a.table.is_none() {
        for v in &mut views {
            v.line = None;
        }
    }
    match a.format {
        Format::Table => print!("{}", twin_table::table(&views)),
        Format::Csv => print!("{}", twin_table::csv(&views).map_err(CliError::Other)?),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&twin_table::json(&views))
                .map_err(|e| CliError::Other(e.into()))?
        ),
    }
    Ok(ExitCode::SUCCESS)
}
