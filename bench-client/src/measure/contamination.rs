//! Whether a request measured what it asked for: the prompt length the server counted and the
//! tokens it served from its prefix cache.

use crate::trace::RequestTrace;

/// Contamination reasons for a trace that asked for `context_tokens` from a cold cache.
pub fn contamination(trace: &RequestTrace, context_tokens: u32) -> Vec<String> {
    let mut out = Vec::new();
    if trace.prompt_tokens_sent.is_some() {
        if let Some(p) = trace.reported_prompt_tokens() {
            if p != context_tokens {
                out.push(format!(
                    "server reported {p} prompt tokens, {context_tokens} were sent"
                ));
            }
        }
    }
    if let Some(c) = trace.cached_tokens().filter(|&c| c > 0) {
        out.push(format!(
            "server served {c} prompt tokens from its prefix cache"
        ));
    }
    out
}
