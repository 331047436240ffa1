//! Serving over a real socket: the radix cache, flushing, chunked prefill and OOM on the Kimi
//! preset, speculative chunks, OpenAI stream shapes, input validation, API key and debug endpoint.

use crate::common::*;

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

/// Long prompts one after another (a sweep with warm-ups): every chunk of a long prefill makes room
/// in the KV pool, so cached prefixes of earlier requests are evicted instead of overfilling the pool.
#[tokio::test(start_paused = true)]
async fn kimi_fixed_config_serves_long_prompts_back_to_back() {
    let mut c = Config::preset(KIMI).unwrap();
    c.set("mem_fraction_static", "0.93").unwrap();
    c.set("chunked_prefill_size", "4096").unwrap();
    c.set("expandable_segments", "true").unwrap();
    let s = start(c).await;
    for (i, n) in [64_000usize, 128_000, 128_000, 185_000, 185_000]
        .into_iter()
        .enumerate()
    {
        let rid = format!("long-{i}");
        let body = json!({"rid": rid, "input_ids": ids(n, 100 + i as u32), "stream": true,
            "sampling_params": {"max_new_tokens": 4, "ignore_eos": true}});
        let (ev, done) = stream(&s.url(), "/generate", body).await;
        assert!(done, "{rid}: {:?}", ev.last());
        let t = s.truth().request(&rid).unwrap();
        assert_eq!(t.finish, FinishTruth::Length, "{rid}");
        assert_eq!(t.completion_tokens, 4);
    }
    assert!(s.crashed().is_none());
}

#[tokio::test(start_paused = true)]
async fn kimi_094_dies_of_oom_on_32k_prefill() {
    let s = start(Config::preset(KIMI).unwrap()).await;
    let url = s.url();
    let small = gen_body("ok16k", 16_384, 4, 2);
    assert!(stream(&url, "/generate", small).await.1);
    let resp = send_generate(&url, &gen_body("big", 32_000, 5, 4)).await;
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
    assert_eq!(
        fin["choices"][0]["delta"],
        json!({"reasoning_content": null})
    );
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
}

/// Every malformed `input_ids` gets SGLang's validation error (a 400 with an OpenAI-style error
/// object) that names the problem, and `null` counts as absent.
#[tokio::test(start_paused = true)]
async fn native_input_ids_errors_name_the_problem() {
    let s = start(Config::default()).await;
    let cl = reqwest::Client::new();
    let cases = [
        (
            r#"{"input_ids": [1, "a"]}"#,
            r#"non-negative integer token ids, got "a""#,
        ),
        (
            r#"{"input_ids": [1, 2.5]}"#,
            "non-negative integer token ids, got 2.5",
        ),
        (
            r#"{"input_ids": [5000000000]}"#,
            "token id 5000000000 is outside the vocabulary",
        ),
        (
            r#"{"input_ids": "1 2"}"#,
            "input_ids must be a list of token ids",
        ),
        (r#"[1, 2]"#, "must be a JSON object"),
        (r#"{"input_ids": [1, 2]"#, "malformed JSON body"),
    ];
    for (body, want) in cases {
        let r = cl
            .post(format!("{}/generate", s.url()))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (&v["object"], &v["code"]),
            (&json!("error"), &json!(400)),
            "{v}"
        );
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{body}: {msg}");
    }
    let r = cl
        .post(format!("{}/generate", s.url()))
        .json(&json!({"text": "a b", "input_ids": null, "sampling_params": {"max_new_tokens": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["meta_info"]["prompt_tokens"], 2, "{v}");
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
            // A validation error (OpenAI-style object) or an error of the generate handler.
            let msg = v["error"]["message"].as_str().or(v["message"].as_str());
            assert!(!msg.unwrap_or_default().is_empty(), "{v}");
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

/// As in SGLang 0.5.23, a prompt id at or above the vocabulary size passes validation and kills the
/// server when it is prefilled: the stream is cut without `[DONE]` and the server stops.
#[tokio::test(start_paused = true)]
async fn an_input_id_outside_the_vocabulary_kills_the_server_as_in_sglang() {
    let s = start(Config::default()).await;
    let r = reqwest::Client::new()
        .post(format!("{}/generate", s.url()))
        .json(&json!({"input_ids": [1, 40000], "stream": true,
            "sampling_params": {"max_new_tokens": 4}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap_or_default();
    assert!(!body.contains("[DONE]"), "{body}");
    let reason = s.crashed().expect("the server died");
    assert!(
        reason.contains("input id 40000 >= vocabulary size 32000"),
        "{reason}"
    );
}
