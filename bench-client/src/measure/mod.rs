//! The only arithmetic: every per-request number is defined here, from a trace, with no clock and
//! no I/O. The streaming measurement, the two-point method with named failures, the per-request
//! figures of load runs, contamination checks, the one percentile definition used everywhere, and the bootstrap comparison
//! of two runs.

pub mod calibrate;
pub mod capacity;
pub mod compare;
mod contamination;
mod load;
mod percentile;
mod streaming;
pub mod table;
#[cfg(test)]
mod tests;
mod two_point;

pub use contamination::contamination;
pub use load::{load_numbers, ttft_from_schedule_ns, LoadNumbers, Slo};
pub use percentile::percentile;
pub use streaming::{
    basics, measure, timeline, ttft_split, Basics, DecodeUnavailable, MeasureError, Measurement,
    TtftSplit,
};
pub use two_point::{two_point, TwoPoint, TwoPointError};

/// Nanoseconds as milliseconds.
pub(crate) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
