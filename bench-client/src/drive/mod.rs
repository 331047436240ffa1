//! Drivers: run a sweep, a load run or a multi-turn load run end to end. Scheduling and pacing, progress, resume, crash
//! handling, Ctrl-C, and the embedded mock when no server is given.

pub mod backoff;
pub mod cpu;
#[cfg(feature = "embedded-mock")]
pub mod embedded;
#[cfg(feature = "embedded-mock")]
pub mod engine;
pub mod load;
mod pacer;
mod piece;
mod progress;
pub use progress::fit_spinner;
mod run;
pub mod sessions;
pub mod sweep;

/// The embedded mock's configuration, which a run on the engine path takes.
#[cfg(feature = "embedded-mock")]
pub type MockConfig = mock_server::Config;

/// Without the embedded mock there is no engine path to configure.
#[cfg(not(feature = "embedded-mock"))]
#[derive(Clone, Debug, PartialEq)]
pub enum MockConfig {}

/// A duration in ns, saturating: an instant past `u64::MAX` ns never comes.
pub(crate) fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Where runs on the engine path (`--simulate`) say the server is.
pub const ENGINE_URL: &str = "engine://embedded-mock";

/// Where a run's requests go, resolved once before it starts: a server at `target`, or, with
/// `engine`, this mock's engine on its exact virtual clock, no HTTP (`target` then says
/// [`ENGINE_URL`]).
#[derive(Clone, Debug)]
pub struct Destination {
    /// The server (or the engine path's stand-for) as the manifest names it.
    pub target: crate::net::Target,
    /// The engine path's configuration, when the run goes there.
    pub engine: Option<MockConfig>,
}

impl Destination {
    /// A server reached over HTTP.
    pub fn server(target: crate::net::Target) -> Self {
        Self {
            target,
            engine: None,
        }
    }
}

pub use cpu::process_cpu_seconds;
pub use load::{run_load, run_load_with, LoadConfig, LoadOutcome};
pub use sessions::{run_sessions, run_sessions_with, SessionsConfig};
pub use sweep::{
    run_sweep, run_sweep_with, Checked, OnCrash, PromptSource, SweepConfig, SweepOutcome,
};
