//! Twins from aggregate tables as a user meets them: bad tables get one clear error naming the
//! file, line and column, exit 65 and no preset; rows the mock made from a known preset calibrate
//! back to its parameters; `predict` answers a grid and a table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};

use bench_client::measure::table::saturation::saturation;
use bench_client::measure::table::{
    Capacity, Point, TableModel, PAIR_INDEX, PREFILL_TOKEN_PER_DECODE_STEP,
};
use bench_client::results::table::TableRow;
use bench_client::twin::discrepancy;
use bench_client::twin::table::{
    apply, chooses_chunk, fit_table, held_parameters, point_of, predict_point, predict_rows,
    table_base, TableFit, TableFitOptions,
};
use bench_client::twin::table_preset::{per_token_prior, table_preset, TableSource, PAIR_HELD};
use bench_client::twin::table_results::rows_of_file;

use crate::support::{run, stderr, BIN};

const HEAD: &str = "deployment,backend,isl,osl,concurrency,ttft_ms,tpot_ms\n";

/// Eight good rows of one deployment.
fn good_rows() -> String {
    let mut s = String::from(HEAD);
    for (i, c) in [
        (1024, 1),
        (1024, 4),
        (1024, 16),
        (2048, 1),
        (2048, 4),
        (2048, 16),
        (4096, 1),
        (4096, 4),
    ] {
        s.push_str(&format!(
            "a,sglang,{i},128,{c},{},{}\n",
            40 + c * 10,
            10 + c
        ));
    }
    s
}

/// `calibrate --table` on `text` refused as bad data (65) with `want` in its error line, and no
/// preset written.
fn refused(dir: &Path, text: &str, extra: &[&str], want: &str) {
    let table = dir.join("rows.csv");
    std::fs::write(&table, text).unwrap();
    let preset = dir.join("twin.toml");
    let mut args = vec![
        "calibrate",
        "--table",
        table.to_str().unwrap(),
        "--out",
        preset.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(65), "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or("");
    assert!(line.contains(want), "wanted {want:?} in: {err}");
    assert!(!preset.exists(), "a preset was written: {err}");
}

#[test]
fn bad_tables_are_refused_with_the_place_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows = d.join("rows.csv");
    let file = rows.to_str().unwrap().to_string();
    let good = good_rows();
    refused(
        d,
        &good.replace("tpot_ms", "itl_ms"),
        &[],
        &format!("{file}: line 1: no column tpot_ms"),
    );
    refused(
        d,
        &good.replace("a,sglang,1024,128,4,80,", "a,sglang,1024,128,4,eighty,"),
        &[],
        &format!("{file}: line 3, column ttft_ms: \"eighty\" is not a number"),
    );
    refused(
        d,
        &good.replace("a,sglang,2048,128,1,50,11", "a,sglang,2048,128,1,50,0"),
        &[],
        &format!("{file}: line 5, column tpot_ms: \"0\": a time must be positive"),
    );
    refused(
        d,
        &good.replace("a,sglang,2048,128,1,50,11", "a,sglang,2048,128,1,-50,11"),
        &[],
        &format!("{file}: line 5, column ttft_ms"),
    );
    let mixed = format!("{good}b,vllm,1024,128,4,90,12\n");
    refused(
        d,
        &mixed,
        &[],
        "rows of 2 deployments (a, b): choose one with --deployment",
    );
    refused(d, &mixed, &["--deployment", "c"], "no deployment \"c\"");
    let few: String = good.lines().take(4).map(|l| format!("{l}\n")).collect();
    refused(
        d,
        &few,
        &[],
        "3 distinct (isl, osl, concurrency) points of 3 rows (6 measured TTFTs and TPOTs; rows repeating a point are one point) are fewer than the model's 8 parameters",
    );
}

#[test]
fn rows_repeating_a_point_are_one_point_for_the_parameter_count() {
    // Eight rows at three points measure no more than three rows do: refused, not fitted.
    let dir = tempfile::tempdir().unwrap();
    let mut repeated = String::from(HEAD);
    for (i, c) in [
        (1024, 4),
        (1024, 4),
        (1024, 4),
        (2048, 1),
        (2048, 1),
        (1024, 4),
        (4096, 16),
        (4096, 16),
    ] {
        repeated.push_str(&format!("a,sglang,{i},128,{c},80,14\n"));
    }
    refused(
        dir.path(),
        &repeated,
        &[],
        "3 distinct (isl, osl, concurrency) points of 8 rows (6 measured TTFTs and TPOTs; rows repeating a point are one point) are fewer than the model's 8 parameters",
    );
}

#[test]
fn a_closed_stdout_loses_no_preset() {
    // `calibrate --table ... | head`: the preset is on disk before the report is printed, and the
    // closed stdout ends the command quietly.
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("rows.csv");
    std::fs::write(&table, good_rows()).unwrap();
    let preset = dir.path().join("twin.toml");
    let mut child = Command::new(BIN)
        .args([
            "calibrate",
            "--table",
            table.to_str().unwrap(),
            "--chunked-prefill-size",
            "8192",
            "--out",
            preset.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&preset).unwrap_or_default();
    assert!(text.contains("prefill_per_token_s = "), "{text}");
    // It ends as a tool that SIGPIPE ended would, without a panic.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_table_naming_its_gpu_runs_at_the_server_s_default_chunk() {
    // SGLang on a B200 (180 GiB) prefills 16,384 tokens a pass unless its launch says otherwise:
    // the fit runs there instead of choosing among chunks, and the preset says where it came from.
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("rows.csv");
    let rows = good_rows().replace("deployment,backend,", "deployment,backend,gpu,");
    let rows = rows.replace("a,sglang,", "a,sglang,b200_sxm,");
    std::fs::write(&table, rows).unwrap();
    let preset = dir.path().join("twin.toml");
    let o = run(&[
        "calibrate",
        "--table",
        table.to_str().unwrap(),
        "--out",
        preset.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("16384 prefill tokens a pass (sglang's default on b200_sxm (180 GiB)"),
        "{err}"
    );
    let text = std::fs::read_to_string(&preset).unwrap();
    assert!(text.contains("chunked_prefill_size = 16384"), "{text}");
    assert!(
        text.contains(
            "ASSUMED: sglang's default on b200_sxm (180 GiB), where the launch does not set it"
        ),
        "{text}"
    );
}

/// The known twin the round trip starts from: SGLang's scheduler, passes of 1,024 tokens.
fn known() -> (mock_server::Config, TableModel, TableFitOptions) {
    let opts = TableFitOptions {
        chunk: 1024,
        mixed: false,
        max_evals: 3000,
        chunk_choices: Vec::new(),
        start: None,
        progress: None,
    };
    let truth = TableModel {
        way_s: 0.005,
        prefill_base_s: 0.008,
        prefill_per_token_s: 2e-5,
        prefill_per_token_pair_s: 5e-9,
        decode_base_s: 0.01,
        decode_per_context_token_s: 2e-7,
        decode_per_request_s: 5e-4,
        decode_batch_exponent: 0.7,
        kv_pool_tokens: None,
        max_running_requests: None,
    };
    let base = table_base(&mock_server::Config::default(), &opts, 8192);
    (apply(&base, &truth), truth, opts)
}

/// The rows `cfg` gives at each (isl, osl, concurrency): its closed loops' mean TTFT and TPOT.
fn rows_of(
    cfg: &mock_server::Config,
    shapes: impl IntoIterator<Item = (u32, u32, u32)>,
) -> Vec<Point> {
    shapes
        .into_iter()
        .map(|(isl, osl, concurrency)| {
            let mut p = Point {
                isl,
                osl,
                concurrency,
                ttft_s: None,
                tpot_s: None,
            };
            let (ttft, tpot) = predict_point(cfg, &p).unwrap();
            p.ttft_s = Some(ttft);
            p.tpot_s = tpot;
            p
        })
        .collect()
}

#[test]
fn rows_made_by_a_known_twin_calibrate_back_to_it() {
    let (cfg, truth, opts) = known();
    let shapes = [(256, 16), (1024, 32), (2048, 24)];
    let points = rows_of(
        &cfg,
        shapes
            .iter()
            .flat_map(|&(isl, osl)| [1, 4, 16, 64].map(|c| (isl, osl, c))),
    );
    // The search starts 30% off every known cost, alternately high and low.
    let off = |v: f64, up: bool| v * if up { 1.3 } else { 0.7 };
    let start = TableModel {
        way_s: off(truth.way_s, true),
        prefill_base_s: off(truth.prefill_base_s, false),
        prefill_per_token_s: off(truth.prefill_per_token_s, true),
        prefill_per_token_pair_s: off(truth.prefill_per_token_pair_s, false),
        decode_base_s: off(truth.decode_base_s, true),
        decode_per_context_token_s: off(truth.decode_per_context_token_s, false),
        decode_per_request_s: off(truth.decode_per_request_s, true),
        decode_batch_exponent: off(truth.decode_batch_exponent, true),
        kv_pool_tokens: None,
        max_running_requests: None,
    };
    let opts = TableFitOptions {
        start: Some(start),
        ..opts
    };
    let fit = fit_table(&mock_server::Config::default(), &points, &opts).unwrap();
    let m = fit.model;
    for (what, got, want) in [
        ("way", m.way_s, truth.way_s),
        ("prefill base", m.prefill_base_s, truth.prefill_base_s),
        (
            "per token",
            m.prefill_per_token_s,
            truth.prefill_per_token_s,
        ),
        (
            "per pair",
            m.prefill_per_token_pair_s,
            truth.prefill_per_token_pair_s,
        ),
        ("decode base", m.decode_base_s, truth.decode_base_s),
        (
            "per context token",
            m.decode_per_context_token_s,
            truth.decode_per_context_token_s,
        ),
        (
            "per request",
            m.decode_per_request_s,
            truth.decode_per_request_s,
        ),
        (
            "batch exponent",
            m.decode_batch_exponent,
            truth.decode_batch_exponent,
        ),
    ] {
        assert!(
            (got / want - 1.0).abs() < 0.02,
            "{what}: fitted {got:e}, known {want:e} ({} evaluations, cost {:e})",
            fit.evals,
            fit.cost
        );
    }
    // Predictions of other rows within 1%.
    for (isl, osl, c) in [(512, 20, 2), (1536, 28, 5)] {
        let p = Point {
            isl,
            osl,
            concurrency: c,
            ttft_s: None,
            tpot_s: None,
        };
        let (a, b) = predict_point(&cfg, &p).unwrap();
        let (x, y) = predict_point(&fit.config, &p).unwrap();
        assert!((x / a - 1.0).abs() < 0.01, "TTFT {x} against {a}");
        assert!(
            (y.unwrap() / b.unwrap() - 1.0).abs() < 0.01,
            "TPOT {y:?} against {b:?}"
        );
    }
}

#[test]
fn rows_of_one_input_length_hold_the_pair_cost_at_zero() {
    // One prompt length cannot tell a cost per token pair from one per token: the fit holds it.
    let (cfg, _, opts) = known();
    let points = rows_of(
        &cfg,
        [16, 32]
            .iter()
            .flat_map(|&osl| [1, 4, 16].map(|c| (1024, osl, c))),
    );
    assert_eq!(held_parameters(&points), vec![PAIR_INDEX]);
    // Nor can it tell chunks apart: the fit runs at the chunk given, choices or not.
    let opts = TableFitOptions {
        max_evals: 30,
        chunk_choices: vec![8192, 2048, 32768],
        ..opts
    };
    assert!(!chooses_chunk(&points, &opts));
    let fit = fit_table(&mock_server::Config::default(), &points, &opts).unwrap();
    assert_eq!(fit.chunk, opts.chunk);
    assert!(fit.pair_held);
    assert_eq!(fit.model.prefill_per_token_pair_s, 0.0);
    assert!(fit.model.prefill_per_token_s > 0.0, "{:?}", fit.model);
    let text = table_preset(
        &fit.config,
        &TableSource {
            source: "rows.csv",
            deployment: None,
            rows: points.len(),
            mape: (Some(1.0), Some(1.0)),
            capacity: None,
            pair_held: true,
            scheduler_from: "the test",
            chunk_from: "ASSUMED: the test",
            base_name: "default",
        },
    )
    .unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("prefill_per_token_pair_s "))
        .unwrap_or("");
    assert!(
        line.starts_with("prefill_per_token_pair_s = 0.0 ") && line.contains(PAIR_HELD),
        "{text}"
    );
    let per_token = text
        .lines()
        .find(|l| l.starts_with("prefill_per_token_s "))
        .unwrap_or("");
    assert!(per_token.contains(&per_token_prior()), "{text}");
    // A second prompt length frees it.
    let mut more = points.clone();
    more.extend(rows_of(&cfg, [(2048, 16, 4)]));
    assert!(held_parameters(&more).is_empty());
    assert!(chooses_chunk(&more, &opts));
}

#[test]
fn rows_of_one_input_length_take_the_cost_per_token_the_decode_step_implies() {
    // Alone at one prompt length, a request's TTFT is the way, the pass and its tokens together:
    // any split fits. The prior takes the cost per token as the decode step's multiple, so a
    // known twin built on that rule extrapolates to prompts eight times longer.
    let opts = TableFitOptions {
        chunk: 8192,
        mixed: false,
        max_evals: 250,
        chunk_choices: Vec::new(),
        start: None,
        progress: None,
    };
    let (decode_base_s, decode_per_request_s) = (0.010, 0.002);
    let truth = TableModel {
        way_s: 0.020,
        prefill_base_s: 0.030,
        prefill_per_token_s: PREFILL_TOKEN_PER_DECODE_STEP * (decode_base_s + decode_per_request_s),
        prefill_per_token_pair_s: 0.0,
        decode_base_s,
        decode_per_context_token_s: 1e-7,
        decode_per_request_s,
        decode_batch_exponent: 0.8,
        kv_pool_tokens: None,
        max_running_requests: None,
    };
    let cfg = apply(
        &table_base(&mock_server::Config::default(), &opts, 16384),
        &truth,
    );
    let points = rows_of(&cfg, [16, 64, 256].map(|osl| (1024, osl, 1)));
    let fit = fit_table(&mock_server::Config::default(), &points, &opts).unwrap();
    assert!(fit.pair_held);
    let per_token = fit.model.prefill_per_token_s;
    assert!(
        (per_token / truth.prefill_per_token_s - 1.0).abs() < 0.05,
        "per token {per_token:e}, known {:e}: {:?}",
        truth.prefill_per_token_s,
        fit.model
    );
    let long = rows_of(&cfg, [(8192, 16, 1)])[0];
    let mut twin = fit.config.clone();
    twin.context_length = cfg.context_length;
    let (ttft, _) = predict_point(&twin, &long).unwrap();
    let want = long.ttft_s.unwrap();
    assert!(
        (ttft / want - 1.0).abs() < 0.05,
        "TTFT at 8,192 in {ttft}, known {want}"
    );
}

#[test]
fn where_the_chunk_is_not_given_the_fit_chooses_the_servers() {
    // A known twin prefilling 2,048 tokens a pass, at 20 ms a pass: prompts of 6,000 tokens take
    // three passes there and one at 8,192, which no per-token cost can make up for at every
    // length and batch.
    let (_, mut truth, opts) = known();
    truth.prefill_base_s = 0.02;
    let known_opts = TableFitOptions {
        chunk: 2048,
        ..opts.clone()
    };
    let cfg = apply(
        &table_base(&mock_server::Config::default(), &known_opts, 8192),
        &truth,
    );
    let points = rows_of(
        &cfg,
        [1500, 3000, 6000]
            .iter()
            .flat_map(|&isl| [1, 2, 4].map(|c| (isl, 12, c))),
    );
    let opts = TableFitOptions {
        chunk: 8192,
        chunk_choices: vec![8192, 2048, 32768],
        max_evals: 600,
        ..opts
    };
    let fit = fit_table(&mock_server::Config::default(), &points, &opts).unwrap();
    assert_eq!(fit.chunk, 2048, "cost {:e}, {:?}", fit.cost, fit.model);
    assert_eq!(fit.config.chunked_prefill_size, 2048);
}

/// Rows of a known twin whose requests queue behind `capacity`, fitted back from its costs with
/// the capacity left to the fit (both kinds tried, each from the rows' guess): the fit.
fn saturated_round_trip(capacity: (Capacity, f64)) -> TableFit {
    let (_, truth, opts) = known();
    let truth = truth.with_capacity(Some(capacity));
    let cfg = apply(
        &table_base(&mock_server::Config::default(), &opts, 8192),
        &truth,
    );
    // Two prompt lengths and two output lengths, unqueued at 4 in flight and queued at 32.
    let shapes = [(512, 16), (512, 48), (1024, 16), (1024, 48)];
    let points = rows_of(
        &cfg,
        shapes
            .iter()
            .flat_map(|&(isl, osl)| [4, 32].map(|c| (isl, osl, c))),
    );
    let s = saturation(&points).expect("the rows at 32 in flight queue");
    assert!(s.guess(capacity.0) > 0.0, "{s:?}");
    let start = truth.with_capacity(None);
    let opts = TableFitOptions {
        start: Some(start),
        max_evals: 300,
        ..opts
    };
    let fit = fit_table(&mock_server::Config::default(), &points, &opts).unwrap();
    // A row it never saw, between the loads: queued, within 3%.
    let p = Point {
        isl: 768,
        osl: 32,
        concurrency: 24,
        ttft_s: None,
        tpot_s: None,
    };
    let (a, b) = predict_point(&cfg, &p).unwrap();
    let (x, y) = predict_point(&fit.config, &p).unwrap();
    assert!(
        (x / a - 1.0).abs() < 0.03,
        "TTFT {x} against {a}: {:?}",
        fit.model
    );
    assert!(
        (y.unwrap() / b.unwrap() - 1.0).abs() < 0.03,
        "TPOT {y:?} against {b:?}: {:?}",
        fit.model
    );
    fit
}

#[test]
fn a_queue_behind_a_running_cap_is_fitted_with_the_cap_and_one_behind_a_full_pool_with_the_pool() {
    // 16 running at most: 32 in flight queue half their requests, whatever their lengths.
    let fit = saturated_round_trip((Capacity::RunningRequests, 16.0));
    assert_eq!(
        fit.capacity,
        Some(Capacity::RunningRequests),
        "{:?}",
        fit.model
    );
    let cap = fit.model.max_running_requests.unwrap_or(0.0).round();
    assert_eq!(cap, 16.0, "{:?}", fit.model);
    assert_eq!(fit.config.max_running_requests, 16);
    // A pool of 8,000 tokens: 32 requests of 512 + 16 overfill it (16,896), 4 of 1,024 + 48 do
    // not (4,288); the longer the requests, the fewer run.
    let fit = saturated_round_trip((Capacity::PoolTokens, 8_000.0));
    assert_eq!(fit.capacity, Some(Capacity::PoolTokens), "{:?}", fit.model);
    let pool = fit.model.kv_pool_tokens.unwrap_or(0.0);
    assert!((pool / 8_000.0 - 1.0).abs() < 0.05, "{:?}", fit.model);
}

#[test]
fn a_prompt_whose_ttft_grows_with_its_output_length_is_queued() {
    let p = |osl, concurrency, ttft: f64| Point {
        isl: 1000,
        osl,
        concurrency,
        ttft_s: Some(ttft),
        tpot_s: Some(0.02),
    };
    // Unqueued, a prompt's TTFT does not depend on its output length: noise of 1.6x over 8 times
    // the output is not a queue.
    assert_eq!(
        saturation(&[p(500, 512, 2.0), p(1000, 512, 2.2), p(1000, 64, 0.4)]),
        None
    );
    assert_eq!(saturation(&[p(500, 512, 2.0), p(4000, 512, 3.2)]), None);
    // Queued, the wait grows with the time the requests ahead run.
    let s = saturation(&[p(500, 512, 2.0), p(1000, 512, 3.2)]).unwrap();
    assert_eq!(s.pool_tokens, 512.0 * 1500.0);
    assert_eq!(s.running_requests, 512.0 * 1500.0 / 2000.0);
    // And in a series, TTFT growing more than twice as fast as the concurrency.
    let s = saturation(&[p(500, 16, 0.2), p(500, 64, 2.0)]).unwrap();
    assert_eq!(s.running_requests, 32.0);
    assert_eq!(s.pool_tokens, 32.0 * 1500.0);
    // A series brackets the queue's start; an output length only bounds it: the series' guess
    // stands beside a smaller bound.
    let both = [p(500, 16, 0.2), p(500, 64, 2.0), p(1000, 16, 0.5)];
    assert_eq!(saturation(&both), Some(s));
}

#[test]
fn a_row_no_batch_can_reach_is_reported_beside_the_fit() {
    let (cfg, _, _) = known();
    let row = |line, tpot_ms| TableRow {
        line,
        deployment: None,
        backend: None,
        gpu: None,
        isl: 1024,
        osl: 32,
        concurrency: 2,
        ttft_ms: Some(100.0),
        tpot_ms: Some(tpot_ms),
    };
    // The lone decode step is 10 ms + 1024 x 0.2 us + 0.5 ms = 10.7 ms.
    let v = predict_rows(&cfg, &[row(2, 12.0), row(3, 2.0)], &[]);
    assert_eq!(v[0].note, None);
    let note = v[1].note.as_deref().unwrap_or("");
    assert!(
        note.contains("unreachable") && note.contains("10.70 ms"),
        "{note}"
    );
    assert!(v[1].err_tpot_pct.unwrap() > 100.0);
    // With the discrepancy measured at the row, the prediction meets it; the note speaks of the
    // model alone.
    let (_, lone_tpot) = predict_point(&cfg, &point_of(&row(3, 2.0))).unwrap();
    let measured = [mock_server::config::Discrepancy {
        isl: 1024,
        osl: 32,
        concurrency: 2,
        ttft: None,
        tpot: Some(0.002 / lone_tpot.unwrap()),
    }];
    let v = predict_rows(&cfg, &[row(3, 2.0)], &measured);
    let note = v[0].note.as_deref().unwrap_or("");
    assert!(
        note.starts_with("unreachable by the model alone: ") && note.contains("10.70 ms"),
        "{note}"
    );
    assert!(v[0].err_tpot_pct.unwrap().abs() < 1e-6, "{:?}", v[0]);
}

#[test]
fn predict_answers_a_grid_and_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "predict",
        "--isl",
        "1k,2k",
        "--osl",
        "16",
        "--concurrency",
        "1,4",
        "--format",
        "csv",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "isl,osl,concurrency,pred_ttft_ms,pred_tpot_ms");
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[1].starts_with("1000,16,1,"), "{out}");
    let table = dir.path().join("rows.csv");
    std::fs::write(
        &table,
        "isl,osl,concurrency,ttft_ms,tpot_ms\n1000,16,1,5,2\n1000,16,4,,\n",
    )
    .unwrap();
    let o = run(&[
        "predict",
        "--table",
        table.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["rows"].as_array().unwrap().len(), 2);
    assert!(j["rows"][0]["err_ttft_pct"].is_number(), "{j}");
    assert!(j["rows"][1].get("err_ttft_pct").is_none(), "{j}");
    assert!(j["mape_ttft_pct"].is_number(), "{j}");
    let bad = run(&[
        "predict",
        "--isl",
        "1k",
        "--osl",
        "16",
        "--concurrency",
        "0",
    ]);
    assert_eq!(bad.status.code(), Some(64), "{}", stderr(&bad));
    // Past what a loop can build: refused before it runs, the flag named. A length alone past
    // 2^24 tokens, and a prompt and output past it together.
    for (isl, osl, says) in [
        (
            "4000000k",
            "16",
            "--isl: context length \"4000000k\" is out of range",
        ),
        ("16000k", "1000k", "--isl: 16000000 + 1000000 tokens"),
    ] {
        let bad = run(&["predict", "--isl", isl, "--osl", osl, "--concurrency", "1"]);
        assert_eq!(bad.status.code(), Some(64), "{}", stderr(&bad));
        assert!(stderr(&bad).contains(says), "{}", stderr(&bad));
    }
}

#[test]
fn a_table_preset_answers_what_ifs_past_its_rows_context() {
    // A table gives no context length: a table twin runs a prompt four times its longest row's
    // (1,024 to 8,192 in), and says the row is extrapolated.
    let o = run(&[
        "predict",
        "--preset",
        "llama-3.1-70b-fp8-h200-tp2-vllm",
        "--isl",
        "32k",
        "--osl",
        "64",
        "--concurrency",
        "4",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = &j["rows"][0];
    assert!(row["pred_ttft_ms"].as_f64().is_some_and(|t| t > 0.0), "{j}");
    assert!(
        row["note"]
            .as_str()
            .is_some_and(|n| n.starts_with("extrapolated")),
        "{j}"
    );
}

#[test]
fn the_shipped_sglang_twin_still_meets_its_rows() {
    let table = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/tables/silicon-sample.csv"
    );
    let mape = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--preset",
            "qwen3-32b-h100-tp2-sglang",
            "--table",
            table,
            "--deployment",
            "qwen3-32b-h100-sxm-sglang0.5.1.post1-bf16-tp2-ep1-qwen-qwen3-32b",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["rows"].as_array().unwrap().len(), 24);
        (
            j["mape_ttft_pct"].as_f64().unwrap(),
            j["mape_tpot_pct"].as_f64().unwrap(),
        )
    };
    // The model as fitted (docs/twin.md): TTFT 8.6%, TPOT 3.9%.
    let (a, b) = mape(&["--model-only"]);
    assert!(a < 9.0 && b < 4.5, "MAPE TTFT {a:.1}%, TPOT {b:.1}%");
    // With the rows' discrepancy the preset keeps, it gives back what was measured.
    let (a, b) = mape(&[]);
    assert!(a < 1e-6 && b < 1e-6, "MAPE TTFT {a}%, TPOT {b}%");
}

#[test]
fn a_shape_s_discrepancy_carries_to_its_other_concurrencies_and_half_to_the_nearest_shape() {
    // Rows measured at 1, 4, 16 and 64 of one shape run 1.1^log4(c) times the known twin's
    // TTFT and 0.95^log4(c) its TPOT (linear in log concurrency), and 1.25 times at another shape.
    let (cfg, _, _) = known();
    let row = |(isl, osl, c): (u32, u32, u32), scale: &dyn Fn(f64) -> (f64, f64)| {
        let p = rows_of(&cfg, [(isl, osl, c)])[0];
        let (a, b) = scale(f64::from(c).log(4.0));
        TableRow {
            line: 0,
            deployment: None,
            backend: None,
            gpu: None,
            isl,
            osl,
            concurrency: c,
            ttft_ms: p.ttft_s.map(|t| t * 1e3 * 1.1f64.powf(a)),
            tpot_ms: p.tpot_s.map(|t| t * 1e3 * 0.95f64.powf(b)),
        }
    };
    let drift = |k: f64| (k, k);
    let fitted: Vec<TableRow> = [1, 4, 16, 64]
        .iter()
        .map(|&c| row((1024, 32, c), &drift))
        .chain([row((2048, 24, 4), &|_| (1.25f64.log(1.1), 0.0))])
        .collect();
    let d = discrepancy::of_rows(&predict_rows(&cfg, &fitted, &[]));
    assert_eq!(d.len(), 5);
    // Each fitted row gets its measurement back; 2, 8 and 32 get the drift between theirs.
    let rows: Vec<TableRow> = [1, 2, 8, 16, 32]
        .iter()
        .map(|&c| row((1024, 32, c), &drift))
        .collect();
    for v in predict_rows(&cfg, &rows, &d) {
        let (t, p) = (v.err_ttft_pct.unwrap(), v.err_tpot_pct.unwrap());
        assert!(t.abs() < 1e-6 && p.abs() < 1e-6, "{v:?}");
        let model = v.model_ttft_ms.unwrap() / v.pred_ttft_ms.unwrap();
        let want = 1.1f64.powf(f64::from(v.concurrency).log(4.0));
        assert!((model * want - 1.0).abs() < 1e-9, "{v:?}");
    }
    // Beyond the last fitted concurrency the drift holds at 64's; another shape's row, measured
    // at 4, holds at every concurrency; a shape never fitted gets half the log ratio of the
    // nearest fitted shape (512/32 is nearer 1024/32 than 2048/24).
    let far = predict_rows(&cfg, &[row((1024, 32, 256), &drift)], &d);
    let at64 = 1.1f64.powi(3);
    let got = far[0].pred_ttft_ms.unwrap() / far[0].model_ttft_ms.unwrap();
    assert!((got / at64 - 1.0).abs() < 1e-9, "{far:?}");
    let other = predict_rows(&cfg, &[row((2048, 24, 64), &drift)], &d);
    let got = other[0].pred_ttft_ms.unwrap() / other[0].model_ttft_ms.unwrap();
    assert!((got / 1.25 - 1.0).abs() < 1e-9, "{other:?}");
    assert_eq!(other[0].model_tpot_ms, other[0].pred_tpot_ms);
    let unseen = predict_rows(&cfg, &[row((512, 32, 8), &drift)], &d);
    let alone = predict_rows(&cfg, &[row((512, 32, 8), &drift)], &[]);
    assert_eq!(unseen[0].model_ttft_ms, alone[0].pred_ttft_ms);
    assert_eq!(unseen[0].model_tpot_ms, alone[0].pred_tpot_ms);
    let u = &unseen[0];
    let t = u.pred_ttft_ms.unwrap() / u.model_ttft_ms.unwrap();
    let p = u.pred_tpot_ms.unwrap() / u.model_tpot_ms.unwrap();
    // At 8, 1024/32's drift is 1.1^1.5 (TTFT) and 0.95^1.5 (TPOT); half of it in log.
    assert!((t / 1.1f64.powf(0.75) - 1.0).abs() < 1e-9, "{u:?}");
    assert!((p / 0.95f64.powf(0.75) - 1.0).abs() < 1e-9, "{u:?}");
}

#[test]
fn a_table_preset_keeps_its_rows_discrepancy_and_predict_can_leave_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("rows.csv");
    std::fs::write(&table, good_rows()).unwrap();
    let preset = dir.path().join("twin.toml");
    let (t, p) = (table.to_str().unwrap(), preset.to_str().unwrap());
    let o = run(&[
        "calibrate",
        "--table",
        t,
        "--chunked-prefill-size",
        "8192",
        "--out",
        p,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&preset).unwrap();
    assert_eq!(text.matches("[[discrepancy]]").count(), 8, "{text}");
    // Every mark sits beside its value: none on a line of its own below the header.
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with(' ') && l.trim_start().starts_with('#')),
        "{text}"
    );
    // The mock reads the preset as any other; a ratio that is not positive is refused.
    mock_server::Config::preset_file(&preset).unwrap();
    let bad = dir.path().join("bad.toml");
    let at = text.find("\nttft = ").unwrap() + "\nttft = ".len();
    std::fs::write(&bad, format!("{}-{}", &text[..at], &text[at..])).unwrap();
    let o = run(&[
        "predict",
        "--preset-file",
        bad.to_str().unwrap(),
        "--table",
        t,
    ]);
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("discrepancy row isl 1024"),
        "{}",
        stderr(&o)
    );
    let predict = |extra: &[&str]| {
        let mut args = vec!["predict", "--preset-file", p, "--table", t];
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    // At the fitted rows, the preset gives back what was measured; the model alone its fit.
    let j: serde_json::Value =
        serde_json::from_slice(&predict(&["--format", "json"]).stdout).unwrap();
    assert!(j["mape_ttft_pct"].as_f64().unwrap() < 1e-6, "{j}");
    assert!(j["mape_tpot_pct"].as_f64().unwrap() < 1e-6, "{j}");
    assert!(j["rows"][0]["model_ttft_ms"].is_number(), "{j}");
    let alone: serde_json::Value =
        serde_json::from_slice(&predict(&["--format", "json", "--model-only"]).stdout).unwrap();
    assert!(alone["mape_ttft_pct"].as_f64().unwrap() > 1.0, "{alone}");
    assert!(alone["rows"][0].get("model_ttft_ms").is_none(), "{alone}");
    assert_eq!(
        alone["rows"][0]["pred_ttft_ms"],
        j["rows"][0]["model_ttft_ms"]
    );
    let csv = String::from_utf8(predict(&["--format", "csv"]).stdout).unwrap();
    assert!(
        csv.starts_with("isl,osl,concurrency,pred_ttft_ms,pred_tpot_ms,ttft_ms,tpot_ms,err_ttft_pct,err_tpot_pct,model_ttft_ms,model_tpot_ms,note\n"),
        "{csv}"
    );
    let table_out = String::from_utf8(predict(&[]).stdout).unwrap();
    assert!(
        table_out.contains("8 of 8 rows carry the discrepancy"),
        "{table_out}"
    );
    // A row whose input lies past the fitted rows' (1,024 to 4,096 tokens) says so, with the
    // model alone too; one within them does not.
    for extra in [&[][..], &["--model-only"][..]] {
        let mut args = vec!["predict", "--preset-file", p, "--format", "json"];
        args.extend_from_slice(&["--isl", "512,2k,4300", "--osl", "128", "--concurrency", "4"]);
        args.extend_from_slice(extra);
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let note = |i: usize| j["rows"][i]["note"].as_str().map(str::to_string);
        assert_eq!(
            note(0).as_deref(),
            Some("extrapolated: fitted at 1024 to 4096 input tokens"),
            "{j}"
        );
        assert_eq!(note(1), None, "{j}");
        // Within a tenth past the longest.
        assert_eq!(note(2), None, "{j}");
    }
    // Past the fitted outputs (128 alone) and concurrencies (1 to 16): each named.
    let o = run(&[
        "predict",
        "--preset-file",
        p,
        "--format",
        "json",
        "--isl",
        "512",
        "--osl",
        "1k",
        "--concurrency",
        "64",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        j["rows"][0]["note"],
        "extrapolated: fitted at 1024 to 4096 input tokens, 128 output tokens alone, 1 to 16 in flight",
        "{j}"
    );
    // The CSV carries the note in a last column.
    let o = run(&[
        "predict",
        "--preset-file",
        p,
        "--isl",
        "512,2k",
        "--osl",
        "128",
        "--concurrency",
        "4",
        "--model-only",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0], "isl,osl,concurrency,pred_ttft_ms,pred_tpot_ms,note",
        "{csv}"
    );
    assert!(
        lines[1].ends_with(",extrapolated: fitted at 1024 to 4096 input tokens"),
        "{csv}"
    );
    assert!(lines[2].ends_with(','), "{csv}");
}

#[test]
fn a_table_twin_as_the_base_of_a_table_fit_lends_it_no_discrepancy() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("rows.csv");
    // Rows at 8,192 in: past the base's fitted inputs (1,024 to 4,096 tokens).
    let mut rows = String::from(HEAD);
    for (o, c) in [(128, 1), (128, 4), (256, 1), (256, 4)] {
        rows.push_str(&format!(
            "a,sglang,8192,{o},{c},{},{}\n",
            300 + c * 50,
            20 + c
        ));
    }
    std::fs::write(&table, rows).unwrap();
    let preset = dir.path().join("twin.toml");
    let o = run(&[
        "calibrate",
        "--table",
        table.to_str().unwrap(),
        "--base",
        "qwen3-32b-h100-tp2-sglang",
        "--chunked-prefill-size",
        "8192",
        "--out",
        preset.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    // Its rows are the fit's own: none is extrapolated, and the preset keeps theirs alone.
    assert!(!out.contains("extrapolated"), "{out}");
    let text = std::fs::read_to_string(&preset).unwrap();
    assert_eq!(text.matches("[[discrepancy]]").count(), 4, "{text}");
    assert!(!text.contains("isl = 1024"), "{text}");
}

#[test]
fn results_files_join_a_table_s_rows_and_an_open_loop_run_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let ok = |o: std::process::Output| assert!(o.status.success(), "{}", stderr(&o));
    ok(run(&[
        "sweep",
        "--simulate",
        "--contexts",
        "1k,2k",
        "--output-tokens",
        "16",
        "--runs",
        "2",
        "--out",
        &p("sweep.jsonl"),
    ]));
    ok(run(&[
        "load",
        "--simulate",
        "--concurrency",
        "4",
        "--num-requests",
        "20",
        "--input-len",
        "1k",
        "--output-len",
        "16",
        "--out",
        &p("load.jsonl"),
    ]));
    ok(run(&[
        "load",
        "--simulate",
        "--request-rate",
        "5",
        "--num-requests",
        "10",
        "--input-len",
        "1k",
        "--output-len",
        "16",
        "--out",
        &p("open.jsonl"),
    ]));
    // A sweep point is a row at concurrency 1, a closed loop a row at its concurrency: the means
    // of their requests' TTFT and (e2e - TTFT) / (output tokens - 1).
    let rows = rows_of_file(Path::new(&p("sweep.jsonl"))).unwrap();
    let shapes: Vec<(u32, u32, u32)> = rows.iter().map(|r| (r.isl, r.osl, r.concurrency)).collect();
    assert_eq!(shapes, vec![(1000, 16, 1), (2000, 16, 1)]);
    let records = bench_client::results::read_records_strict(p("sweep.jsonl")).unwrap();
    let at1k: Vec<_> = records
        .iter()
        .filter(|r| r.context_tokens == 1000)
        .collect();
    let mean = |f: &dyn Fn(&bench_client::results::Record) -> f64| {
        at1k.iter().map(|r| f(r)).sum::<f64>() / at1k.len() as f64
    };
    let ttft = mean(&|r| r.ttft_ms.unwrap());
    let tpot = mean(&|r| {
        (r.e2e_ms.unwrap() - r.ttft_ms.unwrap()) / f64::from(r.completion_tokens.unwrap() - 1)
    });
    assert!((rows[0].ttft_ms.unwrap() - ttft).abs() < 1e-9, "{rows:?}");
    assert!((rows[0].tpot_ms.unwrap() - tpot).abs() < 1e-9, "{rows:?}");
    let load = rows_of_file(Path::new(&p("load.jsonl"))).unwrap();
    assert_eq!((load.len(), load[0].concurrency, load[0].isl), (1, 4, 1000));

    let table = p("rows.csv");
    std::fs::write(&table, good_rows()).unwrap();
    let calibrate = |files: &[&str]| {
        let out = p("twin.toml");
        let mut args = vec![
            "calibrate",
            "--table",
            &table,
            "--chunked-prefill-size",
            "8192",
            "--out",
            &out,
        ];
        args.extend_from_slice(files);
        run(&args)
    };
    let open = p("open.jsonl");
    let o = calibrate(&[&open]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{open}: a table row is a closed loop")),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new(&p("twin.toml")).exists());
    let o = calibrate(&[&p("sweep.jsonl"), &p("load.jsonl")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("3 rows from the results files join the table's 8"),
        "{}",
        stderr(&o)
    );
    let report = String::from_utf8(o.stdout).unwrap();
    assert!(
        report
            .lines()
            .any(|l| l.split_whitespace().take(3).eq(["1000", "16", "4"])),
        "{report}"
    );
    let text = std::fs::read_to_string(p("twin.toml")).unwrap();
    assert_eq!(text.matches("[[discrepancy]]").count(), 11, "{text}");
    assert!(text.contains("rows.csv and 2 results files"), "{text}");
}

#[test]
fn another_tool_s_closed_loop_run_is_a_row_at_its_concurrency_and_mean_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = |f: &str| format!("{}/../fixtures/import/{f}", env!("CARGO_MANIFEST_DIR"));
    let import = |f: &str| {
        let out = dir.path().join(format!("{}.jsonl", f.replace('/', "-")));
        let o = run(&["import", &fixture(f), "--out", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        rows_of_file(&out)
    };
    // Each tool ran 8 requests of 16 output tokens, 2 in flight, at no rate; guidellm's and
    // AIPerf's prompts tokenized to 14-21 tokens.
    for (f, isl) in [
        ("bench_serving-sglang.jsonl", 64),
        ("guidellm.json", 16),
        ("aiperf/profile_export.jsonl", 18),
    ] {
        let rows = import(f).unwrap();
        let shape: Vec<_> = rows.iter().map(|r| (r.isl, r.osl, r.concurrency)).collect();
        assert_eq!(shape, vec![(isl, 16, 2)], "{f}");
    }
    // vLLM's random prompts of 1 to 50 tokens are no fixed-length row.
    let err = import("vllm-bench-serve.json").unwrap_err().to_string();
    assert!(err.contains("give runs of fixed lengths"), "{err}");
    // A summary without requests is a row of the tool's means, where its settings give the
    // lengths (bench_serving's do, vLLM's summary does not).
    let rows = import("bench_serving-summary.jsonl").unwrap();
    let shape: Vec<_> = rows.iter().map(|r| (r.isl, r.osl, r.concurrency)).collect();
    assert_eq!(shape, vec![(64, 16, 2)]);
    let text = std::fs::read_to_string(fixture("bench_serving-summary.jsonl")).unwrap();
    // The tool's own line (its `Infinity` is not JSON serde reads): the number after the key.
    let at = text.find("\"mean_ttft_ms\":").unwrap() + "\"mean_ttft_ms\":".len();
    let digits: String = text[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mean_ttft: f64 = digits.parse().unwrap();
    assert!(
        (rows[0].ttft_ms.unwrap() - mean_ttft).abs() < 1e-9,
        "{rows:?} {mean_ttft}"
    );
    let err = import("vllm-bench-serve-summary.json")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gives no fixed input and output lengths"),
        "{err}"
    );
}
