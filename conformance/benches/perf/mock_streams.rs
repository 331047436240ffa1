//! `mock-streams`: 2,000 streams at once against the mock; its pacing, memory and CPU.

use anyhow::Result;
use bench_client::net;
use bench_client::plan::Timeouts;
use serde_json::json;
use tokio::time::Instant;

use crate::client::{bench_stamping, multi_thread_runtime, target, wave};
use crate::hiccup::{fmt_hiccups, HiccupMeter};
use crate::lags::lags;
use crate::machine::{cpu_seconds, nproc, proc_path, status_field, RssSampler};
use crate::mock::Mock;
use crate::report::{fmt_cpu, mib, Report};
use crate::DEMO;

const STREAMS: usize = 2000;
const STREAM_PROMPT: u32 = 1024;
/// Enough output tokens that the run lasts 10-20 s with small-cpu-demo's costs at 2,000 running
/// requests (the measured wall time: see BENCHMARKS.md).
const STREAM_OUTPUT: u32 = 160;

pub(crate) fn run(external: bool) -> Result<Report> {
    let rt = multi_thread_runtime()?;
    rt.block_on(async {
        // PERF_OUTPUT_PER_REQUEST_S overrides the preset's output spread (0 = a pass's chunks all
        // due at one instant) to measure how pacing depends on it.
        let mut sets = vec![("max_running_requests", STREAMS.to_string())];
        if let Ok(v) = std::env::var("PERF_OUTPUT_PER_REQUEST_S") {
            sets.push(("output_per_request_s", v));
        }
        let mock = Mock::start(DEMO, &sets, external).await?;
        let mut r = Report::for_mock("mock-streams", external);
        r.note(format!(
            "mock: {}; preset {DEMO} with max_running_requests = {STREAMS}; {STREAMS} streams sent \
             at once through bench_client::net::send (SGLang native, cumulative output), prompt \
             {STREAM_PROMPT} tokens, {STREAM_OUTPUT} output tokens; multi-thread tokio runtime with \
             {} worker threads; release build",
            mock.label(),
            nproc()
        ));
        let http = net::http_client_with(&Timeouts::default(), bench_stamping())?;
        let t = target(mock.url());
        let cpu0_self = cpu_seconds(None);
        let cpu0_mock = mock.pid().and_then(|p| cpu_seconds(Some(p)));
        let sampler = RssSampler::start(mock.pid());
        let hiccups = HiccupMeter::start();
        let started = Instant::now();
        let traces = wave(&http, &t, "streams", STREAMS, STREAM_PROMPT, STREAM_OUTPUT).await?;
        let wall = started.elapsed().as_secs_f64();
        let (rss_median, rss_max) = sampler.finish();
        let hiccups = hiccups.finish();
        let hwm = status_field(&proc_path(mock.pid(), "status"), "VmHWM");
        let cpu_self = cpu_seconds(None).zip(cpu0_self).map(|(a, b)| a - b);
        let cpu_mock = mock
            .pid()
            .and_then(|p| cpu_seconds(Some(p)))
            .zip(cpu0_mock)
            .map(|(a, b)| a - b);

        let l = lags(&mock, &http, &traces).await?;
        // PERF_DUMP_PACING=FILE writes every chunk as CSV: modelled instant, the output stage's
        // hand-off, the HTTP layer's hand-off to the connection (unix ns), request id.
        if let Ok(path) = std::env::var("PERF_DUMP_PACING") {
            let mut out = String::new();
            for tr in &traces {
                let t = mock.truth(&http, &tr.rid).await?;
                for c in &t.chunks {
                    out.push_str(&format!(
                        "{},{},{},{}\n",
                        t.received_unix_ns + c.model_ns,
                        t.received_unix_ns + c.at_ns,
                        t.received_unix_ns + c.sent_ns.unwrap_or(0),
                        tr.rid
                    ));
                }
            }
            std::fs::write(path, out)?;
        }
        let ok = traces.len() - l.failed;
        r.row("streams completed", format!("{STREAMS}"), format!("{ok} ({} failed)", l.failed));
        r.row("run wall time", "~10-20 s", format!("{wall:.2} s"));
        r.dist_row(
            "pacing error per chunk (sent by the mock's HTTP layer - modelled)",
            "p99 < 2 ms",
            &l.pacing_ms,
        );
        r.dist_row(
            "  of which first chunks (sent while other requests still arrive)",
            "-",
            &l.first_pacing_ms,
        );
        r.dist_row(
            "  of which every later chunk (all streams running)",
            "-",
            &l.later_pacing_ms,
        );
        r.dist_row(
            "largest pacing error per request",
            "-",
            &l.per_request_max_pacing_ms,
        );
        r.dist_row(
            "chunk lag from the client's send (client arrival - mock emission, each on its own \
             process's clock: includes the request's way in, queued behind the other uploads)",
            "-",
            &l.all,
        );
        r.dist_row(
            "chunk delivery (client arrival - mock emission on the shared real-time clock)",
            "-",
            &l.delivery_ms,
        );
        r.row(
            "peak RSS (VmHWM) of the mock's process",
            "< 200 MB",
            mib(hwm),
        );
        r.row(
            "RSS during the run (VmRSS, sampled every 100 ms)",
            "< 200 MB",
            format!(
                "median {}, max {}",
                rss_median.map_or("n/a".into(), |m| format!("{m:.1} MiB")),
                rss_max.map_or("n/a".into(), |m| format!("{m:.1} MiB"))
            ),
        );
        r.row(
            "CPU of the bench process (user + system)",
            "-",
            fmt_cpu(cpu_self, wall),
        );
        if let Some(c) = cpu_mock {
            r.row(
                "CPU of the mock process (user + system)",
                "-",
                fmt_cpu(Some(c), wall),
            );
        }
        r.row(
            "machine stalls during the run (wake-ups of a thread sleeping 1 ms at a time, late by)",
            "-",
            fmt_hiccups(&hiccups),
        );
        if l.mismatched > 0 {
            r.note(format!(
                "{} streams had a different number of output chunks at the client than in ground truth",
                l.mismatched
            ));
        }
        r.set("wall_s", json!(wall));
        r.set_dist("pacing_per_chunk", &l.pacing_ms);
        r.set_dist("pacing_first_chunks", &l.first_pacing_ms);
        r.set_dist("pacing_later_chunks", &l.later_pacing_ms);
        r.set_dist("pacing_per_request_max", &l.per_request_max_pacing_ms);
        r.set_dist("chunk_lag", &l.all);
        r.set_dist("chunk_delivery", &l.delivery_ms);
        r.set_dist("first_chunk_lag", &l.first);
        r.set("vm_hwm_kb", json!(hwm));
        r.set("rss_median_mib", json!(rss_median));
        r.set("rss_max_mib", json!(rss_max));
        r.set("cpu_self_s", json!(cpu_self));
        r.set("cpu_mock_s", json!(cpu_mock));
        r.set("machine_stalls_ms", json!(hiccups));
        r.set("failed", json!(l.failed));
        r.set("external", json!(external));
        mock.stop().await;
        Ok(r)
    })
}
