//! The machine and the processes under test: CPU model, memory and load, CPU affinity, CPU time and
//! RSS, read from /proc.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_client::measure::percentile;
use serde_json::{json, Value};

pub(crate) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub(crate) fn mem_total_kb() -> Option<u64> {
    status_field("/proc/meminfo", "MemTotal")
}

pub(crate) fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub(crate) fn machine_json() -> Value {
    json!({
        "nproc": nproc(),
        "cpu": cpu_model(),
        "mem_total_kb": mem_total_kb(),
        "loadavg_at_start": loadavg(),
    })
}

pub(crate) fn machine_line() -> String {
    format!(
        "machine: {} cpus, {}, {} MiB memory; load average {}; this process on CPUs {}, an \
         external mock on CPUs {}",
        nproc(),
        cpu_model(),
        mem_total_kb().map_or(0, |k| k / 1024),
        loadavg(),
        cpus_allowed(),
        std::env::var("PERF_MOCK_CPUS").unwrap_or_else(|_| "(not pinned)".into()),
    )
}

/// This process's CPU affinity, as /proc/self/status lists it.
pub(crate) fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .map(|l| {
                    l.trim_start_matches("Cpus_allowed_list:")
                        .trim()
                        .to_string()
                })
        })
        .unwrap_or_else(|| "(unknown)".into())
}

/// A `Name:   123 kB` field of a /proc status-like file, in kB.
pub(crate) fn status_field(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.split(':').next() == Some(field))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

pub(crate) fn proc_path(pid: Option<u32>, file: &str) -> String {
    match pid {
        Some(p) => format!("/proc/{p}/{file}"),
        None => format!("/proc/self/{file}"),
    }
}

/// User + system CPU seconds of a process (clock ticks assumed 100 Hz, Linux's USER_HZ).
pub(crate) fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let s = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: f64 = f.get(11)?.parse().ok()?;
    let st: f64 = f.get(12)?.parse().ok()?;
    Some((ut + st) / 100.0)
}

/// On-CPU time of the calling thread in ns (`/proc/thread-self/schedstat`, first field).
pub(crate) fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Samples VmRSS of a process every 100 ms on a plain thread until stopped.
pub(crate) struct RssSampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<u64>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    pub(crate) fn start(pid: Option<u32>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let stop = stop.clone();
            let samples = samples.clone();
            let path = proc_path(pid, "status");
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(kb) = status_field(&path, "VmRSS") {
                        samples.lock().unwrap_or_else(|p| p.into_inner()).push(kb);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        Self {
            stop,
            samples,
            handle: Some(handle),
        }
    }

    /// Median and largest VmRSS sample, in MiB.
    pub(crate) fn finish(mut self) -> (Option<f64>, Option<f64>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let v: Vec<f64> = self
            .samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|kb| *kb as f64 / 1024.0)
            .collect();
        (percentile(&v, 50.0), percentile(&v, 100.0))
    }
}
