//! Exit codes, the same for every subcommand, and the error that carries one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every request succeeded (or, for `report`, `merge` and `compare`, the files were read) |
//! | 1 | the run finished, but some requests failed (their records say why); the SLO gate (`--slo-target`) failed: fewer requests met the SLO than the target share; for `compare`, a row is `worse` and `--fail-on-regression` was given; for `capacity`, no rate meets the SLO or a step stopped the search by failing requests |
//! | 2 | the server went away or never answered (also: not ready after `--wait-ready`, a run stopped after 16 refused connections in a row, or no request succeeded and every one was refused: no connection, HTTP 429/502/503/504); the records so far are kept |
//! | 64 | bad usage: a flag or its value, or a results file another bench-client is writing, an output that would overwrite an input, a server that needs `--api-key`, refused before anything started |
//! | 65 | bad input data: a results or trace file that cannot be read or holds nothing usable; results of another run, or a request twice (`merge`, `--resume`) |
//! | 70 | any other error (an I/O error writing results, say) |
//! | 130 | interrupted (Ctrl-C); rerun with `--resume` to continue |

use std::process::ExitCode;

/// Every request succeeded.
pub const OK: u8 = 0;
/// Some requests failed.
pub const FAILED_REQUESTS: u8 = 1;
/// `compare --fail-on-regression`: a row is `worse` (the same code as [`FAILED_REQUESTS`]).
pub const REGRESSION: u8 = 1;
/// `--slo-target`: fewer requests met the SLO than the target share (for `capacity`: no level
/// passed). The same code as [`FAILED_REQUESTS`].
pub const SLO_GATE: u8 = 1;
/// The server went away or never answered.
pub const SERVER_GONE: u8 = 2;
/// Bad usage (sysexits' `EX_USAGE`).
pub const USAGE: u8 = 64;
/// Bad input data (sysexits' `EX_DATAERR`).
pub const DATA: u8 = 65;
/// Any other error (sysexits' `EX_SOFTWARE`).
pub const OTHER: u8 = 70;
/// Interrupted by Ctrl-C.
pub const INTERRUPTED: u8 = 130;

/// An error of a subcommand, with the exit code it ends the process with.
#[derive(Debug)]
pub enum CliError {
    /// A flag or its value; nothing was started.
    Usage(anyhow::Error),
    /// An input file that cannot be read or holds nothing usable.
    Data(anyhow::Error),
    /// The server went away, never answered, or is not ready.
    ServerGone(anyhow::Error),
    /// Anything else.
    Other(anyhow::Error),
}

impl CliError {
    /// The process's exit code for this error.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Data(_) => DATA,
            CliError::ServerGone(_) => SERVER_GONE,
            CliError::Other(_) => OTHER,
        }
    }

    /// Print the error's chain on one line and give its exit code.
    pub fn report(&self) -> ExitCode {
        let (CliError::Usage(e) | CliError::Data(e) | CliError::ServerGone(e) | CliError::Other(e)) =
            self;
        eprintln!("error: {e:#}");
        ExitCode::from(self.code())
    }
}

impl CliError {
    /// An error of finding the server: one not ready or not reachable went away (2); one that
    /// needs a key, and every other, is a usage error (64).
    pub fn connecting(e: anyhow::Error) -> Self {
        match e.downcast_ref::<crate::net::NotUsable>() {
            Some(crate::net::NotUsable::NeedsKey { .. }) | None => CliError::Usage(e),
            Some(_) => CliError::ServerGone(e),
        }
    }
}

impl From<anyhow::Error> for CliError {
    /// Another writer holding the results file is a usage error (choose another `--out`); a
    /// results file of another run, or holding a request twice, is a data error; the rest are
    /// other errors.
    fn from(e: anyhow::Error) -> Self {
        use crate::results::{ForeignRun, NotOneRun, ResultsBusy};
        let is = |f: &dyn Fn(&(dyn std::error::Error + 'static)) -> bool| e.chain().any(f);
        if is(&|c| c.is::<ResultsBusy>()) {
            CliError::Usage(e)
        } else if is(&|c| c.is::<ForeignRun>() || c.is::<NotOneRun>()) {
            CliError::Data(e)
        } else {
            CliError::Other(e)
        }
    }
}
