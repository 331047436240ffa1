//! The error checks: bad requests get a 4xx with a JSON error message, and the server still serves.

use bench_client::api::Dialect;

use super::outcome::{result, CheckResult, Outcome};
use super::request::{describe_end, post_status, short, Ctx};

pub(super) async fn checks(ctx: &mut Ctx, out: &mut Vec<CheckResult>) {
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
}
