//! Start-up, OOM death and restart, retraction, continuous batching.

use crate::common::*;

#[tokio::test(start_paused = true)]
async fn startup_period_answers_503_then_serves() {
    let mut c = Config::default();
    c.startup_s = 5.0;
    c.time_scale = 2.0;
    let s = start(c).await;
    let url = s.url();
    let t0 = tokio::time::Instant::now();
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        503
    );
    let (st, _) = post_json(
        &url,
        "/generate",
        json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(st, 503);
    assert_eq!(
        reqwest::get(format!("{url}/health_generate"))
            .await
            .unwrap()
            .status(),
        503
    );
    // 5 s of model time at time scale 2 is 2.5 s.
    tokio::time::sleep_until(t0 + std::time::Duration::from_millis(2400)).await;
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        503
    );
    tokio::time::sleep_until(t0 + std::time::Duration::from_millis(2600)).await;
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        200
    );
    let (st, v) = post_json(
        &url,
        "/generate",
        json!({"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["meta_info"]["completion_tokens"], 1);
}

#[tokio::test(start_paused = true)]
async fn restart_on_oom_crashes_restarts_and_serves_with_an_empty_cache() {
    let mut c = Config::preset(KIMI).unwrap();
    c.enable_metrics = true;
    c.restart_on_oom = true;
    c.startup_s = 30.0;
    let s = start(c).await;
    let url = s.url();
    // The first start-up period.
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        503
    );
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    let warm = gen_body("warm", 16_384, 4, 2);
    assert!(stream(&url, "/generate", warm).await.1);
    let resp = send_generate(&url, &gen_body("boom", 32_000, 5, 4)).await;
    assert!(resp.text().await.is_err(), "the open stream is cut");
    let reason = s.wait_crashed().await;
    assert!(reason.contains("CUDA out of memory"), "{reason}");
    assert_eq!(
        s.truth().request("boom").unwrap().finish,
        FinishTruth::OomCrash
    );
    // Restarting: connections are accepted but every route answers 503.
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        503
    );
    let (st, _) = post_json(&url, "/generate", gen_body("early", 10, 1, 1)).await;
    assert_eq!(st, 503);
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    assert_eq!(
        reqwest::get(format!("{url}/health"))
            .await
            .unwrap()
            .status(),
        200
    );
    // The same prompt as before the crash: the restarted engine's cache is empty.
    let again = gen_body("again", 16_384, 4, 2);
    assert!(stream(&url, "/generate", again).await.1);
    assert_eq!(s.truth().request("warm").unwrap().cached_tokens, 0);
    assert_eq!(s.truth().request("again").unwrap().cached_tokens, 0);
    assert!(s.crashed().is_some());
    // Metrics start over with the new engine.
    let m = scrape(&url).await;
    assert_eq!(m["sglang:num_requests_total"], 1.0);
}

#[tokio::test(start_paused = true)]
async fn retraction_under_kv_pressure_finishes_every_request() {
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    // A pool of about 300 tokens; four requests of 50 + 100 tokens need 600.
    c.kv_bytes_per_token = 20_000_000;
    c.validate().unwrap();
    let pool = mock_server::memory::MemoryBudget::new(&c).kv_pool_tokens;
    assert!((150..600).contains(&pool), "{pool}");
    let s = start(c).await;
    let mut hs = Vec::new();
    for i in 0..4u32 {
        let u = s.url();
        hs.push(tokio::spawn(async move {
            stream(
                &u,
                "/generate",
                gen_body(&format!("r{i}"), 50, 100 + i, 100),
            )
            .await
        }));
    }
    for h in hs {
        // Model time: a livelock would run into this instead of hanging the test.
        let (ev, done) = tokio::time::timeout(std::time::Duration::from_secs(3600), h)
            .await
            .expect("every request finishes")
            .unwrap();
        assert!(done);
        assert_eq!(ev.last().unwrap()["meta_info"]["completion_tokens"], 100);
        assert_eq!(
            ev.last().unwrap()["output_ids"].as_array().unwrap().len(),
            100
        );
    }
    let all = s.truth().all();
    assert_eq!(all.len(), 4);
    let mut retracted = 0;
    for t in &all {
        assert_eq!(t.finish, FinishTruth::Length, "{}", t.rid);
        assert_eq!(t.completion_tokens, 100);
        assert_eq!(t.chunks.iter().map(|c| c.tokens).sum::<usize>(), 100);
        // A prefill pass after the first output token means the request was retracted and re-run.
        if t.prefill_passes
            .iter()
            .any(|p| p.start_ns >= t.chunks[0].at_ns)
        {
            retracted += 1;
        }
    }
    assert!(
        retracted > 0,
        "KV pressure must retract at least one request"
    );
}

#[tokio::test(start_paused = true)]
async fn prefill_of_one_request_stalls_the_decode_of_another() {
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    c.prefill_per_token_s = 1e-5;
    let s = start(c).await;
    let url = s.url();
    let u = url.clone();
    let a = tokio::spawn(async move { stream(&u, "/generate", gen_body("dec", 10, 1, 200)).await });
    let t = s.truth();
    while t.request("dec").is_none_or(|r| r.chunks.len() < 5) {
        tokio::time::sleep(std::time::Duration::from_micros(100)).await;
    }
    assert!(
        stream(&url, "/generate", gen_body("pre", 20_000, 2, 1))
            .await
            .1
    );
    assert!(a.await.unwrap().1);
    let dec = t.request("dec").unwrap();
    let pre = t.request("pre").unwrap();
    assert_eq!(
        pre.prefill_passes.len(),
        3,
        "20k tokens in 8192-token chunks"
    );
    let prefill_ns: u64 = pre
        .prefill_passes
        .iter()
        .map(|p| p.end_ns - p.start_ns)
        .sum();
    let mut gaps: Vec<u64> = dec
        .chunks
        .windows(2)
        .map(|w| w[1].at_ns - w[0].at_ns)
        .collect();
    let max_gap = *gaps.iter().max().unwrap();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!(
        max_gap >= prefill_ns,
        "decode gap {max_gap} ns covers the prefill {prefill_ns} ns"
    );
    assert!(
        median * 10 < prefill_ns,
        "ordinary decode gaps ({median} ns) are far shorter"
    );
    // Exactly one spike: the prefill passes run back to back while the decode waits.
    assert_eq!(gaps.iter().filter(|g| **g >= prefill_ns).count(), 1);
}

/// At an OOM crash a decoding stream is cut without `[DONE]`, and what its client received agrees
/// with the rest of the server: the ground truth lists exactly the tokens the client got, and so
/// does `/metrics` (every token counted before the crash was delivered). Request `a` decodes alone
/// when `b`'s 32k prefill kills the server.
#[tokio::test(start_paused = true)]
async fn an_oom_crash_cuts_a_decoding_stream_after_every_counted_token() {
    let s = start(Config::preset(KIMI).unwrap()).await;
    let url = s.url();
    let resp = send_generate(&url, &gen_body("a", 1000, 7, 5000)).await;
    assert_eq!(resp.status(), 200);
    let reader = tokio::spawn(async move {
        let mut resp = resp;
        let mut body = Vec::new();
        let cut = loop {
            match resp.chunk().await {
                Ok(Some(b)) => body.extend_from_slice(&b),
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        (String::from_utf8_lossy(&body).into_owned(), cut)
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let rb = send_generate(&url, &gen_body("b", 32_000, 5, 4)).await;
    assert_eq!(rb.status(), 200);
    // Polled on the paused clock, which moves while this task sleeps.
    while s.crashed().is_none() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (text, cut) = reader.await.unwrap();
    assert!(cut, "the stream must be cut");
    assert!(!text.contains("[DONE]"), "{text:.200}");
    let last: Value = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .last()
        .expect("a's events before the crash");
    let received = last["meta_info"]["completion_tokens"].as_u64().unwrap();
    assert!(received > 0);
    let t = s.truth().request("a").unwrap();
    assert_eq!(t.finish, FinishTruth::OomCrash);
    let in_truth: usize = t.chunks.iter().map(|c| c.tokens).sum();
    assert_eq!(received as usize, in_truth);
    let counted = s.state().engine().stats().generation_tokens_total;
    assert_eq!(
        received, counted,
        "tokens counted by /metrics but never delivered"
    );
}
