//! Streamed responses captured byte for byte from a server, and cut into reads as a socket
//! delivers them: what the SSE benches and the allocation test feed the client's decoder.

use anyhow::{anyhow, bail, Result};
use bench_client::api::Dialect;
use bench_client::plan::prompt::{Prompt, PromptGen};
use bench_client::plan::RequestSpec;

/// The exact bytes of one streamed response of `max_tokens` to a `prompt_tokens`-token prompt
/// (token ids; chat, which takes text, gets as many words, one mock token each).
pub async fn capture(
    base_url: &str,
    dialect: Dialect,
    prompt_tokens: u32,
    max_tokens: u32,
) -> Result<Vec<u8>> {
    let prompt = if dialect == Dialect::OpenAiChat {
        Prompt::Text(vec!["word"; prompt_tokens as usize].join(" "))
    } else {
        Prompt::TokenIds(PromptGen::new(3).token_ids(prompt_tokens, 0))
    };
    let spec = RequestSpec::new(format!("capture-{}", dialect.as_str()), prompt, max_tokens);
    let body = dialect
        .build_body(&spec, Some("mock/small-cpu-demo"))
        .map_err(|e| anyhow!(e))?;
    let resp = reqwest::Client::new()
        .post(format!("{base_url}{}", dialect.path()))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        bail!("capture {}: HTTP {}", dialect.as_str(), resp.status());
    }
    Ok(resp.bytes().await?.to_vec())
}

/// One read per SSE event (each ending with its blank line), as the mock (and uvicorn) write them.
pub fn per_event_reads(stream: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < stream.len() {
        if stream[i] == b'\n' && stream[i + 1] == b'\n' {
            out.push(&stream[start..i + 2]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < stream.len() {
        out.push(&stream[start..]);
    }
    out
}
