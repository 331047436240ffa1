//! A run's results file across kills, resumes, second writers and merges, as one test crate:
//! nothing finished is lost to `kill -9` ([`kill`]), and a run knows its own identity
//! ([`identity`]).

#[path = "../support/mod.rs"]
mod support;

mod identity;
mod kill;
