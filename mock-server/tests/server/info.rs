//! `/metrics`, `/tokenize`, `/health_generate`, model and server info.

use crate::common::*;

#[tokio::test(start_paused = true)]
async fn metrics_match_the_requests_served() {
    let mut c = Config::default();
    c.enable_metrics = true;
    let s = start(c).await;
    let url = s.url();
    let m0 = scrape(&url).await;
    assert_eq!(m0["sglang:num_requests_total"], 0.0);
    assert_eq!(m0["sglang:time_to_first_token_seconds_count"], 0.0);
    for rid in ["m1", "m2"] {
        assert!(
            stream(&url, "/generate", gen_body(rid, 100, 11, 16))
                .await
                .1
        );
    }
    let m = scrape(&url).await;
    let t = s.truth();
    let reqs = [t.request("m1").unwrap(), t.request("m2").unwrap()];
    let info = get_json(&url, "/server_info").await;
    let pool = info["max_total_num_tokens"].as_f64().unwrap();

    assert_eq!(
        m["sglang:num_running_reqs"], 0.0,
        "idle after the last request"
    );
    assert_eq!(m["sglang:num_queue_reqs"], 0.0);
    assert_eq!(m["sglang:num_requests_total"], 2.0);
    assert_eq!(m["sglang:prompt_tokens_total"], 200.0);
    assert_eq!(m["sglang:generation_tokens_total"], 32.0);
    assert_eq!(reqs[1].cached_tokens, 99);
    assert_eq!(m["sglang:cached_tokens_total"], 99.0);
    assert!(close(m["sglang:cache_hit_rate"], 99.0 / 200.0));
    // The cache holds the union of both sequences minus each one's last token (the prompt is shared).
    let held = 2 * (100 + 16 - 1) - 100;
    assert_eq!(m["sglang:num_used_tokens"], held as f64);
    assert!(close(m["sglang:token_usage"], held as f64 / pool));
    let verify: usize = reqs.iter().map(|r| r.spec_verify_ct).sum();
    assert!(close(m["sglang:spec_accept_length"], 32.0 / verify as f64));
    // The last decode step produced m2's last chunk: throughput = its tokens / the modelled step
    // time (m2 runs alone by then, so its chunks leave right at the ends of their passes).
    let c = &reqs[1].chunks;
    let (a, b) = (&c[c.len() - 2], &c[c.len() - 1]);
    let step = secs(b.model_ns - a.model_ns);
    let want = b.tokens as f64 / step;
    let got = m["sglang:gen_throughput"];
    assert!(
        (got / want - 1.0).abs() < 1e-6,
        "gen_throughput {got} vs {want} ({:?})",
        c
    );

    // The server's histograms observe the modelled instants (as SGLang's output processing does).
    let ttft: Vec<(f64, u64)> = reqs
        .iter()
        .map(|r| (secs(r.chunks[0].model_ns), 1))
        .collect();
    let ttft_sum = ttft.iter().map(|o| o.0).sum();
    check_histogram(&m, "sglang:time_to_first_token_seconds", &ttft, ttft_sum);
    let e2e: Vec<(f64, u64)> = reqs
        .iter()
        .map(|r| (secs(r.chunks.last().unwrap().model_ns), 1))
        .collect();
    let e2e_sum = e2e.iter().map(|o| o.0).sum();
    check_histogram(&m, "sglang:e2e_request_latency_seconds", &e2e, e2e_sum);
    // Token-weighted inter-token latency, as SGLang counts it.
    let mut itl = Vec::new();
    let mut itl_sum = 0.0;
    for r in &reqs {
        for w in r.chunks.windows(2) {
            let gap = secs(w[1].model_ns - w[0].model_ns);
            itl.push((gap / w[1].tokens as f64, w[1].tokens as u64));
            itl_sum += gap;
        }
    }
    let after_first: usize = reqs.iter().map(|r| 16 - r.chunks[0].tokens).sum();
    assert_eq!(itl.iter().map(|o| o.1).sum::<u64>(), after_first as u64);
    check_histogram(&m, "sglang:inter_token_latency_seconds", &itl, itl_sum);
}

#[tokio::test(start_paused = true)]
async fn metrics_gauges_show_running_and_queued_requests() {
    let mut c = Config::default();
    c.enable_metrics = true;
    c.max_running_requests = 1;
    let s = start(c).await;
    let url = s.url();
    let mut hs = Vec::new();
    for i in 0..3 {
        let u = url.clone();
        hs.push(tokio::spawn(async move {
            stream(&u, "/generate", gen_body(&format!("g{i}"), 50, i, 400)).await
        }));
    }
    let t = s.truth();
    while t.all().len() < 3 || t.all().iter().all(|r| r.chunks.is_empty()) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let m = scrape(&url).await;
    assert_eq!(m["sglang:num_running_reqs"], 1.0);
    assert_eq!(m["sglang:num_queue_reqs"], 2.0);
    assert!(m["sglang:num_used_tokens"] >= 50.0);
    for h in hs {
        assert!(h.await.unwrap().1);
    }
    let m = scrape(&url).await;
    assert_eq!(m["sglang:num_running_reqs"], 0.0);
    assert_eq!(m["sglang:num_queue_reqs"], 0.0);
    assert_eq!(m["sglang:generation_tokens_total"], 1200.0);
}

#[tokio::test(start_paused = true)]
async fn tokenize_follows_the_documented_rule() {
    let s = start(Config::default()).await;
    let url = s.url();
    let text = "the  quick\nbrown fox";
    let want = mock_server::tokenizer::encode(text, Config::default().vocab_size);
    assert_eq!(want.len(), 4);
    for key in ["prompt", "text"] {
        let (st, v) = post_json(&url, "/tokenize", json!({ key: text })).await;
        assert_eq!(st, 200);
        assert_eq!(v["tokens"], json!(want));
        assert_eq!(v["count"], 4);
        assert_eq!(v["max_model_len"], Config::default().context_length);
    }
    let (_, v) = post_json(
        &url,
        "/generate",
        json!({"text": text, "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(v["meta_info"]["prompt_tokens"], 4);
    for bad in [json!({"prompt": 5}), json!({}), json!([1])] {
        let (st, v) = post_json(&url, "/tokenize", bad).await;
        assert_eq!(st, 400);
        assert!(!v["message"].as_str().unwrap().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn health_generate_runs_a_one_token_generation() {
    let s = start(Config::default()).await;
    let r = reqwest::get(format!("{}/health_generate", s.url()))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let all = s.truth().all();
    assert_eq!(all.len(), 1);
    assert!(all[0].rid.starts_with("HEALTH_CHECK"));
    assert_eq!(all[0].completion_tokens, 1);
    assert_eq!(all[0].finish, FinishTruth::Length);
}

#[tokio::test(start_paused = true)]
async fn model_and_server_info() {
    let mut c = Config::preset(KIMI).unwrap();
    c.api_key = Some("secret".into());
    let s = start(c.clone()).await;
    let cl = reqwest::Client::new();
    let get = |p: &str| {
        cl.get(format!("{}{p}", s.url()))
            .bearer_auth("secret")
            .send()
    };
    let a: Value = get("/model_info").await.unwrap().json().await.unwrap();
    let b: Value = get("/get_model_info").await.unwrap().json().await.unwrap();
    assert_eq!(a, b);
    assert_eq!(a["model_path"], c.model_path);
    assert_eq!(a["is_generation"], true);
    let a: Value = get("/server_info").await.unwrap().json().await.unwrap();
    let b: Value = get("/get_server_info").await.unwrap().json().await.unwrap();
    assert_eq!(a, b);
    let budget = mock_server::memory::MemoryBudget::new(&c);
    assert_eq!(a["max_total_num_tokens"], budget.kv_pool_tokens);
    assert_eq!(a["mem_fraction_static"], c.mem_fraction_static);
    assert_eq!(a["chunked_prefill_size"], c.chunked_prefill_size);
    assert_eq!(a["speculative_algorithm"], c.speculative_algorithm);
    assert_eq!(a["context_length"], c.context_length);
    assert!(a.get("api_key").is_none(), "the key must not leak");
    let mem = &a["memory_usage"];
    let gib = 1024.0 * 1024.0 * 1024.0;
    assert!(close(
        mem["total_gb"].as_f64().unwrap(),
        c.gpu_total_bytes as f64 / gib
    ));
    assert!(close(
        mem["weight"].as_f64().unwrap(),
        c.weights_bytes as f64 / gib
    ));
    let kv = (budget.kv_pool_tokens as u64 * c.kv_bytes_per_token) as f64 / gib;
    assert!(close(mem["kvcache"].as_f64().unwrap(), kv));
    assert!(close(
        mem["free_headroom_gb"].as_f64().unwrap(),
        budget.free_headroom_bytes as f64 / gib
    ));
    assert_eq!(mem["token_usage"], 0.0);
}

/// As in SGLang, `/metrics` exists only with `--enable-metrics`: without it the route is a 404.
#[tokio::test(start_paused = true)]
async fn metrics_is_a_404_without_enable_metrics() {
    let s = start(Config::default()).await;
    let r = reqwest::get(format!("{}/metrics", s.url())).await.unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v, serde_json::json!({"detail": "Not Found"}));
}
