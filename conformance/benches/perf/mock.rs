//! The mock under test: in this process, or as a child process running the `mock-server` binary
//! (`--external`), with its ground truth read in-process or from `/debug/requests/{rid}`.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bench_client::net;
use mock_server::{Config, MockServer, RequestTruth};
use tokio::time::Instant;

use crate::report::target_dir;

pub(crate) enum Mock {
    InProcess(MockServer),
    Child {
        child: std::process::Child,
        url: String,
    },
}

impl Mock {
    /// Starts `preset` with `key=value` overrides on a free loopback port.
    pub(crate) async fn start(
        preset: &str,
        sets: &[(&str, String)],
        external: bool,
    ) -> Result<Mock> {
        if !external {
            let mut c = Config::preset(preset)?;
            c.host = "127.0.0.1".into();
            c.port = 0;
            for (k, v) in sets {
                c.set(k, v)?;
            }
            return Ok(Mock::InProcess(MockServer::start(c).await?));
        }
        // PERF_MOCK_BIN runs another build of the mock (for A/B runs against one client build).
        let bin = match std::env::var_os("PERF_MOCK_BIN") {
            Some(p) => std::path::PathBuf::from(p),
            None => target_dir()?.join("release").join("mock-server"),
        };
        if !bin.exists() {
            bail!(
                "{} not found: build it first with `cargo build --release -p mock-server` \
                 (same CARGO_TARGET_DIR)",
                bin.display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        // PERF_MOCK_CPUS pins the mock to those CPUs (`taskset -c`, which execs it in place, so
        // the child's pid is the mock's); pin this process apart with `taskset -c` on the bench.
        let mut cmd = match std::env::var("PERF_MOCK_CPUS") {
            Ok(cpus) => {
                let mut c = std::process::Command::new("taskset");
                c.args(["-c", &cpus]).arg(&bin);
                c
            }
            Err(_) => std::process::Command::new(&bin),
        };
        cmd.args([
            "--preset",
            preset,
            "--host",
            "127.0.0.1",
            "--debug-endpoints",
        ])
        .args(["--port", &port.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null());
        // TOKIO_WORKER_THREADS sizes this process's runtime (the client); the mock's runtime is sized
        // by PERF_MOCK_WORKER_THREADS, or by tokio's default (one worker per core).
        cmd.env_remove("TOKIO_WORKER_THREADS");
        if let Ok(n) = std::env::var("PERF_MOCK_WORKER_THREADS") {
            cmd.env("TOKIO_WORKER_THREADS", n);
        }
        for (k, v) in sets {
            cmd.arg("--set").arg(format!("{k}={v}"));
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mock = Mock::Child {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !net::health(&http, &mock.url(), None).await {
            if Instant::now() > deadline {
                mock.stop().await;
                bail!("the mock-server process did not become healthy within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(mock)
    }

    pub(crate) fn url(&self) -> String {
        match self {
            Mock::InProcess(s) => s.url(),
            Mock::Child { url, .. } => url.clone(),
        }
    }

    /// The process that runs the mock (`None`: this one).
    pub(crate) fn pid(&self) -> Option<u32> {
        match self {
            Mock::InProcess(_) => None,
            Mock::Child { child, .. } => Some(child.id()),
        }
    }

    pub(crate) fn label(&self) -> &'static str {
        match self {
            Mock::InProcess(_) => "in-process (mock and load generator share one process)",
            Mock::Child { .. } => {
                "separate process (mock-server binary; this process is the client)"
            }
        }
    }

    pub(crate) async fn truth(&self, http: &reqwest::Client, rid: &str) -> Result<RequestTruth> {
        match self {
            Mock::InProcess(s) => s
                .truth()
                .request(rid)
                .ok_or_else(|| anyhow!("no ground truth for {rid}")),
            Mock::Child { url, .. } => {
                let r = http
                    .get(format!("{url}/debug/requests/{rid}"))
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("GET /debug/requests/{rid}: HTTP {}", r.status());
                }
                Ok(r.json::<RequestTruth>().await?)
            }
        }
    }

    pub(crate) async fn stop(self) {
        match self {
            Mock::InProcess(s) => s.shutdown().await,
            Mock::Child { mut child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
