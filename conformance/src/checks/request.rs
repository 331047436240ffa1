//! Building and sending the checks' requests: fresh prompts, specs, streams and plain POSTs.

use std::time::Duration;

use bench_client::net::{self, Target};
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::RequestSpec;
use bench_client::trace::RequestTrace;

use super::CheckOptions;

/// What every check needs: the client, the target, the options and a source of fresh prompts.
pub(super) struct Ctx {
    pub(super) http: net::Http,
    pub(super) target: Target,
    pub(super) opts: CheckOptions,
    pub(super) prompts: PromptGen,
    pub(super) next: u64,
}

impl Ctx {
    pub(super) fn key(&self) -> Option<&str> {
        self.opts.api_key.as_deref()
    }

    pub(super) fn fresh_prompt(&mut self, n: u32) -> Prompt {
        self.next += 1;
        Prompt::TokenIds(self.prompts.token_ids(n, self.next))
    }

    pub(super) fn spec(&mut self, prompt: Prompt, max_tokens: u32) -> RequestSpec {
        self.next += 1;
        RequestSpec::new(
            format!("conformance-{}-{}", self.opts.seed, self.next),
            prompt,
            max_tokens,
        )
    }

    pub(super) async fn send(&self, spec: &RequestSpec) -> RequestTrace {
        net::send(&self.http, &self.target, spec, &self.opts.timeouts).await
    }
}

/// How a request ended, for evidence.
pub(super) fn describe_end(t: &RequestTrace) -> String {
    match t.failure() {
        Some(f) => format!("{}: {}", f.kind.as_str(), f.message),
        None => format!("{:?}", t.end),
    }
}

/// POSTs `body` (JSON, where given) to `path` and returns the status and the body text.
pub(super) async fn post_status(
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

/// The first 160 characters of a body, for evidence.
pub(super) fn short(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(160) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}
