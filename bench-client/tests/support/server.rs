//! Small HTTP servers for the tests that drive the client against one: an axum app on a thread
//! of its own.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use axum::Router;

/// A two-token SGLang stream: a success for `--output-len 2`.
pub const STREAM: &str = "data: {\"text\":\"ab\",\"output_ids\":[5,6],\"meta_info\":{\"id\":\"x\",\"prompt_tokens\":8,\"completion_tokens\":2,\"cached_tokens\":0,\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n";

pub fn respond(status: StatusCode, body: impl Into<Body>) -> Response {
    Response::builder()
        .status(status)
        .body(body.into())
        .unwrap()
}

/// Serves `app` on a runtime of its own thread; returns its base URL.
pub fn serve(app: Router) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

/// A file's text, empty when absent.
pub fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}
