//! SGLang's bench_serving (`--output-details`: a JSON line per run) and vLLM's `bench serve
//! --save-detailed` (one JSON document), which share their lineage: per-request `ttfts` and `itls`
//! in seconds, `input_lens`, `output_lens` and `errors`; vLLM adds `latencies`, `start_times` and
//! `queue_times`. bench_serving's native backend splits each chunk's gap evenly over the chunk's
//! tokens, so its runs of equal latencies are its chunks; every other backend keeps one latency per
//! chunk and no per-chunk counts.

use serde_json::Value;

use super::check::{Notes, ToolSummary};
use super::json::{self, count, number, Obj};
use super::{ImportError, Rebuilt, Request, Run, Source, TpotDef};
use crate::trace::{Dialect, TokenAttribution};

/// Settings kept in the manifest, where the file has them.
const SETTINGS: [&str; 17] = [
    "tag",
    "backend",
    "endpoint_type",
    "dataset_name",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "num_prompts",
    "sharegpt_output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "label",
    "model_id",
    "tokenizer_id",
    "date",
    "accept_length",
];

/// The runs of a bench_serving JSONL file or a vLLM JSON document.
pub fn runs(
    file: &str,
    text: &str,
    source: Source,
    modified_ms: u64,
) -> Result<Vec<Run>, ImportError> {
    // A vLLM document may be pretty-printed; bench_serving appends one compact line per run. Each
    // line is read, made a run and let go before the next: a file of many runs never holds more
    // than one run's JSON.
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    let one = |line: Option<usize>, v: Value, k: usize| {
        if !v.is_object() {
            return Err(ImportError::new(file, "expected a JSON object per run"));
        }
        run(Obj::top(file, line, &v), source, modified_ms + k as u64)
    };
    let jsonl = lines.len() >= 2
        && lines[0].1.trim_start().starts_with('{')
        && lines[0].1.trim_end().ends_with('}');
    if !jsonl {
        return Ok(vec![one(None, json::parse(file, None, text)?, 0)?]);
    }
    lines
        .into_iter()
        .enumerate()
        .map(|(k, (n, l))| one(Some(n), json::parse(file, Some(n), l)?, k))
        .collect()
}

/// `YYYYMMDD-HHMMSS` (vLLM's `date`, the local time of the machine that ran it) as unix ms, read as
/// UTC: the file does not say its time zone.
pub(super) fn date_ms(s: &str) -> Option<u64> {
    let (d, t) = s.split_once('-')?;
    if d.len() != 8 || t.len() != 6 {
        return None;
    }
    let n = |x: &str| x.parse::<i64>().ok();
    let (y, m, day) = (n(&d[..4])?, n(&d[4..6])?, n(&d[6..])?);
    let (hh, mm, ss) = (n(&t[..2])?, n(&t[2..4])?, n(&t[4..])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm, proleptic Gregorian).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(((days * 24 + hh) * 60 + mm) * 60 + ss)
        .ok()
        .map(|s| s * 1000)
}

/// An array of per-request values, `n` long.
fn per_request<'a>(
    o: &Obj<'a>,
    key: &str,
    n: usize,
) -> Result<Option<&'a Vec<Value>>, ImportError> {
    let Some(v) = o.get(key) else { return Ok(None) };
    let a = v
        .as_array()
        .ok_or_else(|| o.err(key, "expected an array (one entry per request)"))?;
    if a.len() != n {
        return Err(o.err(
            key,
            format!(
                "{} entries, but ttfts has {n}: the arrays must be one entry per request",
                a.len()
            ),
        ));
    }
    Ok(Some(a))
}

fn secs(o: &Obj<'_>, key: &str, i: usize, v: &Value) -> Result<f64, ImportError> {
    json::seconds(v).ok_or_else(|| {
        o.err(
            &format!("{key}[{i}]"),
            format!("expected seconds (0 to 1e10), found {v}"),
        )
    })
}

/// Each run of equal per-token latencies is one chunk: its gap is the run's sum, its tokens the
/// run's length; the first chunk carries what the latencies leave of the output.
fn itl_runs(itls: &[f64], output_len: u32) -> (Vec<f64>, Vec<u32>) {
    let mut gaps = Vec::new();
    let mut tokens = vec![output_len.saturating_sub(itls.len() as u32).max(1)];
    let mut k = 0;
    while k < itls.len() {
        let mut m = 1;
        while k + m < itls.len() && itls[k + m].to_bits() == itls[k].to_bits() {
            m += 1;
        }
        gaps.push(itls[k] * m as f64);
        tokens.push(m as u32);
        k += m;
    }
    (gaps, tokens)
}

/// A summary-only run (no per-request arrays): its settings and the tool's figures, no requests.
fn summary_run(
    o: &Obj<'_>,
    source: Source,
    modified_ms: u64,
    figures: super::summary::Figures,
) -> Run {
    let (settings, server_info) = settings_of(o);
    let (start_unix_ms, start_from) = start_of(o, modified_ms);
    let backend = o.str("backend").unwrap_or("unknown");
    Run {
        source,
        version: None,
        dialect: if backend.contains("chat") {
            Dialect::OpenAiChat
        } else if source == Source::BenchServing && matches!(backend, "sglang" | "sglang-native") {
            Dialect::Sglang
        } else {
            Dialect::OpenAi
        },
        start_unix_ms,
        start_from,
        settings,
        url: None,
        model: o.str("model_id").map(str::to_string),
        server_info,
        requests: Vec::new(),
        attribution: TokenAttribution::ImportedUnknown,
        tpot: TpotDef::EndMinusFirst,
        rebuilt_schedule: None,
        summary: None,
        notes: Notes::default(),
        figures: Some(figures),
    }
}

/// The tool's settings kept in the manifest, and the server's description, secrets removed.
fn settings_of(o: &Obj<'_>) -> (Value, Option<Value>) {
    let mut settings = serde_json::Map::new();
    for k in SETTINGS {
        if let Some(v) = o.get(k) {
            settings.insert(k.to_string(), v.clone());
        }
    }
    (Value::Object(settings), o.get("server_info").cloned())
}

/// The run's start: the file's `date`, else the file's modification time.
fn start_of(o: &Obj<'_>, modified_ms: u64) -> (u64, &'static str) {
    match o.str("date").and_then(date_ms) {
        Some(ms) => (
            ms,
            "the file's date (to the second; its local time, read as UTC)",
        ),
        None => (
            modified_ms,
            "the file's modification time (the file has no date)",
        ),
    }
}

fn run(o: Obj<'_>, source: Source, modified_ms: u64) -> Result<Run, ImportError> {
    let rerun = match source {
        Source::Vllm => "rerun `vllm bench serve` with --save-detailed",
        _ => "rerun bench_serving with --output-details",
    };
    let Some(ttfts) = o.get("ttfts") else {
        let figures = super::summary::lineage(&o, source == Source::Vllm)?;
        if figures.is_empty() {
            return Err(o.err(
                "ttfts",
                format!("missing, and no summary figures either (mean_ttft_ms, output_throughput): {rerun}"),
            ));
        }
        return Ok(summary_run(&o, source, modified_ms, figures));
    };
    let ttfts = ttfts
        .as_array()
        .ok_or_else(|| o.err("ttfts", "expected an array (one entry per request)"))?;
    let n = ttfts.len();
    let need =
        |k: &str| per_request(&o, k, n)?.ok_or_else(|| o.err(k, format!("missing: {rerun}")));
    let itls = need("itls")?;
    let input_lens = need("input_lens")?;
    let output_lens = need("output_lens")?;
    let errors = per_request(&o, "errors", n)?;
    let latencies = per_request(&o, "latencies", n)?;
    let start_times = per_request(&o, "start_times", n)?;
    let queue_times = per_request(&o, "queue_times", n)?;
    let backend = o.str("backend").unwrap_or("unknown").to_string();
    let native =
        source == Source::BenchServing && matches!(backend.as_str(), "sglang" | "sglang-native");
    let dialect = if backend.contains("chat") {
        Dialect::OpenAiChat
    } else if native {
        Dialect::Sglang
    } else {
        Dialect::OpenAi
    };
    let origin = match (start_times, queue_times) {
        (Some(st), q) => {
            let mut min = f64::INFINITY;
            for (i, v) in st.iter().enumerate() {
                let q = q.map_or(Ok(0.0), |q| secs(&o, "queue_times", i, &q[i]))?;
                min = min.min(secs(&o, "start_times", i, v)? - q);
            }
            Some(min)
        }
        _ => None,
    };
    let mut requests = Vec::with_capacity(n);
    for i in 0..n {
        let error = errors
            .and_then(|e| e[i].as_str())
            .filter(|e| !e.trim().is_empty())
            .map(str::to_string);
        let output_len = count(&output_lens[i])
            .ok_or_else(|| o.err(&format!("output_lens[{i}]"), "expected a token count"))?;
        let input_len = count(&input_lens[i])
            .ok_or_else(|| o.err(&format!("input_lens[{i}]"), "expected a token count"))?;
        let gaps: Vec<f64> = itls[i]
            .as_array()
            .ok_or_else(|| o.err(&format!("itls[{i}]"), "expected an array of seconds"))?
            .iter()
            .enumerate()
            .map(|(k, v)| secs(&o, &format!("itls[{i}]"), k, v))
            .collect::<Result<_, _>>()?;
        let (gaps, chunk_tokens) = if native && error.is_none() {
            let (g, t) = itl_runs(&gaps, output_len);
            (g, Some(t))
        } else {
            (gaps, None)
        };
        let sent = match (origin, start_times) {
            (Some(org), Some(st)) => Some(secs(&o, "start_times", i, &st[i])? - org),
            _ => None,
        };
        let queue = match queue_times {
            Some(q) => secs(&o, "queue_times", i, &q[i])?,
            None => 0.0,
        };
        requests.push(Request {
            scheduled_s: sent.map(|s| s - queue),
            sent_s: sent,
            ttft_s: secs(&o, "ttfts", i, &ttfts[i])?,
            gaps_s: gaps,
            chunk_tokens,
            e2e_s: latencies
                .map(|l| secs(&o, "latencies", i, &l[i]))
                .transpose()?,
            input_len: Some(input_len),
            output_len,
            error,
        });
    }
    let (settings, server_info) = settings_of(&o);
    let max_concurrency = o
        .get("max_concurrency")
        .and_then(count)
        .map_or(n, |c| c as usize);
    let (start_unix_ms, start_from) = start_of(&o, modified_ms);
    let summary = ToolSummary {
        mean_ttft_ms: o.figure("mean_ttft_ms")?,
        p99_ttft_ms: o.figure("p99_ttft_ms")?,
        mean_tpot_ms: o.figure("mean_tpot_ms")?,
        output_throughput: o.figure("output_throughput")?,
    };
    let rebuilt = start_times.is_none().then_some(Rebuilt {
        concurrency: max_concurrency.max(1),
    });
    let mut notes = Notes::default();
    if latencies.is_none() {
        notes.mean_tpot = Some(
            "the file keeps no per-request end-to-end latency: each request's end is taken at its last chunk, without the wait for the stream's end".into(),
        );
    }
    if let Some(r) = rebuilt {
        // A request rate paced the arrivals in the tool; the file keeps no trace of them.
        let paced = o
            .get("request_rate")
            .and_then(number)
            .map_or(String::new(), |rate| {
                format!(" (the tool paced arrivals at {rate} req/s, which the file does not keep)")
            });
        notes.output_throughput = Some(format!(
            "the file has no start times: the schedule is rebuilt as a closed loop of {} with no gap between one request's end and the next's start{paced}, so its span is not the tool's benchmark duration (the tool's own turnaround, its set-up and wind-down)",
            r.concurrency
        ));
    }
    Ok(Run {
        source,
        version: None,
        dialect,
        start_unix_ms,
        start_from,
        settings,
        url: None,
        model: o.str("model_id").map(str::to_string),
        server_info,
        requests,
        attribution: if native {
            TokenAttribution::ImportedItlRuns
        } else {
            TokenAttribution::ImportedUnknown
        },
        tpot: TpotDef::EndMinusFirst,
        rebuilt_schedule: rebuilt,
        summary: Some(summary).filter(|s| *s != ToolSummary::default()),
        notes,
        figures: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_as_utc() {
        assert_eq!(date_ms("19700101-000000"), Some(0));
        assert_eq!(date_ms("20240229-123456"), Some(1_709_210_096_000));
        assert_eq!(date_ms("20241301-000000"), None);
        assert_eq!(date_ms("2024-01-01"), None);
    }

    #[test]
    fn runs_of_equal_latencies_are_chunks() {
        let (g, t) = itl_runs(&[0.003, 0.002, 0.002, 0.001, 0.001, 0.001], 8);
        assert_eq!(t, vec![2, 1, 2, 3]);
        assert_eq!(g.len(), 3);
        assert!((g[1] - 0.004).abs() < 1e-12 && (g[2] - 0.003).abs() < 1e-12);
    }
}
