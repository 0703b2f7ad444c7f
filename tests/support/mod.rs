//! What every integration test binary shares. Each binary's `main.rs`
//! includes it with `#[path = "../support/mod.rs"] mod support;`.
//!
//! - [`binary`]: drives the `runner` binary as a user does (a scratch
//!   [`binary::Dir`], runs that print command, directory, stdout and stderr
//!   when a check fails, live runs read event by event).
//! - [`docker`]: the engine: the sandbox images, the one preflight that fails
//!   (never skips) without Docker or an image, the docker CLI, the runtime
//!   under test, and queries on runner's labels narrowed to what a test made.
//! - [`executor`]: the docker executor through the library.
//! - [`eval`]: `runner eval` task directories, runs and reports.
//! - [`fake_model`]: fake Anthropic and OpenAI servers on loopback.
//! - [`serial`]: the one lock for tests that must not overlap.

// Each binary uses a part of this module.
#![allow(dead_code)]

pub mod binary;
pub mod docker;
pub mod egress;
pub mod eval;
pub mod executor;
pub mod fake_model;
pub mod second_engine;
pub mod serial;
