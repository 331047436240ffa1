//! `tcp-floor`: the CPU that one streamed event costs at the least on this machine, with nothing of
//! the project's on either side. A sender thread writes fixed-size events to 64 loopback TCP
//! connections, one `write` per event, at the event rate of `scripts/profile-load.sh`'s closed
//! loop; a receiver thread runs a current-thread tokio runtime with one task per connection that
//! reads whatever has arrived into a buffer and drops it. Each thread's CPU (user + system, from
//! `/proc/thread-self/schedstat`) over the events it handled is the floor for a server that writes
//! each event to its connection when it is due and a client that reads each event when it
//! arrives: the mock and bench-client do both, plus HTTP, SSE, JSON and their bookkeeping.
//!
//! Two pacings: events spread evenly over time (one connection at a time, as the mock's output
//! stage spreads a pass's events), and all 64 connections written back to back once per period
//! (a pass's events at one instant), where the receiver finds several connections ready per
//! wake-up.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::machine::thread_cpu_ns;
use crate::report::Report;

const STREAMS: usize = 64;
const EVENTS_PER_STREAM: usize = 800;
/// About the mean size of an SGLang-native cumulative event at 128 output tokens.
const EVENT_BYTES: usize = 700;
/// The closed loop of `scripts/profile-load.sh` (51,000 events in about 7.4 s): ~6,900 events/s.
const EVENTS_PER_S: f64 = 6_900.0;

/// CPU time of the calling thread (user + system), from the scheduler's own accounting.
fn thread_cpu() -> Option<Duration> {
    thread_cpu_ns().map(Duration::from_nanos)
}

struct Side {
    cpu: Duration,
    ops: u64,
}

/// Writes `EVENTS_PER_STREAM` events to every connection: `burst` connections back to back,
/// then a sleep to the next instant, so that the mean rate is `EVENTS_PER_S`.
fn send(mut conns: Vec<std::net::TcpStream>, burst: usize) -> Result<Side> {
    let event = vec![b'x'; EVENT_BYTES];
    let gap = Duration::from_secs_f64(burst as f64 / EVENTS_PER_S);
    let cpu0 = thread_cpu().context("no /proc/thread-self/schedstat")?;
    let mut at = Instant::now();
    let mut writes = 0u64;
    for _ in 0..EVENTS_PER_STREAM {
        for group in conns.chunks_mut(burst) {
            at += gap;
            if let Some(d) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            for c in group {
                c.write_all(&event)?;
                writes += 1;
            }
        }
    }
    let cpu = thread_cpu().context("no schedstat")?.saturating_sub(cpu0);
    drop(conns);
    Ok(Side { cpu, ops: writes })
}

/// Reads every connection to its end on a current-thread runtime on this thread.
fn receive(conns: Vec<std::net::TcpStream>) -> Result<Side> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cpu0 = thread_cpu().context("no schedstat")?;
    let reads = rt.block_on(async move {
        let mut tasks = Vec::new();
        for c in conns {
            c.set_nonblocking(true)?;
            let mut s = tokio::net::TcpStream::from_std(c)?;
            tasks.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut reads = 0u64;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    reads += 1;
                }
                reads
            }));
        }
        let mut reads = 0;
        for t in tasks {
            reads += t.await?;
        }
        anyhow::Ok(reads)
    })?;
    let cpu = thread_cpu().context("no schedstat")?.saturating_sub(cpu0);
    Ok(Side { cpu, ops: reads })
}

fn pair() -> Result<(Vec<std::net::TcpStream>, Vec<std::net::TcpStream>)> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    for _ in 0..STREAMS {
        let c = std::net::TcpStream::connect(addr)?;
        let (s, _) = l.accept()?;
        s.set_nodelay(true)?;
        rx.push(c);
        tx.push(s);
    }
    Ok((tx, rx))
}

fn run_one(burst: usize) -> Result<(Side, Side)> {
    let (tx, rx) = pair()?;
    let receiver = std::thread::spawn(move || receive(rx));
    let sent = send(tx, burst)?;
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the receiver panicked"))??;
    Ok((sent, received))
}

pub(crate) fn run() -> Result<Report> {
    let mut r = Report::new("tcp-floor");
    r.note(format!(
        "{STREAMS} loopback TCP connections, {EVENTS_PER_STREAM} events of {EVENT_BYTES} B each, \
         {EVENTS_PER_S} events/s in all; sender: one write per event from a plain thread; \
         receiver: a current-thread tokio runtime, one task per connection reading into a 64 KiB \
         buffer; CPU = the thread's user + system time"
    ));
    let events = (STREAMS * EVENTS_PER_STREAM) as f64;
    let mut rows = Vec::new();
    for (name, burst) in [
        ("spread (one connection at a time)", 1),
        ("bursts of 64", 64),
    ] {
        let (s, rcv) = run_one(burst)?;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / events;
        r.row(
            format!("sender CPU per event, {name}"),
            "-",
            format!("{:.2} us ({} writes)", us(s.cpu), s.ops),
        );
        r.row(
            format!("receiver CPU per event, {name}"),
            "-",
            format!(
                "{:.2} us ({:.2} reads per event)",
                us(rcv.cpu),
                rcv.ops as f64 / events
            ),
        );
        rows.push(
            json!({"pacing": name, "burst": burst, "sender_us_per_event": us(s.cpu),
            "receiver_us_per_event": us(rcv.cpu), "reads_per_event": rcv.ops as f64 / events}),
        );
    }
    r.set("runs", json!(rows));
    Ok(r)
}
