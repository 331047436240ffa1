//! The two simulation paths held equal on seeded runs: the engine path (`--simulate`: the mock's
//! engine on its exact virtual clock) and the HTTP path (`--simulate-http`: every byte through the
//! client, the mock on tokio's paused clock) give the same requests, outcomes, tokens per chunk
//! and cached tokens, and every instant within the HTTP path's clock error: a wait there ends up
//! to one quantum (1 ms) late when other work is under way at its instant, and a chunk's instant
//! ends two waits (its pass's start, then its own), so it may be up to two quanta late.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

mod support;
use bench_client::drive::{run_load, run_sweep, Destination, LoadConfig, SweepConfig};
use bench_client::net::stamped::Stamping;
use bench_client::plan::{ArrivalKind, Arrivals, LenDist, Schedule, Stop, Timeouts, Workload};
use bench_client::results::{read_records, Record};
use bench_client::trace::{StreamEnd, TimeoutPhase};
use mock_server::{Config, MockServer};
use support::{paused_runtime, sglang as target};

const QUANTUM_NS: u64 = 1_000_000;
/// A chunk's instant on the HTTP path: its pass may start a quantum late, its event a quantum after.
const CHUNK_NS: u64 = 2 * QUANTUM_NS;

fn preset(name: &str, sets: &[(&str, &str)]) -> Config {
    let mut c = Config::preset(name).unwrap();
    c.enable_metrics = true;
    c.port = 0;
    c.host = "127.0.0.1".into();
    for (k, v) in sets {
        c.set(k, v).unwrap();
    }
    c
}

/// A load run on both paths; records by index.
fn both_loads(
    mock: Config,
    schedule: Schedule,
    workload: Workload,
) -> (BTreeMap<u64, Record>, BTreeMap<u64, Record>) {
    both_loads_timed(mock, schedule, workload, Timeouts::default())
}

/// [`both_loads`] with the client's `timeouts`.
fn both_loads_timed(
    mock: Config,
    schedule: Schedule,
    workload: Workload,
    timeouts: Timeouts,
) -> (BTreeMap<u64, Record>, BTreeMap<u64, Record>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = |url: &str, out: &Path| LoadConfig {
        stamping: Stamping::Socket,
        prompt_salt: Some(1),
        seed: 5,
        scrape_metrics: false,
        timeouts: timeouts.clone(),
        ..LoadConfig::new(
            target(url),
            schedule.clone(),
            workload.clone(),
            out.to_path_buf(),
        )
    };
    let rt = paused_runtime();
    let engine_out = dir.path().join("engine.jsonl");
    let mut e = cfg(bench_client::drive::ENGINE_URL, &engine_out);
    e.engine = Some(mock.clone());
    rt.block_on(run_load(&e)).unwrap();
    let http_out = dir.path().join("http.jsonl");
    rt.block_on(async {
        let server = MockServer::start(mock).await.unwrap();
        run_load(&cfg(&server.url(), &http_out)).await.unwrap();
        server.shutdown().await;
    });
    let by_index = |p: &Path| {
        read_records(p)
            .unwrap()
            .into_iter()
            .map(|r| (r.load.as_ref().unwrap().index, r))
            .collect::<BTreeMap<_, _>>()
    };
    (by_index(&engine_out), by_index(&http_out))
}

/// Instants of a record on the run's clock: its send, then each chunk.
fn instants(r: &Record) -> Vec<u64> {
    let sent = r.load.as_ref().map_or(0, |l| l.sent_ns);
    let t = r.trace.as_ref().unwrap();
    std::iter::once(sent)
        .chain(t.chunks.iter().map(|c| sent + c.at_ns))
        .collect()
}

/// The same requests and outcomes, tokens per chunk and cached tokens; instants within the
/// quantum (the engine path's never later than the HTTP path's).
fn assert_equal(engine: &BTreeMap<u64, Record>, http: &BTreeMap<u64, Record>, what: &str) {
    assert!(!engine.is_empty(), "{what}: no records");
    assert_eq!(
        engine.keys().collect::<Vec<_>>(),
        http.keys().collect::<Vec<_>>(),
        "{what}: the same requests"
    );
    for (i, e) in engine {
        let h = &http[i];
        let kind = |r: &Record| r.error.as_ref().map(|e| e.kind.clone());
        assert_eq!(kind(e), kind(h), "{what} #{i}: outcome");
        assert_eq!(
            e.tokens_per_chunk, h.tokens_per_chunk,
            "{what} #{i}: chunks"
        );
        assert_eq!(e.cached_tokens, h.cached_tokens, "{what} #{i}: cached");
        assert_eq!(e.prompt_tokens, h.prompt_tokens, "{what} #{i}: prompt");
        let (ie, ih) = (instants(e), instants(h));
        assert_eq!(ie.len(), ih.len(), "{what} #{i}: events");
        for (k, (a, b)) in ie.iter().zip(&ih).enumerate() {
            let tolerance = if k == 0 { QUANTUM_NS } else { CHUNK_NS };
            assert!(
                a.abs_diff(*b) <= tolerance,
                "{what} #{i}: instant {k}: engine {a} ns, http {b} ns; engine {:?}, http {:?}",
                &ie[..ie.len().min(4)],
                &ih[..ih.len().min(4)]
            );
        }
    }
}

#[test]
fn a_closed_loop_is_the_same_on_both_paths() {
    let schedule =
        Schedule::new(Arrivals::Closed { concurrency: 8 }, Stop::Requests(48), 5).unwrap();
    let workload = Workload::Random {
        input: LenDist::Uniform { lo: 64, hi: 512 },
        output: LenDist::Uniform { lo: 4, hi: 24 },
    };
    let (e, h) = both_loads(preset("small-cpu-demo", &[]), schedule, workload);
    assert_equal(&e, &h, "closed loop");
}

#[test]
fn the_client_gives_up_requests_at_the_same_instants_on_both_paths() {
    let schedule = Schedule::new(
        Arrivals::Open {
            rate: 3.0,
            kind: ArrivalKind::Poisson,
            burstiness: 1.0,
        },
        Stop::Requests(40),
        5,
    )
    .unwrap();
    let workload = Workload::Random {
        input: LenDist::Uniform { lo: 500, hi: 3000 },
        output: LenDist::Uniform { lo: 32, hi: 256 },
    };
    let ms = std::time::Duration::from_millis;
    let timeouts = Timeouts {
        first_token_base: ms(100),
        first_token_per_1k: ms(250),
        idle: ms(300),
        total: ms(2000),
        ..Timeouts::default()
    };
    let mock = preset("qwen3-32b-h100-tp2-sglang", &[]);
    let (e, h) = both_loads_timed(mock, schedule, workload, timeouts.clone());
    // The HTTP path's timer may fire up to two quanta late and count a chunk that came in the
    // meantime: its events are the engine path's, and perhaps some within that lateness.
    assert_eq!(e.keys().collect::<Vec<_>>(), h.keys().collect::<Vec<_>>());
    for (i, r) in &e {
        let kind = |r: &Record| r.trace.as_ref().map(|t| std::mem::discriminant(&t.end));
        assert_eq!(kind(r), kind(&h[i]), "#{i}: outcome");
        let (ie, ih) = (instants(r), instants(&h[i]));
        let end = ie[0] + r.trace.as_ref().unwrap().end_ns;
        assert!(ih.len() >= ie.len(), "#{i}: events {ie:?} {ih:?}");
        for (k, (a, b)) in ie.iter().zip(&ih).enumerate() {
            assert!(a.abs_diff(*b) <= CHUNK_NS, "#{i}: instant {k}: {a} {b}");
        }
        for b in &ih[ie.len()..] {
            assert!(
                b.abs_diff(end) <= CHUNK_NS,
                "#{i}: an event at {b}, given up at {end}"
            );
        }
    }
    let mut phases = BTreeMap::new();
    for (i, r) in &e {
        let t = r.trace.as_ref().unwrap();
        let last = t.chunks.last().map(|c| c.at_ns);
        let gaps = t.chunks.windows(2).map(|w| w[1].at_ns - w[0].at_ns);
        let prompt = t.prompt_tokens_sent.unwrap();
        let first_ns = timeouts.first_token(prompt).as_nanos() as u64;
        // The engine path gives up at the deadline itself; the HTTP path's timer may be late.
        let due = match &t.end {
            StreamEnd::Done => {
                assert!(t.chunks[0].at_ns <= first_ns, "#{i}: TTFT past its limit");
                assert!(
                    gaps.max().unwrap_or(0) <= 300_000_000,
                    "#{i}: a gap past 300 ms"
                );
                assert!(t.end_ns <= 2_000_000_000, "#{i}: past 2.0 s");
                None
            }
            StreamEnd::Timeout { phase } => {
                *phases.entry(format!("{phase:?}")).or_insert(0) += 1;
                Some(match phase {
                    TimeoutPhase::FirstToken => first_ns,
                    TimeoutPhase::Idle => last.unwrap() + 300_000_000,
                    TimeoutPhase::Total => 2_000_000_000,
                    TimeoutPhase::Connect => unreachable!("#{i}: no connection to time out"),
                })
            }
            end => panic!("#{i}: {end:?}"),
        };
        if let Some(due) = due {
            assert_eq!(t.end_ns, due, "#{i}: given up at its deadline");
            let late = h[i].trace.as_ref().unwrap().end_ns.abs_diff(due);
            assert!(
                late <= CHUNK_NS,
                "#{i}: the HTTP path's timer {late} ns late"
            );
        }
    }
    let done = e.len() - phases.values().sum::<usize>();
    assert!(
        phases.len() == 3 && done > 0,
        "each timeout, and some requests done: {phases:?}, {done} done"
    );
}

#[test]
fn an_open_loop_with_shared_prefixes_is_the_same_on_both_paths() {
    let schedule = Schedule::new(
        Arrivals::Open {
            rate: 40.0,
            kind: ArrivalKind::Poisson,
            burstiness: 1.0,
        },
        Stop::Requests(60),
        5,
    )
    .unwrap();
    let workload = Workload::SharedPrefix {
        groups: 3,
        prefix_len: 256,
        input: LenDist::Uniform { lo: 16, hi: 128 },
        output: LenDist::Uniform { lo: 4, hi: 16 },
    };
    let (e, h) = both_loads(preset("small-cpu-demo", &[]), schedule, workload);
    assert_equal(&e, &h, "open loop, shared prefixes");
    let hits = e
        .values()
        .filter(|r| r.cached_tokens.unwrap_or(0) > 0)
        .count();
    assert!(
        hits > 30,
        "prefix hits on the engine path: {hits} of {}",
        e.len()
    );
}

#[test]
fn the_kimi_oom_sweep_is_the_same_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let mock = preset("kimi-k2.6-dflash-8xrtx-pro-6000", &[]);
    let cfg = |out: &Path| SweepConfig {
        contexts: vec![1000, 4000, 16000, 32000, 64000],
        output_tokens: 16,
        runs: 1,
        warmup: 0,
        stamping: Stamping::Socket,
        ..SweepConfig::new(out.to_path_buf())
    };
    let rt = paused_runtime();
    let engine_out = dir.path().join("engine.jsonl");
    let mut e = Destination::server(target(bench_client::drive::ENGINE_URL));
    e.engine = Some(mock.clone());
    let eo = rt.block_on(run_sweep(&e, &cfg(&engine_out))).unwrap();
    let http_out = dir.path().join("http.jsonl");
    let ho = rt.block_on(async {
        let server = MockServer::start(mock).await.unwrap();
        let o = run_sweep(&Destination::server(target(&server.url())), &cfg(&http_out))
            .await
            .unwrap();
        server.shutdown().await;
        o
    });
    // Both stop at 32k, where the prefill's activation peak kills the server.
    assert!(eo.stopped.is_some() && ho.stopped.is_some());
    let (re, rh) = (
        read_records(&engine_out).unwrap(),
        read_records(&http_out).unwrap(),
    );
    assert_eq!(re.len(), 4);
    assert_eq!(re.len(), rh.len());
    for (a, b) in re.iter().zip(&rh) {
        assert_eq!(a.context_tokens, b.context_tokens);
        assert_eq!(
            a.error.as_ref().map(|e| &e.kind),
            b.error.as_ref().map(|e| &e.kind)
        );
        assert_eq!(a.tokens_per_chunk, b.tokens_per_chunk);
        let (ta, tb) = (a.trace.as_ref().unwrap(), b.trace.as_ref().unwrap());
        for (x, y) in ta.chunks.iter().zip(&tb.chunks) {
            assert!(x.at_ns.abs_diff(y.at_ns) <= CHUNK_NS);
        }
    }
    assert_eq!(
        re.last()
            .and_then(|r| r.error.as_ref())
            .map(|e| e.kind.as_str()),
        Some("stream-cut")
    );
}

#[test]
fn a_sweep_gives_up_a_point_at_its_deadline_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let mock = preset("qwen3-32b-h100-tp2-sglang", &[]);
    let timeouts = Timeouts {
        first_token_base: std::time::Duration::from_millis(300),
        first_token_per_1k: std::time::Duration::ZERO,
        ..Timeouts::default()
    };
    let cfg = |out: &Path| SweepConfig {
        contexts: vec![1000, 8000, 32000],
        output_tokens: 16,
        runs: 2,
        warmup: 0,
        stamping: Stamping::Socket,
        timeouts: timeouts.clone(),
        ..SweepConfig::new(out.to_path_buf())
    };
    let rt = paused_runtime();
    let engine_out = dir.path().join("engine.jsonl");
    let mut e = Destination::server(target(bench_client::drive::ENGINE_URL));
    e.engine = Some(mock.clone());
    rt.block_on(run_sweep(&e, &cfg(&engine_out))).unwrap();
    let http_out = dir.path().join("http.jsonl");
    rt.block_on(async {
        let server = MockServer::start(mock).await.unwrap();
        run_sweep(&Destination::server(target(&server.url())), &cfg(&http_out))
            .await
            .unwrap();
        server.shutdown().await;
    });
    let (re, rh) = (
        read_records(&engine_out).unwrap(),
        read_records(&http_out).unwrap(),
    );
    assert_eq!(re.len(), 6);
    assert_eq!(re.len(), rh.len());
    for (a, b) in re.iter().zip(&rh) {
        let (ta, tb) = (a.trace.as_ref().unwrap(), b.trace.as_ref().unwrap());
        let long = a.context_tokens > 1000;
        let given_up = StreamEnd::Timeout {
            phase: TimeoutPhase::FirstToken,
        };
        assert_eq!(
            ta.end == given_up,
            long,
            "{}: {:?}",
            a.context_tokens,
            ta.end
        );
        assert_eq!(ta.end, tb.end, "{}", a.context_tokens);
        if long {
            assert_eq!(ta.end_ns, 300_000_000, "given up at its deadline");
            assert!(tb.end_ns.abs_diff(300_000_000) <= CHUNK_NS);
        }
    }
}

#[test]
fn a_trace_slice_with_prefix_hits_is_the_same_on_both_paths() {
    // The first 80 requests of the Mooncake conversation slice, lengths / 32 (16-token blocks):
    // prefix hits where the trace's hash ids share blocks.
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/traces/mooncake-conversation-300.jsonl");
    let opts = bench_client::plan::TraceOptions {
        scale: 1.0 / 32.0,
        limit: Some(80),
        ..Default::default()
    };
    let trace = std::sync::Arc::new(bench_client::plan::Trace::read(&path, &opts).unwrap());
    // One request every 200 ms, each alone on the engine: over HTTP an open-loop send may leave
    // up to a quantum late, and one that misses a pass boundary is served a pass later (the
    // closed loop above holds the two paths equal with requests overlapping); requests the trace
    // sends at one instant would reach the engine over HTTP in any order.
    let offsets_ns = (0..trace.len() as u64).map(|i| i * 200_000_000).collect();
    let schedule = Schedule::new(
        Arrivals::Trace { offsets_ns },
        Stop::Requests(trace.len() as u64),
        5,
    )
    .unwrap();
    let mock = preset("small-cpu-demo", &[]);
    let (e, h) = both_loads(mock, schedule, Workload::Trace(trace));
    assert_equal(&e, &h, "trace slice");
    let cached: u32 = e.values().filter_map(|r| r.cached_tokens).sum();
    assert!(cached > 0, "the slice's shared blocks hit the cache");
}

#[test]
fn a_multi_turn_run_is_the_same_on_both_paths() {
    use bench_client::drive::{run_sessions, SessionsConfig};
    use bench_client::plan::{Sessions, ThinkTime};
    let dir = tempfile::tempdir().unwrap();
    let sessions = Sessions {
        sessions: 6,
        turns: 4,
        first_input: LenDist::Uniform { lo: 128, hi: 384 },
        turn_input: LenDist::Uniform { lo: 16, hi: 64 },
        output: LenDist::Uniform { lo: 4, hi: 16 },
        think: ThinkTime::Uniform {
            lo_ns: 200_000_000,
            hi_ns: 800_000_000,
        },
    };
    let cfg = |url: &str, out: &Path| SessionsConfig {
        run: LoadConfig {
            stamping: Stamping::Socket,
            prompt_salt: Some(1),
            seed: 5,
            scrape_metrics: false,
            ..LoadConfig::new(
                target(url),
                Schedule::new(Arrivals::Closed { concurrency: 3 }, Stop::Requests(24), 5).unwrap(),
                Workload::Random {
                    input: sessions.first_input.clone(),
                    output: sessions.output.clone(),
                },
                out.to_path_buf(),
            )
        },
        sessions: sessions.clone(),
    };
    let mock = preset("small-cpu-demo", &[]);
    let rt = paused_runtime();
    let engine_out = dir.path().join("engine.jsonl");
    let mut e = cfg(bench_client::drive::ENGINE_URL, &engine_out);
    e.run.engine = Some(mock.clone());
    rt.block_on(run_sessions(&e)).unwrap();
    let http_out = dir.path().join("http.jsonl");
    rt.block_on(async {
        let server = MockServer::start(mock).await.unwrap();
        run_sessions(&cfg(&server.url(), &http_out)).await.unwrap();
        server.shutdown().await;
    });
    let by_index = |p: &Path| {
        read_records(p)
            .unwrap()
            .into_iter()
            .map(|r| (r.load.as_ref().unwrap().index, r))
            .collect::<BTreeMap<_, _>>()
    };
    let (en, ht) = (by_index(&engine_out), by_index(&http_out));
    assert_eq!(en.len(), 24);
    assert_equal(&en, &ht, "multi-turn");
    for (i, r) in &en {
        let (a, b) = (r.load.as_ref().unwrap(), ht[i].load.as_ref().unwrap());
        assert_eq!(a.session, b.session, "#{i}: session and turn");
        let ids = |r: &Record| r.trace.as_ref().unwrap().output_ids.clone();
        assert_eq!(ids(r), ids(&ht[i]), "#{i}: the output ids sent back");
    }
    // Later turns hit the cache with the conversation so far.
    let late_hits = en
        .values()
        .filter(|r| r.load.as_ref().unwrap().session.unwrap().turn > 0)
        .filter(|r| r.cached_tokens.unwrap_or(0) > 100)
        .count();
    assert_eq!(late_hits, 18);
}

/// A long sweep against a server with a large prefix cache: every prompt begins with its own
/// token out of the server's vocabulary, so no point is served one cached token by an earlier
/// point's prompt (with first ids from the 3,900-id prompt range only, every point past the
/// 3,900th was).
#[test]
fn ten_thousand_sweep_points_share_no_cached_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("long.jsonl");
    let cfg = SweepConfig {
        contexts: vec![16],
        output_tokens: 1,
        runs: 10_000,
        warmup: 0,
        stamping: Stamping::Socket,
        ..SweepConfig::new(out.clone())
    };
    let engine = Destination {
        target: target(bench_client::drive::ENGINE_URL),
        engine: Some(preset("small-cpu-demo", &[])),
    };
    paused_runtime().block_on(run_sweep(&engine, &cfg)).unwrap();
    let records = read_records(&out).unwrap();
    assert_eq!(records.len(), 10_000);
    let contaminated: Vec<_> = records
        .iter()
        .filter(|r| r.contaminated)
        .map(|r| r.contamination.join("; "))
        .collect();
    assert!(
        contaminated.is_empty(),
        "{} contaminated, the first: {:?}",
        contaminated.len(),
        contaminated.first()
    );
}

/// A simulated load run's records by index: TTFT, end, cached tokens and tokens per chunk.
fn simulated(dir: &Path, name: &str, flags: &[&str]) -> BTreeMap<u64, String> {
    let out = dir.join(name);
    let mut args = vec!["load", "--out", out.to_str().unwrap()];
    args.extend_from_slice(flags);
    let o = support::run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", support::stderr(&o));
    read_records(&out)
        .unwrap()
        .into_iter()
        .map(|r| {
            let key = format!(
                "{:?} {:?} {:?} {:?}",
                r.ttft_ms, r.e2e_ms, r.cached_tokens, r.tokens_per_chunk
            );
            (r.load.unwrap().index, key)
        })
        .collect()
}

#[test]
fn a_simulated_run_repeats_exactly_with_the_same_flags_on_either_path() {
    // Three token ids: prompts share long prefixes by chance, so each request's cached tokens, and
    // with them every timing, depend on the prompts' contents.
    let dir = tempfile::tempdir().unwrap();
    let tokens = ["--token-id-min", "1", "--token-id-max", "3"];
    let open = [
        &["--request-rate", "50", "--num-requests", "60"][..],
        &["--input-len", "200", "--output-len", "20"],
        &tokens,
    ]
    .concat();
    let sessions = [
        &["--sessions", "6", "--turns", "3", "--concurrency", "3"][..],
        &["--input-len", "200", "--output-len", "20"],
        &tokens,
    ]
    .concat();
    let runs = [
        ("open loop", [&["--simulate"][..], &open].concat()),
        ("sessions", [&["--simulate"][..], &sessions].concat()),
        (
            "open loop over HTTP",
            [&["--simulate-http"][..], &open].concat(),
        ),
        (
            "sessions over HTTP",
            [&["--simulate-http"][..], &sessions].concat(),
        ),
    ];
    for (what, flags) in runs {
        let a = simulated(dir.path(), &format!("{what}-a.jsonl"), &flags);
        let b = simulated(dir.path(), &format!("{what}-b.jsonl"), &flags);
        assert!(a.len() >= 18, "{what}: {} records", a.len());
        assert_eq!(a, b, "{what}");
        // A run at another salt differs: the contents matter to this workload.
        let salted = [&flags[..], &["--start-at", "1700000000000"]].concat();
        let c = simulated(dir.path(), &format!("{what}-c.jsonl"), &salted);
        assert_ne!(
            a, c,
            "{what}: another salt changed nothing, so the check could not fail"
        );
    }
}
