//! Live protocol checks: what the mock assumes about an LLM server, checked against any server.
//!
//! Each check sends real requests through the benchmark client's own request path
//! ([`bench_client::net::send`]) and states what it saw as evidence, so a failing check tells the
//! user what the server did. The same checks run against the mock in `cargo test`
//! (`tests/live_checks.rs`), so the mock passes exactly what a real server passes.
//!
//! One module per group of checks, run in this order: `server` (health, models), `stream`, `cache`,
//! `flush`, `errors`. `request` builds and sends the checks' requests; `table` renders the results.

mod cache;
mod errors;
mod flush;
mod options;
mod outcome;
mod request;
mod server;
mod stream;
mod table;

pub use errors::error_message;
pub use options::CheckOptions;
pub use outcome::{CheckResult, Outcome};
pub use table::render_table;

use bench_client::net;
use bench_client::plan::prompt::PromptGen;

use outcome::result;
use request::Ctx;

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
    let mut out = Vec::new();
    let target = server::discover(&http, &opts, &mut out).await;
    let mut ctx = Ctx {
        http,
        target,
        prompts: PromptGen::new(opts.seed),
        next: 0,
        opts,
    };

    stream::checks(&mut ctx, &mut out).await;
    cache::checks(&mut ctx, &mut out).await;
    flush::checks(&mut ctx, &mut out).await;
    errors::checks(&mut ctx, &mut out).await;
    out
}
