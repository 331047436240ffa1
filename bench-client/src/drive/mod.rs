//! Drivers: run a sweep, a load run or a multi-turn load run end to end. Scheduling and pacing, progress, resume, crash
//! handling, Ctrl-C, and the embedded mock when no server is given.

pub mod backoff;
pub mod capacity;
pub mod cpu;
#[cfg(feature = "embedded-mock")]
pub mod embedded;
#[cfg(feature = "embedded-mock")]
pub mod engine;
pub mod load;
mod pacer;
mod progress;
mod run;
pub mod sessions;
pub mod sweep;
#[cfg(feature = "embedded-mock")]
pub mod twin;

/// The embedded mock's configuration, which a run on the engine path takes.
#[cfg(feature = "embedded-mock")]
pub type MockConfig = mock_server::Config;

/// Without the embedded mock there is no engine path to configure.
#[cfg(not(feature = "embedded-mock"))]
#[derive(Clone, Debug, PartialEq)]
pub enum MockConfig {}

/// Where runs on the engine path (`--simulate`) say the server is.
pub const ENGINE_URL: &str = "engine://embedded-mock";

pub use capacity::{run_capacity, CapacityConfig, CapacityOutcome};
pub use cpu::process_cpu_seconds;
pub use load::{run_load, LoadConfig, LoadOutcome};
pub use sessions::{run_sessions, SessionsConfig};
pub use sweep::{run_sweep, run_sweep_with, OnCrash, PromptSource, SweepConfig, SweepOutcome};
