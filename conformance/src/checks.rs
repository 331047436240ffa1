//! Live protocol checks: what the mock assumes about an LLM server, checked against any server.
//!
//! Each check sends real requests through the benchmark client's own request path
//! ([`bench_client::net::send`]) and states what it saw as evidence, so a failing check tells the
//! user what the server did. The same checks run against the mock in `cargo test`
//! (`tests/live_checks.rs`), so the mock passes exactly what a real server passes.

use std::time::Duration;

use bench_client::api::Dialect;
use bench_client::measure;
use bench_client::net::{self, Target};
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::{RequestSpec, Timeouts};
use bench_client::trace::{RequestTrace, StreamEnd};

/// Verdict of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The server behaves as the mock assumes.
    Pass,
    /// The server contradicts the assumption: the evidence says how.
    Fail,
    /// The server does not offer the feature (an endpoint or field is absent).
    NotSupported,
}

impl Outcome {
    /// Label for the table.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "FAIL",
            Self::NotSupported => "not supported",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckResult {
    /// Stable identifier.
    pub id: &'static str,
    /// What is checked, in words.
    pub title: &'static str,
    /// Verdict.
    pub outcome: Outcome,
    /// What the server did.
    pub evidence: String,
}

/// What to check and how.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Server base URL.
    pub url: String,
    /// Wire dialect; probed from the server when `None`.
    pub dialect: Option<Dialect>,
    /// Model name; the server's first model when `None`.
    pub model: Option<String>,
    /// Bearer token.
    pub api_key: Option<String>,
    /// Prompt length of the token-id prompts, in tokens.
    pub prompt_tokens: u32,
    /// Output tokens per request.
    pub max_tokens: u32,
    /// Output tokens of the long request that keeps the server busy during the flush check.
    pub busy_tokens: u32,
    /// Prompt seed.
    pub seed: u64,
    /// Deadlines per request.
    pub timeouts: Timeouts,
}

impl CheckOptions {
    /// Defaults sized for tiny CPU models (context ≥ 1,024).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            dialect: None,
            model: None,
            api_key: None,
            prompt_tokens: 256,
            max_tokens: 16,
            busy_tokens: 256,
            seed: fresh_seed(),
            timeouts: Timeouts {
                total: Duration::from_secs(600),
                ..Timeouts::default()
            },
        }
    }
}

/// A seed that differs between invocations, so the prompts of one run are never in the prefix cache
/// of a server that an earlier run (of the checks or of a sweep) left warm.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (nanos as u64) ^ 0x6c6c_6d62_656e_6368
}

fn result(
    id: &'static str,
    title: &'static str,
    outcome: Outcome,
    evidence: impl Into<String>,
) -> CheckResult {
    CheckResult {
        id,
        title,
        outcome,
        evidence: evidence.into(),
    }
}

struct Ctx {
    http: net::Http,
    target: Target,
    opts: CheckOptions,
    prompts: PromptGen,
    next: u64,
}

impl Ctx {
    fn key(&self) -> Option<&str> {
        self.opts.api_key.as_deref()
    }

    fn fresh_prompt(&mut self, n: u32) -> Prompt {
        self.next += 1;
        Prompt::TokenIds(self.prompts.token_ids(n, self.next))
    }

    fn spec(&mut self, prompt: Prompt, max_tokens: u32) -> RequestSpec {
        self.next += 1;
        RequestSpec::new(
            format!("conformance-{}-{}", self.opts.seed, self.next),
            prompt,
            max_tokens,
        )
    }

    async fn send(&self, spec: &RequestSpec) -> RequestTrace {
        net::send(&self.http, &self.target, spec, &self.opts.timeouts).await
    }
}

fn describe_end(t: &RequestTrace) -> String {
    match t.failure() {
        Some(f) => format!("{}: {}", f.kind.as_str(), f.message),
        None => format!("{:?}", t.end),
    }
}

/// Run every check against `opts.url`, in a fixed order.
pub async fn run_checks(opts: CheckOptions) -> Vec<CheckResult> {
    let http = match net::http_client(&opts.timeouts) {
        Ok(h) => h,
        Err(e) => {
            return vec![result(
                "client",
                "HTTP client can be built",
                Outcome::Fail,
                e.to_string(),
            )]
        }
    };
    let base = opts.url.trim_end_matches('/').to_string();
    let key = opts.api_key.clone();
    let mut out = Vec::new();

    // /health
    let healthy = net::health(&http, &base, key.as_deref()).await;
    out.push(result(
        "health",
        "GET /health answers 200 while serving",
        if healthy {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        if healthy {
            "200".to_string()
        } else {
            "no success status (server down, starting, or no such route)".to_string()
        },
    ));

    let dialect = match opts.dialect {
        Some(d) => d,
        None => net::probe_dialect(&http, &base, key.as_deref()).await,
    };
    let model = match &opts.model {
        Some(m) => Some(m.clone()),
        None => net::first_model(&http, &base, key.as_deref()).await,
    };
    out.push(result(
        "models",
        "GET /v1/models lists the served model",
        if model.is_some() {
            Outcome::Pass
        } else {
            Outcome::NotSupported
        },
        match &model {
            Some(m) => format!("model {m:?}; dialect {}", dialect.as_str()),
            None => format!("no model listed; dialect {}", dialect.as_str()),
        },
    ));

    let target = Target {
        base_url: base.clone(),
        dialect,
        model,
        api_key: key.clone(),
    };
    let mut ctx = Ctx {
        http,
        target,
        prompts: PromptGen::new(opts.seed),
        next: 0,
        opts,
    };

    stream_checks(&mut ctx, &mut out).await;
    cache_checks(&mut ctx, &mut out).await;
    flush_checks(&mut ctx, &mut out).await;
    error_checks(&mut ctx, &mut out).await;
    out
}

async fn stream_checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
    let n = ctx.opts.prompt_tokens;
    let max = ctx.opts.max_tokens;
    let prompt = ctx.fresh_prompt(n);
    let spec = ctx.spec(prompt, max);
    let trace = ctx.send(&spec).await;

    out.push(result(
        "stream-done",
        "a stream ends with data: [DONE]",
        if trace.end == StreamEnd::Done {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        format!(
            "{} events; end: {}",
            trace.chunks.len(),
            describe_end(&trace)
        ),
    ));

    let usage_chunk = trace.chunks.iter().any(|c| {
        c.usage
            .as_ref()
            .is_some_and(|u| u.completion_tokens.is_some())
    });
    out.push(result(
        "usage",
        "token usage reported when asked (final usage chunk / meta_info)",
        if usage_chunk {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        match trace.completion_tokens() {
            Some(c) => format!("completion_tokens = {c} reported"),
            None => "no usage in any event".to_string(),
        },
    ));

    out.push(match trace.reported_prompt_tokens() {
        Some(p) if p == n => result(
            "prompt-tokens",
            "prompt_tokens equals the token-id prompt length",
            Outcome::Pass,
            format!("sent {n}, server counted {p}"),
        ),
        Some(p) => result(
            "prompt-tokens",
            "prompt_tokens equals the token-id prompt length",
            Outcome::Fail,
            format!("sent {n}, server counted {p}"),
        ),
        None => result(
            "prompt-tokens",
            "prompt_tokens equals the token-id prompt length",
            Outcome::NotSupported,
            "server reported no prompt_tokens",
        ),
    });

    out.push(match trace.completion_tokens() {
        Some(c) if c == max => result(
            "completion-tokens",
            "completion_tokens equals max_tokens with ignore_eos",
            Outcome::Pass,
            format!("asked {max}, got {c}"),
        ),
        Some(c) => result(
            "completion-tokens",
            "completion_tokens equals max_tokens with ignore_eos",
            Outcome::Fail,
            format!("asked {max}, got {c}"),
        ),
        None => result(
            "completion-tokens",
            "completion_tokens equals max_tokens with ignore_eos",
            Outcome::Fail,
            format!(
                "asked {max}; no completion count reported ({})",
                describe_end(&trace)
            ),
        ),
    });

    out.push(match measure::measure(&trace) {
        Ok(m) if !m.tokens_per_chunk.is_empty() => {
            let sum: u32 = m.tokens_per_chunk.iter().sum();
            let multi = m.tokens_per_chunk.iter().filter(|&&t| t > 1).count();
            let consistent = m.completion_tokens.is_none_or(|c| c == sum);
            result(
                "tokens-per-chunk",
                "per-chunk token counts are known and add up to completion_tokens",
                if consistent { Outcome::Pass } else { Outcome::Fail },
                format!(
                    "attribution {}; {} chunks, {multi} with >1 token, sum {sum}, reported {:?}; first chunks {:?}",
                    m.token_attribution.as_str(),
                    m.tokens_per_chunk.len(),
                    m.completion_tokens,
                    &m.tokens_per_chunk[..m.tokens_per_chunk.len().min(8)]
                ),
            )
        }
        Ok(m) => result(
            "tokens-per-chunk",
            "per-chunk token counts are known and add up to completion_tokens",
            Outcome::NotSupported,
            format!(
                "attribution {}: the stream does not say how many tokens each event carries",
                m.token_attribution.as_str()
            ),
        ),
        Err(e) => result(
            "tokens-per-chunk",
            "per-chunk token counts are known and add up to completion_tokens",
            Outcome::Fail,
            e.to_string(),
        ),
    });
}

async fn cache_checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
    let n = ctx.opts.prompt_tokens;
    let max = ctx.opts.max_tokens;

    // Cache busting: two fresh prompts, neither may be served from cache.
    let mut busted = Vec::new();
    for _ in 0..2 {
        let p = ctx.fresh_prompt(n);
        let spec = ctx.spec(p, max);
        busted.push(ctx.send(&spec).await);
    }
    let cached: Vec<Option<u32>> = busted.iter().map(|t| t.cached_tokens()).collect();
    let hit = cached.iter().any(|c| c.is_some_and(|c| c > 0));
    out.push(result(
        "cache-busting",
        "prompts with a unique random prefix get no cached tokens",
        if hit { Outcome::Fail } else { Outcome::Pass },
        format!("cached_tokens reported: {cached:?}"),
    ));

    // Repeat: the same prompt twice; the second should be served from the prefix cache.
    let p = ctx.fresh_prompt(n);
    let spec1 = ctx.spec(p.clone(), max);
    let spec2 = ctx.spec(p, max);
    let first = ctx.send(&spec1).await;
    let second = ctx.send(&spec2).await;
    let (m1, m2) = (measure::measure(&first), measure::measure(&second));
    let c2 = second.cached_tokens();
    out.push(match (m1, m2) {
        (Ok(a), Ok(b)) => {
            let evidence = format!(
                "second request: cached_tokens {c2:?} of {n}; TTFT {:.1} ms then {:.1} ms",
                a.ttft_ms, b.ttft_ms
            );
            if c2.is_some_and(|c| c > 0) {
                result(
                    "prefix-cache",
                    "repeating a prompt is served from the prefix cache",
                    Outcome::Pass,
                    evidence,
                )
            } else if b.ttft_ms < 0.7 * a.ttft_ms {
                result(
                    "prefix-cache",
                    "repeating a prompt is served from the prefix cache",
                    Outcome::Pass,
                    format!("{evidence} (shorter TTFT; cached tokens not reported)"),
                )
            } else {
                result(
                    "prefix-cache",
                    "repeating a prompt is served from the prefix cache",
                    Outcome::NotSupported,
                    format!("{evidence}: no sign of a prefix cache"),
                )
            }
        }
        (a, b) => result(
            "prefix-cache",
            "repeating a prompt is served from the prefix cache",
            Outcome::Fail,
            format!(
                "requests failed: {} / {}",
                a.err().map(|e| e.to_string()).unwrap_or_default(),
                b.err().map(|e| e.to_string()).unwrap_or_default()
            ),
        ),
    });
}

async fn post_status(
    ctx: &Ctx,
    path: &str,
    body: Option<&'static str>,
) -> Result<(u16, String), String> {
    let mut req = ctx
        .http
        .post(format!("{}{path}", ctx.target.base_url))
        .timeout(Duration::from_secs(60));
    if let Some(b) = body {
        req = req
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(b);
    }
    if let Some(k) = ctx.key() {
        req = req.bearer_auth(k);
    }
    match req.send().await {
        Ok(r) => {
            let s = r.status().as_u16();
            let text = r.text().await.unwrap_or_default();
            Ok((s, text))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn short(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(160) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

async fn flush_checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
    let idle = post_status(ctx, "/flush_cache", None).await;
    let supported = match &idle {
        Ok((404 | 405, _)) => false,
        Ok(_) => true,
        Err(_) => false,
    };
    out.push(match &idle {
        Ok((200, body)) => result(
            "flush-idle",
            "POST /flush_cache succeeds when idle",
            Outcome::Pass,
            format!("200 {:?}", short(body)),
        ),
        Ok((404 | 405, _)) => result(
            "flush-idle",
            "POST /flush_cache succeeds when idle",
            Outcome::NotSupported,
            "no /flush_cache route (not an SGLang server)",
        ),
        Ok((s, body)) => result(
            "flush-idle",
            "POST /flush_cache succeeds when idle",
            Outcome::Fail,
            format!("{s} {:?}", short(body)),
        ),
        Err(e) => result(
            "flush-idle",
            "POST /flush_cache succeeds when idle",
            Outcome::Fail,
            e.clone(),
        ),
    });
    if !supported {
        out.push(result(
            "flush-busy",
            "POST /flush_cache is refused (400) while a request runs",
            Outcome::NotSupported,
            "no /flush_cache route",
        ));
        return;
    }

    // Keep the server busy with a long request, then try to flush while it streams.
    let p = ctx.fresh_prompt(ctx.opts.prompt_tokens);
    let spec = ctx.spec(p, ctx.opts.busy_tokens);
    let http = ctx.http.clone();
    let target = ctx.target.clone();
    let timeouts = ctx.opts.timeouts.clone();
    let long = tokio::spawn(async move { net::send(&http, &target, &spec, &timeouts).await });
    let mut statuses = Vec::new();
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if long.is_finished() {
            break;
        }
        match post_status(ctx, "/flush_cache", None).await {
            Ok((s, _)) => {
                statuses.push(s);
                if s != 200 {
                    break;
                }
            }
            Err(e) => {
                out.push(result(
                    "flush-busy",
                    "POST /flush_cache is refused (400) while a request runs",
                    Outcome::Fail,
                    e,
                ));
                let _ = long.await;
                return;
            }
        }
    }
    let finished = long
        .await
        .map(|t| t.end == StreamEnd::Done)
        .unwrap_or(false);
    let refused = statuses.contains(&400);
    let accepted_busy = statuses.contains(&200);
    out.push(result(
        "flush-busy",
        "POST /flush_cache is refused (400) while a request runs",
        if refused && !accepted_busy && finished {
            Outcome::Pass
        } else if statuses.is_empty() {
            Outcome::NotSupported
        } else {
            Outcome::Fail
        },
        if statuses.is_empty() {
            "the long request finished before a flush could be tried".to_string()
        } else {
            format!(
                "statuses while busy: {statuses:?}; long request {}",
                if finished {
                    "completed"
                } else {
                    "did not complete"
                }
            )
        },
    ));
}

async fn error_checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
    let path = ctx.target.dialect.path();
    let cases: [(&'static str, &'static str, &'static str); 2] = [
        (
            "error-malformed-json",
            "malformed JSON gets a 4xx with a JSON error message",
            "{\"prompt\": [1, 2",
        ),
        (
            "error-bad-max-tokens",
            "a negative max tokens gets a 4xx with a JSON error message",
            if matches!(ctx.target.dialect, Dialect::Sglang) {
                "{\"input_ids\": [101, 102, 103], \"sampling_params\": {\"max_new_tokens\": -5}}"
            } else {
                "{\"prompt\": [101, 102, 103], \"max_tokens\": -5}"
            },
        ),
    ];
    for (id, title, body) in cases {
        out.push(match post_status(ctx, path, Some(body)).await {
            Ok((s, text)) if (400..500).contains(&s) => {
                let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
                let message = json.as_ref().and_then(error_message);
                match message {
                    Some(m) => result(id, title, Outcome::Pass, format!("{s}: {:?}", short(&m))),
                    None => result(
                        id,
                        title,
                        Outcome::Fail,
                        format!("{s} but the body is not a JSON error: {:?}", short(&text)),
                    ),
                }
            }
            Ok((s, text)) => result(id, title, Outcome::Fail, format!("{s}: {:?}", short(&text))),
            Err(e) => result(id, title, Outcome::Fail, e),
        });
    }
    // The server must still serve after bad input.
    let p = ctx.fresh_prompt(32);
    let spec = ctx.spec(p, 2);
    let after = ctx.send(&spec).await;
    out.push(result(
        "serves-after-errors",
        "the server still serves after bad requests",
        if after.failure().is_none() {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        describe_end(&after),
    ));
}

/// The message of an error body in any of the shapes servers use: `{"message"}` (SGLang, vLLM),
/// `{"error": {"message"}}` (OpenAI, llama.cpp, SGLang native), `{"error": "text"}`, `{"detail"}` (FastAPI).
pub fn error_message(v: &serde_json::Value) -> Option<String> {
    let s = |x: &serde_json::Value| x.as_str().map(str::to_string);
    v.get("message")
        .and_then(s)
        .or_else(|| v.get("error").and_then(|e| e.get("message")).and_then(s))
        .or_else(|| v.get("error").and_then(s))
        .or_else(|| v.get("detail").map(|d| d.to_string()))
}

/// Render the results as a table.
pub fn render_table(results: &[CheckResult]) -> String {
    let idw = results.iter().map(|r| r.id.len()).max().unwrap_or(2).max(5);
    let mut s = format!("{:<idw$}  {:<13}  evidence\n", "check", "result");
    s.push_str(&format!("{}\n", "-".repeat(idw + 2 + 13 + 2 + 8)));
    for r in results {
        s.push_str(&format!(
            "{:<idw$}  {:<13}  {}\n",
            r.id,
            r.outcome.as_str(),
            r.evidence
        ));
    }
    let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
    s.push_str(&format!(
        "\n{} passed, {} failed, {} not supported\n",
        count(Outcome::Pass),
        count(Outcome::Fail),
        count(Outcome::NotSupported)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_shapes() {
        let cases = [
            (
                r#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#,
                "bad",
            ),
            (r#"{"error":{"message":"bad"}}"#, "bad"),
            (r#"{"error":"bad"}"#, "bad"),
        ];
        for (body, want) in cases {
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(error_message(&v).as_deref(), Some(want), "{body}");
        }
        assert_eq!(error_message(&serde_json::json!({"ok": 1})), None);
    }

    #[test]
    fn table_counts_outcomes() {
        let rs = [
            result("a", "t", Outcome::Pass, "x"),
            result("b", "t", Outcome::Fail, "y"),
            result("c", "t", Outcome::NotSupported, "z"),
        ];
        let t = render_table(&rs);
        assert!(t.contains("1 passed, 1 failed, 1 not supported"), "{t}");
        assert!(t.contains("FAIL"));
    }
}
