//! The twin as one test crate: calibration from results files and the twin's round trip
//! ([`e2e`]), `calibrate` as a user meets it ([`calibrate`]), and the table twin ([`table`]).

#[path = "../support/mod.rs"]
mod support;

mod calibrate;
mod e2e;
mod table;
