//! Faults of the infrastructure, each injected by the test itself on the
//! real machine and undone by it (issue 25): what runner guarantees when
//! the run directory's disk fills up, when the engine stalls, and when
//! runner itself is killed again and again, and over a long soak. The
//! README's "Faults" table names each guarantee and the test that proves
//! it.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod cut_proxy;
mod disk_full;
mod engine_restart;
mod engine_stall;
mod kills;
mod memcg;
mod midsuite;
mod remote_cut;
mod small_fs;
mod soak;
mod tasks;
