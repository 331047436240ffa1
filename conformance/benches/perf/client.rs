//! The client side: targets, waves and closed loops of streams through `bench_client::net`, the
//! real-time stamps of their sends, the stamping mode and the runtimes.

use anyhow::Result;
use bench_client::api::Dialect;
use bench_client::net::stamped::Stamping;
use bench_client::net::{self, Target};
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::trace::RequestTrace;
use tokio::time::Instant;

pub(crate) fn target(url: String) -> Target {
    Target {
        base_url: url,
        dialect: Dialect::Sglang,
        model: None,
        api_key: None,
    }
}

/// `n` streams at once through `net::send`, each with its own prompt.
pub(crate) async fn wave(
    http: &net::Http,
    target: &Target,
    tag: &str,
    n: usize,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<RequestTrace>> {
    let gen = PromptGen::new(0x5eed);
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let http = http.clone();
        let target = target.clone();
        let prompt = Prompt::TokenIds(gen.token_ids(prompt_tokens, hash_index(tag, i)));
        let spec = RequestSpec::new(format!("{tag}-{i}"), prompt, max_tokens);
        tasks.push(tokio::spawn(async move {
            let (tr, sent) = net::send_traced(&http, &target, &spec, &Timeouts::default()).await;
            stamp_sent(&tr, sent);
            tr
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        out.push(t.await?);
    }
    Ok(out)
}

/// `workers` tasks, each sending `rounds` requests one after another; returns (round, trace).
/// Output lengths vary from `max_tokens / 2` to `max_tokens * 3 / 2` by request, so the workers
/// drift apart after the first round instead of finishing and restarting in lockstep.
pub(crate) async fn closed_loop(
    http: &net::Http,
    target: &Target,
    tag: &str,
    workers: usize,
    rounds: usize,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<(usize, RequestTrace)>> {
    let gen = PromptGen::new(0x10ad);
    let mut tasks = Vec::with_capacity(workers);
    for w in 0..workers {
        let (http, target, gen) = (http.clone(), target.clone(), gen.clone());
        let tag = tag.to_string();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::with_capacity(rounds);
            for k in 0..rounds {
                let i = w * rounds + k;
                let h = hash_index(&tag, i);
                let prompt = Prompt::TokenIds(gen.token_ids(prompt_tokens, h));
                let tokens = max_tokens / 2 + (h % u64::from(max_tokens + 1)) as u32;
                let spec = RequestSpec::new(format!("{tag}-{i}"), prompt, tokens);
                let (tr, sent) =
                    net::send_traced(&http, &target, &spec, &Timeouts::default()).await;
                stamp_sent(&tr, sent);
                out.push((k, tr));
            }
            out
        }));
    }
    let mut out = Vec::with_capacity(workers * rounds);
    for t in tasks {
        out.extend(t.await?);
    }
    Ok(out)
}

/// Real-time-clock instants (ns since the Unix epoch) at which the client started each request's
/// clock, by rid. With the mock's `received_unix_ns` they split the client's TTFT overhead into the
/// request's way in (send to the mock's handler) and the first chunk's way out.
pub(crate) fn sent_unix() -> &'static std::sync::Mutex<std::collections::HashMap<String, u64>> {
    static M: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
        std::sync::OnceLock::new();
    M.get_or_init(Default::default)
}

pub(crate) fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Records, on the real-time clock, the instant the trace's times count from (its send, as
/// `net::send_traced` returns it): the real-time clock now, less the time since.
pub(crate) fn stamp_sent(tr: &RequestTrace, sent: Instant) {
    let started = unix_now_ns().saturating_sub(sent.elapsed().as_nanos() as u64);
    if let Ok(mut m) = sent_unix().lock() {
        m.insert(tr.rid.clone(), started);
    }
}

/// A prompt index unique to (tag, i), so no two requests of a run share a prefix.
pub(crate) fn hash_index(tag: &str, i: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tag.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (i as u64)
}

pub(crate) fn stamping_name() -> &'static str {
    match bench_stamping() {
        Stamping::Kernel => "kernel",
        Stamping::Socket => "socket",
        Stamping::Task => "task",
    }
}

/// Where the client stamps its streams: `PERF_CLIENT_STAMPING` = kernel (the default), socket or
/// task.
pub(crate) fn bench_stamping() -> Stamping {
    match std::env::var("PERF_CLIENT_STAMPING").as_deref() {
        Ok("socket") => Stamping::Socket,
        Ok("task") => Stamping::Task,
        _ => Stamping::Kernel,
    }
}

pub(crate) fn multi_thread_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub(crate) fn paused_runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?)
}
