//! The `/flush_cache` checks: it succeeds when idle and is refused while a request runs.

use std::time::Duration;

use bench_client::net;
use bench_client::trace::StreamEnd;

use super::outcome::{result, CheckResult, Outcome};
use super::request::{post_status, short, Ctx};

pub(super) async fn checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
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
