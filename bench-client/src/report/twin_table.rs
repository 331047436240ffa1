//! Views of a table twin's rows (`calibrate --table`, `predict`): each row's prediction beside
//! its measurement and the error, as a table, CSV or JSON, ending with the MAPE of TTFT and TPOT.

use std::fmt::Write;

use serde::Serialize;

use crate::measure::table::{error_pct, mape, Capacity, TableModel};
use crate::report::grid::{Col, Grid};

/// One row: its shape, the twin's prediction (ms) and, where measured, the measurement and
/// the error (percent). `note` says why a row has no prediction or cannot be reached.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
    pub pred_ttft_ms: Option<f64>,
    pub pred_tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub err_ttft_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub err_tpot_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The model's own prediction where the preset's discrepancy corrected it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_tpot_ms: Option<f64>,
}

impl RowView {
    /// A row with its prediction; the errors follow from the measurement.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        line: Option<u64>,
        (isl, osl, concurrency): (u32, u32, u32),
        pred: Option<(f64, Option<f64>)>,
        measured: (Option<f64>, Option<f64>),
        note: Option<String>,
    ) -> RowView {
        let pred_ttft_ms = pred.map(|p| p.0 * 1e3);
        let pred_tpot_ms = pred.and_then(|p| p.1).map(|t| t * 1e3);
        RowView {
            line,
            isl,
            osl,
            concurrency,
            pred_ttft_ms,
            pred_tpot_ms,
            ttft_ms: measured.0,
            tpot_ms: measured.1,
            err_ttft_pct: pred_ttft_ms.and_then(|p| error_pct(p, measured.0)),
            err_tpot_pct: pred_tpot_ms.and_then(|p| error_pct(p, measured.1)),
            note,
            model_ttft_ms: None,
            model_tpot_ms: None,
        }
    }
}

/// The MAPE of TTFT and TPOT over the rows with a measurement and a prediction.
pub fn mapes(rows: &[RowView]) -> (Option<f64>, Option<f64>) {
    (
        mape(rows.iter().filter_map(|r| r.err_ttft_pct)),
        mape(rows.iter().filter_map(|r| r.err_tpot_pct)),
    )
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:+.1}%"))
}

/// A MAPE as printed: "-" where there is none (or none finite).
pub fn mape_text(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite())
        .map_or("-".into(), |v| format!("{v:.1}%"))
}

/// The rows as a plain-text table, then the MAPE line.
pub fn table(rows: &[RowView]) -> String {
    let measured = rows
        .iter()
        .any(|r| r.ttft_ms.is_some() || r.tpot_ms.is_some());
    // Shape, then TTFT and TPOT as groups two spaces apart; a row's note after its last figure.
    let (shape, group) = (Col::right(), Col::right().gap(2));
    let mut g = if measured {
        Grid::new(&[
            shape.min(7),
            shape.min(6),
            shape.min(5),
            group.min(11),
            shape.min(11),
            shape.min(8),
            group.min(10),
            shape.min(10),
            shape.min(8),
            Col::left().gap(2),
        ])
    } else {
        Grid::new(&[
            shape.min(7),
            shape.min(6),
            shape.min(5),
            group.min(11),
            shape.min(10),
            Col::left().gap(2),
        ])
    };
    if measured {
        g.row([
            "isl",
            "osl",
            "conc",
            "TTFT ms",
            "predicted",
            "error",
            "TPOT ms",
            "predicted",
            "error",
        ]);
    } else {
        g.row(["isl", "osl", "conc", "TTFT ms", "TPOT ms"]);
    }
    for r in rows {
        let mut row = vec![
            r.isl.to_string(),
            r.osl.to_string(),
            r.concurrency.to_string(),
        ];
        if measured {
            row.extend([
                ms(r.ttft_ms),
                ms(r.pred_ttft_ms),
                pct(r.err_ttft_pct),
                ms(r.tpot_ms),
                ms(r.pred_tpot_ms),
                pct(r.err_tpot_pct),
            ]);
        } else {
            row.extend([ms(r.pred_ttft_ms), ms(r.pred_tpot_ms)]);
        }
        if let Some(n) = &r.note {
            row.push(format!("({n})"));
        }
        g.row(row);
    }
    let mut out = g.render();
    let corrected = rows.iter().filter(|r| corrected(r)).count();
    if corrected > 0 {
        let _ = writeln!(
            out,
            "{corrected} of {} rows carry the discrepancy the preset measured at their shape, or half the nearest shape's (--model-only: the model alone)",
            rows.len()
        );
    }
    if measured {
        let (a, b) = mapes(rows);
        let _ = writeln!(out, "MAPE: TTFT {}, TPOT {}", mape_text(a), mape_text(b));
    }
    out
}

/// Whether the preset's discrepancy corrected a row.
fn corrected(r: &RowView) -> bool {
    r.model_ttft_ms.is_some() || r.model_tpot_ms.is_some()
}

/// The rows as CSV: `isl, osl, concurrency, pred_ttft_ms, pred_tpot_ms`; where the table has
/// measurements, `ttft_ms, tpot_ms, err_ttft_pct, err_tpot_pct`; where the preset's discrepancy
/// corrected a row, the model's own `model_ttft_ms, model_tpot_ms`; where a row has a note, `note`.
pub fn csv(rows: &[RowView]) -> anyhow::Result<String> {
    let measured = rows
        .iter()
        .any(|r| r.ttft_ms.is_some() || r.tpot_ms.is_some());
    let model = rows.iter().any(corrected);
    let noted = rows.iter().any(|r| r.note.is_some());
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut head = vec!["isl", "osl", "concurrency", "pred_ttft_ms", "pred_tpot_ms"];
    if measured {
        head.extend(["ttft_ms", "tpot_ms", "err_ttft_pct", "err_tpot_pct"]);
    }
    if model {
        head.extend(["model_ttft_ms", "model_tpot_ms"]);
    }
    if noted {
        head.push("note");
    }
    w.write_record(&head)?;
    let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    for r in rows {
        let mut rec = vec![
            r.isl.to_string(),
            r.osl.to_string(),
            r.concurrency.to_string(),
            f(r.pred_ttft_ms),
            f(r.pred_tpot_ms),
        ];
        if measured {
            rec.extend([
                f(r.ttft_ms),
                f(r.tpot_ms),
                f(r.err_ttft_pct),
                f(r.err_tpot_pct),
            ]);
        }
        if model {
            rec.extend([f(r.model_ttft_ms), f(r.model_tpot_ms)]);
        }
        if noted {
            rec.push(r.note.clone().unwrap_or_default());
        }
        w.write_record(&rec)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// The rows and the MAPE as JSON.
pub fn json(rows: &[RowView]) -> serde_json::Value {
    let (a, b) = mapes(rows);
    serde_json::json!({
        "rows": rows,
        "mape_ttft_pct": a,
        "mape_tpot_pct": b,
    })
}

/// A duration in plain units.
pub fn secs(s: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.3} us", s * 1e6)
    } else {
        format!("{:.3} ns", s * 1e9)
    }
}

/// The fitted model in plain units.
pub fn model(m: &TableModel, chunk: usize, mixed: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "fitted model:");
    let _ = writeln!(out, "  way in and out {} (every TTFT)", secs(m.way_s));
    let _ = writeln!(
        out,
        "  prefill pass {} + {}/token + {} per token pair (token x context before it), {} tokens a pass",
        secs(m.prefill_base_s),
        secs(m.prefill_per_token_s),
        secs(m.prefill_per_token_pair_s),
        chunk
    );
    let _ = writeln!(
        out,
        "  decode step {} + {} per context token + {} x batch^{:.3} (the batch's requests)",
        secs(m.decode_base_s),
        secs(m.decode_per_context_token_s),
        secs(m.decode_per_request_s),
        m.decode_batch_exponent
    );
    let _ = writeln!(
        out,
        "  scheduler: {}",
        if mixed {
            "prefill and decode in one pass (vLLM's)"
        } else {
            "a prefill pass or a decode step (SGLang's)"
        }
    );
    match m.capacity() {
        Some((Capacity::PoolTokens, p)) => {
            let _ = writeln!(
                out,
                "  KV pool {p:.0} tokens (fitted: the rows saturate, and a full pool fits their queue better than a cap on the running requests)"
            );
        }
        Some((Capacity::RunningRequests, r)) => {
            let _ = writeln!(
                out,
                "  running requests at most {:.0} (fitted: the rows saturate, and a cap on the running requests fits their queue better than a full KV pool); KV pool left open",
                r.round().max(1.0)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  KV pool and running requests: no row saturates; left open"
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<RowView> {
        vec![
            RowView::new(
                Some(2),
                (1024, 128, 4),
                Some((0.05, Some(0.011))),
                (Some(50.0), Some(10.0)),
                None,
            ),
            RowView::new(
                Some(3),
                (1024, 128, 8),
                Some((0.066, Some(0.0095))),
                (Some(60.0), Some(10.0)),
                None,
            ),
        ]
    }

    #[test]
    fn errors_and_mape_follow_from_the_rows() {
        let r = rows();
        assert!((r[0].err_tpot_pct.unwrap() - 10.0).abs() < 1e-9);
        let (a, b) = mapes(&r);
        assert!((a.unwrap() - 5.0).abs() < 1e-9, "{a:?}");
        assert!((b.unwrap() - 7.5).abs() < 1e-9, "{b:?}");
        assert!(
            table(&r).ends_with("MAPE: TTFT 5.0%, TPOT 7.5%\n"),
            "{}",
            table(&r)
        );
        let j = json(&r);
        assert!((j["mape_ttft_pct"].as_f64().unwrap() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn csv_has_measured_columns_only_where_measured() {
        let c = csv(&rows()).unwrap();
        assert!(c.starts_with("isl,osl,concurrency,pred_ttft_ms,pred_tpot_ms,ttft_ms,tpot_ms,err_ttft_pct,err_tpot_pct\n"), "{c}");
        let grid = vec![RowView::new(
            None,
            (1000, 1000, 1),
            Some((0.1, Some(0.01))),
            (None, None),
            None,
        )];
        let c = csv(&grid).unwrap();
        assert_eq!(
            c,
            "isl,osl,concurrency,pred_ttft_ms,pred_tpot_ms\n1000,1000,1,100.0000,10.0000\n"
        );
        assert!(!table(&grid).contains("MAPE"));
    }
}
