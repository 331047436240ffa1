//! Integration tests: a real socket on 127.0.0.1, a real HTTP client, tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mock_server::{Config, FinishTruth, MockServer};
use serde_json::{json, Value};

const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

async fn start(cfg: Config) -> MockServer {
    let mut cfg = cfg;
    cfg.port = 0;
    MockServer::start(cfg).await.unwrap()
}

fn ids(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7 + salt) % 30000).collect()
}

/// Sends a streaming request and returns the `data:` payloads (without `[DONE]`) and whether it ended with `[DONE]`.
async fn stream(url: &str, path: &str, body: Value) -> (Vec<Value>, bool) {
    let resp = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let mut events = Vec::new();
    let mut done = false;
    for ev in text.split("\n\n").filter(|e| !e.is_empty()) {
        let data = ev.strip_prefix("data: ").expect("data line");
        if data == "[DONE]" {
            done = true;
        } else {
            events.push(serde_json::from_str(data).unwrap());
        }
    }
    (events, done)
}

#[tokio::test(start_paused = true)]
async fn repeated_prompt_hits_cache_and_skips_prefill() {
    let s = start(Config::default()).await;
    let p = ids(20_000, 1);
    for rid in ["a", "b"] {
        let body = json!({"rid": rid, "input_ids": p, "stream": true,
            "sampling_params": {"max_new_tokens": 8, "ignore_eos": true}});
        let (ev, done) = stream(&s.url(), "/generate", body).await;
        assert!(done);
        let last = ev.last().unwrap();
        assert_eq!(last["meta_info"]["completion_tokens"], 8);
        assert_eq!(last["output_ids"].as_array().unwrap().len(), 8);
    }
    let t = s.truth();
    let (a, b) = (t.request("a").unwrap(), t.request("b").unwrap());
    assert_eq!(a.cached_tokens, 0);
    assert_eq!(b.cached_tokens, 20_000 - 1);
    assert_eq!(b.prefill_passes.iter().map(|p| p.tokens).sum::<usize>(), 1);
    assert!(b.chunks[0].at_ns < a.chunks[0].at_ns);
    assert_eq!(a.finish, FinishTruth::Length);
}

#[tokio::test(start_paused = true)]
async fn flush_cache_refused_while_busy_and_empties_when_idle() {
    let s = start(Config::default()).await;
    let url = s.url();
    let p = ids(5000, 2);
    let body = json!({"rid": "long", "input_ids": p, "sampling_params": {"max_new_tokens": 200, "ignore_eos": true}});
    let u2 = url.clone();
    let h = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{u2}/generate"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
    });
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let busy = reqwest::get(format!("{url}/flush_cache")).await.unwrap();
    assert_eq!(busy.status(), 400);
    assert_eq!(h.await.unwrap(), 200);
    let ok = reqwest::Client::new()
        .post(format!("{url}/flush_cache"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert!(ok.text().await.unwrap().starts_with("Cache flushed"));
    let body = json!({"rid": "again", "input_ids": p, "sampling_params": {"max_new_tokens": 2}});
    reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(s.truth().request("again").unwrap().cached_tokens, 0);
}

#[tokio::test(start_paused = true)]
async fn kimi_fixed_config_chunks_32k_and_survives() {
    let mut c = Config::preset(KIMI).unwrap();
    c.set("mem_fraction_static", "0.93").unwrap();
    c.set("chunked_prefill_size", "4096").unwrap();
    c.set("expandable_segments", "true").unwrap();
    let s = start(c).await;
    let body = json!({"rid": "k", "input_ids": ids(32_768, 3), "stream": true,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}});
    let (_, done) = stream(&s.url(), "/generate", body).await;
    assert!(done);
    let t = s.truth().request("k").unwrap();
    let passes: Vec<usize> = t.prefill_passes.iter().map(|p| p.tokens).collect();
    assert_eq!(passes, vec![4096; 8]);
    assert!(s.crashed().is_none());
}

#[tokio::test(start_paused = true)]
async fn kimi_094_dies_of_oom_on_32k_prefill() {
    let s = start(Config::preset(KIMI).unwrap()).await;
    let url = s.url();
    let small = json!({"rid": "ok16k", "input_ids": ids(16_384, 4), "stream": true,
        "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}});
    assert!(stream(&url, "/generate", small).await.1);
    let body = json!({"rid": "big", "input_ids": ids(32_000, 5), "stream": true,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}});
    let resp = reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.text().await.is_err(),
        "the stream must be cut, not finished"
    );
    let reason = s.wait_crashed().await;
    assert!(reason.contains("CUDA out of memory"), "{reason}");
    assert_eq!(
        s.truth().request("big").unwrap().finish,
        FinishTruth::OomCrash
    );
    let peak = s.truth().request("big").unwrap().memory_peak_bytes as f64 / 1e6;
    assert!((peak - 896.0).abs() < 1.0, "{peak}");
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    assert!(
        reqwest::get(format!("{url}/health")).await.is_err(),
        "connection must be refused"
    );
}

#[tokio::test(start_paused = true)]
async fn speculative_chunks_carry_several_tokens_and_stats_match_truth() {
    let s = start(Config::default()).await;
    let body = json!({"rid": "spec", "input_ids": ids(1000, 6), "stream": true,
        "sampling_params": {"max_new_tokens": 64, "ignore_eos": true}});
    let (ev, done) = stream(&s.url(), "/generate", body).await;
    assert!(done);
    let t = s.truth().request("spec").unwrap();
    assert_eq!(t.completion_tokens, 64);
    assert_eq!(t.chunks.len(), ev.len());
    assert!(t.chunks.iter().any(|c| c.tokens > 1));
    assert_eq!(t.chunks.iter().map(|c| c.tokens).sum::<usize>(), 64);
    let meta = &ev.last().unwrap()["meta_info"];
    assert_eq!(
        meta["spec_verify_ct"].as_u64().unwrap() as usize,
        t.spec_verify_ct
    );
    assert_eq!(
        meta["spec_accept_length"].as_f64().unwrap(),
        64.0 / t.spec_verify_ct as f64
    );
    let hist: Vec<u64> = serde_json::from_value(meta["spec_accept_histogram"].clone()).unwrap();
    assert_eq!(hist, t.spec_accept_histogram);
    // Cumulative output by default.
    let lens: Vec<usize> = ev
        .iter()
        .map(|e| e["output_ids"].as_array().unwrap().len())
        .collect();
    assert!(lens.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test(start_paused = true)]
async fn openai_streams_match_sglang_shapes() {
    let mut c = Config::default();
    c.enable_cache_report = true;
    let s = start(c).await;
    let body = json!({"model": "m", "prompt": "one two three four", "max_tokens": 5, "stream": true, "ignore_eos": true,
        "stream_options": {"include_usage": true}});
    let (ev, done) = stream(&s.url(), "/v1/completions", body).await;
    assert!(done);
    let last = ev.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], 4);
    assert_eq!(last["usage"]["completion_tokens"], 5);
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(ev[ev.len() - 2]["choices"][0]["finish_reason"], "length");
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3,
        "stream": true, "ignore_eos": true});
    let (ev, done) = stream(&s.url(), "/v1/chat/completions", body).await;
    assert!(done);
    assert_eq!(ev[0]["choices"][0]["delta"]["role"], "assistant");
    let fin = ev.last().unwrap();
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
}

#[tokio::test(start_paused = true)]
async fn bad_inputs_get_4xx_and_server_keeps_serving() {
    let mut c = Config::default();
    c.max_body_bytes = 4096;
    let s = start(c).await;
    let url = s.url();
    let cl = reqwest::Client::new();
    let cases: Vec<(&str, String)> = vec![
        ("/generate", "{not json".into()),
        ("/generate", json!({"text": 5}).to_string()),
        (
            "/generate",
            json!({"text": "a", "input_ids": [1]}).to_string(),
        ),
        ("/generate", json!({"text": ""}).to_string()),
        (
            "/generate",
            json!({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}).to_string(),
        ),
        (
            "/generate",
            json!({"input_ids": [1], "sampling_params": {"max_new_tokens": 100_000_000}})
                .to_string(),
        ),
        ("/generate", json!({"text": "x ".repeat(3000)}).to_string()),
        (
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": "many"}).to_string(),
        ),
        ("/v1/completions", json!({"prompt": {"x": 1}}).to_string()),
        ("/v1/chat/completions", json!({"messages": []}).to_string()),
        ("/nope", "{}".into()),
    ];
    for (path, body) in cases {
        let r = cl
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let st = r.status().as_u16();
        assert!((400..500).contains(&st), "{path} {body:.60}: {st}");
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if path == "/v1/completions" || path == "/v1/chat/completions" {
            assert_eq!(v["object"], "error");
            assert!(!v["message"].as_str().unwrap().is_empty());
        } else if path == "/generate" {
            assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
        }
    }
    let body = json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3, "ignore_eos": true}});
    let v: Value = cl
        .post(format!("{url}/generate"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], 3);
}

#[tokio::test(start_paused = true)]
async fn api_key_and_debug_endpoint() {
    let mut c = Config::default();
    c.api_key = Some("k".into());
    c.debug_endpoints = true;
    let s = start(c).await;
    let cl = reqwest::Client::new();
    assert_eq!(
        cl.get(format!("{}/health", s.url()))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        cl.get(format!("{}/v1/models", s.url()))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let body = json!({"rid": "d", "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}});
    let r = cl
        .post(format!("{}/generate", s.url()))
        .bearer_auth("k")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let t: mock_server::RequestTruth = cl
        .get(format!("{}/debug/requests/d", s.url()))
        .bearer_auth("k")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t, s.truth().request("d").unwrap());
    s.shutdown().await;
}
