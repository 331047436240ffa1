//! Conformance suite: the benchmark client against the mock's ground truth, the mission story's
//! failures reproduced, fixture transcripts replayed and snapshotted, and the live checks run against
//! the mock. One test binary; every timing test runs on tokio's paused clock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod common;
mod diff;
mod fixtures;
mod ground_truth;
mod live_checks;
mod load;
mod reports;
mod schema;
mod story;
