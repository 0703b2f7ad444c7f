//! `runner eval` driven like a user drives it, against the real engine:
//! the example suite (oracle and nop), grading that a tampering agent
//! cannot flip, timeouts, bounded concurrency, Ctrl-C, and the reports.
//! These tests need Docker and the runner-sandbox images; without them
//! they FAIL with a message saying what to do.

#[path = "../support/mod.rs"]
mod support;

mod concurrency;
mod junit;
mod suite;
mod tamper;
mod timeouts;
