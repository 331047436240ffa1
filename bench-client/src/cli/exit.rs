//! Exit codes, the same for every subcommand, and the error that carries one.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every request succeeded (or, for `report`, `merge` and `compare`, the files were read) |
//! | 1 | the run finished, but some requests failed (their records say why); the SLO gate (`--slo-target`) failed: fewer requests met the SLO than the target share; for `compare`, a row is `worse` and `--fail-on-regression` was given; for `capacity`, no rate meets the SLO or a step stopped the search by failing requests |
//! | 2 | the server went away or never answered; the records so far are kept |
//! | 64 | bad usage: a flag or its value, refused before anything started |
//! | 65 | bad input data: a results or trace file that cannot be read or holds nothing usable |
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
    /// Anything else.
    Other(anyhow::Error),
}

impl CliError {
    /// The process's exit code for this error.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::Data(_) => DATA,
            CliError::Other(_) => OTHER,
        }
    }

    /// Print the error's chain on one line and give its exit code.
    pub fn report(&self) -> ExitCode {
        let (CliError::Usage(e) | CliError::Data(e) | CliError::Other(e)) = self;
        eprintln!("error: {e:#}");
        ExitCode::from(self.code())
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> Self {
        CliError::Other(e)
    }
}
