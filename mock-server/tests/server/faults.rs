//! Faults on demand: the bytes a raw HTTP client sees.

use crate::common::*;

#[tokio::test(start_paused = true)]
async fn fault_none_sends_one_event_per_http_chunk() {
    let s = start(Config::default()).await;
    let r = raw_post(s.addr(), "/generate", &gen_body("n", 10, 1, 8), &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.terminated);
    for (_, c) in &r.chunks {
        let c = std::str::from_utf8(c).unwrap();
        assert!(
            c.starts_with("data: ") && c.ends_with("\n\n") && c.matches("\n\n").count() == 1,
            "{c:?}"
        );
    }
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn fault_split_cuts_every_event_in_two_writes() {
    let s = start(Config::default()).await;
    let r = raw_post(
        s.addr(),
        "/generate",
        &gen_body("sp", 10, 1, 8),
        &[("x-mock-fault", "split")],
    )
    .await;
    assert!(r.terminated);
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(r.chunks.len(), 2 * events.len());
    for pair in r.chunks.chunks(2) {
        let (a, b) = (
            std::str::from_utf8(&pair[0].1).unwrap(),
            std::str::from_utf8(&pair[1].1).unwrap(),
        );
        assert!(
            !a.ends_with("\n\n") && !a.is_empty() && !b.is_empty(),
            "{a:?} {b:?}"
        );
        let whole = format!("{a}{b}");
        assert!(
            whole.starts_with("data: ")
                && whole.ends_with("\n\n")
                && whole.matches("\n\n").count() == 1
        );
    }
    let t = s.truth().request("sp").unwrap();
    assert_eq!(t.chunks.len() + 1, events.len());
}

#[tokio::test(start_paused = true)]
async fn fault_pack_puts_several_events_in_one_write() {
    let s = start(Config::default()).await;
    let r = raw_post(
        s.addr(),
        "/generate",
        &gen_body("pk", 10, 1, 8),
        &[("x-mock-fault", "pack")],
    )
    .await;
    assert!(r.terminated);
    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert!(events.len() > 2);
    assert!(r.chunks.len() < events.len());
    assert!(r
        .chunks
        .iter()
        .any(|c| std::str::from_utf8(&c.1).unwrap().matches("data: ").count() >= 2));
    for (_, c) in &r.chunks {
        assert!(
            std::str::from_utf8(c).unwrap().ends_with("\n\n"),
            "writes end on event boundaries"
        );
    }
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 8);
}

#[tokio::test(start_paused = true)]
async fn fault_reset_after_cuts_the_connection() {
    let s = start(Config::default()).await;
    let r = raw_post(
        s.addr(),
        "/generate",
        &gen_body("rs", 10, 1, 32),
        &[("x-mock-fault", "reset-after=3")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.terminated, "the chunked body must not end properly");
    let events = r.events();
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|e| e != "[DONE]"));
    for e in &events {
        let v: Value = serde_json::from_str(e).unwrap();
        assert!(v["meta_info"]["finish_reason"].is_null());
    }
    // The engine notices the closed stream and aborts the request.
    let t = s.truth();
    for _ in 0..1000 {
        if t.request("rs").unwrap().finish != FinishTruth::Pending {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let rt = t.request("rs").unwrap();
    assert_eq!(rt.finish, FinishTruth::Aborted);
    assert!(rt.completion_tokens < 32);
}

#[tokio::test(start_paused = true)]
async fn fault_error_after_sends_an_in_stream_error() {
    let s = start(Config::default()).await;
    let r = raw_post(
        s.addr(),
        "/v1/completions",
        &json!({"prompt": "a b c", "max_tokens": 32, "stream": true,
        "ignore_eos": true}),
        &[("x-mock-fault", "error-after=2")],
    )
    .await;
    assert!(r.terminated);
    let events = r.events();
    assert_eq!(events.len(), 4, "{events:?}");
    for e in &events[..2] {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "text_completion");
    }
    let err: Value = serde_json::from_str(&events[2]).unwrap();
    assert!(!err["error"]["message"].as_str().unwrap().is_empty());
    assert_eq!(events[3], "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn fault_stall_delays_delivery_not_the_engine() {
    let s = start(Config::default()).await;
    let r = raw_post(
        s.addr(),
        "/generate",
        &gen_body("st", 10, 1, 16),
        &[("x-mock-fault", "stall-ms=300")],
    )
    .await;
    assert!(r.terminated);
    let gap = r.chunks[1].0 - r.chunks[0].0;
    assert!(gap >= std::time::Duration::from_millis(300), "{gap:?}");
    let t = s.truth().request("st").unwrap();
    assert_eq!(t.completion_tokens, 16);
    let engine_span = t.chunks.last().unwrap().at_ns - t.chunks[0].at_ns;
    assert!(
        engine_span < 300_000_000,
        "the engine did not stall: {engine_span} ns"
    );
    // Every other delivery gap is the engine's own pace, far below the stall.
    for w in r.chunks[1..].windows(2) {
        assert!(w[1].0 - w[0].0 < std::time::Duration::from_millis(300));
    }
}
