//! `sse-decode`: events per second through the SSE decoder and the dialect decoding, on captured
//! streams.

use anyhow::{bail, Result};
use bench_client::api::sse::SseDecoder;
use bench_client::api::Dialect;
use bench_client::stream::StreamAssembler;
use conformance::streams::{capture, per_event_reads};
use serde_json::json;
use tokio::time::Instant;

use crate::client::paused_runtime;
use crate::machine::thread_cpu_ns;
use crate::mock::Mock;
use crate::report::Report;
use crate::DEMO;

fn fixed_reads(stream: &[u8], size: usize) -> Vec<&[u8]> {
    stream.chunks(size).collect()
}

/// Events per wall second and per on-CPU second of this thread through `f`, repeated until the
/// thread has run at least `min_cpu_s` seconds on a CPU (other load on the machine stretches the
/// wall time, not the CPU time). Errors when `f` does not see the expected events.
fn rate(
    events_per_pass: usize,
    min_cpu_s: f64,
    mut f: impl FnMut() -> usize,
) -> Result<(f64, Option<f64>)> {
    // One untimed pass warms caches.
    std::hint::black_box(f());
    let t0 = Instant::now();
    let c0 = thread_cpu_ns();
    let mut passes = 0usize;
    loop {
        let seen = std::hint::black_box(f());
        if seen != events_per_pass {
            bail!("a pass decoded {seen} events, expected {events_per_pass}");
        }
        passes += 1;
        if passes % 64 != 0 {
            continue;
        }
        let wall = t0.elapsed().as_secs_f64();
        let cpu = thread_cpu_ns()
            .zip(c0)
            .map(|(a, b)| a.saturating_sub(b) as f64 / 1e9);
        let done = match cpu {
            Some(c) => c >= min_cpu_s,
            None => wall >= min_cpu_s,
        };
        if done {
            let n = (passes * events_per_pass) as f64;
            return Ok((n / wall, cpu.filter(|c| *c > 0.0).map(|c| n / c)));
        }
    }
}

fn per_s(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.0}"))
}

pub(crate) fn run() -> Result<Report> {
    let mut r = Report::new("sse-decode");
    let rt = paused_runtime()?;
    let (native, openai) = rt.block_on(async {
        let sets = [("enable_cache_report", "true".to_string())];
        let mock = Mock::start(DEMO, &sets, false).await?;
        let native = capture(&mock.url(), Dialect::Sglang, 1000, 128).await?;
        let openai = capture(&mock.url(), Dialect::OpenAi, 1000, 128).await?;
        mock.stop().await;
        anyhow::Ok((native, openai))
    })?;
    drop(rt);
    r.note(
        "streams captured byte-for-byte from the mock (preset small-cpu-demo, DFLASH speculative \
         chunks, 1000-token prompt, 128 output tokens): SGLang native /generate with cumulative text, \
         output_ids and meta_info; OpenAI /v1/completions with stream_options include_usage + \
         continuous_usage_stats. Decoded on the main thread (one core), each pass a fresh decoder over \
         the whole stream, repeated until the thread has had >= 1 s of CPU (read from /proc/thread-self/schedstat, so \
         other load on the machine does not lower the per-CPU-second rate)",
    );
    let min_s = 1.0;
    let mut data = Vec::new();
    for (name, dialect, bytes) in [
        ("SGLang native cumulative", Dialect::Sglang, &native),
        ("OpenAI continuous-usage", Dialect::OpenAi, &openai),
    ] {
        let events = SseDecoder::new().push(bytes).len();
        if events == 0 {
            bail!("captured {name} stream has no events");
        }
        let avg = bytes.len() as f64 / events as f64;
        for (reads_name, reads) in [
            ("one read per event", per_event_reads(bytes)),
            ("4 KiB reads", fixed_reads(bytes, 4096)),
        ] {
            let (sse_wall, sse_cpu) = rate(events, min_s, || {
                let mut d = SseDecoder::new();
                let mut out = Vec::new();
                let mut n = 0;
                for rd in &reads {
                    d.push_into(rd, &mut out);
                    n += out.len();
                    out.clear();
                }
                n
            })?;
            let (full_wall, full_cpu) = rate(events, min_s, || {
                let mut a = StreamAssembler::new(dialect);
                for (i, rd) in reads.iter().enumerate() {
                    a.push(rd, i as u64);
                }
                a.chunks.len() + usize::from(a.done_ns.is_some())
            })?;
            r.row(
                format!("{name}, {reads_name}: SSE layer"),
                ">= 1,000,000 events/s",
                format!(
                    "{} events per CPU-second ({:.0} MB/s; {} per wall second; {events} events, {avg:.0} B/event)",
                    per_s(sse_cpu),
                    sse_cpu.unwrap_or(sse_wall) * avg / 1e6,
                    per_s(Some(sse_wall)),
                ),
            );
            r.row(
                format!("{name}, {reads_name}: SSE + JSON dialect decoding"),
                "-",
                format!(
                    "{} events per CPU-second ({:.0} MB/s; {} per wall second)",
                    per_s(full_cpu),
                    full_cpu.unwrap_or(full_wall) * avg / 1e6,
                    per_s(Some(full_wall)),
                ),
            );
            data.push(
                json!({"stream": name, "reads": reads_name, "events": events,
                "bytes_per_event": avg, "sse_events_per_wall_s": sse_wall,
                "sse_events_per_cpu_s": sse_cpu, "sse_dialect_events_per_wall_s": full_wall,
                "sse_dialect_events_per_cpu_s": full_cpu}),
            );
        }
    }
    r.set("results", json!(data));
    Ok(r)
}
