//! Aggregate tables: one closed-loop point per CSV row (`isl`, `osl`, `concurrency`, and where
//! measured the mean `ttft_ms` and `tpot_ms`), as AIPerf, bench_serving and vendor pages report
//! them. Other columns are ignored except `deployment` (which server a row is), `backend` (whose
//! scheduler) and `gpu` (which sets the server's default prefill tokens a pass). Every error names
//! the file, the line and the column.

use std::collections::BTreeSet;
use std::path::Path;

/// One row of a table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRow {
    /// The row's line in its file (the header is line 1).
    pub line: u64,
    pub deployment: Option<String>,
    pub backend: Option<String>,
    /// The accelerator's name (`h100_sxm`, `B200`), where the table has a `gpu` column.
    pub gpu: Option<String>,
    pub isl: u32,
    pub osl: u32,
    pub concurrency: u32,
    /// Mean TTFT in ms, where measured.
    pub ttft_ms: Option<f64>,
    /// Mean TPOT in ms, where measured: (e2e - TTFT) / (output tokens - 1).
    pub tpot_ms: Option<f64>,
}

/// Why a table cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error("{file}: line {line}, column {column}: {message}")]
    Cell {
        file: String,
        line: u64,
        column: String,
        message: String,
    },
}

/// The most requests a row may keep in flight: its closed loop runs ten times as many.
pub const MAX_CONCURRENCY: u32 = 65_536;

/// The least time a row may give (ms): a microsecond; less is not a measurement.
pub const MIN_TIME_MS: f64 = 1e-3;

/// The most time a row may give (ms): a day; more is a unit slip (a time in us or ns).
pub const MAX_TIME_MS: f64 = 86_400_000.0;

/// Why a row's lengths cannot be run: `None` where they can, else the column at fault and why.
pub fn shape_error(isl: u32, osl: u32, concurrency: u32) -> Option<(&'static str, String)> {
    if concurrency > MAX_CONCURRENCY {
        return Some((
            "concurrency",
            format!("{concurrency} in flight: at most {MAX_CONCURRENCY} (a closed loop runs ten times as many requests)"),
        ));
    }
    // A prompt and its output together: at most `plan::MAX_TOKENS`, the longer one named.
    let most = crate::plan::MAX_TOKENS;
    (u64::from(isl) + u64::from(osl) > u64::from(most)).then(|| {
        (
            if isl >= osl { "isl" } else { "osl" },
            format!("{isl} + {osl} tokens: a prompt and its output hold at most {most} together"),
        )
    })
}

/// Whether the measured columns must be there (`calibrate`) or may be (`predict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measured {
    Required,
    Optional,
}

/// Reads a table file (see the module's rules).
pub fn read_table(path: &Path, measured: Measured) -> Result<Vec<TableRow>, TableError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TableError::File {
        file: file.clone(),
        message: e.to_string(),
    })?;
    parse_table(&file, &text, measured)
}

/// Parses a table's text; `file` names it in errors.
pub fn parse_table(
    file: &str,
    text: &str,
    measured: Measured,
) -> Result<Vec<TableRow>, TableError> {
    let whole = |message: String| TableError::File {
        file: file.to_string(),
        message,
    };
    let mut rd = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let headers = rd
        .headers()
        .map_err(|e| whole(format!("line 1: {e}")))?
        .clone();
    if text.trim().is_empty() {
        return Err(whole("the file is empty (a header of isl, osl, concurrency, ttft_ms, tpot_ms, then a row each)".into()));
    }
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    // A column named twice would be read from its first place without a word.
    for name in [
        "isl",
        "osl",
        "concurrency",
        "ttft_ms",
        "tpot_ms",
        "deployment",
        "backend",
        "gpu",
    ] {
        if headers
            .iter()
            .filter(|h| h.eq_ignore_ascii_case(name))
            .count()
            > 1
        {
            return Err(whole(format!("line 1: column {name} is named twice")));
        }
    }
    let need = |name: &str| {
        col(name).ok_or_else(|| {
            whole(format!(
                "line 1: no column {name} (the header has: {})",
                headers.iter().collect::<Vec<_>>().join(", ")
            ))
        })
    };
    let (isl, osl, conc) = (need("isl")?, need("osl")?, need("concurrency")?);
    let (ttft, tpot) = match measured {
        Measured::Required => (Some(need("ttft_ms")?), Some(need("tpot_ms")?)),
        Measured::Optional => (col("ttft_ms"), col("tpot_ms")),
    };
    let (dep, backend, gpu) = (col("deployment"), col("backend"), col("gpu"));
    let mut rows = Vec::new();
    for rec in rd.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, csv::Position::line);
            whole(format!("line {line}: {e}"))
        })?;
        let line = rec.position().map_or(0, csv::Position::line);
        let cell = |i: usize| rec.get(i).unwrap_or("");
        let bad = |i: usize, message: String| TableError::Cell {
            file: file.to_string(),
            line,
            column: headers.get(i).unwrap_or("?").to_string(),
            message,
        };
        let count = |i: usize| -> Result<u32, TableError> {
            let s = cell(i);
            match s.parse::<u32>() {
                Ok(v) if v >= 1 => Ok(v),
                Ok(_) => Err(bad(i, format!("{s:?}: must be at least 1"))),
                Err(_) => Err(bad(
                    i,
                    format!("{s:?} is not a whole number of tokens or requests"),
                )),
            }
        };
        let time = |i: Option<usize>| -> Result<Option<f64>, TableError> {
            let Some(i) = i else { return Ok(None) };
            let s = cell(i);
            if s.is_empty() && measured == Measured::Optional {
                return Ok(None);
            }
            match s.parse::<f64>() {
                Ok(v) if (MIN_TIME_MS..=MAX_TIME_MS).contains(&v) => Ok(Some(v)),
                Ok(v) if v.is_finite() && v > MAX_TIME_MS => Err(bad(
                    i,
                    format!("{s:?}: over a day (86,400,000 ms) is not a measured time; the column is in ms"),
                )),
                Ok(v) if v.is_finite() && v > 0.0 => Err(bad(
                    i,
                    format!("{s:?}: under a microsecond (0.001 ms) is not a measured time; the column is in ms"),
                )),
                Ok(_) => Err(bad(i, format!("{s:?}: a time must be positive (ms)"))),
                Err(_) => Err(bad(i, format!("{s:?} is not a number"))),
            }
        };
        let text = |i: Option<usize>| i.map(|i| cell(i).to_string()).filter(|s| !s.is_empty());
        let row = TableRow {
            line,
            deployment: text(dep),
            backend: text(backend),
            gpu: text(gpu),
            isl: count(isl)?,
            osl: count(osl)?,
            concurrency: count(conc)?,
            ttft_ms: time(ttft)?,
            tpot_ms: time(tpot)?,
        };
        if let Some((column, why)) = shape_error(row.isl, row.osl, row.concurrency) {
            let at = headers.iter().position(|h| h.eq_ignore_ascii_case(column));
            return Err(bad(at.unwrap_or(isl), why));
        }
        if row.osl < 2 && row.tpot_ms.is_some() {
            return Err(bad(osl, "TPOT needs at least 2 output tokens".into()));
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(whole("no rows after the header".into()));
    }
    Ok(rows)
}

/// How a blank `deployment` cell is named beside named ones.
const BLANK: &str = "(blank)";

/// The rows of one deployment: `name`'s, or all of them when the table holds one. A table
/// that mixes deployments is refused without a name, since one server's fit cannot be another's.
pub fn select_deployment(
    file: &str,
    rows: Vec<TableRow>,
    name: Option<&str>,
) -> Result<Vec<TableRow>, TableError> {
    let mut names: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.deployment.as_deref())
        .collect();
    // A blank cell beside named ones is a deployment of its own, never merged into another.
    if !names.is_empty() && rows.iter().any(|r| r.deployment.is_none()) {
        names.insert(BLANK);
    }
    let whole = |message: String| TableError::File {
        file: file.to_string(),
        message,
    };
    let list = |names: &BTreeSet<&str>| {
        let shown: Vec<&str> = names.iter().take(5).copied().collect();
        let more = names.len().saturating_sub(shown.len());
        format!(
            "{}{}",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    match name {
        None if names.len() > 1 => Err(whole(format!(
            "rows of {} deployments ({}): choose one with --deployment",
            names.len(),
            list(&names)
        ))),
        None => Ok(rows),
        Some(n) => {
            if !names.contains(n) {
                return Err(whole(if names.is_empty() {
                    format!("--deployment {n}: the table has no deployment column")
                } else {
                    format!("no deployment {n:?} (the table has {})", list(&names))
                }));
            }
            Ok(rows
                .into_iter()
                .filter(|r| r.deployment.as_deref().unwrap_or(BLANK) == n)
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "deployment,backend,isl,osl,concurrency,ttft_ms,tpot_ms\n\
        a,sglang,1024,128,4,50.5,10\n\
        a,sglang,1024,128,8,60,11.5\n\
        b,vllm,2048,128,4,80,12\n";

    fn err(text: &str, measured: Measured) -> String {
        parse_table("t.csv", text, measured)
            .map(|r| format!("parsed {} rows", r.len()))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn rows_are_read_with_their_lines() {
        let rows = parse_table("t.csv", OK, Measured::Required).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].line, 3);
        assert_eq!(rows[1].ttft_ms, Some(60.0));
        assert_eq!(rows[2].backend.as_deref(), Some("vllm"));
    }

    #[test]
    fn bad_cells_name_file_line_and_column() {
        let e = err(&OK.replace("60,11.5", "sixty,11.5"), Measured::Required);
        assert_eq!(
            e,
            "t.csv: line 3, column ttft_ms: \"sixty\" is not a number"
        );
        let e = err(&OK.replace("60,11.5", "60,0"), Measured::Required);
        assert!(
            e.starts_with("t.csv: line 3, column tpot_ms:") && e.contains("positive"),
            "{e}"
        );
        let e = err(&OK.replace("60,11.5", "-3,11.5"), Measured::Required);
        assert!(
            e.contains("line 3, column ttft_ms") && e.contains("positive"),
            "{e}"
        );
        let e = err(&OK.replace("1024,128,8", "1024,128,0"), Measured::Required);
        assert!(e.contains("line 3, column concurrency"), "{e}");
        let e = err(&OK.replace("2048,128,4", "2k,128,4"), Measured::Required);
        assert!(e.contains("line 4, column isl"), "{e}");
    }

    #[test]
    fn rows_past_what_a_loop_can_run_are_refused_before_it_runs() {
        // A hundred million in flight would take the memory of ten times as many requests.
        let e = err(
            &OK.replace("1024,128,8", "1024,128,100000000"),
            Measured::Required,
        );
        assert!(
            e.starts_with("t.csv: line 3, column concurrency: 100000000 in flight: at most 65536"),
            "{e}"
        );
        assert_eq!(
            err(
                &OK.replace("1024,128,8", "1024,128,65536"),
                Measured::Required
            ),
            "parsed 3 rows"
        );
        // A prompt of four billion tokens would be built whole.
        let e = err(
            &OK.replace("2048,128,4", "4000000000,128,4"),
            Measured::Optional,
        );
        assert!(
            e.starts_with("t.csv: line 4, column isl: 4000000000 + 128 tokens"),
            "{e}"
        );
        let e = err(
            &OK.replace("2048,128,4", "2048,16777215,4"),
            Measured::Optional,
        );
        assert!(e.contains("line 4, column osl"), "{e}");
        // 1e-300 ms is positive, and no measurement: a fit would drive every cost to 0 for it.
        let e = err(&OK.replace("60,11.5", "60,1e-300"), Measured::Required);
        assert!(
            e.starts_with("t.csv: line 3, column tpot_ms:") && e.contains("microsecond"),
            "{e}"
        );
        // 1e300 ms is finite, and a unit slip: the engine's clock cannot hold it.
        let e = err(&OK.replace("60,11.5", "1e300,11.5"), Measured::Required);
        assert!(
            e.starts_with("t.csv: line 3, column ttft_ms:") && e.contains("over a day"),
            "{e}"
        );
    }

    #[test]
    fn a_blank_deployment_a_column_named_twice_and_an_empty_file_are_refused() {
        let blank = OK.replace("b,vllm", ",vllm");
        let rows = parse_table("t.csv", &blank, Measured::Required).unwrap();
        let e = select_deployment("t.csv", rows.clone(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 deployments (") && e.contains("(blank)"),
            "{e}"
        );
        assert_eq!(
            select_deployment("t.csv", rows.clone(), Some("a"))
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            select_deployment("t.csv", rows, Some("(blank)"))
                .unwrap()
                .len(),
            1
        );
        let e = err(&OK.replacen("isl,", "isl,ISL,", 1), Measured::Required);
        assert!(e.contains("column isl is named twice"), "{e}");
        let e = err("", Measured::Required);
        assert!(e.contains("the file is empty"), "{e}");
    }

    #[test]
    fn missing_columns_are_named() {
        let e = err(&OK.replace("tpot_ms", "itl_ms"), Measured::Required);
        assert!(e.starts_with("t.csv: line 1: no column tpot_ms"), "{e}");
        // predict takes a table without measurements
        assert_eq!(
            err("isl,osl,concurrency\n1024,128,4\n", Measured::Optional),
            "parsed 1 rows"
        );
        let e = err("isl,osl\n1024,128\n", Measured::Optional);
        assert!(e.contains("no column concurrency"), "{e}");
        assert!(
            err("isl,osl,concurrency,ttft_ms,tpot_ms\n", Measured::Required).contains("no rows")
        );
    }

    #[test]
    fn mixed_deployments_need_a_name() {
        let rows = parse_table("t.csv", OK, Measured::Required).unwrap();
        let e = select_deployment("t.csv", rows.clone(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2 deployments (a, b)") && e.contains("--deployment"),
            "{e}"
        );
        let a = select_deployment("t.csv", rows.clone(), Some("a")).unwrap();
        assert_eq!(a.len(), 2);
        let e = select_deployment("t.csv", rows, Some("c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no deployment \"c\""), "{e}");
    }
}
