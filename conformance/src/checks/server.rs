//! The server checks: `/health` and `/v1/models`, and the target (dialect, model) they discover.

use bench_client::net::{self, Target};

use super::outcome::{result, CheckResult, Outcome};
use super::CheckOptions;

/// Checks health and the model list, and returns the target the other checks send to: the dialect
/// and model of `opts`, or what the server says where `opts` leaves them open.
pub(super) async fn discover(
    http: &net::Http,
    opts: &CheckOptions,
    out: &mut Vec<CheckResult>,
) -> Target {
    let base = opts.url.trim_end_matches('/').to_string();
    let key = opts.api_key.clone();

    // /health
    let healthy = net::health(http, &base, key.as_deref()).await;
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
        None => net::probe_dialect(http, &base, key.as_deref()).await,
    };
    let model = match &opts.model {
        Some(m) => Some(m.clone()),
        None => net::first_model(http, &base, key.as_deref()).await,
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

    Target {
        base_url: base,
        dialect,
        model,
        api_key: key,
    }
}
