//! A simulated SGLang server: radix cache, chunked prefill, GPU memory budget, speculative
//! decoding and exact ground truth, for regression-checking benchmark arithmetic without a GPU.

pub mod clock;
pub mod config;
pub mod engine;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod radix;
pub mod server;
pub mod tokenizer;
pub mod truth;
pub mod wire;

pub use config::{Config, ConfigError};
pub use http::{app, AppState};
pub use server::MockServer;
pub use truth::{ChunkTruth, FinishTruth, GroundTruth, PrefillPass, RequestTruth};
