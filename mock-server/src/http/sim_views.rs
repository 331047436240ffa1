//! What the engine path's server would answer on `GET /metrics` and `GET /server_info`: the HTTP
//! layer's own renderings of the simulator's state.

use crate::engine::sim::Simulator;

impl Simulator {
    /// `GET /metrics` as the server would answer now.
    pub fn metrics_text(&self) -> String {
        super::prometheus::text(&self.stats(), self.budget().kv_pool_tokens, self.config())
    }

    /// `GET /server_info` as the server would answer now.
    pub fn server_info(&self) -> serde_json::Value {
        super::routes::server_info_value(self.config(), self.budget(), &self.stats())
    }
}
