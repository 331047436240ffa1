//! Conformance: ties the benchmark client to the mock's ground truth (see `tests/`), and checks a live
//! server against the assumptions the mock makes (`checks`, binary `conformance --url URL`).

pub mod checks;
pub mod diff;
pub mod streams;
