//! Non-streaming responses, sampling (EOS, stop tokens, min and max tokens) and the API key.

use crate::common::*;

#[tokio::test(start_paused = true)]
async fn non_streaming_generate_and_completions() {
    let mut c = Config::default();
    c.enable_cache_report = true;
    let s = start(c).await;
    let url = s.url();
    let (st, v) = post_json(
        &url,
        "/generate",
        json!({"rid": "ns", "input_ids": ids(300, 9),
        "sampling_params": {"max_new_tokens": 24, "ignore_eos": true}}),
    )
    .await;
    assert_eq!(st, 200);
    let t = s.truth().request("ns").unwrap();
    let out: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
    assert_eq!(out.len(), 24);
    assert_eq!(v["text"], mock_server::tokenizer::decode(&out));
    let meta = &v["meta_info"];
    assert_eq!(meta["id"], "ns");
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "length", "length": 24})
    );
    assert_eq!(meta["prompt_tokens"], 300);
    assert_eq!(meta["completion_tokens"], 24);
    assert_eq!(meta["cached_tokens"], 0);
    let e2e = meta["e2e_latency"].as_f64().unwrap();
    assert!(
        (e2e - secs(t.chunks.last().unwrap().at_ns)).abs() < 1e-6,
        "{e2e}"
    );
    assert_eq!(meta["spec_verify_ct"], t.spec_verify_ct);
    assert_eq!(
        meta["spec_accept_histogram"],
        json!(t.spec_accept_histogram)
    );

    let (st, v) = post_json(
        &url,
        "/v1/completions",
        json!({"model": "m", "prompt": ids(300, 9),
        "max_tokens": 5, "ignore_eos": true}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    let ch = &v["choices"][0];
    assert_eq!(ch["finish_reason"], "length");
    assert_eq!(
        mock_server::tokenizer::encode(ch["text"].as_str().unwrap(), 32000).len(),
        5
    );
    assert_eq!(v["usage"]["prompt_tokens"], 300);
    assert_eq!(v["usage"]["completion_tokens"], 5);
    assert_eq!(v["usage"]["total_tokens"], 305);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 299);

    let (st, v) = post_json(
        &url,
        "/v1/chat/completions",
        json!({"model": "m",
        "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3, "ignore_eos": true}),
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(
        v["usage"]["prompt_tokens"], 3,
        "role + one word + assistant turn"
    );
}

/// SGLang checks a request's length before its stop tokens: an EOS drawn as the last token allowed
/// ends the request by length; one token earlier, by the stop.
#[tokio::test(start_paused = true)]
async fn an_eos_at_max_new_tokens_finishes_by_length() {
    let mut c = Config::default();
    c.speculative_algorithm = "none".into();
    // Every token from the 5th on is EOS.
    c.eos_probability = 1.0;
    let eos = c.eos_token_id;
    let s = start(c).await;
    for (max_new, finish, truth) in [
        (
            5,
            json!({"type": "length", "length": 5}),
            FinishTruth::Length,
        ),
        (
            6,
            json!({"type": "stop", "matched": eos}),
            FinishTruth::Stop,
        ),
    ] {
        let rid = format!("eos-at-{max_new}");
        let (st, v) = post_json(
            &s.url(),
            "/generate",
            json!({"rid": rid, "input_ids": [5, 6, 7],
            "sampling_params": {"max_new_tokens": max_new, "min_new_tokens": 4}}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let out: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
        assert_eq!(out.len(), 5, "{rid}: {out:?}");
        assert_eq!(out[4], eos, "{rid}");
        assert_eq!(v["meta_info"]["finish_reason"], finish, "{rid}");
        assert_eq!(s.truth().request(&rid).unwrap().finish, truth, "{rid}");
    }
}

#[tokio::test(start_paused = true)]
async fn min_new_tokens_and_eos_without_ignore_eos() {
    let mut c = Config::default();
    c.eos_probability = 0.3;
    c.seed = 7;
    let eos = c.eos_token_id;
    let run = |c: Config| async move {
        let s = start(c).await;
        let mut outs = Vec::new();
        for i in 0..20 {
            let (st, v) = post_json(
                &s.url(),
                "/generate",
                json!({"rid": format!("e{i}"), "input_ids": [5, 6, 7],
                "sampling_params": {"max_new_tokens": 200, "min_new_tokens": 10}}),
            )
            .await;
            assert_eq!(st, 200);
            outs.push(v);
        }
        (outs, s.truth())
    };
    let (outs, truth) = run(c.clone()).await;
    let mut stopped_early = 0;
    for (i, v) in outs.iter().enumerate() {
        let out: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
        assert!(out.len() > 10, "min_new_tokens holds: {}", out.len());
        assert!(
            !out[..out.len() - 1].contains(&eos),
            "no EOS before the end"
        );
        let t = truth.request(&format!("e{i}")).unwrap();
        assert_eq!(t.completion_tokens, out.len());
        if out.len() < 200 {
            stopped_early += 1;
            assert_eq!(*out.last().unwrap(), eos);
            assert_eq!(
                v["meta_info"]["finish_reason"],
                json!({"type": "stop", "matched": eos})
            );
            assert_eq!(t.finish, FinishTruth::Stop);
        }
    }
    assert!(stopped_early > 0, "EOS must end some generations");
    // The same seed gives the same outputs.
    let (again, _) = run(c.clone()).await;
    let o = |v: &Vec<Value>| {
        v.iter()
            .map(|x| x["output_ids"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(o(&outs), o(&again));
    // ignore_eos: never stops early, never emits EOS.
    let s = start(c).await;
    let (_, v) = post_json(
        &s.url(),
        "/generate",
        json!({"input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 100, "ignore_eos": true}}),
    )
    .await;
    let out: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
    assert_eq!(out.len(), 100);
    assert!(!out.contains(&eos));
    // OpenAI's min_tokens does the same.
    let (_, v) = post_json(
        &s.url(),
        "/v1/completions",
        json!({"prompt": "a", "max_tokens": 50, "min_tokens": 30}),
    )
    .await;
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 30);
}

#[tokio::test(start_paused = true)]
async fn api_key_guards_every_route_but_health_and_metrics() {
    let mut c = Config::default();
    c.enable_metrics = true;
    c.api_key = Some("k".into());
    c.debug_endpoints = true;
    let s = start(c).await;
    let url = s.url();
    let cl = reqwest::Client::new();
    let gen = json!({"rid": "x", "input_ids": [1, 2], "sampling_params": {"max_new_tokens": 1}});
    let routes: Vec<(&str, &str, Value)> = vec![
        ("POST", "/generate", gen.clone()),
        (
            "POST",
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": 1}),
        ),
        (
            "POST",
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "max_tokens": 1}),
        ),
        ("GET", "/flush_cache", Value::Null),
        ("POST", "/flush_cache", Value::Null),
        ("GET", "/model_info", Value::Null),
        ("GET", "/get_model_info", Value::Null),
        ("GET", "/server_info", Value::Null),
        ("GET", "/get_server_info", Value::Null),
        ("GET", "/v1/models", Value::Null),
        ("POST", "/tokenize", json!({"prompt": "a"})),
        ("GET", "/debug/requests/x", Value::Null),
        ("GET", "/no/such/route", Value::Null),
    ];
    let send = |m: &str, p: &str, b: &Value, key: Option<&str>| {
        let mut r = if m == "GET" {
            cl.get(format!("{url}{p}"))
        } else {
            cl.post(format!("{url}{p}")).json(b)
        };
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send()
    };
    for (m, p, b) in &routes {
        for key in [None, Some("wrong"), Some("K")] {
            let r = send(m, p, b, key).await.unwrap();
            assert_eq!(r.status(), 401, "{m} {p} with {key:?}");
            assert_eq!(
                r.json::<Value>().await.unwrap(),
                json!({"error": "Unauthorized"})
            );
        }
    }
    for (m, p, b) in &routes {
        let st = send(m, p, b, Some("k")).await.unwrap().status();
        assert_ne!(st, 401, "{m} {p} with the key");
        assert!(st.is_success() || *p == "/no/such/route", "{m} {p}: {st}");
    }
    // As in SGLang's middleware, /health* and /metrics are open.
    for p in ["/health", "/health_generate", "/metrics"] {
        assert_eq!(
            cl.get(format!("{url}{p}")).send().await.unwrap().status(),
            200,
            "{p}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn max_new_tokens_zero_finishes_after_prefill() {
    let s = start(Config::default()).await;
    let url = s.url();
    let fut = post_json(
        &url,
        "/generate",
        json!({"rid": "z", "input_ids": [1, 2, 3],
        "sampling_params": {"max_new_tokens": 0}}),
    );
    let (st, v) = tokio::time::timeout(std::time::Duration::from_secs(60), fut)
        .await
        .expect("no hang");
    assert_eq!(st, 200);
    assert_eq!(v["meta_info"]["completion_tokens"], 0);
    assert_eq!(
        v["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 0})
    );
    assert_eq!(s.truth().request("z").unwrap().finish, FinishTruth::Length);
    let (ev, done) = stream(
        &s.url(),
        "/generate",
        json!({"input_ids": [1, 2, 3], "stream": true,
        "sampling_params": {"max_new_tokens": 0}}),
    )
    .await;
    assert!(done);
    assert_eq!(
        ev.last().unwrap()["meta_info"]["finish_reason"]["type"],
        "length"
    );
}
