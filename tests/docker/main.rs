//! Integration tests of the docker executor against the real engine. They
//! FAIL (never skip) without a running engine and `runner-sandbox:tiny`.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Each #[tokio::test] has its own runtime; the serial lock is held across
// awaits on purpose so tests never overlap (see support::serial).
#![allow(clippy::await_holding_lock)]

#[path = "../support/mod.rs"]
mod support;

mod accounts;
mod build_cache;
mod confine;
mod files;
mod lifecycle;
mod limits;
mod measure;
mod processes;
mod pull;
mod services;
mod shell;
mod snapshot;
mod upperdir;
mod workdir;
