//! The embedded mock: with no `--url`, start the simulated server in-process on a free loopback port.
//! With the twin (`twin/`, the calibrated preset), the only place the client touches the mock crate; all
//! requests still go over HTTP.

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
        Self::start_config(Self::config(preset, None, sets)?).await
    }

    /// The configuration of `preset` (or of the preset file, when given) with `key=value`
    /// overrides on a free port, `/metrics` on unless an override turns it off, validated:
    /// checked before anything starts.
    pub fn config(
        preset: &str,
        preset_file: Option<&std::path::Path>,
        sets: &[(String, String)],
    ) -> anyhow::Result<mock_server::Config> {
        let mut config = match preset_file {
            Some(p) => mock_server::Config::preset_file(p)?,
            None => mock_server::Config::preset(preset)
                .map_err(|e| anyhow::anyhow!("mock preset {preset:?}: {e}"))?,
        };
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
        config
            .validate()
            .map_err(|e| anyhow::anyhow!("embedded mock: {e}"))?;
        Ok(config)
    }

    /// Start the mock with a configuration already built and validated.
    pub async fn start_config(config: mock_server::Config) -> anyhow::Result<Self> {
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
