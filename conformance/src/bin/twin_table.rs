//! The table twin's check on public data: protocols P1 (interpolation: in each (isl, osl) series
//! sorted by concurrency, the 2nd, 4th, ... rows held out, never the first or the last) and P2
//! (leave one shape out, where a deployment has three or more) on every deployment of a table,
//! the twin's MAPE alone and times the discrepancy its training rows measured at the held-out
//! row's shape (P2 holds out whole shapes, so none applies there), beside two baselines (log-log
//! interpolation between neighbours, P1 only; a linear least-squares model), per deployment and
//! the median over deployments.
//!
//! Run: `cargo run --release -p conformance --bin twin-table -- ../shared/data/gpu-tables/silicon-train.csv`
//! (`--only A,B` for the deployments whose names contain A or B, `--protocol p1|p2`, `--max-evals N`; with
//! `TWIN_TABLE_ROWS=1` every row is printed beside each fit).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use bench_client::measure::table::baseline::{loglog_neighbours, p1_held_out, p2_folds, Linear};
use bench_client::measure::table::{error_pct, mape, median, Point};
use bench_client::report::grid::{Col, Grid};
use bench_client::report::twin_table::mape_text;
use bench_client::results::table::{read_table, Measured, TableRow};
use bench_client::twin::discrepancy::{of_row, ratios};
use bench_client::twin::scheduler::{rows_chunk, rows_scheduler};
use bench_client::twin::table::{fit_table, predict_point, TableFitOptions, CHUNK_CHOICES};
use clap::Parser;
use mock_server::config::Discrepancy;

/// Errors (percent) of one method on one deployment's held-out rows.
#[derive(Default)]
struct Errors {
    ttft: Vec<f64>,
    tpot: Vec<f64>,
}

impl Errors {
    fn add(&mut self, p: &Point, ttft: f64, tpot: Option<f64>) {
        self.ttft.extend(error_pct(ttft, p.ttft_s));
        if let Some(t) = tpot {
            self.tpot.extend(error_pct(t, p.tpot_s));
        }
    }
    /// `None` where nothing was measured (a deployment whose rows hold no TPOT).
    fn mape(&self) -> (Option<f64>, Option<f64>) {
        (
            mape(self.ttft.iter().copied()),
            mape(self.tpot.iter().copied()),
        )
    }
}

/// One protocol's figures for one deployment: twin, log-log, linear.
struct Outcome {
    name: String,
    rows: usize,
    twin: Errors,
    /// The twin times the discrepancy of the training rows of the held-out row's shape (or half
    /// the nearest training shape's).
    corrected: Errors,
    loglog: Errors,
    linear: Errors,
    fit_s: Vec<f64>,
}

fn point(r: &TableRow) -> Point {
    Point {
        isl: r.isl,
        osl: r.osl,
        concurrency: r.concurrency,
        ttft_s: r.ttft_ms.map(|v| v / 1e3),
        tpot_s: r.tpot_ms.map(|v| v / 1e3),
    }
}

/// Fits on `train`, predicts `test`: the twin and the linear baseline (and log-log for P1).
fn fold(
    pts: &[Point],
    train: &[usize],
    test: &[usize],
    opts: &TableFitOptions,
    loglog: bool,
    out: &mut Outcome,
) -> anyhow::Result<()> {
    let base = mock_server::Config::preset("small-cpu-demo")?;
    let tp: Vec<Point> = train.iter().map(|&i| pts[i]).collect();
    let t0 = Instant::now();
    let fit = fit_table(&base, &tp, opts)?;
    out.fit_s.push(t0.elapsed().as_secs_f64());
    if std::env::var_os("TWIN_TABLE_ROWS").is_some() {
        println!(
            "  guess {:?} cost {:.4}\n  fit   {:?} cost {:.4} evals {}",
            fit.guess, fit.guess_cost, fit.model, fit.cost, fit.evals
        );
        let mut g = Grid::new(&[
            Col::left().min(4).gap(2),
            Col::right().min(5),
            Col::right().min(5),
            Col::left(),
            Col::right().min(3).gap(0),
            Col::left().gap(2),
            Col::right().min(9),
            Col::left(),
            Col::left(),
            Col::right().min(9),
            Col::left().gap(2),
            Col::right().min(7),
            Col::left(),
            Col::right().min(7),
        ]);
        for (k, p) in pts.iter().enumerate() {
            // A row the model cannot run shows "-" for what it did not predict.
            let (t, d) = predict_point(&fit.config, p).map_or((None, None), |(t, d)| (Some(t), d));
            let ms = |v: Option<f64>, digits: usize| {
                v.filter(|v| v.is_finite())
                    .map_or("-".to_string(), |v| format!("{:.*}", digits, v * 1e3))
            };
            g.row([
                if test.contains(&k) { "held" } else { "" }.to_string(),
                p.isl.to_string(),
                p.osl.to_string(),
                "c=".into(),
                p.concurrency.to_string(),
                "ttft".into(),
                ms(p.ttft_s, 1),
                "ms".into(),
                "pred".into(),
                ms(t, 1),
                "tpot".into(),
                ms(p.tpot_s, 2),
                "pred".into(),
                ms(d, 2),
            ]);
        }
        print!("{}", g.render());
    }
    // The training rows' measured over the model's, as `calibrate --table` keeps them.
    let measured: Vec<Discrepancy> = train
        .iter()
        .filter_map(|&i| {
            let p = &pts[i];
            let (t, d) = predict_point(&fit.config, p).ok()?;
            of_row(
                (p.isl, p.osl, p.concurrency),
                (p.ttft_s, p.tpot_s),
                (Some(t), d),
            )
        })
        .collect();
    let lin = Linear::fit(pts, train);
    for &i in test {
        let p = &pts[i];
        match predict_point(&fit.config, p) {
            Ok((ttft, tpot)) => {
                out.twin.add(p, ttft, tpot);
                let (a, b) = ratios(&measured, p.isl, p.osl, p.concurrency);
                out.corrected.add(
                    p,
                    ttft * a.unwrap_or(1.0),
                    tpot.map(|t| t * b.unwrap_or(1.0)),
                );
            }
            // A row the model cannot reach counts as 100% off.
            Err(_) => {
                for e in [&mut out.twin, &mut out.corrected] {
                    e.add(p, 2.0 * p.ttft_s.unwrap_or(1.0), p.tpot_s.map(|t| 2.0 * t));
                }
            }
        }
        let (a, b) = lin.predict(p);
        out.linear.add(p, a, Some(b));
        if loglog {
            if let Some((a, b)) = loglog_neighbours(pts, train, i) {
                out.loglog.add(p, a, Some(b));
            }
        }
    }
    Ok(())
}

/// The table twin's check on public data (P1 interpolation, P2 leave one shape out).
#[derive(Parser, Debug)]
#[command(name = "twin-table")]
struct Args {
    /// The table: columns isl, osl, concurrency, ttft_ms, tpot_ms and deployment.
    table: PathBuf,
    /// Only the deployments whose names contain one of these comma-separated substrings.
    #[arg(long)]
    only: Option<String>,
    /// Which protocol to run.
    #[arg(long, value_parser = ["p1", "p2", "both"], default_value = "both")]
    protocol: String,
    /// Objective evaluations per fit (calibrate's 250 where not given; docs/twin.md's figures
    /// use 80 for P1 and 60 for P2).
    #[arg(long)]
    max_evals: Option<u64>,
    /// Prefill tokens a pass (where not given, the server's default on the rows' GPU, else
    /// chosen among 8,192, 16,384 and 32,768).
    #[arg(long)]
    chunk: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    let Args {
        table: file,
        only,
        protocol,
        max_evals,
        chunk,
    } = Args::parse();
    let rows = read_table(&file, Measured::Required)?;
    let mut deps: BTreeMap<String, Vec<TableRow>> = BTreeMap::new();
    for r in rows {
        let name = r.deployment.clone().unwrap_or_else(|| "table".into());
        if only
            .as_deref()
            .is_none_or(|o| o.split(',').any(|o| name.contains(o)))
        {
            deps.entry(name).or_default().push(r);
        }
    }
    let mut p1s = Vec::new();
    let mut p2s = Vec::new();
    let started = Instant::now();
    for (name, rows) in &deps {
        let pts: Vec<Point> = rows.iter().map(point).collect();
        let mut opts = TableFitOptions {
            mixed: rows_scheduler(rows, None).0,
            ..TableFitOptions::default()
        };
        if let Some(m) = max_evals {
            opts.max_evals = m;
        }
        // As `calibrate --table` chooses: the flag's, the server's default on the rows' GPU, or
        // the rows' best fit.
        match chunk.or_else(|| rows_chunk(rows, None).map(|c| c.0)) {
            Some(c) => opts.chunk = c,
            None => opts.chunk_choices = CHUNK_CHOICES.to_vec(),
        }
        let new = |rows| Outcome {
            name: name.clone(),
            rows,
            twin: Errors::default(),
            corrected: Errors::default(),
            loglog: Errors::default(),
            linear: Errors::default(),
            fit_s: Vec::new(),
        };
        if protocol != "p2" {
            let held = p1_held_out(&pts);
            if !held.is_empty() {
                let train: Vec<usize> = (0..pts.len()).filter(|i| !held.contains(i)).collect();
                let mut o = new(train.len());
                fold(&pts, &train, &held, &opts, true, &mut o)?;
                report("P1", &o, true);
                p1s.push(o);
            }
        }
        if protocol != "p1" {
            let folds = p2_folds(&pts);
            if !folds.is_empty() {
                let mut o = new(pts.len());
                for test in &folds {
                    let train: Vec<usize> = (0..pts.len()).filter(|i| !test.contains(i)).collect();
                    fold(&pts, &train, test, &opts, false, &mut o)?;
                }
                report("P2", &o, false);
                p2s.push(o);
            }
        }
    }
    println!();
    if protocol != "p2" {
        summary("P1", &p1s, true);
    }
    if protocol != "p1" {
        summary("P2", &p2s, false);
    }
    println!(
        "{} deployments in {:.0} s",
        deps.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn report(what: &str, o: &Outcome, loglog: bool) {
    let (a, b) = o.twin.mape();
    let (c, d) = o.linear.mape();
    let fit = o.fit_s.iter().sum::<f64>() / o.fit_s.len().max(1) as f64;
    // One line a deployment, printed as its fits end; the columns' least widths line them up.
    let (word, figure) = (Col::left().gap(2), Col::right().min(7));
    let mut cols = vec![
        Col::left(),
        Col::left().min(90),
        Col::left(),
        Col::right().min(2),
        word,
        figure,
        figure,
        word,
        figure,
        figure,
    ];
    let mut row = vec![
        what.to_string(),
        o.name.clone(),
        "rows".into(),
        o.rows.to_string(),
        "twin".into(),
        mape_text(a),
        mape_text(b),
        "+discrepancy".into(),
        mape_text(o.corrected.mape().0),
        mape_text(o.corrected.mape().1),
    ];
    if loglog {
        let (e, f) = o.loglog.mape();
        cols.extend([word, figure, figure]);
        row.extend(["log-log".into(), mape_text(e), mape_text(f)]);
    }
    cols.extend([word, figure, figure, word, Col::right().min(5), Col::left()]);
    row.extend([
        "linear".into(),
        mape_text(c),
        mape_text(d),
        "fit".into(),
        format!("{fit:.1}"),
        "s".into(),
    ]);
    let mut g = Grid::new(&cols);
    g.row(row);
    print!("{}", g.render());
}

fn summary(what: &str, os: &[Outcome], loglog: bool) {
    // The median over the deployments that have the figure.
    let med = |f: &dyn Fn(&Outcome) -> Option<f64>| {
        mape_text(median(&os.iter().filter_map(f).collect::<Vec<_>>()))
    };
    println!(
        "{what} median over {} deployments (MAPE TTFT / TPOT): twin {} / {}  twin + discrepancy {} / {}{}  linear {} / {}",
        os.len(),
        med(&|o| o.twin.mape().0),
        med(&|o| o.twin.mape().1),
        med(&|o| o.corrected.mape().0),
        med(&|o| o.corrected.mape().1),
        if loglog {
            format!(
                "  log-log {} / {}",
                med(&|o| o.loglog.mape().0),
                med(&|o| o.loglog.mape().1)
            )
        } else {
            String::new()
        },
        med(&|o| o.linear.mape().0),
        med(&|o| o.linear.mape().1),
    );
    let mut worst: Vec<&Outcome> = os.iter().collect();
    worst.sort_by(|a, b| {
        let s = |o: &Outcome| {
            let (a, b) = o.twin.mape();
            a.unwrap_or(0.0) + b.unwrap_or(0.0)
        };
        s(b).total_cmp(&s(a))
    });
    for o in worst.iter().take(5) {
        let (a, b) = o.twin.mape();
        println!("  worst: {} ({} / {})", o.name, mape_text(a), mape_text(b));
    }
}
