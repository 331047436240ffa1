//! Secrets and outputs, as a user meets them: keys, passwords and URL credentials never written
//! or shown; no output over an input, a results file or its manifest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use axum::routing::{get, post};
use axum::Router;
use support::server::{read, serve, STREAM};
use support::{run, stderr};

/// The recorded SGLang `/server_info`, with secrets set as a server started with
/// `--api-key --admin-api-key --ssl-keyfile-password` reports them, and one more field holding
/// the client's own key.
fn server_info_with_keys() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/streams/real/sglang_info_server_info.json"
    );
    let rec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut info: serde_json::Value =
        serde_json::from_str(rec["reads"][0]["data"].as_str().unwrap()).unwrap();
    assert!(info.get("api_key").is_some() && info.get("ssl_keyfile_password").is_some());
    info["api_key"] = "sk-server-secret-123".into();
    info["admin_api_key"] = "adm-secret-456".into();
    info["ssl_keyfile_password"] = "sslpw-789".into();
    info["served_for"] = "sk-client-own-000".into();
    info.to_string()
}

fn sglang_app(info: String) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/get_model_info", get(|| async { "{}" }))
        .route(
            "/server_info",
            get(move || {
                let info = info.clone();
                async move { info }
            }),
        )
        .route("/generate", post(|| async { STREAM }))
}

#[test]
fn secrets_never_reach_results_manifest_report_or_stderr() {
    let url = serve(sglang_app(server_info_with_keys()));
    let with_user = url.replace("http://", "http://alice:hunter2pw@");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let html = dir.path().join("r.html");
    let o = run(&[
        "load",
        "--url",
        &with_user,
        "--api-key",
        "sk-client-own-000",
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--input-len",
        "8",
        "--output-len",
        "2",
        "--no-metrics",
        "--out",
        out.to_str().unwrap(),
    ]);
    let r = run(&[
        "report",
        out.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let manifest = read(&out.with_file_name("r.jsonl.manifest.jsonl"));
    // The server's description is there, redacted, not left out.
    assert!(
        manifest.contains("\"api_key\":\"<redacted>\"") && manifest.contains("\"model_path\""),
        "{manifest}"
    );
    let all = [
        read(&out),
        manifest,
        read(&html),
        stderr(&o),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    ]
    .concat();
    for secret in [
        "sk-server-secret-123",
        "adm-secret-456",
        "sslpw-789",
        "sk-client-own-000",
        "hunter2pw",
    ] {
        assert!(!all.contains(secret), "{secret} was written");
    }
}

#[test]
fn a_server_quoting_the_key_or_a_url_carrying_one_reveals_nothing() {
    let key = "sk-client-own-000";
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/get_model_info", get(|| async { "{}" }))
        .route(
            "/server_info",
            get(|| async { r#"{"note": "served for sk-client-own-000 only"}"# }),
        )
        .route(
            "/generate",
            post(|| async {
                (
                    axum::http::StatusCode::UNAUTHORIZED,
                    r#"{"error": {"message": "Incorrect API key provided: sk-client-own-000"}}"#,
                )
            }),
        );
    let url = serve(app);
    let dir = tempfile::tempdir().unwrap();
    for (name, url) in [
        ("quoted", url.clone()),
        ("query", format!("{url}/?api_key=qs-secret-999")),
    ] {
        let out = dir.path().join(format!("{name}.jsonl"));
        let args = [
            "--concurrency",
            "1",
            "--num-requests",
            "2",
            "--input-len",
            "8",
        ];
        let o = run(&[
            &["load", "--url", &url, "--api-key", key, "--no-metrics"][..],
            &args[..],
            &["--output-len", "2", "--out", out.to_str().unwrap()][..],
        ]
        .concat());
        let all = [
            std::fs::read_to_string(&out).unwrap_or_default(),
            std::fs::read_to_string(out.with_extension("jsonl.manifest.jsonl")).unwrap_or_default(),
            stderr(&o),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ]
        .concat();
        assert!(all.contains("<redacted>"), "{name}: {all}");
        for secret in [key, "qs-secret-999"] {
            assert!(!all.contains(secret), "{name}: {secret} was written: {all}");
        }
    }
}

#[test]
fn secrets_in_manifests_written_before_redaction_are_not_shown() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (name, secret) in [("a.jsonl", "old-secret-aaa"), ("b.jsonl", "old-secret-bbb")] {
        let out = dir.path().join(name);
        let o = run(&[
            "sweep",
            "--simulate",
            "--contexts",
            "1k",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--no-progress",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let m = out.with_file_name(format!("{name}.manifest.jsonl"));
        let text = read(&m);
        let mut v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        v["server_info"]["api_key"] = secret.into();
        std::fs::write(&m, format!("{v}\n")).unwrap();
        files.push(out);
    }
    let (a, b) = (files[0].to_str().unwrap(), files[1].to_str().unwrap());
    let html = dir.path().join("c.html");
    let c = run(&["compare", a, b, "--html", html.to_str().unwrap()]);
    let r = run(&[
        "report",
        a,
        "--html",
        dir.path().join("r.html").to_str().unwrap(),
    ]);
    assert_eq!(c.status.code(), Some(0), "{}", stderr(&c));
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let shown = [
        String::from_utf8_lossy(&c.stdout).into_owned(),
        stderr(&c),
        read(&html),
        read(&dir.path().join("r.html")),
    ]
    .concat();
    assert!(
        shown.contains("server_info.api_key"),
        "the difference is named"
    );
    assert!(!shown.contains("old-secret"), "a secret was shown");
}

/// Bytes of a file, or `None` when absent.
fn bytes(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(p).ok()
}

#[test]
fn outputs_that_name_an_input_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("r.jsonl");
    let man = dir.path().join("r.jsonl.manifest.jsonl");
    std::fs::write(&res, "{\"measurements\": 1}\n").unwrap();
    std::fs::write(&man, "{\"kind\": \"load\"}\n").unwrap();
    let other = dir.path().join("o.jsonl");
    std::fs::write(&other, "{\"other\": 1}\n").unwrap();
    let (r, m, o) = (
        res.to_str().unwrap(),
        man.to_str().unwrap(),
        other.to_str().unwrap(),
    );
    // The same file under another spelling.
    let dotted = format!("{}/./r.jsonl", dir.path().display());
    let before = (bytes(&res), bytes(&man), bytes(&other));
    let cases: Vec<Vec<&str>> = vec![
        vec!["report", r, "--html", r],
        vec!["report", r, "--plot", m],
        vec!["report", r, "--html", &dotted],
        vec!["compare", r, o, "--html", o],
        vec!["compare", r, o, "--plot", m],
        vec!["import", r, "--out", r],
        vec![
            "sweep",
            "--simulate",
            "--contexts",
            "1k",
            "--out",
            o,
            "--resume",
            "--plot",
            o,
        ],
    ];
    for args in cases {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("would overwrite"), "{args:?}");
        assert_eq!(
            (bytes(&res), bytes(&man), bytes(&other)),
            before,
            "{args:?}"
        );
    }
}

#[test]
fn an_empty_key_variable_gives_way_to_the_next() {
    let authorized = |h: axum::http::HeaderMap| {
        h.get("authorization")
            .is_some_and(|v| v.as_bytes() == b"Bearer sg-key-12345")
    };
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/get_model_info", get(|| async { "{}" }))
        .route("/server_info", get(|| async { "{}" }))
        .route(
            "/generate",
            post(move |h: axum::http::HeaderMap| async move {
                if authorized(h) {
                    (axum::http::StatusCode::OK, STREAM)
                } else {
                    (axum::http::StatusCode::UNAUTHORIZED, "no key")
                }
            }),
        );
    let url = serve(app);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.jsonl");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_bench-client"))
        .args(["load", "--url", &url, "--api", "sglang", "--no-metrics"])
        .args([
            "--concurrency",
            "1",
            "--num-requests",
            "2",
            "--input-len",
            "8",
        ])
        .args(["--output-len", "2", "--out", out.to_str().unwrap()])
        .env("OPENAI_API_KEY", "")
        .env("SGLANG_API_KEY", "sg-key-12345")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
