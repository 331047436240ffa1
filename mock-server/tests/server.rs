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

/// Posts `body` to `/generate` and returns the response as soon as its head arrives.
async fn send_generate(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(body)
        .send()
        .await
        .unwrap()
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
    assert_eq!(fin["choices"][0]["delta"], json!({}));
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
}

/// Every malformed `input_ids` gets a 400 that names the problem, and `null` counts as absent.
#[tokio::test(start_paused = true)]
async fn native_input_ids_errors_name_the_problem() {
    let s = start(Config::default()).await;
    let cl = reqwest::Client::new();
    let cases = [
        (
            r#"{"input_ids": [1, -2]}"#,
            "non-negative integer token ids, got -2",
        ),
        (
            r#"{"input_ids": [1, "a"]}"#,
            r#"non-negative integer token ids, got "a""#,
        ),
        (
            r#"{"input_ids": [1, 2.5]}"#,
            "non-negative integer token ids, got 2.5",
        ),
        (
            r#"{"input_ids": [1, 40000]}"#,
            "token id 40000 is outside the vocabulary (size 32000)",
        ),
        (
            r#"{"input_ids": [5000000000]}"#,
            "token id 5000000000 is outside the vocabulary",
        ),
        (
            r#"{"input_ids": "1 2"}"#,
            "input_ids must be a list of token ids",
        ),
        (r#"{"text": "a", "input_ids": [1]}"#, "not both"),
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
        let msg = v["error"]["message"].as_str().unwrap_or_default();
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

// ---------------------------------------------------------------------------------------------
// Helpers for the tests below.
// ---------------------------------------------------------------------------------------------

async fn get_json(url: &str, path: &str) -> Value {
    let r = reqwest::get(format!("{url}{path}")).await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

async fn post_json(url: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let st = r.status().as_u16();
    (st, r.json().await.unwrap_or(Value::Null))
}

/// `/metrics` as a map from series (name plus labels) to value; checks the text is well formed.
async fn scrape(url: &str) -> std::collections::HashMap<String, f64> {
    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut m = std::collections::HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (k, v) = line.rsplit_once(' ').expect("series value");
        let v: f64 = v.parse().unwrap();
        assert!(v.is_finite(), "{line}");
        assert!(k.starts_with("sglang:"), "{line}");
        // Every series carries SGLang's model_name label; the keys below leave it out.
        let (name, labels) = k.split_once('{').expect("labels");
        let labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
        assert!(
            labels
                .iter()
                .any(|l| l.starts_with("model_name=\"") && l.len() > 13),
            "{line}"
        );
        let rest: Vec<&str> = labels
            .into_iter()
            .filter(|l| !l.starts_with("model_name="))
            .collect();
        let k = if rest.is_empty() {
            name.to_string()
        } else {
            format!("{name}{{{}}}", rest.join(","))
        };
        assert!(m.insert(k.clone(), v).is_none(), "duplicate {k}");
    }
    m
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 + 1e-9 * a.abs().max(b.abs())
}

/// Checks a scraped histogram against the exact observations `(value, weight)` and `sum`.
fn check_histogram(
    m: &std::collections::HashMap<String, f64>,
    name: &str,
    obs: &[(f64, u64)],
    sum: f64,
) {
    let count: u64 = obs.iter().map(|o| o.1).sum();
    assert_eq!(m[&format!("{name}_count")], count as f64, "{name}_count");
    assert!(
        close(m[&format!("{name}_sum")], sum),
        "{name}_sum {} vs {sum}",
        m[&format!("{name}_sum")]
    );
    let mut buckets = 0;
    for (k, v) in m {
        let Some(rest) = k.strip_prefix(&format!("{name}_bucket{{le=\"")) else {
            continue;
        };
        let le = rest.trim_end_matches("\"}");
        let le: f64 = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap()
        };
        let want: u64 = obs.iter().filter(|o| o.0 <= le).map(|o| o.1).sum();
        assert_eq!(*v, want as f64, "{k}");
        buckets += 1;
    }
    assert!(buckets > 2, "{name} has buckets");
}

/// A raw HTTP/1.1 response: status, the body's HTTP chunks (with the tokio instant each one
/// arrived), and whether the chunked body ended properly with its zero-size chunk.
struct Raw {
    status: u16,
    head: String,
    chunks: Vec<(tokio::time::Instant, Vec<u8>)>,
    terminated: bool,
}

impl Raw {
    fn body(&self) -> String {
        let all: Vec<u8> = self.chunks.iter().flat_map(|c| c.1.clone()).collect();
        String::from_utf8(all).unwrap()
    }
    fn events(&self) -> Vec<String> {
        self.body()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").expect("data line").to_string())
            .collect()
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

async fn raw_post(
    addr: std::net::SocketAddr,
    path: &str,
    body: &Value,
    extra: &[(&str, &str)],
) -> Raw {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = body.to_string();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{head}\r\n{body}").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let mut pos = None::<usize>;
    let mut raw = Raw {
        status: 0,
        head: String::new(),
        chunks: Vec::new(),
        terminated: false,
    };
    let mut tmp = vec![0u8; 1 << 16];
    loop {
        let n = match s.read(&mut tmp).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = tokio::time::Instant::now();
        buf.extend_from_slice(&tmp[..n]);
        if pos.is_none() {
            if let Some(i) = find(&buf, b"\r\n\r\n") {
                raw.head = String::from_utf8(buf[..i].to_vec())
                    .unwrap()
                    .to_ascii_lowercase();
                raw.status = raw.head[9..12].parse().unwrap();
                assert!(
                    raw.head.contains("transfer-encoding: chunked"),
                    "{}",
                    raw.head
                );
                pos = Some(i + 4);
            }
        }
        while let Some(p) = pos {
            let Some(le) = find(&buf[p..], b"\r\n") else {
                break;
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[p..p + le]).unwrap(), 16).unwrap();
            let start = p + le + 2;
            if buf.len() < start + size + 2 {
                break;
            }
            if size == 0 {
                raw.terminated = true;
                pos = None;
                break;
            }
            raw.chunks.push((now, buf[start..start + size].to_vec()));
            pos = Some(start + size + 2);
        }
        if raw.terminated {
            break;
        }
    }
    raw
}

fn gen_body(rid: &str, n: usize, salt: u32, max_new: usize) -> Value {
    json!({"rid": rid, "input_ids": ids(n, salt), "stream": true,
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": true}})
}

// ---------------------------------------------------------------------------------------------
// /metrics, /tokenize, /health_generate, model and server info.
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn metrics_match_the_requests_served() {
    let s = start(Config::default()).await;
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

// ---------------------------------------------------------------------------------------------
// Faults on demand: the bytes a raw HTTP client sees.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Start-up, OOM restart, retraction, continuous batching.
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Non-streaming responses, sampling, API key, shutdown.
// ---------------------------------------------------------------------------------------------

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
        input_ids,
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
    let received = tokio::time::Instant::now();
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
    use mock_server::engine::StreamEvent;
    let (truth, engine, _crashed) = spawn_engine(c);
    let received = tokio::time::Instant::now();
    let mut rxs = Vec::new();
    for (i, (rid, prompt, max_new)) in reqs.iter().enumerate() {
        let input_ids = ids(*prompt, 1000 + i as u32);
        let rx = engine
            .submit(engine_request(rid, input_ids, *max_new, received))
            .unwrap();
        rxs.push(rx);
    }
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

/// Reads a number from a `/proc` file, or the `Max open files` soft limit from `/proc/self/limits`.
#[cfg(target_os = "linux")]
fn proc_number(path: &str) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    if path.ends_with("limits") {
        let line = s.lines().find(|l| l.starts_with("Max open files"))?;
        return line.split_whitespace().nth(3)?.parse().ok();
    }
    s.trim().parse().ok()
}

/// 2,000 clients connecting at once must not overflow the listening socket's queue: with the
/// backlog of tokio's `TcpListener::bind` (128) the kernel dropped the excess handshakes, and those
/// clients connected a second later on the SYN retry. The runtime is blocked while the connections
/// arrive, so none is accepted and every one of them must wait in the kernel's queue.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn listen_queue_holds_1200_pending_connections() {
    const N: usize = 1_200;
    let somaxconn = proc_number("/proc/sys/net/core/somaxconn").unwrap_or(0);
    let files = proc_number("/proc/self/limits").unwrap_or(0);
    if somaxconn < N as u64 + 1 || files < N as u64 + 200 {
        eprintln!(
            "skipped: needs net.core.somaxconn > {N} (is {somaxconn}) and an open-file limit over {} (is {files})",
            N + 200
        );
        return;
    }
    let s = start(Config::preset("small-cpu-demo").unwrap()).await;
    let addr = s.addr();
    // Blocking join: this current-thread runtime, which runs the accept loop, does nothing else
    // until every connection is either established or timed out.
    let connected = std::thread::spawn(move || {
        let mut open = Vec::with_capacity(N);
        for _ in 0..N {
            match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300))
            {
                Ok(c) => open.push(c),
                Err(_) => break,
            }
        }
        open.len()
    })
    .join()
    .unwrap();
    assert_eq!(
        connected, N,
        "the listen queue overflowed after {connected} connections"
    );
    s.shutdown().await;
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The ground truth records when a request reached the server's socket (the kernel's receive
/// timestamp), apart from when the handler got to it. The runtime is blocked while the client
/// writes, so the request waits in the socket: its recorded arrival lies within the client's
/// write call, and the handler receives it only after the runtime is free again.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn truth_records_the_requests_arrival_at_the_socket() {
    use std::io::{Read, Write};
    let s = start(Config::preset("small-cpu-demo").unwrap()).await;
    let addr = s.addr();
    let body = r#"{"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":2},"rid":"held"}"#;
    let client = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let req = format!(
            "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let before = unix_ns();
        c.write_all(req.as_bytes()).unwrap();
        let after = unix_ns();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        (before, after, resp)
    });
    // Nothing on this current-thread runtime runs (no accept, no read) for 200 ms.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let freed = unix_ns();
    let (before, after, resp) = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let t = s
        .truth()
        .request("held")
        .expect("truth of the held request");
    let arrived = t
        .socket_arrival_unix_ns
        .expect("a kernel receive timestamp");
    assert!(
        (before..=after).contains(&arrived),
        "arrival {arrived} outside the client's write [{before}, {after}]"
    );
    assert!(t.received_unix_ns >= freed.min(after), "{t:?}");
    if after < freed {
        // The usual case: the request was in the socket before the runtime was free.
        assert!(t.received_unix_ns - arrived >= freed - after);
    }
    s.shutdown().await;
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
