//! The prefix-cache checks: unique prompts get no cached tokens, a repeated prompt does.

use bench_client::measure;

use super::outcome::{result, CheckResult, Outcome};
use super::request::Ctx;

pub(super) async fn checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
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
