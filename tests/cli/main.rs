//! The `runner` binary driven as a user drives it: the loop with the
//! scripted model on both executors, real wire formats against fake model
//! servers, the conversation on a terminal, and the docker executor through
//! the binary.
//!
//! Every test that needs Docker is under a module named `docker`
//! (`scripted::docker::*`, `docker::*`): `make test-unit` runs the others
//! with `--skip docker::`, and `make test-runsc` runs these again on gVisor
//! with the filter `docker::`. Those tests FAIL, never skip, without Docker
//! and `runner-sandbox:tiny`.
//!
//! The heavy docker tests (a 1 GB flood, a memory bomb) take the serial lock;
//! every other test takes it shared, so they never share the 2 cores with
//! those.

// A test that unwraps fails loudly, which is what a test should do; the
// crate denies both outside tests ([lints] in Cargo.toml).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod approve;
mod continue_run;
mod continue_trust;
mod docker;
mod docs;
mod edit;
mod local_servers;
mod messages;
mod models;
#[path = "../model/recorded.rs"]
mod recorded;
mod repl;
mod replies;
mod scripted;
