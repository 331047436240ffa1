//! The engine on its own, without HTTP: output pacing, admission, retraction, the ground truth
//! at each chunk, and the real clock.

use crate::common::*;

/// An engine on its own (no HTTP), with its ground truth and crash signal.
fn spawn_engine(
    c: Config,
) -> (
    mock_server::GroundTruth,
    mock_server::engine::EngineHandle,
    std::sync::Arc<tokio::sync::watch::Sender<Option<String>>>,
) {
    let truth = mock_server::GroundTruth::default();
    let crashed = std::sync::Arc::new(tokio::sync::watch::channel(None::<String>).0);
    let engine = mock_server::engine::EngineHandle::spawn(c, truth.clone(), crashed.clone());
    (truth, engine, crashed)
}

/// An engine request for `max_new` tokens with EOS ignored, received at `received`.
fn engine_request(
    rid: &str,
    input_ids: Vec<u32>,
    max_new: usize,
    received: tokio::time::Instant,
) -> mock_server::engine::GenRequest {
    mock_server::engine::GenRequest {
        rid: rid.into(),
        input_ids: std::sync::Arc::new(input_ids),
        max_new_tokens: max_new,
        min_new_tokens: 0,
        ignore_eos: true,
        stop_token_ids: Vec::new(),
        received,
        arrived_unix_ns: None,
    }
}

/// The events of one pass leave one output-processing slot apart, in batch order, and every
/// stream sees them in that order; nothing leaves before its modelled instant.
#[tokio::test(start_paused = true)]
async fn a_pass_emits_its_events_one_output_slot_apart() {
    use mock_server::engine::StreamEvent;
    let mut c = Config::default();
    c.output_per_request_s = 0.0005;
    c.speculative_algorithm = "none".into();
    let (truth, engine, _crashed) = spawn_engine(c);
    // Received a millisecond before the engine wakes: all four reached the scheduler before the
    // pass began (one received at its very instant would wait for the next).
    let received = tokio::time::Instant::now() - std::time::Duration::from_millis(1);
    let mut rxs = Vec::new();
    for i in 0..4u32 {
        rxs.push(
            engine
                .submit(engine_request(&format!("o{i}"), ids(100, i), 3, received))
                .unwrap(),
        );
    }
    for rx in &mut rxs {
        let mut n = 0;
        while let Some(ev) = rx.recv().await {
            match ev {
                StreamEvent::Tokens { finish, .. } => {
                    n += 1;
                    if finish.is_some() {
                        break;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(n, 3);
    }
    let t: Vec<_> = (0..4)
        .map(|i| truth.request(&format!("o{i}")).unwrap())
        .collect();
    // One prefill pass served all four (same receipt instant, so the ns are comparable).
    let end = t[0].prefill_passes[0].end_ns;
    assert!(t
        .iter()
        .all(|r| r.prefill_passes.len() == 1 && r.prefill_passes[0].end_ns == end));
    for step in 0..3 {
        let mut at: Vec<u64> = t.iter().map(|r| r.chunks[step].model_ns).collect();
        at.sort_unstable();
        let base = at[0];
        if step == 0 {
            assert_eq!(
                base, end,
                "the first event of the pass leaves when the pass ends"
            );
        }
        let offsets: Vec<u64> = at.iter().map(|a| a - base).collect();
        assert_eq!(
            offsets,
            vec![0, 500_000, 1_000_000, 1_500_000],
            "step {step}"
        );
        for r in &t {
            assert!(r.chunks[step].at_ns >= r.chunks[step].model_ns, "{r:?}");
        }
    }
}

/// Submits `(rid, prompt, max_new)` requests to an engine at one instant and drains their streams.
async fn run_engine(
    c: Config,
    reqs: &[(&str, usize, usize)],
) -> (mock_server::GroundTruth, mock_server::engine::EngineHandle) {
    let received = tokio::time::Instant::now();
    let reqs = reqs
        .iter()
        .enumerate()
        .map(|(i, (rid, prompt, max_new))| {
            engine_request(rid, ids(*prompt, 1000 + i as u32), *max_new, received)
        })
        .collect();
    run_requests(c, reqs).await
}

/// Submits engine requests in order and drains their streams, each to its finish.
async fn run_requests(
    c: Config,
    reqs: Vec<mock_server::engine::GenRequest>,
) -> (mock_server::GroundTruth, mock_server::engine::EngineHandle) {
    use mock_server::engine::StreamEvent;
    let (truth, engine, _crashed) = spawn_engine(c);
    let mut rxs: Vec<_> = reqs
        .into_iter()
        .map(|r| engine.submit(r).unwrap())
        .collect();
    for rx in &mut rxs {
        while let Some(ev) = rx.recv().await {
            match ev {
                StreamEvent::Tokens { finish, .. } if finish.is_some() => break,
                StreamEvent::Tokens { .. } => {}
                other => panic!("{other:?}"),
            }
        }
    }
    (truth, engine)
}

/// A KV pool of about 1,000 tokens, no speculation (one token per step), no output spread.
fn tiny_pool() -> Config {
    let mut c = Config::default();
    c.kv_bytes_per_token = 6_300_000;
    c.speculative_algorithm = "none".into();
    c.output_per_request_s = 0.0;
    c
}

#[tokio::test(start_paused = true)]
async fn admission_budgets_the_prompts_of_all_admitted_requests_together() {
    let c = tiny_pool();
    assert_eq!(
        mock_server::memory::MemoryBudget::new(&c).kv_pool_tokens,
        1000
    );
    // Each prompt fits the pool alone; both together do not.
    let (truth, engine) = run_engine(c, &[("a1", 600, 8), ("a2", 600, 8)]).await;
    let (a1, a2) = (truth.request("a1").unwrap(), truth.request("a2").unwrap());
    assert_eq!((a1.completion_tokens, a2.completion_tokens), (8, 8));
    // a2 waits in the queue until a1 has finished and freed its KV; nothing is retracted.
    let a1_done = a1.chunks.last().unwrap().model_ns;
    assert!(
        a2.queue_wait_ns >= a1_done,
        "{} < {a1_done}",
        a2.queue_wait_ns
    );
    assert!(a2.prefill_passes[0].start_ns >= a1_done);
    assert_eq!(engine.stats().retracted_total, 0);
}

/// The ground truth has each chunk, and the request's finish, by the time its event reaches the
/// stream: a client that reads its final chunk and then asks `/debug/requests/{rid}` sees the
/// request finished, even when many requests finish in one pass and the engine puts them away
/// after their events have gone out.
#[tokio::test(start_paused = true)]
async fn the_ground_truth_has_a_chunk_and_its_finish_when_the_chunk_arrives() {
    use mock_server::engine::StreamEvent;
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    let (truth, engine, _crashed) = spawn_engine(c);
    let received = tokio::time::Instant::now();
    // 80 requests finish in the same pass, more than the engine puts away between yields.
    let mut rxs = Vec::new();
    for i in 0..80u32 {
        let rid = format!("f{i}");
        let rx = engine
            .submit(engine_request(&rid, ids(20, 2000 + i), 3, received))
            .unwrap();
        rxs.push((rid, rx));
    }
    let mut finished = 0;
    for (rid, rx) in &mut rxs {
        let mut seen = 0;
        while let Some(ev) = rx.recv().await {
            let StreamEvent::Tokens { finish, .. } = ev else {
                panic!("{rid}: {ev:?}");
            };
            seen += 1;
            // Other streams' events may have left since, so the truth can be ahead of this one.
            let t = truth.request(rid).unwrap();
            assert!(t.chunks.len() >= seen, "{rid}: {} < {seen}", t.chunks.len());
            assert_eq!(
                t.finish != FinishTruth::Pending,
                t.completion_tokens == 3,
                "{rid}: {:?} after {} tokens",
                t.finish,
                t.completion_tokens
            );
            if finish.is_some() {
                assert_eq!(t.finish, FinishTruth::Length, "{rid}");
                finished += 1;
                break;
            }
        }
    }
    assert_eq!(finished, 80);
}

#[tokio::test(start_paused = true)]
async fn a_retracted_request_comes_back_after_the_other_finishes() {
    let c = tiny_pool();
    // Both prompts fit, but their outputs outgrow the pool: the newer one is retracted once and
    // comes back after the other finishes.
    let (truth, engine) = run_engine(c, &[("r1", 400, 250), ("r2", 400, 250)]).await;
    let (r1, r2) = (truth.request("r1").unwrap(), truth.request("r2").unwrap());
    assert_eq!((r1.completion_tokens, r2.completion_tokens), (250, 250));
    assert_eq!(r1.finish, FinishTruth::Length);
    assert_eq!(r2.finish, FinishTruth::Length);
    assert_eq!(engine.stats().retracted_total, 1);
    // Its second prefill (prompt plus the output it had) starts after r1's last chunk.
    assert_eq!(r2.prefill_passes.len(), 2, "{:?}", r2.prefill_passes);
    assert!(r2.prefill_passes[1].start_ns >= r1.chunks.last().unwrap().model_ns);
}

/// SGLang's admission budget (`reserve_output_tokens`): a request waits until the pool holds the
/// whole output of every admitted request beside its own, so the pair that the plain budget lets
/// in together, and then retracts, runs one after the other; a pair whose outputs fit runs at once;
/// the running requests' outputs and the newcomer's each keep it waiting alone.
#[tokio::test(start_paused = true)]
async fn reserving_outputs_queues_a_request_the_pool_cannot_finish_instead_of_retracting_it() {
    let mut c = tiny_pool();
    c.reserve_output_tokens = true;
    let (truth, engine) = run_engine(c.clone(), &[("r1", 400, 250), ("r2", 400, 250)]).await;
    let (r1, r2) = (truth.request("r1").unwrap(), truth.request("r2").unwrap());
    assert_eq!((r1.completion_tokens, r2.completion_tokens), (250, 250));
    assert_eq!(engine.stats().retracted_total, 0);
    assert_eq!(r2.prefill_passes.len(), 1, "{:?}", r2.prefill_passes);
    let r1_done = r1.chunks.last().unwrap().model_ns;
    assert!(
        r2.queue_wait_ns >= r1_done,
        "{} < {r1_done}",
        r2.queue_wait_ns
    );
    // 2 x (300 + 100) tokens fit the pool of 1,000: s2 (which reached the scheduler as the first
    // pass began) is prefilled in the next pass, long before s1 finishes.
    let (truth, engine) = run_engine(c.clone(), &[("s1", 300, 100), ("s2", 300, 100)]).await;
    let (s1, s2) = (truth.request("s1").unwrap(), truth.request("s2").unwrap());
    assert_eq!(s2.prefill_passes[0].start_ns, s1.prefill_passes[0].end_ns);
    assert!(s2.prefill_passes[0].start_ns < s1.chunks[1].model_ns);
    assert_eq!(engine.stats().retracted_total, 0);
    // A short request behind a long one: its own 310 tokens fit beside the long one's KV, but not
    // beside the rest of the long one's output too, so it waits for it.
    let (truth, engine) = run_engine(c.clone(), &[("l1", 300, 500), ("l2", 300, 10)]).await;
    let (l1, l2) = (truth.request("l1").unwrap(), truth.request("l2").unwrap());
    assert_eq!((l1.completion_tokens, l2.completion_tokens), (500, 10));
    assert!(l2.prefill_passes[0].start_ns >= l1.chunks.last().unwrap().model_ns);
    assert_eq!(engine.stats().retracted_total, 0);
    // And the other way round: the long one's own output does not fit beside the short one.
    let (truth, _engine) = run_engine(c, &[("m1", 300, 10), ("m2", 300, 500)]).await;
    let (m1, m2) = (truth.request("m1").unwrap(), truth.request("m2").unwrap());
    assert!(m2.prefill_passes[0].start_ns >= m1.chunks.last().unwrap().model_ns);
}

/// Under SGLang's admission budget a running request that may stop at EOS reserves only the
/// new-token ratio's share of its remaining output (0.7 at first): the short request that waits
/// behind a long one ignoring EOS (above) goes in at the next pass behind one that does not, and
/// a request the ratio's share leaves no room for still waits.
#[tokio::test(start_paused = true)]
async fn a_request_that_may_stop_early_reserves_its_output_at_the_new_token_ratio() {
    // A long request that may stop at EOS (it does not: EOS has probability 0), then `second`.
    async fn behind_a_long_one(
        second: usize,
    ) -> (mock_server::RequestTruth, mock_server::RequestTruth, u64) {
        let mut c = tiny_pool();
        c.reserve_output_tokens = true;
        assert_eq!(c.eos_probability, 0.0);
        let received = tokio::time::Instant::now();
        let mut long = engine_request("n1", ids(300, 1000), 500, received);
        long.ignore_eos = false;
        let short = engine_request("n2", ids(300, 1001), second, received);
        let (truth, engine) = run_requests(c, vec![long, short]).await;
        let (n1, n2) = (truth.request("n1").unwrap(), truth.request("n2").unwrap());
        assert_eq!((n1.completion_tokens, n2.completion_tokens), (500, second));
        (n1, n2, engine.stats().retracted_total)
    }
    // 300 + 0.7 x 500 + 300 + 10 (and a step each) fit the pool of 1,000; 300 + 500 + 310 do not.
    let (n1, n2, retracted) = behind_a_long_one(10).await;
    assert_eq!(n2.prefill_passes[0].start_ns, n1.prefill_passes[0].end_ns);
    assert_eq!(retracted, 0);
    // 300 + 0.7 x 500 + 300 + 100 do not fit (nor later: the long one's KV grows faster than
    // its reserved share shrinks), where 300 + 300 + 100 would.
    let (n1, n2, retracted) = behind_a_long_one(100).await;
    assert!(n2.prefill_passes[0].start_ns >= n1.chunks.last().unwrap().model_ns);
    assert_eq!(retracted, 0);
}

/// Output processing is one queue: when a pass's events take longer to go out than the next pass
/// takes to run, the next pass's events wait behind them instead of overtaking or piling up.
#[tokio::test(start_paused = true)]
async fn output_processing_is_one_queue_across_passes() {
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    c.output_per_request_s = 0.005;
    let (truth, _engine) = run_engine(c, &[("q0", 50, 6), ("q1", 50, 6), ("q2", 50, 6)]).await;
    let mut all: Vec<u64> = Vec::new();
    for rid in ["q0", "q1", "q2"] {
        let t = truth.request(rid).unwrap();
        assert_eq!(t.completion_tokens, 6);
        assert!(t.chunks.windows(2).all(|w| w[0].model_ns < w[1].model_ns));
        assert!(t.chunks.iter().all(|c| c.at_ns >= c.model_ns));
        all.extend(t.chunks.iter().map(|c| c.model_ns));
    }
    all.sort_unstable();
    // A decode step of three requests takes ~2.3 ms, far less than three 5 ms output slots: the
    // queue never empties after the first event, so every event leaves one slot after the last.
    let gaps: Vec<u64> = all.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| *g == 5_000_000), "{gaps:?}");
}

/// When the server dies of OOM, events still waiting in the output queue never leave: the ground
/// truth holds no chunk modelled after the crash, and the stream ends with the crash.
#[tokio::test(start_paused = true)]
async fn events_queued_for_output_die_with_the_server() {
    use mock_server::engine::StreamEvent;
    let mut c = Config::preset(KIMI).unwrap();
    // A slow output stage, so that many of the decoding request's events wait in its queue.
    c.output_per_request_s = 0.2;
    let (truth, engine, crashed) = spawn_engine(c);
    let gen = |rid: &str, n: usize, max_new: usize| {
        engine_request(rid, ids(n, 3), max_new, tokio::time::Instant::now())
    };
    let t0 = tokio::time::Instant::now();
    let mut rx = engine.submit(gen("decoding", 100, 5000)).unwrap();
    // Finishes in the engine well before the crash, but its final event is still queued then.
    let _short = engine.submit(gen("short", 100, 100)).unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let big_at = tokio::time::Instant::now();
    let _big = engine.submit(gen("big", 32_000, 4)).unwrap();
    let mut ended_by_crash = false;
    while let Some(ev) = rx.recv().await {
        if let StreamEvent::Crash(_) = ev {
            ended_by_crash = true;
            break;
        }
    }
    assert!(ended_by_crash);
    assert!(crashed.borrow().is_some());
    // Give a surviving output stage every chance to send what it still holds.
    tokio::time::sleep(std::time::Duration::from_secs(30)).await;
    let big = truth.request("big").unwrap();
    assert_eq!(big.finish, FinishTruth::OomCrash);
    let crash_ns = (big_at - t0).as_nanos() as u64 + big.prefill_passes.last().unwrap().start_ns;
    let d = truth.request("decoding").unwrap();
    assert_eq!(d.finish, FinishTruth::OomCrash);
    assert!(d.chunks.len() >= 3, "{} chunks", d.chunks.len());
    assert!(
        d.chunks.iter().all(|c| c.model_ns <= crash_ns),
        "a chunk modelled after the crash at {crash_ns} ns: {:?}",
        d.chunks.last()
    );
    // Far more tokens were drawn than left: the rest died in the queue.
    assert!(d.completion_tokens < 100, "{}", d.completion_tokens);
    // The short request's end never reached its client, so it did not finish by length.
    let short = truth.request("short").unwrap();
    assert_eq!(short.finish, FinishTruth::OomCrash);
    assert!(short.completion_tokens < 100, "{}", short.completion_tokens);
}

/// On the real clock the output stage sleeps on the OS timer between events modelled microseconds
/// apart; it may send an event late, never early: every chunk leaves at or after its modelled
/// instant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_clock_no_event_leaves_before_its_modelled_instant() {
    let mut c = Config::default();
    // 64 streams, events modelled 15 us apart, closer than an OS sleep can resolve.
    c.output_per_request_s = 0.000_015;
    c.speculative_algorithm = "none".into();
    let rids: Vec<String> = (0..64).map(|i| format!("q{i}")).collect();
    let reqs: Vec<(&str, usize, usize)> = rids.iter().map(|r| (r.as_str(), 64, 4)).collect();
    let (truth, _engine) = run_engine(c, &reqs).await;
    let mut chunks = 0;
    for i in 0..64 {
        let r = truth.request(&format!("q{i}")).unwrap();
        assert_eq!(r.chunks.len(), 4, "{r:?}");
        for ch in &r.chunks {
            assert!(ch.at_ns >= ch.model_ns, "sent early: {ch:?}");
            chunks += 1;
        }
    }
    assert_eq!(chunks, 256);
}

/// On the real clock the output stage wakes up at most once per `output_tick_s`: an event due
/// within a tick of the previous wake-up waits for the tick's end and leaves with the others due
/// by then. A pass's 8 events are modelled 20 ms apart and the tick is 1 s: at most the first two
/// leave at their own instants (the first is due when the pass ends; the second is the first
/// wait), and the other six leave together at the tick's end, so the departures are separated by
/// at most two gaps over 15 ms. Without the tick there are seven. A slow machine only merges
/// departures (events already due leave at once), so it cannot add gaps unless the stage itself
/// stalls for 15 ms between two events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_real_clock_events_due_within_a_tick_leave_together() {
    let mut c = Config::default();
    c.output_per_request_s = 0.02;
    c.output_tick_s = 1.0;
    c.speculative_algorithm = "none".into();
    let rids: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    let reqs: Vec<(&str, usize, usize)> = rids.iter().map(|r| (r.as_str(), 64, 1)).collect();
    let (truth, _engine) = run_engine(c, &reqs).await;
    let chunks: Vec<mock_server::ChunkTruth> = rids
        .iter()
        .flat_map(|r| truth.request(r).expect("truth").chunks)
        .collect();
    assert_eq!(chunks.len(), 8);
    for ch in &chunks {
        assert!(ch.at_ns >= ch.model_ns, "sent early: {ch:?}");
    }
    // Every request was received at the same instant, so their ns are on one timeline.
    let mut left: Vec<u64> = chunks.iter().map(|c| c.at_ns).collect();
    left.sort_unstable();
    let gaps = left.windows(2).filter(|w| w[1] - w[0] > 15_000_000).count();
    assert!(
        gaps <= 2,
        "{gaps} separate departures after the first: {chunks:?}"
    );
}

/// Costs that make a pass's length tell what it ran: 10 ms a prefill pass, 0.1 ms a prompt
/// token, 2 ms a decode pass, 1 ms a request in the batch; one token a step, no output spread.
/// Reads a stream to its finishing event; any other event fails the test.
async fn drain(rx: &mut tokio::sync::mpsc::UnboundedReceiver<mock_server::engine::StreamEvent>) {
    use mock_server::engine::StreamEvent;
    while let Some(ev) = rx.recv().await {
        match ev {
            StreamEvent::Tokens { finish, .. } if finish.is_some() => break,
            StreamEvent::Tokens { .. } => {}
            other => panic!("{other:?}"),
        }
    }
}

fn pass_costs(mixed: bool) -> Config {
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    c.output_per_request_s = 0.0;
    c.stream_latency_s = 0.0;
    c.chunked_prefill_size = 256;
    (
        c.prefill_base_s,
        c.prefill_per_token_s,
        c.prefill_per_token_pair_s,
    ) = (0.010, 0.0001, 0.0);
    (
        c.decode_base_s,
        c.decode_per_context_token_s,
        c.decode_per_request_s,
    ) = (0.002, 0.0, 0.001);
    c.mixed_batches = mixed;
    c
}

/// A request that arrives while another decodes: with mixed batches each of its prefill passes
/// also decodes the running request (its token counted in the pass's budget, its batch cost
/// added, no decode base) and the running request gets a chunk when each pass ends; without,
/// the passes prefill only and the running request waits them out.
#[tokio::test(start_paused = true)]
async fn mixed_batches_decode_the_running_batch_in_each_prefill_pass() {
    for mixed in [true, false] {
        let (truth, engine, _crashed) = spawn_engine(pass_costs(mixed));
        let t0 = tokio::time::Instant::now();
        let mut d = engine
            .submit(engine_request("d", ids(100, 1), 60, t0))
            .unwrap();
        let later = t0 + std::time::Duration::from_millis(30);
        tokio::time::sleep_until(later).await;
        let mut p = engine
            .submit(engine_request("p", ids(400, 2), 2, later))
            .unwrap();
        for rx in [&mut d, &mut p] {
            drain(rx).await;
        }
        let (dt, pt) = (truth.request("d").unwrap(), truth.request("p").unwrap());
        let tokens: Vec<usize> = pt.prefill_passes.iter().map(|x| x.tokens).collect();
        let d_chunks: Vec<u64> = dt.chunks.iter().map(|c| c.model_ns).collect();
        for x in &pt.prefill_passes {
            let want = 0.010 + 0.0001 * x.tokens as f64 + if mixed { 0.001 } else { 0.0 };
            let took = (x.end_ns - x.start_ns) as f64 / 1e9;
            assert!(
                (took - want).abs() < 1e-6,
                "mixed {mixed}: pass {x:?} took {took}, want {want}"
            );
            // d was received 30 ms before p.
            let end_for_d = x.end_ns + 30_000_000;
            assert_eq!(
                d_chunks.contains(&end_for_d),
                mixed,
                "mixed {mixed}: d's chunks {d_chunks:?}, pass end {end_for_d}"
            );
        }
        assert_eq!(
            tokens,
            if mixed {
                vec![255, 145]
            } else {
                vec![256, 144]
            }
        );
        assert_eq!(dt.completion_tokens, 60);
    }
}

/// With `results_after_next_pass` (SGLang's overlap scheduler on the CPU backend) a pass's
/// events leave when the next pass ends, and at once when none follows: alone, a request's
/// first chunk waits for its first decode step and its last leaves with the one before it.
#[tokio::test(start_paused = true)]
async fn results_wait_for_the_next_pass_and_leave_at_once_when_none_follows() {
    for lag in [true, false] {
        let mut c = pass_costs(false);
        c.results_after_next_pass = lag;
        let (truth, engine, _crashed) = spawn_engine(c);
        let mut rx = engine
            .submit(engine_request(
                "d",
                ids(100, 1),
                5,
                tokio::time::Instant::now(),
            ))
            .unwrap();
        drain(&mut rx).await;
        let t = truth.request("d").unwrap();
        let ms: Vec<u64> = t.chunks.iter().map(|c| c.model_ns / 1_000_000).collect();
        // Prefill 20 ms (10 + 100 x 0.1), then decode steps of 3 ms (2 + 1 request).
        let want = if lag {
            vec![23, 26, 29, 32, 32]
        } else {
            vec![20, 23, 26, 29, 32]
        };
        assert_eq!(ms, want, "lag {lag}");
        assert!(t.chunks.iter().all(|c| c.at_ns >= c.model_ns), "{t:?}");
    }
}

/// `spec_warmup_steps`: the verify steps right after the first token accept no draft, those
/// after accept as the rates say (here every draft).
///
/// With `spec_first_token_alone` (vLLM's) the first chunk carries one token as well, and the
/// last step is clipped at the output length.
#[tokio::test(start_paused = true)]
async fn warm_up_steps_after_the_first_token_accept_no_draft() {
    for alone in [false, true] {
        let mut c = pass_costs(false);
        c.speculative_algorithm = "EAGLE".into();
        c.speculative_num_draft_tokens = 2;
        c.spec_accept_rates = vec![1.0, 1.0];
        c.spec_warmup_steps = 3;
        c.spec_first_token_alone = alone;
        let (truth, engine, _crashed) = spawn_engine(c);
        let mut rx = engine
            .submit(engine_request(
                "w",
                ids(50, 1),
                15,
                tokio::time::Instant::now(),
            ))
            .unwrap();
        drain(&mut rx).await;
        let t = truth.request("w").unwrap();
        let tokens: Vec<usize> = t.chunks.iter().map(|c| c.tokens).collect();
        let want = if alone {
            vec![1, 1, 1, 1, 3, 3, 3, 2]
        } else {
            vec![3, 1, 1, 1, 3, 3, 3]
        };
        assert_eq!(tokens, want, "first token alone: {alone}");
    }
}

/// With `spec_warmup_shares` each request draws its own warm-up: shares of one half at one and
/// at three steps give both runs of one-token chunks, about as often, and no other.
#[tokio::test(start_paused = true)]
async fn each_request_draws_its_warm_up_from_the_shares() {
    let mut c = pass_costs(false);
    c.speculative_algorithm = "EAGLE".into();
    c.speculative_num_draft_tokens = 2;
    c.spec_accept_rates = vec![1.0, 1.0];
    c.spec_warmup_steps = 2;
    c.spec_warmup_shares = vec![0.0, 0.5, 0.0, 0.5];
    let (truth, engine, _crashed) = spawn_engine(c);
    let mut runs = std::collections::BTreeMap::<usize, usize>::new();
    for i in 0..40u32 {
        let rid = format!("w{i}");
        let mut rx = engine
            .submit(engine_request(
                &rid,
                ids(50, i + 1),
                15,
                tokio::time::Instant::now(),
            ))
            .unwrap();
        drain(&mut rx).await;
        let t = truth.request(&rid).unwrap();
        let ones = t.chunks[1..].iter().take_while(|c| c.tokens == 1).count();
        *runs.entry(ones).or_default() += 1;
    }
    let keys: Vec<usize> = runs.keys().copied().collect();
    assert_eq!(keys, vec![1, 3], "{runs:?}");
    assert!(runs.values().all(|&n| n >= 10), "{runs:?}");
}

/// On the paused clock requests sent in one tick tie with the pass they would join. They count
/// as having reached the scheduler after it began, as the real servers see sends tens of
/// microseconds apart: of two requests at once the first starts a pass alone and the second
/// waits for the next, and a request received at the instant a decode step starts waits for
/// the step to end.
#[tokio::test(start_paused = true)]
async fn requests_tied_with_a_pass_start_wait_for_the_next_pass() {
    let mut c = pass_costs(false);
    c.chunked_prefill_size = 4096;
    let (truth, engine, _crashed) = spawn_engine(c);
    let t0 = tokio::time::Instant::now();
    let mut a = engine
        .submit(engine_request("a", ids(100, 1), 3, t0))
        .unwrap();
    let mut b = engine
        .submit(engine_request("b", ids(100, 2), 3, t0))
        .unwrap();
    for rx in [&mut a, &mut b] {
        drain(rx).await;
    }
    let pass = |rid: &str| -> Vec<(u64, u64)> {
        let t = truth.request(rid).unwrap();
        t.prefill_passes
            .iter()
            .map(|x| (x.start_ns / 1_000_000, x.end_ns / 1_000_000))
            .collect()
    };
    // One 100-token prompt a pass (20 ms each), not both in one pass of 30 ms.
    assert_eq!(pass("a"), vec![(0, 20)]);
    assert_eq!(pass("b"), vec![(20, 40)]);

    // d alone: prefill 20 ms, then decode steps of 3 ms ending at 23, 26, ...
    let t1 = tokio::time::Instant::now();
    let mut d = engine
        .submit(engine_request("d", ids(100, 3), 20, t1))
        .unwrap();
    let tie = t1 + std::time::Duration::from_millis(23);
    tokio::time::sleep_until(tie).await;
    let mut p = engine
        .submit(engine_request("p", ids(100, 4), 2, tie))
        .unwrap();
    for rx in [&mut d, &mut p] {
        drain(rx).await;
    }
    // p's prefill starts when the step that began at its arrival ends, 3 ms later.
    assert_eq!(pass("p"), vec![(3, 23)]);
}
