//! The local executor: its exec contract through the library (exit codes,
//! the kill protocol, bounded capture, the environment allowlist) and its
//! limits through the binary. Needs no Docker.

#[path = "../support/mod.rs"]
mod support;

mod exec;
mod limits;
