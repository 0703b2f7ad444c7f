//! `runner eval` driven like a user drives it, against the real engine:
//! the example suite (oracle and nop), grading that a tampering agent
//! cannot flip, timeouts, bounded concurrency, Ctrl-C, and the reports.
//! These tests need Docker and the runner-sandbox images; without them
//! they FAIL with a message saying what to do.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod allowlist;
mod backends;
mod concurrency;
mod diagnosis;
mod fidelity;
mod flagged;
mod gaming;
mod junit;
mod modes;
mod report_outputs;
mod scale;
mod schema;
mod seed;
mod shards;
mod suite;
mod tamper;
mod task_links;
mod timeouts;
