//! The embedded mock: with no `--url`, start the simulated server in-process on a free loopback port.
//! The only place the client touches the mock crate; all requests still go over HTTP.

use anyhow::Context;

/// A running in-process mock server.
pub struct EmbeddedMock {
    server: mock_server::MockServer,
}

impl std::fmt::Debug for EmbeddedMock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedMock")
            .field("url", &self.url())
            .finish()
    }
}

impl EmbeddedMock {
    /// Start `preset` with `key=value` overrides; the port defaults to a free one, and `/metrics`
    /// is on (as a deployment started with `--enable-metrics`) unless an override turns it off.
    pub async fn start(preset: &str, sets: &[(String, String)]) -> anyhow::Result<Self> {
        let mut config = mock_server::Config::preset(preset)
            .map_err(|e| anyhow::anyhow!("mock preset {preset:?}: {e}"))?;
        for (k, v) in [("port", "0"), ("enable_metrics", "true")] {
            config
                .set(k, v)
                .map_err(|e| anyhow::anyhow!("mock setting {k}={v}: {e}"))?;
        }
        for (k, v) in sets {
            config
                .set(k, v)
                .map_err(|e| anyhow::anyhow!("--mock-set {k}={v}: {e}"))?;
        }
        let server = mock_server::MockServer::start(config)
            .await
            .context("starting the embedded mock server")?;
        Ok(Self { server })
    }

    /// Base URL.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Stop the server.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}
