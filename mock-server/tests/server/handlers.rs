//! The router without a socket: `app()` driven with `tower::ServiceExt::oneshot` (axum's
//! `examples/testing`), checked against what the real-socket tests establish.

use crate::common::*;
use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use mock_server::engine::EngineHandle;
use mock_server::{app, AppState, GroundTruth};
use std::sync::Arc;
use tower::ServiceExt;

/// The router over a fresh engine, as `MockServer::start` builds it (no start-up period).
fn router(c: Config) -> (axum::Router, GroundTruth) {
    let truth = GroundTruth::default();
    let crashed = Arc::new(tokio::sync::watch::channel(None::<String>).0);
    let engine = EngineHandle::spawn(c, truth.clone(), crashed);
    (app(AppState::new(engine)), truth)
}

/// Sends one request through the router; the status, the content type and the body.
async fn call(r: axum::Router, req: Request<Body>) -> (StatusCode, Option<String>, Vec<u8>) {
    let resp = r.oneshot(req).await.unwrap();
    let status = resp.status();
    let kind = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string());
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, kind, body)
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn oneshot_health_is_an_empty_200() {
    let (r, _) = router(Config::default());
    let (status, _, body) = call(r, get("/health")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.is_empty());
}

#[tokio::test(start_paused = true)]
async fn oneshot_get_model_info_names_the_model_path() {
    let c = Config::preset(KIMI).unwrap();
    let (r, _) = router(c.clone());
    let (status, kind, body) = call(r.clone(), get("/get_model_info")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kind.as_deref(), Some("application/json"));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["model_path"], c.model_path);
    assert_eq!(v["is_generation"], true);
    let (_, _, same) = call(r, get("/model_info")).await;
    assert_eq!(serde_json::from_slice::<Value>(&same).unwrap(), v);
}

#[tokio::test(start_paused = true)]
async fn oneshot_malformed_json_is_a_400_naming_the_problem() {
    let (r, truth) = router(Config::default());
    let (status, _, body) = call(r, post("/generate", r#"{"input_ids": [1, 2]"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_slice(&body).unwrap();
    // SGLang's request validation answers in the OpenAI error shape on every route.
    assert_eq!(v["type"], "Bad Request", "{v}");
    let msg = v["message"].as_str().unwrap_or_default();
    assert!(msg.contains("malformed JSON body"), "{msg}");
    assert!(truth.all().is_empty(), "nothing reached the engine");
}

#[tokio::test(start_paused = true)]
async fn oneshot_non_streamed_generate_matches_the_ground_truth() {
    let (r, truth) = router(Config::default());
    let body = json!({"rid": "ns", "input_ids": ids(300, 9),
        "sampling_params": {"max_new_tokens": 24, "ignore_eos": true}});
    let (status, kind, bytes) = call(r, post("/generate", &body.to_string())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kind.as_deref(), Some("application/json"));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let t = truth.request("ns").unwrap();
    assert_eq!(t.finish, FinishTruth::Length);
    // The answer as the real-socket test `non_streaming_generate_and_completions` reads it.
    let out: Vec<u32> = serde_json::from_value(v["output_ids"].clone()).unwrap();
    assert_eq!((out.len(), t.completion_tokens), (24, 24));
    assert_eq!(v["text"], mock_server::tokenizer::decode(&out));
    let m = &v["meta_info"];
    let want = json!({"type": "length", "length": 24});
    assert_eq!((&m["id"], &m["finish_reason"]), (&json!("ns"), &want));
    assert_eq!(
        (&m["prompt_tokens"], &m["cached_tokens"]),
        (&json!(300), &json!(0))
    );
}

#[tokio::test(start_paused = true)]
async fn oneshot_unknown_path_is_a_json_404() {
    let (r, _) = router(Config::default());
    let (status, _, body) = call(r, get("/no/such/route")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v, json!({"detail": "Not Found"}));
}

/// A recorded SGLang 0.5.23 exchange (fixtures/streams/real): its request, status and body.
fn recorded(name: &str) -> (String, serde_json::Value, u16, String) {
    let path = format!(
        "{}/../fixtures/streams/real/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let body: String = t["reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["data"].as_str().unwrap())
        .collect();
    (
        t["request"]["path"].as_str().unwrap().to_string(),
        t["request"]["body"].clone(),
        u16::try_from(t["status"].as_u64().unwrap()).unwrap(),
        body,
    )
}

/// The error message of an error body: an in-band event's, a native or an OpenAI one's.
fn error_message(body: &str) -> String {
    let json = body
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| *d != "[DONE]"))
        .unwrap_or(body);
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v.pointer("/error/message")
        .or_else(|| v.get("message"))
        .and_then(|m| m.as_str())
        .unwrap()
        .to_string()
}

/// Bad input answered as SGLang answered it: the same status, the same stream end (a streamed
/// native request gets HTTP 200, its error as an event, then `[DONE]`), the same message (SGLang's
/// pydantic errors wrap the mock's message in a longer text), and the mock serves on after each.
#[tokio::test(start_paused = true)]
async fn recorded_sglang_errors_are_answered_alike() {
    let mut c = Config::default();
    c.context_length = 4096;
    c.served_model_name = "tiny-llama".into();
    let (r, _) = router(c);
    for name in [
        "sglang_native_bad_max_new_tokens",
        "sglang_native_too_long_prompt",
        "sglang_max_tokens_zero",
        "sglang_max_tokens_zero_plain",
        "sglang_bad_temperature",
        "sglang_too_long_prompt",
        "sglang_bad_request",
    ] {
        let (path, body, status, want) = recorded(name);
        let (got_status, kind, got) = call(r.clone(), post(&path, &body.to_string())).await;
        let got = String::from_utf8(got).unwrap();
        assert_eq!(got_status.as_u16(), status, "{name}: {got}");
        if status == 200 {
            assert_eq!(
                kind.as_deref(),
                Some("text/event-stream; charset=utf-8"),
                "{name}"
            );
            assert!(got.ends_with("data: [DONE]\n\n"), "{name}: {got}");
        }
        let (want_msg, got_msg) = (error_message(&want), error_message(&got));
        assert!(
            want_msg.contains(&got_msg),
            "{name}: SGLang said {want_msg:?}, the mock {got_msg:?}"
        );
        let (ok, _, _) = call(
            r.clone(),
            post(
                "/generate",
                r#"{"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}"#,
            ),
        )
        .await;
        assert_eq!(ok, StatusCode::OK, "the mock stopped serving after {name}");
    }
}
