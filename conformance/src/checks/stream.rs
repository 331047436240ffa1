//! The stream checks: `[DONE]`, usage, prompt and completion counts, tokens per chunk.

use bench_client::measure;
use bench_client::trace::StreamEnd;

use super::outcome::{result, CheckResult, Outcome};
use super::request::{describe_end, Ctx};

pub(super) async fn checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
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
