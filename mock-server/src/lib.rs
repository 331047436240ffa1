//! A simulated SGLang server: radix cache, chunked prefill, GPU memory budget, speculative
//! decoding and exact ground truth, for regression-checking benchmark arithmetic without a GPU.
//!
//! HTTP in ([`http`]) -> requests -> [`engine`] (simulation and ground truth) -> events -> HTTP
//! out. The engine knows no HTTP; [`server`] puts both on a socket ([`listen`]), [`cli`] builds
//! a [`Config`] from flags.

pub mod cli;
pub mod clock;
pub mod config;
pub mod conn;
pub mod engine;
pub mod http;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod radix;
pub mod server;
pub mod tokenizer;
pub mod truth;

pub use config::{Config, ConfigError};
pub use engine::sim::{Refusal, SimEvent, SimRequest, Simulator};
pub use http::{app, AppState};
pub use server::{MockServer, ServeOptions};
pub use truth::{
    ChunkTruth, FinishTruth, GroundTruth, PrefillPass, RequestTruth, DEFAULT_TRUTH_WINDOW,
};
