//! `bench-client capacity`: the highest open-loop request rate (or number of requests in flight)
//! at which a target share of requests meets the SLO, found by stepping the level and bisecting.
//!
//! Here, in the order a search goes:
//! - `run.rs`: the search end to end, one load run per step ([`run_capacity`]), the step rule
//!   and `--resume`;
//! - `report.rs`: the curve, one row per step, and the answer ([`CapacityReport`]);
//! - `export.rs`: the report as a table, JSON, CSV and an SVG plot.
//!
//! Elsewhere, each with its kind: the flags, in `cli/capacity.rs` beside every command's; the
//! search rule's arithmetic (the next level, pass and fail, the step timing), pure, in
//! `measure/capacity.rs` beside every other number the client computes; the plot's drawing, in
//! `report/export/svg/curve.rs` (the latency-throughput curve, fed by `export.rs`).

pub mod export;
mod report;
mod run;
#[cfg(test)]
mod tests;

pub use report::{CapacityReport, CapacityRow, Level};
pub use run::{is_step_name, run_capacity, step_path, CapacityConfig, CapacityOutcome, MARGIN};
