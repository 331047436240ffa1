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
    let msg = v["error"]["message"].as_str().unwrap_or_default();
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
