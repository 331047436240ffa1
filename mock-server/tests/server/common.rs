//! Helpers shared by the test modules: starting a server, request bodies, streaming and raw
//! HTTP clients, `/metrics` scrapes and histogram checks.

pub use mock_server::{Config, FinishTruth, MockServer};
pub use serde_json::{json, Value};

pub const KIMI: &str = "kimi-k2.6-dflash-8xrtx-pro-6000";

pub async fn start(cfg: Config) -> MockServer {
    let mut cfg = cfg;
    cfg.port = 0;
    MockServer::start(cfg).await.unwrap()
}

pub fn ids(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7 + salt) % 30000).collect()
}

/// Posts `body` to `/generate` and returns the response as soon as its head arrives.
pub async fn send_generate(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/generate"))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Sends a streaming request and returns the `data:` payloads (without `[DONE]`) and whether it ended with `[DONE]`.
pub async fn stream(url: &str, path: &str, body: Value) -> (Vec<Value>, bool) {
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

pub async fn get_json(url: &str, path: &str) -> Value {
    let r = reqwest::get(format!("{url}{path}")).await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.json().await.unwrap()
}

pub async fn post_json(url: &str, path: &str, body: Value) -> (u16, Value) {
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
pub async fn scrape(url: &str) -> std::collections::HashMap<String, f64> {
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

pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 + 1e-9 * a.abs().max(b.abs())
}

/// Checks a scraped histogram against the exact observations `(value, weight)` and `sum`.
pub fn check_histogram(
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
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub chunks: Vec<(tokio::time::Instant, Vec<u8>)>,
    pub terminated: bool,
}

impl Raw {
    pub fn body(&self) -> String {
        let all: Vec<u8> = self.chunks.iter().flat_map(|c| c.1.clone()).collect();
        String::from_utf8(all).unwrap()
    }
    pub fn events(&self) -> Vec<String> {
        self.body()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").expect("data line").to_string())
            .collect()
    }
}

pub fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

pub async fn raw_post(
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

pub fn gen_body(rid: &str, n: usize, salt: u32, max_new: usize) -> Value {
    json!({"rid": rid, "input_ids": ids(n, salt), "stream": true,
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": true}})
}
