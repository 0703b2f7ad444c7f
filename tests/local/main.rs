//! The local executor: its exec contract through the library (exit codes,
//! the kill protocol, bounded capture, the environment allowlist) and its
//! limits through the binary. Needs no Docker.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod exec;
mod latency;
mod limits;
mod shell;
mod supervised;
